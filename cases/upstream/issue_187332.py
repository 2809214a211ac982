"""pytorch#187332: Inductor i0/i1 return inf for infinite inputs on CUDA where eager returns NaN.

https://github.com/pytorch/pytorch/issues/187332 (fixed by PR #187354, 2026-06-15)

CUDA Inductor lowers the unscaled modified Bessel functions (`aten.special_i0`,
`i1`, `modified_bessel_i0/i1`) to libdevice `cyl_bessel_i0/i1`, which returns
+inf for +-inf inputs; eager's Cephes-derived CPU/CUDA kernels (and SciPy)
return NaN. The fix masks infinite inputs to NaN at the Triton lowering. CPU
passes (seen on 2.13.0). Fix version not pinned down: declared for < 2.14.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/187332"


def bessel_i(x):
    return torch.special.i0(x), torch.special.i1(x), torch.special.modified_bessel_i0(x)


@case(
    tags=("upstream", "inductor", "pointwise", "special", "nan-inf", "cuda-only"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="i0|i1|bessel",
    known_failures=(
        KnownFailure(
            "libdevice cyl_bessel_i0/i1 return inf for +-inf, eager NaN (pytorch#187332)",
            device="cuda",
            torch=">=2.11,<2.14",
        ),
    ),
)
def upstream_187332_bessel_i0_infinite_input(dtype):
    """i0/i1/modified_bessel_i0 of +-inf: eager NaN, compiled CUDA inf."""
    x = torch.tensor([float("inf"), -float("inf"), 0.5, -2.0], dtype=dtype)
    return Program(bessel_i, [x])
