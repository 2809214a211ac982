"""Writes that collide: several values written to one element.

`index_put_` without `accumulate`, `scatter_`, `index_copy_` and
`max_unpool` given indices that repeat write several values to one element,
and PyTorch leaves which one lands undefined (the docs of each op say so):
eager's kernel picks one, a generated kernel may pick another on every run.
Such an element, and everything computed from it, is no test of the compiler.
Eager's first run of every case runs under `CollidingWrites` (it changes no
value: it only looks at the destinations of those ops). When a write
collided, eager runs twice more, once with the first of each element's
writers winning and once with the last (`CollidingWrites(winner=...)`);
the elements where those runs and eager's own differ are undefined, and the
verdict leaves them out (`undefined` counts them in each comparison).

Accumulating writes (`accumulate=True`, `scatter_add`, `index_add`) sum the
values that collide. A generated kernel sums them with atomic adds in the
result's dtype: in float16 or bfloat16 every add rounds, in an order that
changes from run to run, where eager on a GPU sums in float32.
`LowPrecisionSums` is eager with each such sum made as those adds make it,
one add at a time in the result's dtype, in the order of the values: the
baseline a run's error is judged against when its program adds atomically
in float16 or bfloat16 (docs/verdict.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.judge.tolerances import Tolerance, is_exact_dtype, tolerance_for

aten = torch.ops.aten
Winner = Literal["first", "last"]
# Writes into a larger tensor are not checked: finding their destinations takes an int64 index of every element
# (8 bytes each). Eager's winner then stands, as it did before any check.
MAX_CHECKED_ELEMENTS = 1 << 26
# How an op writes: (the tensor written, each written value's destination in it as a flat index, the values).
Writes = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _index_put_writes(args: list[Any], kwargs: dict[str, Any]) -> Writes | None:
    self, indices, values = args[0], args[1], args[2]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    if accumulate:
        return None
    dest = aten.index.Tensor(_positions(self), indices)  # the element of `self` each written value goes to
    return self, dest, torch.broadcast_to(values, dest.shape)


def _scatter_writes(args: list[Any], kwargs: dict[str, Any]) -> Writes | None:
    self, dim, index = args[:3]
    src = args[3] if len(args) > 3 else kwargs.get("src", kwargs.get("value"))
    if kwargs.get("reduce") is not None or len(args) > 4:
        return None  # a reduce= scatter accumulates
    dest = _positions(self).gather(dim, index)
    if isinstance(src, torch.Tensor):
        values = src[tuple(slice(0, n) for n in index.shape)]
    else:
        values = torch.full(index.shape, src, dtype=self.dtype, device=self.device)
    return self, dest, values


def _index_copy_writes(args: list[Any], kwargs: dict[str, Any]) -> Writes | None:
    self, dim, index, source = args[:4]
    return self, _positions(self).index_select(dim, index), source


def _max_unpool_writes(result: torch.Tensor, args: list[Any]) -> Writes:
    values, indices = args[0], args[1]
    spatial = values.dim() - len(args[2])  # output_size names the unpooled dims
    planes = math.prod(values.shape[:spatial])
    plane = math.prod(result.shape[spatial:])
    offsets = torch.arange(planes, device=values.device) * plane
    offsets = offsets.view(*values.shape[:spatial], *[1] * (values.dim() - spatial))
    return result, indices + offsets, values


# op -> how to read its writes.
_WRITES: dict[Any, Callable[[list[Any], dict[str, Any]], Any]] = {
    aten.index_put.default: _index_put_writes,
    aten.index_put_.default: _index_put_writes,
    aten._index_put_impl_.default: _index_put_writes,
    aten._unsafe_index_put.default: _index_put_writes,
    aten.scatter.src: _scatter_writes,
    aten.scatter_.src: _scatter_writes,
    aten.scatter.value: _scatter_writes,
    aten.scatter_.value: _scatter_writes,
    aten.index_copy.default: _index_copy_writes,
    aten.index_copy_.default: _index_copy_writes,
}
_UNPOOLS = (aten.max_unpool2d.default, aten.max_unpool3d.default)
# Out-of-place ops write into a copy of `self`: their result, not their argument, gets the chosen winners.
_IN_PLACE = (
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.scatter_.src,
    aten.scatter_.value,
    aten.index_copy_.default,
)


def _positions(t: torch.Tensor) -> torch.Tensor:
    return torch.arange(t.numel(), device=t.device).view(t.shape)


@dataclass
class Collision:
    op: str
    elements: int  # elements of the result written more than once


class CollidingWrites(TorchDispatchMode):
    """Eager with every colliding write noted; with `winner`, the first or last of each element's writers wins
    (in the order of the written values), instead of whichever eager's kernel lets win."""

    def __init__(self, winner: Winner | None = None):
        super().__init__()
        self.winner = winner
        self.collisions: list[Collision] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func not in _WRITES and func not in _UNPOOLS or args[0].numel() > MAX_CHECKED_ELEMENTS:
            return result
        try:
            self._settle(func, list(args), kwargs, result)
        except Exception:  # noqa: BLE001 - an op this reading does not understand is left as eager made it
            pass
        return result

    def _settle(self, func: Any, args: list[Any], kwargs: dict[str, Any], result: Any) -> None:
        writes = _max_unpool_writes(result, args) if func in _UNPOOLS else _WRITES[func](args, kwargs)
        if writes is None:
            return
        target, dest, values = writes
        target = target if func in _IN_PLACE or func in _UNPOOLS else result
        dest = dest.reshape(-1).to(torch.int64)
        if dest.numel() < 2:
            return
        counts = torch.bincount(dest, minlength=target.numel())
        contested = int((counts > 1).sum().item())
        if not contested:
            return
        self.collisions.append(Collision(str(func.overloadpacket.__name__), contested))
        if self.winner is None:
            return
        # Each destination's first (or last) writer: a stable sort by destination keeps the writers' order.
        order = torch.sort(dest, stable=True).indices
        sorted_dest = dest[order]
        ends = torch.ones_like(sorted_dest, dtype=torch.bool)
        if self.winner == "first":
            ends[1:] = sorted_dest[1:] != sorted_dest[:-1]
        else:
            ends[:-1] = sorted_dest[1:] != sorted_dest[:-1]
        chosen = order[ends]
        chosen_dest, chosen_values = dest[chosen], values.reshape(-1)[chosen].to(target.dtype)
        if target.is_contiguous():
            target.view(-1)[chosen_dest] = chosen_values
        else:
            target[torch.unravel_index(chosen_dest, target.shape)] = chosen_values


