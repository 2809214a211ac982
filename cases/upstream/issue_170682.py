"""pytorch#170682: [BUG][Inconsistency] aten.__upsample_nearest gives different results on Inductor vs Eager with bfloat16.

https://github.com/pytorch/pytorch/issues/170682 (open, high priority, pt2: numerics-discrepancy)

`torch.ops.aten.__upsample_nearest(x, size=None, scale_factor=2)` on a CUDA
bfloat16 (2, 1, 100, 150) input: the compiled output differs from eager by far
more than bf16 rounding (nearest upsampling only copies values, so any
difference means a wrong source index). Reported on CUDA only; CPU 2.13.0
passes (seen). Blamed: the upsample_nearest2d lowering's source-index
computation for reduced-precision inputs (not localised in the issue).
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/170682"


def upsample_nearest_x2(x):
    return torch.ops.aten.__upsample_nearest(x, size=None, scale_factor=2)


@case(
    tags=("upstream", "inductor", "interpolate", "index", "cuda-only"),
    dtypes=(torch.bfloat16,),
    issue=ISSUE,
    culprit="upsample|_unsafe_index|aten.index",
    known_failures=(
        KnownFailure(
            "bf16 __upsample_nearest (scale 2) picks other source pixels under Inductor (pytorch#170682)",
            device="cuda",
            torch=">=2.12",
        ),  # passes on 2.11.0+cu130 (H200, seen)
    ),
)
def upstream_170682_upsample_nearest_bf16(dtype):
    """bf16 nearest upsampling by 2 of a (2, 1, 100, 150) image: compiled CUDA values differ from eager."""
    x = 0.1 * torch.randn(2, 1, 100, 150, generator=torch.Generator().manual_seed(170682), dtype=torch.float32)
    return Program(upsample_nearest_x2, [x.to(dtype)])
