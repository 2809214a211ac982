"""pytorch#198119: [inductor] avg_pool1d/2d backward with ceil_mode=True divides the overhanging window by the full kernel size.

https://github.com/pytorch/pytorch/issues/198119 (open)

For `avg_pool1d(x, 3, 2, ceil_mode=True)` on length 6 the last window covers
two of its three positions; eager (and aot_eager) divide its gradient by 2,
Inductor's `avg_pool2d_backward` lowering uses `scale = kH * kW` whenever
count_include_pad is set and divides by 3. The forward is right; the input
gradient of the last window is wrong. CPU and CUDA per the issue.
"""

import torch
import torch.nn.functional as F

from harness import KnownFailure, Program, case, contiguous

ISSUE = "https://github.com/pytorch/pytorch/issues/198119"


def avg_pool1d_ceil(x):
    return F.avg_pool1d(x, kernel_size=3, stride=2, ceil_mode=True)


def avg_pool2d_ceil(x):
    return F.avg_pool2d(x, kernel_size=3, stride=2, ceil_mode=True)


KNOWN = (
    KnownFailure(
        "avg_pool backward divides the clipped ceil_mode window by kH*kW (pytorch#198119)", device="cpu", torch="2.13"
    ),
    KnownFailure(
        "avg_pool2d_backward lowering, ceil_mode (pytorch#198119, CPU and CUDA per the issue)",
        device="cuda",
        torch=">=2.11",
    ),
)


@case(
    tags=("upstream", "inductor", "pooling", "backward"),
    dtypes=(torch.float32,),
    modes=("training",),
    issue=ISSUE,
    culprit="avg_pool2d_backward",
    known_failures=KNOWN,
)
def upstream_198119_avg_pool1d_ceil_mode_backward(dtype):
    """avg_pool1d(k=3, s=2, ceil_mode=True) on length 6: gradient of the overhanging window is 1/3, not 1/2."""
    return Program(avg_pool1d_ceil, [contiguous((2, 3, 6), requires_grad=True)])


@case(
    tags=("upstream", "inductor", "pooling", "backward"),
    dtypes=(torch.float32,),
    modes=("training",),
    issue=ISSUE,
    culprit="avg_pool2d_backward",
    known_failures=KNOWN,
)
def upstream_198119_avg_pool2d_ceil_mode_backward(dtype):
    """avg_pool2d(k=3, s=2, ceil_mode=True) on 6x6: last row/column gradients divided by 9 instead of 6/4."""
    return Program(avg_pool2d_ceil, [contiguous((2, 3, 6, 6), requires_grad=True)])
