"""OpInfo sample tensors laid out again, through the harness's own layout constructors.

Each layout turns one tensor into a view of a fresh storage with the layout
named: the view's size is the sample's, and so are its values where the layout
allows it. Value-preserving layouts (`contiguous`, `permuted`, `gapped`,
`storage_offset`) apply to every tensor of a sample; the two that make elements
share an address (`broadcast`, `overlapping`) cannot hold arbitrary values, so
they apply to the sample's primary input only, and only for ops that do not
write their inputs: their values are the sample's own values, repeated.

Storage elements the view does not reach (the holes of a gapped view, the
margin before an offset) keep the harness's seeded fill, so a kernel that reads
them reads deterministic garbage, never what the view holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from harness.inputs import TensorSpec, broadcast, contiguous, gapped, materialize, permuted, strided
from harness.layout import contiguous_stride, is_non_overlapping, is_non_overlapping_and_dense

# The order they are listed and generated in.
LAYOUTS = ("contiguous", "permuted", "gapped", "broadcast", "storage_offset", "overlapping")
# Layouts whose views alias elements: the op must only read them.
ALIASING = frozenset({"broadcast", "overlapping"})
# Applied to the primary input only (their values are repeats of the sample's).
PRIMARY_ONLY = ALIASING
GAP_STEP = 2
OFFSET = 3  # odd, so an offset view is never aligned the way a fresh allocation is


@dataclass(frozen=True)
class Layout:
    name: str
    # What the view looks like, in a sentence (the case description).
    summary: str
    # The spec for a tensor of this size, or None when the size cannot have the layout.
    spec: Callable[[tuple[int, ...]], TensorSpec | None]


def _sized_dims(size: tuple[int, ...]) -> list[int]:
    return [d for d, n in enumerate(size) if n > 1]


def _contiguous(size: tuple[int, ...]) -> TensorSpec | None:
    return contiguous(size)


def _permuted(size: tuple[int, ...]) -> TensorSpec | None:
    # Reversed dims over a base of reversed size: column-major, dense but not contiguous.
    if len(_sized_dims(size)) < 2:
        return None
    order = tuple(reversed(range(len(size))))
    return permuted(tuple(reversed(size)), order)


def _gapped(size: tuple[int, ...]) -> TensorSpec | None:
    dims = _sized_dims(size)
    if not dims:
        return None
    return gapped(size, step=GAP_STEP, dim=dims[-1])


def _broadcast(size: tuple[int, ...]) -> TensorSpec | None:
    dims = _sized_dims(size)
    if not dims:
        return None
    source = list(size)
    source[dims[0]] = 1  # the outermost sized dim is expanded from one slice
    return broadcast(size, tuple(source))


def _storage_offset(size: tuple[int, ...]) -> TensorSpec | None:
    if math.prod(size) == 0:
        return None
    return strided(size, contiguous_stride(size), storage_offset=OFFSET)


def _overlapping(size: tuple[int, ...]) -> TensorSpec | None:
    # The two innermost dims of size > 1: consecutive rows share half their elements.
    dims = _sized_dims(size)
    if len(dims) < 2:
        return None
    outer, inner = dims[-2], dims[-1]
    stride = [1] * len(size)
    stride[outer] = max(1, size[inner] // 2)
    reach = 1 + (size[outer] - 1) * stride[outer] + (size[inner] - 1)
    for d in reversed(range(outer)):  # outer dims step over the overlapped block, so blocks do not overlap
        stride[d] = reach
        reach *= size[d]
    return strided(size, tuple(stride))


REGISTRY: dict[str, Layout] = {
    "contiguous": Layout("contiguous", "contiguous", _contiguous),
    "permuted": Layout("permuted", "dims reversed over a base of reversed size (dense, column-major)", _permuted),
    "gapped": Layout("gapped", f"a slice with step {GAP_STEP} along the innermost dim of size > 1", _gapped),
    "broadcast": Layout("broadcast", "expanded (stride 0) along the outermost dim of size > 1", _broadcast),
    "storage_offset": Layout("storage_offset", f"contiguous at storage offset {OFFSET}", _storage_offset),
    "overlapping": Layout("overlapping", "an as_strided view whose innermost rows overlap by half", _overlapping),
}


def spec_for(layout: str, t: torch.Tensor) -> TensorSpec | None:
    """The layout's spec for a tensor of `t`'s size, dtype and grad flag, or None if it cannot have it."""
    if layout != "contiguous" and t.numel() == 0:
        return None  # an empty tensor has no layout to speak of
    spec = REGISTRY[layout].spec(tuple(t.shape))
    if spec is None:
        return None
    return TensorSpec(
        spec.size,
        dtype=t.dtype,
        stride=spec.stride,
        storage_offset=spec.storage_offset,
        storage_numel=spec.storage_numel,
        fill="randint" if not t.dtype.is_floating_point else "randn",
        low=0,
        high=2 if t.dtype == torch.bool else 10,
    )


def applies(layout: str, t: torch.Tensor) -> bool:
    """Whether a tensor of `t`'s size can have the layout."""
    return spec_for(layout, t) is not None


def relayout(t: torch.Tensor, layout: str, seed: int) -> torch.Tensor:
    """`t`'s values (or, for aliasing layouts, repeats of them) in a fresh storage viewed with `layout`.

    The result is a leaf with `t`'s requires_grad.
    """
    spec = spec_for(layout, t)
    if spec is None:
        raise ValueError(f"a tensor of size {tuple(t.shape)} cannot be laid out {layout}")
    generator = torch.Generator().manual_seed(seed)
    view = materialize(spec, generator, "cpu").detach()
    values = t.detach().cpu()
    with torch.no_grad():
        if layout == "broadcast":
            # The storage holds one slice of the sample; the view repeats it.
            dim = next(d for d, (n, s) in enumerate(zip(spec.size, spec.resolved_stride)) if n > 1 and s == 0)
            source = values.narrow(dim, 0, 1).contiguous().reshape(-1)
            view.as_strided((source.numel(),), (1,), spec.storage_offset).copy_(source)
        elif layout == "overlapping":
            # The storage holds the sample's values in order, as many as the view reaches.
            reach = spec.needed_storage() - spec.storage_offset
            flat = values.reshape(-1)
            source = flat.repeat(-(-reach // max(flat.numel(), 1)))[:reach] if flat.numel() else flat
            view.as_strided((reach,), (1,), spec.storage_offset).copy_(source)
        else:
            view.copy_(values)
    return view.requires_grad_(t.requires_grad)


def describe(t: torch.Tensor) -> str:
    dense = "dense" if is_non_overlapping_and_dense(t) else ("non-dense" if is_non_overlapping(t) else "overlapping")
    return f"size={tuple(t.shape)} stride={t.stride()} offset={t.storage_offset()} ({dense})"
