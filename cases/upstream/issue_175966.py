"""pytorch#175966: Silently incorrect results for torch.arange + Inductor.

https://github.com/pytorch/pytorch/issues/175966 (open, labelled pt2: ubn)

`torch.arange(0, 11, dtype=torch.int64) * torch.tensor([10**9])` comes back
wrapped modulo 2**32 (3e9 -> -1294967296, ...) from Inductor; eager and
aot_eager_decomp_partition are right. The compiler bisector blames the `mul`
lowering: the iota is folded into an index expression (`1000000000*x0`) and that
expression is evaluated in the kernel's 32-bit index type although the result
dtype is int64 (constant/index propagation; the CUDA fix for the sibling issue
#183901 made Triton keep int64 for value-producing index_expr). On CPU 2.13.0
the C++ kernel still computes it in 32 bits.
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/175966"


def arange_times_tensor(x):
    return torch.arange(0, 11, device=x.device, dtype=torch.int64) * torch.tensor(
        [int(1e9)], dtype=torch.int64, device=x.device
    )


@case(
    tags=("upstream", "inductor", "index", "dtype", "int-overflow"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.mul",
    known_failures=(
        KnownFailure(
            "int64 arange * 1e9 wraps at 2**32: index_expr evaluated in int32 (pytorch#175966)",
            device="cpu",
            torch="2.13",
        ),
        KnownFailure(
            "int64 arange * 1e9 wraps at 2**32 in Triton index_expr (pytorch#175966, reported on 2.10)",
            device="cuda",
            torch=">=2.10,<2.13",
        ),
    ),
)
def upstream_175966_arange_int64_mul_overflow(dtype):
    """int64 arange times a 1e9 int64 tensor wraps modulo 2**32 (8 of 11 elements wrong)."""
    return Program(arange_times_tensor, [contiguous((1,))])
