"""The eager simulation of seed 000 (the int64 as_strided report; `cases/seed_index_as_strided.py`): figures known exactly.

Narrow the overlapping view with `.to(int32)` (a dense copy), then read that
copy with the view's original strides, as the NPU kernel does.
"""

import torch

VIEW_SIZE = (12, 4, 768, 64)
VIEW_STRIDE = (98304, 16384, 64, 1)
BASE_NUMEL = 1179648


def overlapping_view(dtype=torch.int64):
    return torch.arange(BASE_NUMEL, dtype=dtype).as_strided(VIEW_SIZE, VIEW_STRIDE)


def eager_index(dtype=torch.int64):
    return overlapping_view(dtype).contiguous().view(-1)


def npu_boundary_downcast_index(dtype=torch.int64):
    view = overlapping_view(dtype)
    if dtype != torch.int64:  # nothing to narrow: the kernel gets the view itself
        return view.contiguous().view(-1)
    dense_copy = view.to(torch.int32)  # what the launcher hands the kernel
    misread = dense_copy.view(-1).as_strided(VIEW_SIZE, VIEW_STRIDE)
    return misread.contiguous().view(-1).to(dtype)
