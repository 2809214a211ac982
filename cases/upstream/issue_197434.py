"""pytorch#197434: torch.compile returns transposed max-pool indices when the input's spatial dims are transposed.

https://github.com/pytorch/pytorch/issues/197434 (closed; fix PR #197596)

The pooling lowerings decode the flat window offset that an argmax reduction
returns as a row-major position in the window, but Inductor reorders the
reduction's loop by the input's strides: when H's stride is smaller than W's,
the offset is encoded `kw * KH + kh` and decoded `kh * KW + kw`. The values are
right; the indices are not (`adaptive_max_pool2d`, `max_pool{2,3}d`,
`fractional_max_pool{2,3}d` with `return_indices=True`). Found again by the
OpInfo sweep on torch 2.13.0+cpu: `max_pool3d` on a permuted input, every
dtype. Blamed: aten.max_pool3d_with_indices.
"""

import torch
import torch.nn.functional as F

from harness import KnownFailure, Program, case, permuted

ISSUE = "https://github.com/pytorch/pytorch/issues/197434"


def max_pool3d_with_indices(x):
    return F.max_pool3d(x, kernel_size=3, stride=2, return_indices=True)


@case(
    tags=("upstream", "inductor", "pooling", "index", "layout"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.max_pool3d_with_indices",
    known_failures=(
        KnownFailure(
            "max_pool3d indices of an input whose H and W are transposed in memory (pytorch#197434)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "max_pool3d indices of an input whose H and W are transposed in memory (pytorch#197434); "
            "seen on CUDA, torch 2.11 (H200)",
            device="cuda",
            torch="2.11",
        ),
    ),
)
def upstream_197434_max_pool3d_indices_transposed_input(dtype):
    """max_pool3d(return_indices=True) of an input whose last two dims are swapped in memory: indices transposed."""
    return Program(max_pool3d_with_indices, [permuted((1, 2, 6, 7, 5), (0, 1, 2, 4, 3))])
