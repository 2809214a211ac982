"""pytorch#198201: interpolate(mode='nearest') resamples a spatial dimension whose size is unchanged.

https://github.com/pytorch/pytorch/issues/198201 (open)

With `scale_factor=(1.3, 1.5)` on a 3x4 image the height stays 3
(floor(3 * 1.3)); eager treats an unchanged dimension as identity, the compiled
upsample_nearest lowering still applies the 1/1.3 scale and picks source rows
[0, 0, 1] instead of [0, 1, 2]. Same output shape, wrong values.
"""

import torch
import torch.nn.functional as F

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/198201"


def nearest_mixed_scale(z):
    return F.interpolate(z, scale_factor=(1.3, 1.5), mode="nearest")


@case(
    tags=("upstream", "inductor", "decomposition", "interpolate", "index"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="stage:aot_eager",
    known_failures=(
        KnownFailure(
            "upsample_nearest resamples an unchanged dim with scale 1/1.3 (pytorch#198201)", device="cpu", torch="2.13"
        ),
        KnownFailure("upsample_nearest lowering (device independent; pytorch#198201)", device="cuda", torch=">=2.11"),
    ),
)
def upstream_198201_interpolate_nearest_unchanged_dim(dtype):
    """nearest interpolation, scale (1.3, 1.5) on 3x4: the unchanged height is resampled (rows 0,0,1)."""
    return Program(nearest_mixed_scale, [contiguous((1, 1, 3, 4), fill="arange")])
