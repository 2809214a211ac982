"""pytorch#191571: torch.compile returns stale zeros when a size-1 scatter_add_ is gathered from in the same graph.

https://github.com/pytorch/pytorch/issues/191571 (closed)

When the scatter_add_ target has a leading dimension of 1 and the result is
gathered (index_select) in the same graph, Inductor fuses scatter and gather
into one Triton kernel and emits the gather's load before the scatter's
`tl.atomic_add`: the compiled function returns zeros. CUDA only (CPU 2.13.0
passes, seen). The fix version is not pinned down here.
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/191571"


def scatter_add_then_gather(x, idx):
    res = torch.zeros(1, x.shape[1], device=x.device, dtype=x.dtype)
    res.scatter_add_(0, idx.unsqueeze(-1).expand(-1, x.shape[1]), x)
    return torch.index_select(res, 0, idx)


@case(
    tags=("upstream", "inductor", "scatter", "fusion", "cuda-only"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="scatter_add|index_select|gather",
    known_failures=(
        # Reported on CUDA; does not reproduce on torch 2.11.0+cu130 / Triton 3.6 (H200, seen).
        KnownFailure(
            "fused scatter_add + gather: load emitted before tl.atomic_add (pytorch#191571)",
            device="cuda",
            torch=">=2.12",
        ),
    ),
)
def upstream_191571_scatter_add_size1_then_gather(dtype):
    """scatter_add_ into a (1, 4) zeros buffer then index_select from it: compiled CUDA returns zeros."""
    idx = torch.zeros(8, dtype=torch.int64)
    return Program(scatter_add_then_gather, [contiguous((8, 4)), idx])
