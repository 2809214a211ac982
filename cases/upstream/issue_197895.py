"""pytorch#197895: [inductor] Floating-point floor division is off by one (`1.0 // 0.1` gives 10.0).

https://github.com/pytorch/pytorch/issues/197895 (open)

Eager computes floating floor division with the fmod-based algorithm (as
Python does), so `1.0 // 0.1 == 9.0`. Inductor lowers `aten.div.Tensor_mode`
(rounding_mode="floor") / `aten.floor_divide` to `floor(a / b)`, and whenever
the rounded quotient lands on an integer the result is one too high. The issue
reports float32 and float64, CPU and CUDA, 2.14 and nightly.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/197895"


def floor_div(a, b):
    return a // b, torch.div(a, b, rounding_mode="floor")


@case(
    tags=("upstream", "inductor", "pointwise", "division", "quick"),
    dtypes=(torch.float32, torch.float64),
    issue=ISSUE,
    culprit="aten.div|floor_divide",
    known_failures=(
        KnownFailure(
            "float floor division lowered to floor(a/b): 1.0 // 0.1 == 10 (pytorch#197895)", device="cpu", torch="2.13"
        ),
        KnownFailure(
            "float floor division lowered to floor(div_rn(a, b)) (pytorch#197895; CUDA per the issue)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_197895_float_floor_divide_off_by_one(dtype):
    """a // b on floats whose exact quotient lies just below an integer comes out one too high."""
    a = torch.tensor([1.0, 0.5, 6.0, 1.0, 7.0, 0.3], dtype=dtype)
    b = torch.tensor([0.1, 0.1, 0.2, 1 / 3, 0.7, 0.1], dtype=dtype)
    return Program(floor_div, [a, b])
