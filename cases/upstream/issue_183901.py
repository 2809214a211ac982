"""pytorch#183901: torch.compile produces int32-overflowed results for int64 arange multiplication on CUDA.

https://github.com/pytorch/pytorch/issues/183901

`torch.arange(n, dtype=torch.int64) * 1500000000` (a Python int scalar) is
computed in 32 bits: Inductor treats the value-producing `index_expr` of the
folded iota as the kernel's index dtype. PR #184492 (2026-05-20) fixed the
Triton codegen; the C++ backend of torch 2.13.0 still wraps (seen here), so the
same program fails on CPU. Sibling of #175966 (there the factor is a tensor).
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/183901"


def arange_times_int(x):
    return torch.arange(16, device=x.device, dtype=torch.int64) * 1500000000


@case(
    tags=("upstream", "inductor", "index", "dtype", "int-overflow"),
    dtypes=(torch.float32,),
    issue=ISSUE,
    culprit="aten.mul",
    known_failures=(
        KnownFailure(
            "int64 arange * 1.5e9 computed in int32 index arithmetic (pytorch#183901)", device="cpu", torch="2.13"
        ),
        KnownFailure(
            "Triton index_expr kept the int32 index dtype (pytorch#183901, fixed by #184492)",
            device="cuda",
            torch="<2.13",
        ),
    ),
)
def upstream_183901_arange_int64_mul_scalar_overflow(dtype):
    """int64 arange times the Python int 1500000000 wraps modulo 2**32."""
    return Program(arange_times_int, [contiguous((1,))])
