"""pytorch#184408: torch.div(rounding_mode='trunc') produces off-by-one results under torch.compile on CUDA.

https://github.com/pytorch/pytorch/issues/184408 (open, high priority)

The Triton lowering of `aten.div.Tensor_mode` with rounding_mode="trunc"
computes `trunc(a / b)` with the fast (non IEEE round-to-nearest) division, so
near-integer quotients round past the boundary (14.999999 / 3 -> 5 instead of 4)
and exact ones can fall below it (148 / 37 -> 3 instead of 4). The floor path
was switched to `div_rn`; trunc was not. CUDA only: CPU computes an IEEE
division and passes (seen on 2.13.0).
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/184408"


def div_trunc(a, b):
    return torch.div(a, b, rounding_mode="trunc")


@case(
    tags=("upstream", "inductor", "pointwise", "division", "cuda-only"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.div",
    known_failures=(
        KnownFailure(
            "trunc division uses non-IEEE a/b in Triton: off by one (pytorch#184408)", device="cuda", torch=">=2.11"
        ),
    ),
)
def upstream_184408_div_trunc_off_by_one(dtype):
    """div(rounding_mode='trunc') of near-integer and exact-integer quotients is off by one on CUDA."""
    a = torch.tensor([14.999999, 26.999999, 13.999999, 148.0, 1073.0, 2112.0], dtype=dtype)
    b = torch.tensor([3.0, 3.0, 7.0, 37.0, 37.0, 33.0], dtype=dtype)
    return Program(div_trunc, [a, b])
