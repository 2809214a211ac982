"""Input tensors with exact layouts, made deterministically.

Every layout a kernel argument can have (contiguous, permuted, gapped slice,
broadcast/expand, overlapping `as_strided` view, storage offset) is one
`TensorSpec`: a storage of `storage_numel` elements viewed with size, stride
and offset. Values are generated on the CPU from a generator seeded by the
case name, so every device and every run sees the same numbers.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class TensorSpec:
    size: tuple[int, ...]
    dtype: torch.dtype | None = None  # None: the case's dtype
    stride: tuple[int, ...] | None = None  # None: contiguous
    storage_offset: int = 0
    storage_numel: int | None = None  # None: the smallest storage the view needs
    # How the storage is filled: "randn", "rand" (uniform [low, high)), "arange"
    # (storage element i holds low + i: every read is traceable to its address),
    # "randint" (uniform in [low, high)), "ones".
    fill: str = "randn"
    low: float = 0
    high: float = 100
    requires_grad: bool = False

    def with_dtype(self, dtype: torch.dtype) -> "TensorSpec":
        return self if self.dtype is not None else replace(self, dtype=dtype)

    @property
    def resolved_stride(self) -> tuple[int, ...]:
        return self.stride if self.stride is not None else contiguous_stride(self.size)

    def needed_storage(self) -> int:
        return self.storage_offset + extent(self.size, self.resolved_stride)

    def describe(self) -> str:
        return f"size={self.size} stride={self.resolved_stride} offset={self.storage_offset} storage={self.storage_numel or self.needed_storage()}"


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


# Layout constructors: each returns a TensorSpec whose view has the layout named.

def contiguous(size: Sequence[int], **kw: Any) -> TensorSpec:
    return TensorSpec(tuple(size), **kw)


def permuted(base_size: Sequence[int], dims: Sequence[int], **kw: Any) -> TensorSpec:
    """`torch.empty(base_size).permute(dims)`: dense but not contiguous."""
    base_stride = contiguous_stride(base_size)
    return TensorSpec(tuple(base_size[d] for d in dims), stride=tuple(base_stride[d] for d in dims), **kw)


def gapped(size: Sequence[int], step: int, dim: int = -1, **kw: Any) -> TensorSpec:
    """`base[..., ::step]` along `dim`: holes between the elements read."""
    dim = dim % len(size)
    base_size = list(size)
    base_size[dim] = size[dim] * step
    base_stride = contiguous_stride(base_size)
    stride = list(base_stride)
    stride[dim] *= step
    return TensorSpec(tuple(size), stride=tuple(stride), storage_numel=math.prod(base_size), **kw)


def broadcast(size: Sequence[int], from_size: Sequence[int], **kw: Any) -> TensorSpec:
    """`base.expand(size)` of a `from_size` tensor: stride 0 on broadcast dims."""
    lead = len(size) - len(from_size)
    from_stride = contiguous_stride(from_size)
    stride = [0] * lead + [0 if f == 1 and n != 1 else st for f, n, st in zip(from_size, size[lead:], from_stride)]
    return TensorSpec(tuple(size), stride=tuple(stride), storage_numel=math.prod(from_size), **kw)


def strided(size: Sequence[int], stride: Sequence[int], storage_offset: int = 0, storage_numel: int | None = None, **kw: Any) -> TensorSpec:
    """Any `as_strided` layout, overlapping views included."""
    return TensorSpec(tuple(size), stride=tuple(stride), storage_offset=storage_offset, storage_numel=storage_numel, **kw)


def is_non_overlapping(t: torch.Tensor) -> bool:
    """Whether no two elements share an address (gaps allowed): a layout `copy_` can write."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size != 1)
    reach = 0  # elements spanned by the dims so far, minus one
    for stride, size in dims:
        if stride <= reach:
            return False
        reach += (size - 1) * stride
    return True


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


# Materialization.

def seed_for(*parts: object) -> int:
    """A stable 31-bit seed from the case name (and dtype, mode...)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF


def materialize(spec: TensorSpec, generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    dtype = spec.dtype
    if dtype is None:
        raise ValueError(f"TensorSpec {spec.describe()} has no dtype and the case gave none")
    numel = spec.storage_numel if spec.storage_numel is not None else spec.needed_storage()
    if numel < spec.needed_storage():
        raise ValueError(f"storage of {numel} elements is too small for {spec.describe()}")
    storage = _fill(spec, numel, dtype, generator).to(device)
    # A view of a storage that needs no grad is itself a leaf, with its strides intact.
    return storage.as_strided(spec.size, spec.resolved_stride, spec.storage_offset).requires_grad_(spec.requires_grad)


def _fill(spec: TensorSpec, numel: int, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if spec.fill == "arange":
        if dtype.is_floating_point:
            return (torch.arange(numel, dtype=torch.float64) + spec.low).to(dtype)
        return (torch.arange(numel, dtype=torch.int64) + int(spec.low)).to(dtype)
    if spec.fill == "ones":
        return torch.ones(numel, dtype=dtype)
    if spec.fill == "randint" or not (dtype.is_floating_point or dtype.is_complex):
        if dtype == torch.bool:
            return torch.randint(0, 2, (numel,), generator=generator).bool()
        return torch.randint(int(spec.low), int(spec.high), (numel,), generator=generator, dtype=torch.int64).to(dtype)
    if spec.fill == "rand":
        values = torch.rand(numel, generator=generator, dtype=torch.float64) * (spec.high - spec.low) + spec.low
        return values.to(dtype)
    if spec.fill == "randn":
        return torch.randn(numel, generator=generator, dtype=torch.float64).to(dtype)
    raise ValueError(f"unknown fill {spec.fill!r}: use randn, rand, randint, arange or ones")


def clone_exact(t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Copy a tensor with its size, stride, offset and whole storage kept.

    `Tensor.clone()` gives an overlapping or gapped view a dense layout of its
    own; kernels compiled for the original strides must see the original ones.
    The copy is a leaf that requires grad when `t` does.
    """
    itemsize = t.element_size()
    storage_numel = t.untyped_storage().nbytes() // itemsize
    base = t.detach().as_strided((storage_numel,), (1,), 0).clone()
    if dtype is not None:
        base = base.to(dtype)
    view = base.as_strided(t.size(), t.stride(), t.storage_offset())
    return view.requires_grad_(t.requires_grad and view.dtype.is_floating_point)
