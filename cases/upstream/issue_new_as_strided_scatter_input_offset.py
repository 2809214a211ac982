"""new (not yet reported): [inductor] as_strided_scatter on an input with a storage offset scatters relative to it.

Found by the OpInfo sweep (`opinfo-as_strided_scatter-*-s0-storage_offset`, every dtype; no upstream issue
found yet).

`torch.as_strided_scatter(x, src, (), (), storage_offset=0)` where `x` is a
one-element view one element into its storage. `storage_offset` is absolute,
as in `x.as_strided`: the element it names lies before `x`, so eager returns
`x` unchanged. Compiled code counts the offset from `x`'s first element and
writes `src` there. It fails with the compile caches off too (so it is not the
cache-key bug of `as_strided_copy` in `cases/upstream/README.md`), and
`--bisect` places it in Inductor's post-grad graph, not in a kernel: with every
kernel output made eager the result still differs. Seen on torch 2.13.0+cpu.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, strided

ISSUE = "new: not yet reported upstream (found by the OpInfo sweep, as_strided_scatter of an offset input)"

RELATIVE_OFFSET = (
    "as_strided_scatter on an input with a storage offset: the compiled code counts storage_offset "
    "from the input's first element, not from its storage's (new upstream bug, found by the OpInfo "
    "sweep)"
)


def scatter_at_storage_start(x, src):
    return torch.as_strided_scatter(x, src, (), (), storage_offset=0)


@case(
    tags=("upstream", "inductor", "scatter", "layout", "storage-offset"),
    dtypes=(torch.float32, torch.int64),
    issue=ISSUE,
    culprit="stage:inductor_graph_passes",
    known_failures=(
        KnownFailure(RELATIVE_OFFSET, device="cpu", torch="2.13"),
        KnownFailure(RELATIVE_OFFSET + "; seen on CUDA, torch 2.11 (H200)", device="cuda", torch="2.11"),
    ),
)
def upstream_new_as_strided_scatter_input_offset(dtype):
    """as_strided_scatter at storage offset 0 of a view starting at offset 1: eager leaves x as it is."""
    return Program(
        scatter_at_storage_start,
        [strided((1,), (1,), storage_offset=1, storage_numel=2, fill="arange"), contiguous((), fill="arange", low=10)],
    )
