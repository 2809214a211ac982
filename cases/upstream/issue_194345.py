"""pytorch#194345: [inductor][cuda] torch.remainder / torch.fmod wrong under torch.compile on CUDA for large |a/b|.

https://github.com/pytorch/pytorch/issues/194345 (open)

For |a / b| beyond float range the Triton lowerings of remainder/fmod compute
`a - trunc/floor(a / b) * b`, which loses everything once the quotient is huge
or infinite: remainder(1e10, 1e-20) is 166.87 compiled vs 2.6e-21 eager; other
pairs give -inf or NaN. The issue reports compiled CPU as correct, which holds
for the scalar C++ path (std::fmod) only: with enough elements for the
vectorised path, CPU torch 2.13.0 gives remainder -inf and fmod NaN for
(3e38, 1e-30) and (3.4e38, 1.4e-45) (seen), i.e. the same a - floor(a/b)*b
formula in the vector kernel.
"""

import torch

from harness import KnownFailure, Program, case

ISSUE = "https://github.com/pytorch/pytorch/issues/194345"


def remainder_and_fmod(a, b):
    return torch.remainder(a, b), torch.fmod(a, b)


@case(
    tags=("upstream", "inductor", "pointwise", "division", "vectorization"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.remainder|aten.fmod",
    known_failures=(
        KnownFailure(
            "vectorised remainder/fmod via a - floor(a/b)*b: -inf/NaN for huge |a/b| (pytorch#194345)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "Triton remainder/fmod via a - floor(a/b)*b breaks for huge |a/b| (pytorch#194345)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_194345_remainder_fmod_large_ratio(dtype):
    """remainder/fmod with |a/b| beyond float range: wrong finite values, -inf or NaN compiled."""
    # 4 x 5 = 20 elements, so the CPU kernel takes its vectorised path.
    a = torch.tensor([1e10, 65504.0, 3.0e38, 7.5, 3.4e38] * 4, dtype=dtype)
    b = torch.tensor([1e-20, 6e-8, 1e-30, 2.0, 1.4e-45] * 4, dtype=dtype)
    return Program(remainder_and_fmod, [a, b])
