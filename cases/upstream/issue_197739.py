"""pytorch#197739: torch.compile returns incorrect argmin index for non-contiguous (transposed) tensor.

https://github.com/pytorch/pytorch/issues/197739 (open)

`(x.t() + 0.5).argmin()` on a 2x2 tensor returns 2 compiled and 1 eager: the
flat index of the argmin reduction over the transposed, freshly computed buffer
is reported in the buffer's storage order instead of the logical (row-major)
order of `x.t()`. Triggered by any op between `.t()` and `argmin()`
(`+ 0.5`, `.contiguous()`). Blamed: aten.argmin (full reduction).
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/197739"


def argmin_of_transposed(x):
    return (x.t() + 0.5).argmin(), (x.t() + 0.5).argmax()


@case(
    tags=("upstream", "inductor", "reduction", "argmin", "layout", "quick"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.argmin",
    known_failures=(
        KnownFailure(
            "argmin/argmax flat index of a transposed intermediate in storage order (pytorch#197739)",
            device="cpu",
            torch="2.13",
        ),
    ),
)
def upstream_197739_argmin_transposed_intermediate(dtype):
    """argmin()/argmax() of x.t() + 0.5 (no dim): the flat index is in x's order, not x.t()'s."""
    x = torch.tensor([[1.5410, -0.2934], [-2.1788, 0.5684]], dtype=dtype)
    return Program(argmin_of_transposed, [x])
