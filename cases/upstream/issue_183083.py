"""pytorch#183083: torch.remainder returns incorrect results with float16 tensor and Python scalar on Inductor CPU.

https://github.com/pytorch/pytorch/issues/183083 (closed as a duplicate class of #186875; still reproduces on 2.13.0)

`torch.remainder(x, 3.14)` on float16: eager rounds 3.14 to fp16 (3.140625),
so `remainder(3.140625, 3.14)` is 0 in eager and 6.25e-4 compiled; the other
elements differ in the last fp16 bits. Same mechanism as #186875 (scalar kept
at full precision in the compute type).

strict_eager=True for the same reason as #186875.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/183083"


def remainder_pi(x):
    return torch.remainder(x, 3.14)


@case(
    tags=("upstream", "inductor", "pointwise", "dtype", "scalar-promotion"),
    dtypes=(torch.float16,),
    issue=ISSUE,
    culprit="aten.remainder",
    strict_eager=True,
    known_failures=(
        KnownFailure(
            "remainder keeps the scalar 3.14 at fp32 instead of fp16 3.140625 (pytorch#183083)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "remainder keeps the scalar at fp32 in Triton too (pytorch#183083; seen on H200)",
            device="cuda",
            torch="2.11",
        ),
    ),
)
def upstream_183083_remainder_fp16_scalar(dtype):
    """remainder(fp16 x, 3.14): eager divides by fp16(3.14) == 3.140625, compiled by 3.14."""
    x = torch.tensor([-4.0, -1.5, -0.0, 0.0, 0.1, 1.0, 3.140625, 8.0], dtype=dtype)
    return Program(remainder_pi, [x])
