"""pytorch#188048: [Inductor][CUDA] torch.div(rounding_mode="floor") mismatches eager for infinite inputs.

https://github.com/pytorch/pytorch/issues/188048

Eager floor division follows fmod semantics: `inf // 1` and `-inf // 1` are NaN,
and `1 // -inf` is -1. Inductor's `floor(a / b)` lowering of
`aten.div.Tensor_mode` (rounding_mode="floor") gives +inf, -inf and -0.0. The
issue was filed for CUDA; CPU torch 2.13.0 shows the same divergence (seen).
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/188048"


def floor_div_both_ways(a, b):
    return torch.div(a, b, rounding_mode="floor"), torch.div(b, a, rounding_mode="floor")


@case(
    tags=("upstream", "inductor", "pointwise", "division", "nan-inf"),
    dtypes=(torch.float64, torch.float32),
    issue=ISSUE,
    culprit="aten.div|floor_divide",
    known_failures=(
        KnownFailure(
            "floor division by/of inf: NaN in eager, +-inf / -0.0 compiled (pytorch#188048)", device="cpu", torch="2.13"
        ),
        KnownFailure(
            "floor division by/of inf: NaN in eager, +-inf compiled (pytorch#188048, CUDA report)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_188048_floor_divide_inf(dtype):
    """div(rounding_mode='floor') with +-inf operands: eager NaN / -1, compiled +-inf / -0."""
    a = torch.tensor([float("nan"), float("inf"), -float("inf"), 2.0], dtype=dtype)
    b = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=dtype)
    return Program(floor_div_both_ways, [a, b])
