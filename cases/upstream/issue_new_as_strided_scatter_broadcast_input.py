"""new (not yet reported): [inductor] as_strided_scatter of an expanded input returns a result that aliases its rows.

Found by the OpInfo sweep (`opinfo-as_strided_scatter-{int32,int64,bool}-s2-broadcast`; no upstream issue found yet).

`torch.as_strided_scatter(x, src, (1, 3), (3, 1))` where `x` is
`arange(3).expand(3, 3)` (strides (0, 1)). Eager returns a fresh dense (3, 3)
tensor: row 0 is `src`, rows 1 and 2 keep `x`'s values. Compiled, the result
keeps `x`'s stride-0 layout, so its three rows share three elements and all
read `src`: rows 1 and 2 are wrong. With OpInfo's sample (size (2, 2), stride
(1, 2)) the scatter also writes past those three elements: the process then
aborts in some runs (`free(): invalid next size`, heap corruption), which is
why this case keeps its writes within the first row. Seen on torch 2.13.0+cpu
(one fused C++ kernel) and on torch 2.11.0+cu130 on an H200 (a copy kernel,
then an in-place Triton kernel on the same buffer, then the same wrong layout).
"""

import torch

from harness import KnownFailure, Program, broadcast, case, contiguous

ISSUE = "new: not yet reported upstream (found by the OpInfo sweep, as_strided_scatter of a broadcast input)"

WRONG_ROWS = (
    "as_strided_scatter of an expanded input: the compiled result keeps the stride-0 layout, so every row "
    "reads the scattered one (new upstream bug, found by the OpInfo sweep)"
)


def scatter_into_first_row(x, src):
    return torch.as_strided_scatter(x, src, (1, 3), (3, 1), storage_offset=0)


@case(
    tags=("upstream", "inductor", "scatter", "layout", "broadcast"),
    dtypes=(torch.int64, torch.float32),
    issue=ISSUE,
    culprit="aten.clone",
    known_failures=(
        KnownFailure(WRONG_ROWS, device="cpu", torch="2.13"),
        KnownFailure(WRONG_ROWS, device="cuda", torch="2.11"),
    ),
)
def upstream_new_as_strided_scatter_broadcast_input(dtype):
    """as_strided_scatter into row 0 of arange(3).expand(3, 3): compiled rows 1 and 2 equal row 0."""
    return Program(
        scatter_into_first_row, [broadcast((3, 3), (1, 3), fill="arange"), contiguous((1, 3), fill="arange", low=10)]
    )
