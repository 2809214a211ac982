"""Dynamic runs: compile once with symbolic sizes, run at the declared size and at a second size.

A kernel generated for symbolic sizes has bug classes a static run never
executes: index arithmetic in the wrong width for a size it was not
specialised to, masks at vector or block tails, guards that let a stale
graph serve a new size, reductions split differently. A dynamic run:

- marks the varying dims of the inputs (`torch._dynamo.maybe_mark_dynamic`, on
  every run's copies): the case's `dynamic_dims`, or by default the leading
  dim of every input of rank 2 or more; when eager rejects the second size so
  made, also every other dim of the same size (a matmul's inner size that
  equals the batch must change with it). Sizes 0 and 1, which Dynamo always
  specialises, never vary, nor does a parameter (`nn.Parameter`) given as an
  input, unless `dynamic_dims` names it: a module's parameters and buffers
  are not what a user's program varies;
- compiles at the declared size, and runs the same compiled program at a
  second size, one more than the first and not a multiple of 8 (nor so of
  16): a tail for every vector width and block size;
- judges each size against eager at that size, and reports a recompilation
  (Dynamo compiled a graph at the second size) as `recompiled`, with the
  guard that failed (`recompile_reasons`): a pass with a warning where the
  values pass, a failure under `--dynamic strict`.

A `TensorSpec` input is made afresh at the second size, its layout kept and
its strides recomputed for the new sizes (`resized`); a tensor given as it is
(an OpInfo sample) has its values repeated along the resized dims
(`resized_tensor`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from harness.inputs import TensorSpec
from harness.layout import contiguous_stride, extent, is_non_overlapping

VECTOR = 8  # a second size is never a multiple of this (nor, so, of 16)


def second_size(size: int) -> int:
    """One more than `size`, and not a multiple of 8 or 16."""
    size += 1
    while size % VECTOR == 0:
        size += 1
    return size


@dataclass(frozen=True)
class DynamicPlan:
    """Which input dims vary, and how each varying size changes."""

    # input key (position, or keyword name) -> the dims marked dynamic
    marks: Mapping[int | str, tuple[int, ...]]
    # a varying size -> the second size
    sizes: Mapping[int, int]

    def mark(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Mark one run's input tensors (the compiled program's arguments) before it is called."""
        for key, dims in self.marks.items():
            value = kwargs.get(key) if isinstance(key, str) else args[key] if key < len(args) else None
            if isinstance(value, torch.Tensor) and dims:
                torch._dynamo.maybe_mark_dynamic(value, list(dims))

    def second(self, items: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The program's inputs at the second size: each spec's or tensor's marked dims resized."""

        def one(key: int | str, item: Any) -> Any:
            shape = _shape(item)
            if shape is None or key not in self.marks:
                return item
            new_sizes = {d: self.sizes[shape[d]] for d in self.marks[key]}
            return resized(item, new_sizes) if isinstance(item, TensorSpec) else resized_tensor(item, new_sizes)

        return [one(i, item) for i, item in enumerate(items)], {k: one(k, v) for k, v in kwargs.items()}


def _shape(item: Any) -> tuple[int, ...] | None:
    if isinstance(item, TensorSpec):
        return tuple(item.size)
    if isinstance(item, torch.Tensor) and item.layout == torch.strided:
        return tuple(item.shape)
    return None


def plans_for(
    items: Sequence[Any], kwargs: Mapping[str, Any], declared: Mapping[int | str, Sequence[int]] | None
) -> list[DynamicPlan] | str:
    """The plans to try for a program's inputs (specs and tensors), in order; a string says why none can vary.

    The first varies the chosen dims alone (the case's `dynamic_dims`, or the leading dim of every input of
    rank 2 or more); the second also every other dim of a chosen size (a matmul's shared size, which must
    change with the batch it equals). The runner takes the first whose second size eager accepts."""
    shapes = {**{i: _shape(item) for i, item in enumerate(items)}, **{k: _shape(v) for k, v in kwargs.items()}}
    shapes = {key: shape for key, shape in shapes.items() if shape is not None}
    # What a user's program varies: its inputs, not a parameter handed in as one (Dynamo specialises those).
    parameters = {key for key, item in [*enumerate(items), *kwargs.items()] if isinstance(item, torch.nn.Parameter)}
    if declared is not None:
        unknown = [key for key in declared if key not in shapes]
        if unknown:
            return f"dynamic_dims names inputs {unknown} that are not tensors of the case"
        declared = {key: _dims_of(key, dims, shapes[key], declared) for key, dims in declared.items()}
        chosen = {key: tuple(d for d in dims if shapes[key][d] >= 2) for key, dims in declared.items()}
    else:
        chosen = {
            key: (0,) for key, shape in shapes.items() if len(shape) >= 2 and shape[0] >= 2 and key not in parameters
        }
    chosen = {key: dims for key, dims in chosen.items() if dims}
    if not chosen:
        return (
            "no input dim can vary: the default varies the leading dim of every input of rank 2 or more "
            "(sizes 0 and 1 are always specialised); declare the case's dynamic_dims"
        )
    varying = {shapes[key][d] for key, dims in chosen.items() for d in dims}
    sizes = {size: second_size(size) for size in varying}
    every = {
        key: tuple(d for d, size in enumerate(shape) if size in varying)
        for key, shape in shapes.items()
        if declared is not None and key in declared or key not in parameters
    }
    plans = [DynamicPlan(chosen, sizes), DynamicPlan({key: dims for key, dims in every.items() if dims}, sizes)]
    return plans if plans[1].marks != plans[0].marks else plans[:1]


class BadDynamicDims(ValueError):
    """A case's `dynamic_dims` that cannot make a second size: a dim its input does not have, or sizes that come
    out the same as the first (the second size would judge nothing new)."""


def _dims_of(key: int | str, dims: Sequence[int], shape: tuple[int, ...], declared: Mapping) -> tuple[int, ...]:
    """The declared dims of one input, counted from 0 (-1 is its last dim, as in torch)."""
    if not isinstance(dims, (tuple, list)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
        raise BadDynamicDims(f"dynamic_dims {dict(declared)!r}: input {key!r} needs a tuple of dims, not {dims!r}")
    wrong = [d for d in dims if not -len(shape) <= d < len(shape)]
    if wrong:
        raise BadDynamicDims(
            f"dynamic_dims {dict(declared)!r}: input {key!r} of shape {tuple(shape)} has no dim {wrong[0]}"
        )
    return tuple(dict.fromkeys(d % len(shape) for d in dims))


def check_second_size(
    first: tuple[Sequence[Any], Mapping[str, Any]],
    second: tuple[Sequence[Any], Mapping[str, Any]],
    declared: Mapping | None,
) -> None:
    """A second size (its inputs: specs or tensors, and keywords) equal to the first is no second size: an error
    naming the declaration."""

    def sizes(items: Sequence[Any], kwargs: Mapping[str, Any]) -> list:
        return [_shape(item) for item in [*items, *kwargs.values()] if _shape(item) is not None]

    if sizes(*first) == sizes(*second):
        said = f"dynamic_dims {dict(declared)!r}" if declared is not None else "the default dims"
        raise BadDynamicDims(f"{said} made the second size equal to the first ({sizes(*first)}): nothing would vary")


def resized_tensor(t: torch.Tensor, new_sizes: Mapping[int, int]) -> torch.Tensor:
    """A tensor given as it is (an OpInfo sample) at the second size: its values repeated along the resized
    dims (row i of the new size holds row i mod the old size: the values stay in the sample's domain, an index
    stays an index), laid out as `t` is (`resized`'s strides), with `t`'s requires_grad."""
    values = t.detach()
    for d, n in new_sizes.items():
        values = values.index_select(d, torch.arange(n, device=t.device) % t.shape[d])
    size = tuple(values.shape)
    stride = _restrided(tuple(t.shape), tuple(t.stride()), size)
    storage = torch.zeros(t.storage_offset() + extent(size, stride), dtype=t.dtype, device=t.device)
    view = storage.as_strided(size, stride, t.storage_offset())
    with torch.no_grad():
        if not is_non_overlapping(view):  # the storage holds the values in order, as far as the view reaches
            flat = values.reshape(-1)
            reach = storage.numel() - t.storage_offset()
            storage[t.storage_offset() :] = flat.repeat(-(-reach // max(flat.numel(), 1)))[:reach]
        else:
            view.copy_(values)
    return view.requires_grad_(t.requires_grad)


def resized(spec: TensorSpec, new_sizes: Mapping[int, int]) -> TensorSpec:
    """`spec` with some dims resized, its layout kept: contiguous stays contiguous; a strided view keeps its
    dims' order in memory, each gap between them (a sliced or padded dim) and its stride-0 dims; an
    overlapping view keeps its strides."""
    size = tuple(new_sizes.get(d, n) for d, n in enumerate(spec.size))
    if spec.stride is None:
        return dataclasses.replace(spec, size=size, storage_numel=_grown(spec, size, None))
    stride = _restrided(spec.size, spec.stride, size)
    return dataclasses.replace(spec, size=size, stride=stride, storage_numel=_grown(spec, size, stride))


def _restrided(old_size: Sequence[int], old_stride: Sequence[int], size: Sequence[int]) -> tuple[int, ...]:
    order = sorted((d for d in range(len(size)) if old_stride[d] != 0), key=lambda d: (old_stride[d], d))
    stride = list(old_stride)
    inner_old, inner_new = 1, 1  # the span of the dims below, before and after
    for d in order:
        if old_stride[d] % inner_old:
            return tuple(old_stride)  # dims overlap in memory: no gap to keep
        gap = old_stride[d] // inner_old
        stride[d] = gap * inner_new
        inner_old, inner_new = old_stride[d] * max(old_size[d], 1), stride[d] * max(size[d], 1)
    if any(s < 0 for s in stride):
        return contiguous_stride(size)
    return tuple(stride)


def _grown(spec: TensorSpec, size: Sequence[int], stride: Sequence[int] | None) -> int | None:
    """A storage size the resized view fits in (the spec's own, when it names one and it still fits)."""
    if spec.storage_numel is None:
        return None
    needed = dataclasses.replace(
        spec, size=tuple(size), stride=tuple(stride) if stride else None, storage_numel=None
    ).needed_storage()
    return max(spec.storage_numel, needed)


def shapes(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[list[int]]:
    """The shapes of a run's tensor inputs, in order (positional, then keyword)."""
    return [list(value.shape) for value in [*args, *kwargs.values()] if isinstance(value, torch.Tensor)]
