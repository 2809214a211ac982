"""Input tensors with exact layouts, made deterministically.

Every layout a kernel argument can have (contiguous, permuted, gapped slice,
broadcast/expand, overlapping `as_strided` view, storage offset) is one
`TensorSpec`: a storage of `storage_numel` elements viewed with size, stride
and offset. Values are generated on the CPU from a generator seeded by the
case name, so every device and every run sees the same numbers.
"""

from __future__ import annotations

import math
import operator
import zlib
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch

from harness.layout import clone_exact, contiguous_stride, extent, is_non_overlapping, is_non_overlapping_and_dense  # noqa: F401  (re-exported for case authors)


@dataclass(frozen=True)
class TensorSpec:
    # The view's size, stride and offset (what the program sees); the storage under it is `storage_numel`
    # elements (a permuted or gapped input's base is that storage, not a size given here).
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
    # None: the run's device. "cpu": kept on the CPU whatever the device, as a 0-d CPU tensor a device
    # program reads as a scalar (a learning rate, a step count); Inductor passes those to kernels by value.
    device: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if not all(_whole(n) for n in self.size):
            problems.append(f"size {self.size} must be whole numbers >= 0")
        if self.stride is not None and (len(self.stride) != len(self.size) or not all(_whole(n) for n in self.stride)):
            problems.append(f"stride {self.stride} needs one whole number >= 0 per dimension of size {self.size}")
        if not _whole(self.storage_offset):
            problems.append(f"storage_offset {self.storage_offset!r} must be a whole number >= 0")
        if self.fill not in FILLS:
            problems.append(f"fill {self.fill!r} is not one of {', '.join(FILLS)}")
        if not problems and self.storage_numel is not None and self.storage_numel < self.needed_storage():
            problems.append(
                f"storage_numel {self.storage_numel} is smaller than the {self.needed_storage()} "
                "elements the view reads"
            )
        if problems:
            raise ValueError(f"TensorSpec(size={self.size}, stride={self.stride}): " + "; ".join(problems))

    def with_dtype(self, dtype: torch.dtype) -> "TensorSpec":
        return self if self.dtype is not None else replace(self, dtype=dtype)

    @property
    def resolved_stride(self) -> tuple[int, ...]:
        return self.stride if self.stride is not None else contiguous_stride(self.size)

    def needed_storage(self) -> int:
        return self.storage_offset + extent(self.size, self.resolved_stride)

    def describe(self) -> str:
        on = f" device={self.device}" if self.device else ""
        storage = self.storage_numel or self.needed_storage()
        return f"size={self.size} stride={self.resolved_stride} offset={self.storage_offset} storage={storage}{on}"


FILLS = ("randn", "rand", "randint", "arange", "ones")


def _whole(value: Any) -> bool:
    """A size, stride or offset: a whole number >= 0 (a Python or NumPy integer, not a bool or float)."""
    try:
        return not isinstance(value, bool) and operator.index(value) >= 0
    except TypeError:
        return False


# Layout constructors: each returns a TensorSpec whose view has the layout named, or raises ValueError naming
# the call when its arguments describe another layout (a case would then pass while testing something else).


def _check(call: str, ok: bool, why: str) -> None:
    if not ok:
        raise ValueError(f"{call}: {why}")


def contiguous(size: Sequence[int], **kw: Any) -> TensorSpec:
    return TensorSpec(tuple(size), **kw)


def permuted(base_size: Sequence[int], dims: Sequence[int], **kw: Any) -> TensorSpec:
    """`torch.empty(base_size).permute(dims)`: dense but not contiguous."""
    call = f"permuted({tuple(base_size)}, {tuple(dims)})"
    _check(
        call,
        sorted(dims) == list(range(len(base_size))),
        f"dims must be a permutation of 0..{len(base_size) - 1}, one per dimension of base_size",
    )
    base_stride = contiguous_stride(base_size)
    return TensorSpec(tuple(base_size[d] for d in dims), stride=tuple(base_stride[d] for d in dims), **kw)


def gapped(size: Sequence[int], step: int, dim: int = -1, **kw: Any) -> TensorSpec:
    """`base[..., ::step]` along `dim`: holes between the elements read."""
    call = f"gapped({tuple(size)}, step={step}, dim={dim})"
    _check(call, len(size) > 0 and -len(size) <= dim < len(size), f"dim must be a dimension of size (rank {len(size)})")
    _check(call, isinstance(step, int) and step >= 2, "step must be a whole number >= 2 (1 leaves no gap)")
    dim = dim % len(size)
    base_size = list(size)
    base_size[dim] = size[dim] * step
    base_stride = contiguous_stride(base_size)
    stride = list(base_stride)
    stride[dim] *= step
    return TensorSpec(tuple(size), stride=tuple(stride), storage_numel=math.prod(base_size), **kw)


def broadcast(size: Sequence[int], from_size: Sequence[int], **kw: Any) -> TensorSpec:
    """`base.expand(size)` of a `from_size` tensor: stride 0 on broadcast dims."""
    call = f"broadcast({tuple(size)}, from_size={tuple(from_size)})"
    lead = len(size) - len(from_size)
    _check(
        call,
        lead >= 0 and all(f in (1, n) for f, n in zip(from_size, size[lead:])),
        "from_size must expand to size (each of its dimensions 1 or equal, trailing dimensions aligned)",
    )
    from_stride = contiguous_stride(from_size)
    stride = [0] * lead + [0 if f == 1 and n != 1 else st for f, n, st in zip(from_size, size[lead:], from_stride)]
    return TensorSpec(tuple(size), stride=tuple(stride), storage_numel=math.prod(from_size), **kw)


def strided(
    size: Sequence[int], stride: Sequence[int], storage_offset: int = 0, storage_numel: int | None = None, **kw: Any
) -> TensorSpec:
    """Any `as_strided` layout, overlapping views included."""
    _check(f"strided({tuple(size)}, {tuple(stride)})", len(stride) == len(size), "needs one stride per dimension")
    return TensorSpec(
        tuple(size), stride=tuple(stride), storage_offset=storage_offset, storage_numel=storage_numel, **kw
    )


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
    storage = _fill(spec, numel, dtype, generator).to(spec.device or device)
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
    raise ValueError(f"unknown fill {spec.fill!r}: use {', '.join(FILLS)}")
