"""Strided geometry: how a view lies in its storage, and exact copies that keep it; and a dtype's name.

A leaf module (torch only): inputs, the probe, emulations and the launch
layer all reason about size, stride and offset the same way. A dtype travels
by name (`float32`) only where it leaves torch, in records, JSON and the
command line: `dtype_name` and `dtype_named` are those edges.
"""

from __future__ import annotations

from typing import Sequence

import torch


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_named(name: str) -> torch.dtype:
    """The dtype `name` names (ValueError for a name that is none)."""
    dtype = getattr(torch, name, None) if isinstance(name, str) and not name.startswith("_") else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"no torch dtype is named {name!r}")
    return dtype


def contiguous_stride(size: Sequence[int]) -> tuple[int, ...]:
    stride, running = [], 1
    for dim in reversed(size):
        stride.append(running)
        running *= max(dim, 1)
    return tuple(reversed(stride))


def extent(size: Sequence[int], stride: Sequence[int]) -> int:
    """Elements from the first to one past the last address a view reads."""
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(size, stride))


def span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) element offsets a strided tensor touches in its storage."""
    return t.storage_offset(), t.storage_offset() + extent(t.shape, t.stride())


def overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors touch a common stretch of one storage (a conservative test: spans, not elements)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr() or not a.numel() or not b.numel():
        return False
    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1


def is_non_overlapping(t: torch.Tensor, broadcast_dims_too: bool = True) -> bool:
    """Whether no two elements share an address (gaps allowed): a layout `copy_` can write. Without
    `broadcast_dims_too`, stride-0 dims are left out of the question (see `overlaps_beyond_broadcast`)."""
    dims = sorted(
        (stride, size) for size, stride in zip(t.shape, t.stride()) if size != 1 and (broadcast_dims_too or stride != 0)
    )
    reach = 0  # elements spanned by the dims so far, minus one
    for stride, size in dims:
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


def overlaps_beyond_broadcast(t: torch.Tensor) -> bool:
    """Whether elements share an address other than through stride-0 dims. A stride-0 dim is a broadcast
    (`expand`, the gradient of a sum): every element it repeats has one well-defined value, and ATen refuses
    to write through such a layout. Overlap with non-zero strides can be written through, in an order that
    decides the values."""
    return not is_non_overlapping(t, broadcast_dims_too=False)


def is_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Whether the elements tile a storage span exactly: some permutation of a contiguous tensor.

    The layouts `Tensor.to()` and `empty_like` keep; every other one they make contiguous.
    """
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def clone_exact(
    t: torch.Tensor, dtype: torch.dtype | None = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """Copy a tensor with its size, stride, offset and whole storage kept (on `device`, when given).

    `Tensor.clone()` (and `Tensor.to(device)`) gives an overlapping or gapped view
    a dense layout of its own; kernels compiled for the original strides must see
    the original ones. The copy is a leaf that requires grad when `t` does.
    """
    itemsize = t.element_size()
    storage_numel = t.untyped_storage().nbytes() // itemsize
    base = t.detach().as_strided((storage_numel,), (1,), 0).clone()
    if device is not None:
        base = base.to(device)
    if dtype is not None:
        base = base.to(dtype)
    view = base.as_strided(t.size(), t.stride(), t.storage_offset())
    return view.requires_grad_(t.requires_grad and view.dtype.is_floating_point)
