"""pytorch#198101: [inductor] Consumer of a dtype view of an input is computed after a later in-place mutation of that input.

https://github.com/pytorch/pytorch/issues/198101 (open)

    y = x.view(torch.int32) * 2; y.sub_(-4); x[:, 2:5] = 2; return y.view(torch.int64)

`view.dtype` with a different item size is a fallback that aliases `x`;
`GraphLowering.mark_buffer_mutated` realizes the pending users of `x` before
the mutation, but not the users of buffers that merely alias it, so `y` is
computed from the *mutated* `x` (fix proposed in PR #198104). Scheduler-level,
device independent (issue repro on CUDA; CPU 2.13.0 fails, seen).
"""

import torch

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/198101"


def dtype_view_then_mutate(x):
    y = x.view(torch.int32) * 2
    y.sub_(-4)
    x[:, 2:5] = 2
    return y.view(torch.int64)


@case(
    tags=("upstream", "inductor", "view", "inplace", "dtype", "aliasing"),
    dtypes=(torch.int64,),
    issue=ISSUE,
    culprit="aten.mul",
    known_failures=(
        KnownFailure(
            "user of an int32 view of x scheduled after x[:, 2:5] = 2 (pytorch#198101)", device="cpu", torch="2.13"
        ),
        KnownFailure(
            "aliasing-buffer users not realized before mutation (pytorch#198101, CUDA repro)",
            device="cuda",
            torch=">=2.11",
        ),
    ),
)
def upstream_198101_dtype_view_read_after_mutation(dtype):
    """A tensor computed from x.view(int32) before x[:, 2:5] = 2 sees the new values."""
    return Program(dtype_view_then_mutate, [contiguous((4, 6), fill="arange", low=-12)])
