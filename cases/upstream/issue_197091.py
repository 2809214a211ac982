"""pytorch#197091: [inductor] torch.ldexp output dtype differs from eager (half x float32 -> half).

https://github.com/pytorch/pytorch/issues/197091 (open; fix proposed in #197162)

`torch.ldexp(x, e)` with a float16 mantissa and float32 exponents: eager
promotes both operands (a float32 result), Inductor's `ldexp` lowering keeps
the mantissa's dtype, so the compiled result is float16: values beyond
float16's range become inf (2 * 2**20 is 2097152 in eager, inf compiled) and
tiny ones flush to 0. An op given a float16 tensor and a float32 tensor, with
type promotion inside it: a failure, with both dtypes in the record (before,
comparing the two dtypes' undefined elements crashed the harness: "Half did
not match Float"). Seen on torch 2.13.0+cpu.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/197091"


def ldexp_half_by_float_exponents(x, e):
    return torch.ldexp(x, e)


@case(
    tags=("upstream", "inductor", "pointwise", "dtype", "type-promotion"),
    dtypes=(torch.float16,),
    issue=ISSUE,
    culprit="aten.ldexp|aten.mul|aten.pow|aten.exp2",
    known_failures=(
        KnownFailure(
            "ldexp keeps the float16 mantissa's dtype instead of promoting with float32 exponents (pytorch#197091)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "ldexp keeps the float16 mantissa's dtype (pytorch#197091, CPU and CUDA per the issue)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_197091_ldexp_half_mantissa_float_exponent(dtype):
    """ldexp(float16 x, float32 e): eager's result is float32 and finite, the compiled one float16 with inf and 0."""
    x = torch.tensor([1.5, 2.0, -3.0, 0.5, 1.0, -0.25, 7.0, 1.0], dtype=torch.float16)
    e = torch.tensor([3.0, 20.0, 17.0, -30.0, 0.0, 2.0, 15.0, -26.0], dtype=torch.float32)
    return Program(ldexp_half_by_float_exponents, [x, e])
