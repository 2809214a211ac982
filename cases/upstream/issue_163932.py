"""pytorch#163932: "softmax+" -- softmax of a 1e14-scaled, in-place sin_'ed strided view is all NaN under Inductor (CPU).

https://github.com/pytorch/pytorch/issues/163932 (open)

    x = x.view(-1, 2).sin_().t()[0]; x = x * scale (a buffer, 1e14); softmax(x, 0)

Eager returns a one-hot vector, the compiled softmax is NaN everywhere (the
scaled input itself matches). The bisector blames joint_graph_passes
`pass_pattern_1` (the softmax pattern rewrite). Our reading: the rewritten
softmax recomputes `sin(x) * scale` in the max-reduction and in the exp/sum
loops, and the two copies (vectorised vs scalar sin over the stride-2 view)
differ by an ulp that 1e14 turns into exp(+huge) = inf, inf/inf = NaN. The
reporter and the PT2 repro agent see it on CPU only; without the sin_ or the
strided select it does not reproduce.
"""

import torch
from torch import nn

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/163932"


class ScaledSoftmaxOfSinView(nn.Module):
    def __init__(self, scale: float = 1e14):
        super().__init__()
        self.register_buffer("scale", torch.tensor([scale]))

    def forward(self, x):
        x = x.view(-1, 2)
        x = x.sin_()
        x = x.t()
        x = x[0]
        x = x * self.scale
        return x, torch.softmax(x, dim=0)


@case(
    tags=("upstream", "inductor", "reduction", "softmax", "inplace", "nan-inf"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten._softmax|aten.sin|aten.exp|aten.amax",
    known_failures=(
        KnownFailure(
            "softmax of 1e14 * sin_(strided view) is NaN: recomputed sin differs by an ulp (pytorch#163932)",
            device="cpu",
            torch="2.13",
        ),
    ),
)
def upstream_163932_softmax_scaled_sin_view_nan(dtype):
    """softmax(1e14 * sin_(x.view(-1,2)).t()[0]): eager one-hot, compiled all NaN."""
    # The issue's input (torch.manual_seed(0); torch.randn(10, 5)); whether the recomputed
    # maxima disagree depends on the values (seeds 0 and 1 fail, 2-4 pass on 2.13.0).
    x = torch.randn(10, 5, generator=torch.Generator().manual_seed(0), dtype=dtype)
    return Program(ScaledSoftmaxOfSinView(), [x])
