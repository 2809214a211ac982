"""pytorch#186875: [Inductor] fmod/remainder with Python float scalar diverge from eager for bf16/fp16 on CPU.

https://github.com/pytorch/pytorch/issues/186875

Eager CPU rounds a Python float scalar operand of fmod/remainder to the tensor
dtype (bf16(1.7) == 1.703125); Inductor keeps 1.7 at full precision in the
float32 compute type. At the rounding boundary `fmod(1.703125, 1.7)` gives
0.003125 instead of 0, and `remainder(-1.703125, 1.7)` jumps a whole period to
1.6953125 instead of -0. Fix PR #186942 threads the scalar rounding through the
pointwise registration; torch 2.13.0 still diverges (seen).

strict_eager=True: a float64 reference keeps the scalar at 1.7 and so sides
with the compiled answer, not with eager's dtype semantics; the verdict must be
eager's tolerance alone.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/186875"


def fmod_and_remainder(x):
    return torch.fmod(x, 1.7), torch.remainder(x, 1.7)


@case(
    tags=("upstream", "inductor", "pointwise", "dtype", "scalar-promotion"),
    dtypes=(torch.bfloat16, torch.float16),
    issue=ISSUE,
    culprit="aten.fmod|aten.remainder",
    strict_eager=True,
    known_failures=(
        KnownFailure(
            "fmod/remainder keep the Python scalar at fp32 instead of rounding to bf16/fp16 (pytorch#186875)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "fmod/remainder keep the Python scalar at fp32 in Triton too (pytorch#186875; seen on H200)",
            device="cuda",
            torch="2.11",
        ),
    ),
)
def upstream_186875_fmod_remainder_scalar_low_precision(dtype):
    """fmod/remainder(x, 1.7) for x == dtype(1.7): eager 0, compiled 0.003 (remainder: a full period off)."""
    x = torch.tensor([1.7, -1.7, 3.4, -3.4, 0.5], dtype=dtype)
    return Program(fmod_and_remainder, [x])
