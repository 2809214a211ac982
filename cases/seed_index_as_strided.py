"""Seed 000: an int64 index tensor read through an overlapping `as_strided` view.

Found by torchbench's Longformer training accuracy check on the NPU's
`triton_experimental` backend: the backward graph's `index_put` index producer

    arange(1179648).as_strided((12, 4, 768, 64), (98304, 16384, 64, 1)).contiguous().view(-1)

came out wrong in 2260992 of 2359296 elements (max_abs=589824, out_max=589823)
for int64 and right for int32. Root cause: the launcher narrows int64 kernel
arguments with `Tensor.to(torch.int32)`, which gives an overlapping view a
contiguous layout while the kernel keeps indexing with the view's strides.

Two forms: the report's repro (the graph input is the 1-D base) and the form
the backward graph receives (the graph input is the overlapping view itself).
Whether a kernel receives the view as an argument in the first form depends on
the backend's codegen; in the second it always does.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, strided

# The upstream report (a torch_npu issue, in Chinese) has no public link we could find; it is named in words.
ISSUE = (
    "torch_npu Inductor (triton_experimental) report: int64 boundary downcast collapses a non-dense layout "
    "(AllenaiLongformerBase training accuracy, backward index_put index producer)"
)
VIEW_SIZE = (12, 4, 768, 64)
VIEW_STRIDE = (98304, 16384, 64, 1)
BASE_NUMEL = 1179648
NPU_BOUNDARY_DOWNCAST = KnownFailure(
    device="npu",
    npu_backend="triton_experimental",
    dtype="int64",
    reason="triton_experimental narrows int64 args with Tensor.to(), collapsing the overlapping view (seed 000)",
)
# The same, seen through torch_npu's own launcher (`_wrap_launcher_with_downcast`) where its backend runs on another
# device (the surrogate's torch_npu mode): measured in 2.13.0 and 2.14.0.
TORCH_NPU_LAUNCHER_NARROWING = KnownFailure(
    npu_backend="triton_experimental",
    dtype="int64",
    torch_npu=">=2.13.0,<=2.14.0",
    reason="torch_npu's launcher narrows int64 args with Tensor.to(), collapsing the overlapping view (seed 000)",
)


def index_producer_from_base(base):
    return base.as_strided(VIEW_SIZE, VIEW_STRIDE).contiguous().view(-1)


def index_producer_from_view(view):
    return view.contiguous().view(-1)


@case(
    tags=("seed", "quick", "layout", "overlapping", "index"),
    dtypes=(torch.int64, torch.int32),
    issue=ISSUE,
    known_failures=(NPU_BOUNDARY_DOWNCAST, TORCH_NPU_LAUNCHER_NARROWING),
)
def seed_index_as_strided_base(dtype):
    """The report's repro: arange base in, overlapping view built inside the graph."""
    return Program(index_producer_from_base, [contiguous((BASE_NUMEL,), fill="arange")])


@case(
    tags=("seed", "quick", "layout", "overlapping", "index"),
    dtypes=(torch.int64, torch.int32),
    issue=ISSUE,
    known_failures=(NPU_BOUNDARY_DOWNCAST, TORCH_NPU_LAUNCHER_NARROWING),
)
def seed_index_as_strided_view(dtype):
    """As the backward graph sees it: the overlapping view is the graph input."""
    view = strided(VIEW_SIZE, VIEW_STRIDE, storage_numel=BASE_NUMEL, fill="arange")
    return Program(index_producer_from_view, [view])


def index_put_backward(view, grad, weight):
    """The index producer inside a larger graph, as Longformer's backward uses it: the gradient scattered
    through the overlapping index with `index_put(accumulate=True)`, beside other work on the gradient.
    (Small whole numbers in float32: every sum is exact, whatever order the accumulation takes.)"""
    index = index_producer_from_view(view)
    scaled = grad * weight
    scattered = torch.zeros(BASE_NUMEL, dtype=grad.dtype, device=grad.device).index_put(
        (index,), scaled.reshape(-1), accumulate=True
    )
    return scattered.neg(), scaled.sum(0)


@case(
    tags=("seed", "quick", "layout", "overlapping", "index"),
    dtypes=(torch.int64, torch.int32),
    issue=ISSUE,
    known_failures=(NPU_BOUNDARY_DOWNCAST, TORCH_NPU_LAUNCHER_NARROWING),
)
def seed_index_as_strided_index_put(dtype):
    """The overlapping view inside a larger graph (a scatter of a gradient through it): what `harness extract`
    reduces back to the view and its copy."""
    view = strided(VIEW_SIZE, VIEW_STRIDE, storage_numel=BASE_NUMEL, fill="arange")
    return Program(
        index_put_backward,
        [
            view,
            contiguous(VIEW_SIZE, dtype=torch.float32, fill="randint", low=-4, high=5),
            contiguous(VIEW_SIZE[-1:], dtype=torch.float32, fill="randint", low=-4, high=5),
        ],
    )
