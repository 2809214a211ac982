"""pytorch#197431: [torch.compile] as_strided produces incorrect outputs for out-of-bounds strided tensor.

https://github.com/pytorch/pytorch/issues/197431 (open)

`full = x.repeat((3, 2)); torch.as_strided(full[:, ::2], (3, 2), full.stride())`
is legal in eager (the view stays inside `full`'s 6-element storage and reads
all of it). Inductor materialises `full[:, ::2]` into a 3-element buffer and
then applies the `as_strided` (a ReinterpretView) to that smaller buffer, so
half the output is read past its end: garbage that changes run to run, but
always wrong. Blamed: aten.as_strided over a realized slice.

The issue's input is one value repeated, so a read past the buffer that
happens to land on a leftover copy of it (a fresh CUDA worker) gives the right
answer. The case repeats two distinct values instead: then the second element
is wrong in bounds too (the materialised buffer holds the slice's values, not
`full`'s), whatever the memory past the buffer holds.

The case multiplies the view by 1.0 so the compiled result is a dense buffer
whose values can be compared; returning the view itself (as the issue does)
gives a tensor whose storage is too small to read (`setStorage ... out of
bounds`), an error at comparison rather than a wrong value.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/197431"


def as_strided_over_slice_of_repeat(x):
    full = x.repeat((3, 2))
    return torch.as_strided(full[:, ::2], (3, 2), full.stride()) * 1.0


@case(
    tags=("upstream", "inductor", "view", "layout", "as_strided"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.as_strided",
    known_failures=(
        KnownFailure(
            "as_strided with full's strides over the materialised slice: wrong elements, some read "
            "past its buffer (pytorch#197431)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "as_strided ReinterpretView of a realized slice (IR-level, device independent; pytorch#197431)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_197431_as_strided_of_sliced_repeat(dtype):
    """as_strided over full[:, ::2] with full's strides (times 1.0): 2 elements wrong in bounds, 2 out of bounds."""
    return Program(as_strided_over_slice_of_repeat, [torch.tensor([[1.5, -2.25]], dtype=dtype)])
