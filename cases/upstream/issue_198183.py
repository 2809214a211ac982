"""pytorch#198183: [inductor][cpu] Vectorized float32 torch.erf loses all relative accuracy near 0.

https://github.com/pytorch/pytorch/issues/198183 (open)

For a tensor of 8 or more float32 elements the C++ backend emits
`Vectorized<float>::erf()`, an Abramowitz-Stegun 7.1.26 approximation with a
1.5e-7 *absolute* error bound, instead of `std::erf`: erf(1e-7) comes out 0
(eager 1.128e-7), erf(1e-5) has 1.7e-2 relative error; the vector `atanh`
likewise returns 0 below the float epsilon. Blamed: aten.erf (cpp vectorised
codegen).

The values are tiny, so assert_close's default atol (1e-5) would hide the
error entirely; the case compares with rtol only (atol 1e-30), which is the
only way a relative-accuracy bug of this kind is visible.
"""

import torch

from harness import KnownFailure, Program, Tolerance, case

ISSUE = "https://github.com/pytorch/pytorch/issues/198183"
SMALL = [1e-8, 1e-7, 2e-7, 5e-7, 1e-6, 1e-5, 1e-4, 1e-3]


def erf_and_atanh(x):
    return torch.erf(x), torch.atanh(x)


@case(
    tags=("upstream", "inductor", "pointwise", "special", "precision", "vectorization"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.erf|aten.atanh",
    tolerances={torch.float32: Tolerance(rtol=1.3e-6, atol=1e-30)},
    known_failures=(
        KnownFailure(
            "Vectorized<float>::erf/atanh have absolute, not relative, accuracy near 0 (pytorch#198183)",
            device="cpu",
            torch="2.13",
        ),
    ),
)
def upstream_198183_vectorized_erf_small_inputs(dtype):
    """Vectorised float32 erf/atanh of |x| <= 1e-3: erf(1e-7) == 0, large relative errors everywhere."""
    x = torch.tensor(SMALL + [-v for v in SMALL], dtype=dtype).repeat(4)  # 64 elements, vector path
    return Program(erf_and_atanh, [x])
