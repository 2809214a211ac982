"""pytorch#174172: TorchInductor produces different results from eager for copysign with other=-0.0.

https://github.com/pytorch/pytorch/issues/174172 (open)

`torch.ops.aten.copysign(x, -0.0)` with a Python scalar: eager makes every
element negative (the sign bit of -0.0 is set); Inductor on CUDA returns them
positive (6/6 mismatched, max relative difference 2.0) -- the scalar -0.0 loses
its sign on the way into the Triton kernel (a constant -0.0 emitted as 0.0).
CPU 2.13.0 passes (seen).
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/174172"


def copysign_negative_zero(x):
    return torch.ops.aten.copysign(x, -0.0)


@case(
    tags=("upstream", "inductor", "pointwise", "signed-zero", "cuda-only"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.copysign",
    known_failures=(
        KnownFailure(
            "copysign(x, -0.0) scalar: sign of -0.0 lost in the Triton kernel (pytorch#174172)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_174172_copysign_negative_zero_scalar(dtype):
    """copysign(x, -0.0): eager -|x|, compiled CUDA +|x|."""
    return Program(copysign_negative_zero, [contiguous((6,))])
