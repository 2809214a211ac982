"""Dynamic runs: compile once with symbolic sizes, run at the declared size and at a second size.

A kernel generated for symbolic sizes has bug classes a static run never
executes: index arithmetic in the wrong width for a size it was not
specialised to, masks at vector or block tails, guards that let a stale
graph serve a new size, reductions split differently. A dynamic run:

- marks the varying dims of the inputs (`torch._dynamo.maybe_mark_dynamic`, on
  every run's copies): the case's `dynamic_dims`, or by default the leading
  dim of every input of rank 2 or more. A size is a value: every dim of an
  input of the same size varies with it (a matmul's inner size stays one
  size for both operands). Sizes 0 and 1, which Dynamo always specialises,
  never vary;
- compiles at the declared size, and runs the same compiled program at a
  second size, one more than the first and not a multiple of 8 (nor so of
  16): a tail for every vector width and block size;
- judges each size against eager at that size, and reports a recompilation
  (Dynamo compiled a graph at the second size) as `recompiled`.

Only inputs given as `TensorSpec`s are resized (a tensor given as it is keeps
its shape); a strided spec keeps its layout, its strides recomputed for the
new sizes (`resized`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from .inputs import TensorSpec
from .layout import contiguous_stride

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
        """The program's inputs at the second size: each spec's marked dims resized."""
        def one(key: int | str, item: Any) -> Any:
            if not isinstance(item, TensorSpec) or key not in self.marks:
                return item
            return resized(item, {d: self.sizes[item.size[d]] for d in self.marks[key]})

        return [one(i, item) for i, item in enumerate(items)], {k: one(k, v) for k, v in kwargs.items()}


def plan_for(items: Sequence[Any], kwargs: Mapping[str, Any],
             declared: Mapping[int | str, Sequence[int]] | None) -> DynamicPlan | str:
    """The plan for a program's inputs; a string says why none can vary."""
    specs = {**{i: item for i, item in enumerate(items)}, **dict(kwargs)}
    specs = {key: spec for key, spec in specs.items() if isinstance(spec, TensorSpec)}
    if declared is not None:
        unknown = [key for key in declared if key not in specs]
        if unknown:
            return f"dynamic_dims names inputs {unknown} that are not TensorSpecs of the case"
        chosen = {spec.size[d] for key, dims in declared.items() for d in dims for spec in [specs[key]]}
    else:
        chosen = {spec.size[0] for spec in specs.values() if len(spec.size) >= 2}
    varying = {size for size in chosen if size >= 2}
    if not varying:
        return ("no input dim can vary: the default varies the leading dim of every input of rank 2 or more "
                "(sizes 0 and 1 are always specialised); declare the case's dynamic_dims")
    marks = {key: tuple(d for d, size in enumerate(spec.size) if size in varying) for key, spec in specs.items()}
    return DynamicPlan({key: dims for key, dims in marks.items() if dims}, {s: second_size(s) for s in varying})


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
    needed = dataclasses.replace(spec, size=tuple(size), stride=tuple(stride) if stride else None,
                                 storage_numel=None).needed_storage()
    return max(spec.storage_numel, needed)


def shapes(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[list[int]]:
    """The shapes of a run's tensor inputs, in order (positional, then keyword)."""
    return [list(value.shape) for value in [*args, *kwargs.values()] if isinstance(value, torch.Tensor)]