LOW_PRECISION = (torch.float16, torch.bfloat16)


def _index_put_sums(args: list[Any], kwargs: dict[str, Any]) -> Writes | None:
    self, indices, values = args[0], args[1], args[2]
    if not (args[3] if len(args) > 3 else kwargs.get("accumulate", False)):
        return None
    dest = aten.index.Tensor(_positions(self), indices)
    return self, dest, torch.broadcast_to(values, dest.shape)


def _masked_index_put_sums(args: list[Any], kwargs: dict[str, Any]) -> Writes:
    # As Inductor's lowering and ATen's kernel make it: masked-out values add 0, at indices clamped into range.
    self, mask, indices, values = args[:4]
    clamped = [None if i is None else i.clamp(-self.shape[d], self.shape[d] - 1) for d, i in enumerate(indices)]
    dest = aten.index.Tensor(_positions(self), clamped)
    masked = torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device))
    return self, dest, torch.broadcast_to(masked, dest.shape)


def _index_add_sums(args: list[Any], kwargs: dict[str, Any]) -> Writes:
    self, dim, index, source = args[:4]
    alpha = args[4] if len(args) > 4 else kwargs.get("alpha", 1)
    dest = _positions(self).index_select(dim, index)
    return self, dest, torch.broadcast_to(source * alpha if alpha != 1 else source, dest.shape)


def _scatter_add_sums(args: list[Any], kwargs: dict[str, Any]) -> Writes | None:
    self, dim, index, src = args[:4]
    reduce = args[4] if len(args) > 4 else kwargs.get("reduce", "sum")
    if reduce != "sum" or not (args[5] if len(args) > 5 else kwargs.get("include_self", True)):
        return None
    return self, _positions(self).gather(dim, index), src[tuple(slice(0, n) for n in index.shape)]


