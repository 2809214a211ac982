"""pytorch#175154: [inductor/aot_eager] interpolate under torch.compile produces incorrect result when mode is `nearest`.

https://github.com/pytorch/pytorch/issues/175154 (open)

`F.interpolate(x, scale_factor=1.3, mode="nearest")` of `[[[[1., 2.]]]]` is
`[[[[1., 2.]]]]` in eager and `[[[[1., 1.]]]]` compiled. The upsample_nearest
decomposition (`_compute_upsample_nearest_indices`) maps output to input index
with the float `1/scale` instead of `isize/osize`, so index 1 rounds down to 0.
The decomposition is shared by every backend (aot_eager fails too).
"""

import torch
import torch.nn.functional as F

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/175154"


def nearest_scale_1_3(x):
    return F.interpolate(x, scale_factor=1.3, mode="nearest")


@case(
    tags=("upstream", "inductor", "decomposition", "interpolate", "index"),
    dtypes=(torch.float64, torch.float32),
    issue=ISSUE,
    culprit="stage:aot_eager",
    known_failures=(
        KnownFailure(
            "upsample_nearest decomposition uses 1/scale, picks source index 0 for 1 (pytorch#175154)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "upsample_nearest decomposition (device independent; pytorch#175154)", device="cuda", torch=">=2.11"
        ),
    ),
)
def upstream_175154_interpolate_nearest_scale_1_3(dtype):
    """nearest interpolation with scale 1.3 of a width-2 row repeats element 0 instead of copying 1."""
    return Program(nearest_scale_1_3, [torch.tensor([[[[1.0, 2.0]]]], dtype=dtype)])
