"""pytorch#198094: [inductor] Scatter result reinplaced into a graph input that a later mutation overwrites.

https://github.com/pytorch/pytorch/issues/198094 (open)

`y = torch.slice_scatter(x, src[1:3], dim=0, start=1, end=3); x.zero_(); return y`
returns zeros: Inductor reinplaces the functional `slice_scatter` whose `self`
is a graph input into that input's buffer because a `copy_` epilogue into the
input exists, but that epilogue writes the unrelated `zero_()` result, so the
observed scatter output is overwritten. Same for select_/diagonal_scatter.
Mechanism in the reinplacing pass (device independent); the issue's repro is on
CUDA, CPU torch 2.13.0 fails the same way (seen).
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/198094"


def scatter_then_zero_input(x, src):
    y = torch.slice_scatter(x, src[1:3], dim=0, start=1, end=3)  # a fresh tensor in eager
    x.zero_()
    return y


@case(
    tags=("upstream", "inductor", "scatter", "inplace", "reinplace"),
    dtypes=(torch.int64,),
    issue=ISSUE,
    culprit="pass:reinplace_inplaceable_ops",
    known_failures=(
        KnownFailure(
            "slice_scatter reinplaced into input x, then x.zero_() overwrites it (pytorch#198094)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "slice_scatter reinplaced into a mutated input (pytorch#198094, CUDA repro in the issue)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_198094_slice_scatter_reinplaced_into_mutated_input(dtype):
    """slice_scatter(x, ...) followed by x.zero_(): the returned scatter result is all zeros."""
    return Program(
        scatter_then_zero_input, [contiguous((4, 6), fill="arange"), contiguous((4, 6), fill="arange", low=-12)]
    )