# op -> how to read its sums (as its writes: the tensor added to, each value's destination, the values).
_SUMS: dict[Any, Callable[[list[Any], dict[str, Any]], Any]] = {
    aten.index_put.default: _index_put_sums,
    aten.index_put_.default: _index_put_sums,
    aten._index_put_impl_.default: _index_put_sums,
    aten._unsafe_index_put.default: _index_put_sums,
    aten._unsafe_masked_index_put_accumulate.default: _masked_index_put_sums,
    aten.index_add.default: _index_add_sums,
    aten.index_add_.default: _index_add_sums,
    aten.scatter_add.default: _scatter_add_sums,
    aten.scatter_add_.default: _scatter_add_sums,
    aten.scatter_reduce.two: _scatter_add_sums,
    aten.scatter_reduce_.two: _scatter_add_sums,
}
_SUMS_IN_PLACE = (
    aten.index_put_.default,
    aten._index_put_impl_.default,
    aten.index_add_.default,
    aten.scatter_add_.default,
    aten.scatter_reduce_.two,
)


class LowPrecisionSums(TorchDispatchMode):
    """Eager with every float16/bfloat16 scatter sum made one add at a time in that dtype (module docstring)."""

    def __init__(self):
        super().__init__()
        self.emulated: list[str] = []  # the ops whose sums were made so

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SUMS and isinstance(args[0], torch.Tensor) and args[0].dtype in LOW_PRECISION:
            try:
                sums = _SUMS[func](list(args), kwargs)
            except Exception:  # noqa: BLE001 - an op this reading does not understand runs as eager runs it
                sums = None
            if sums is not None:
                target, dest, values = sums
                result = target if func in _SUMS_IN_PLACE else target.clone()
                _add_one_at_a_time(result, dest.reshape(-1).to(torch.int64), values.reshape(-1))
                self.emulated.append(str(func.overloadpacket.__name__))
                return result
        return func(*args, **kwargs)


def _add_one_at_a_time(target: torch.Tensor, dest: torch.Tensor, values: torch.Tensor) -> None:
    """target.view(-1)[dest[k]] += values[k] for each k in order, every add rounded to target's dtype: the adds
    to distinct elements at once, round after round (round r makes each element's r-th add)."""
    flat = target.reshape(-1).clone() if not target.is_contiguous() else target.view(-1)
    order = torch.sort(dest, stable=True).indices
    sorted_dest, sorted_values = dest[order], values[order].to(target.dtype)
    starts = torch.ones_like(sorted_dest, dtype=torch.bool)
    starts[1:] = sorted_dest[1:] != sorted_dest[:-1]
    positions = torch.arange(sorted_dest.numel(), device=dest.device)
    group_start = torch.cummax(torch.where(starts, positions, torch.zeros_like(positions)), 0).values
    rank = positions - group_start
    for r in range(int(rank.max().item()) + 1 if rank.numel() else 0):
        chosen = rank == r
        at = sorted_dest[chosen]
        flat[at] = flat[at] + sorted_values[chosen]
    if not target.is_contiguous():
        target.copy_(flat.view(target.shape))


def undefined_elements(
    run_eager: Callable[[], Any],
    first: Any,
    collisions: list[Collision],
    tolerances: Mapping[torch.dtype, Tolerance] | None = None,
) -> tuple[dict[str, torch.Tensor], str]:
    """The elements of each tensor result of `first` (eager's `Results`, whose run saw `collisions`) that change
    when the first, or the last, of each element's writers wins, and a sentence saying so; `run_eager()` runs
    eager again (under the mode then active)."""
    masks: dict[str, torch.Tensor] = {}
    for winner in ("first", "last"):
        with CollidingWrites(winner):
            other = run_eager()
        for name, value in first.tensors().items():
            alternative = other.tensors().get(name)
            if not isinstance(alternative, torch.Tensor) or alternative.shape != value.shape:
                continue
            mask = _differs(alternative, value, tolerances)
            masks[name] = masks[name] | mask if name in masks else mask
    masks = {name: mask for name, mask in masks.items() if bool(mask.any())}
    ops = ", ".join(sorted({c.op for c in collisions}))
    counted = ", ".join(f"{name} {int(mask.sum().item())} of {mask.numel()}" for name, mask in masks.items())
    return masks, (
        f"{ops} wrote several values to one element (indices that repeat): which one wins is undefined, "
        f"so the elements that depend on it were left out ({counted or 'none differed'})"
    )


def _differs(
    alternative: torch.Tensor, value: torch.Tensor, tolerances: Mapping[torch.dtype, Tolerance] | None
) -> torch.Tensor:
    if is_exact_dtype(value.dtype) or value.is_complex():
        return alternative != value
    tol = tolerance_for(value.dtype, tolerances)
    return ~torch.isclose(alternative, value, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
