"""Which eager value a kernel argument holds: the buffer-to-value map of one graph call.

A kernel writes Inductor buffers; a buffer holds, once its kernel ran, the
value of one FX node (`BufferFact.value_node`). The map below turns a launch's
tensor argument into that node, at that launch:

- an argument that *is* a wrapper local (`buf3`, `arg0_1`, an alias local
  such as `buf0 = reinterpret_tensor(buf2, ...)`) writes the buffers that the
  kernel computes into that local's storage; when several do (a zeros buffer
  and the `index_put_` that mutates it, in one fused kernel), the storage ends
  up holding the last of them in graph order;
- an argument that is an unnamed view of a local takes the computed buffer
  laid out exactly there, else the local's own value, viewed the same way;
- without codegen's kernel map, the k-th write to a storage in a graph call
  takes the k-th of its writers in graph order.

Reads resolve through the writes seen so far in the call (the node last
stored in that region), then through the local's own node, then the graph
input's value on entry. Whatever cannot be resolved is `unmapped`, with the
reason, and counted as such.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from harness.inductor_compat import GraphInfo, Launch
from harness.layout import clone_exact, is_non_overlapping, is_non_overlapping_and_dense, span
from harness.probe.node_values import GraphValues

Layout = Callable[[torch.Tensor], "torch.Tensor | None"]


def _same(value: torch.Tensor) -> torch.Tensor:
    return value


@dataclass
class Region:
    """What one kernel argument holds, in eager terms."""

    buffer: str | None  # the Inductor buffer (or graph input) it is or lies in
    node: str | None = None  # the FX node whose value it holds
    input: str | None = None  # ... or the graph input whose value on entry it holds
    reason: str | None = None  # why neither, when unmapped
    # Lays the node's value out as the argument is (a view of a larger buffer, say).
    layout: Layout = field(default=_same, repr=False)
    # A write of part of a storage: the storage's state before it, and where the part lies
    # ((size, stride, offset) relative to the argument, which is the whole buffer).
    before: "Region | None" = None
    part: tuple[list[int], list[int], int] | None = None
    # The launch that stored this region (set when the write is recorded).
    written_by: int | None = None

    def nodes(self) -> list[str]:
        """The FX nodes this region's eager value is made from."""
        own = [self.node] if self.node else []
        return own + (self.before.nodes() if self.before is not None else [])

    @property
    def mapped(self) -> bool:
        return (self.node is not None or self.input is not None) and (self.before is None or self.before.mapped)

    def eager(self, values: GraphValues) -> torch.Tensor | None:
        return self._value(values, float64=False)

    def float64(self, values: GraphValues) -> torch.Tensor | None:
        return self._value(values, float64=True)

    def _value(self, values: GraphValues, float64: bool) -> torch.Tensor | None:
        if self.input is not None:
            value = values.input(self.input)
            if float64 and value is not None and value.is_floating_point():
                value = value.to(torch.float64)
        else:
            value = values.float64(self.node or "") if float64 else values.value(self.node or "")
        if value is None:
            return None
        if self.before is None:
            return self.layout(value)
        whole = self.before._value(values, float64)
        if whole is None or self.part is None:
            return None
        result = clone_exact(whole, value.dtype)
        size, stride, offset = self.part
        result.as_strided(size, stride, result.storage_offset() + offset).copy_(value)
        return result


@dataclass
class RegionMap:
    """The buffer-to-value map of one call of one compiled graph."""

    info: GraphInfo
    values: GraphValues
    # (storage pointer, offset, shape, stride) -> the region last written there.
    _writes: dict[tuple, Region] = field(default_factory=dict)
    _written_storages: Counter = field(default_factory=Counter)
    _storage_writes: Counter = field(default_factory=Counter)
    # (launch key, region key) -> what that launch's write holds, as first mapped.
    _written_regions: dict[tuple, Region] = field(default_factory=dict)
    # A fallback launch's number -> which call of its op in this graph it is (codegen names each call's buffers).
    _fallback_ordinals: dict[int, int] = field(default_factory=dict)
    _fallback_counts: Counter = field(default_factory=Counter)

    def local_of(self, launch: Launch, tensor: torch.Tensor) -> str | None:
        """The wrapper local this tensor is; of several (`buf1 = buf0`), one whose value is known."""
        names = launch.local_names(tensor)
        known = [
            n
            for n in names
            if n in self.info.input_names or (n in self.info.buffers and self.info.buffers[n].value_node is not None)
        ]
        return (known or names or [None])[0]

    def written(self, launch: Launch, tensor: torch.Tensor, check: bool = True) -> Region:
        """The node a written argument holds once this launch ran. With `check`, a region whose eager value
        does not fit the argument is unmapped, which computes that value; without, its nodes may be fetched
        first, all in one pass (`GraphValues.prefetch`)."""
        # Asked again by a replay of the launch: the same answer (mapping a write counts it, see _written_local).
        key = (launch.key, region_key(tensor))
        region = self._written_regions.get(key)
        if region is None:
            region = self._written_regions[key] = self._written(launch, tensor)
        return self._check(region, tensor) if check else region

    def _written(self, launch: Launch, tensor: torch.Tensor) -> Region:
        path = launch.result_path(tensor)
        if path is not None:
            return self._returned(launch, path)
        local = self.local_of(launch, tensor)
        if local is not None:
            return self._written_local(launch, local, tensor)
        owner = launch.owning_buffer(tensor)
        if owner is None:
            return Region(None, reason="not a wrapper buffer nor a view of one")
        owner_name, owner_tensor = owner
        for name in self._computed(launch) or ():
            fact = self.info.buffers.get(name)
            if (
                fact is not None
                and fact.view is not None
                and fact.storage == owner_name
                and fact.view == _view_of(tensor, owner_tensor)
            ):
                return self._region_of(name)
        region = self._written_local(launch, owner_name, owner_tensor)
        return _viewed(region, owner_tensor, tensor)

    def read(self, launch: Launch, tensor: torch.Tensor, check: bool = True) -> Region:
        """The node a read argument holds before this launch runs (`check` as for `written`)."""
        region = self._read(launch, tensor)
        return self._check(region, tensor) if check else region

    def _read(self, launch: Launch, tensor: torch.Tensor) -> Region:
        key = region_key(tensor)
        if key in self._writes:
            return self._writes[key]
        moved = self._same_memory_write(tensor)
        if moved is not None:
            return moved
        local = self.local_of(launch, tensor)
        if local is not None:
            return self._known(local, tensor)
        owner = launch.owning_buffer(tensor)
        if owner is None:
            return Region(None, reason="not a wrapper buffer nor a view of one")
        owner_name, owner_tensor = owner
        region = self._writes.get(region_key(owner_tensor)) or self._known(owner_name, owner_tensor)
        return _viewed(region, owner_tensor, tensor)

    def record_write(self, tensor: torch.Tensor, region: Region, launch_index: int) -> None:
        """What launch `launch_index` just stored; an overlapping region stored before is no longer known."""
        region = dataclasses.replace(region, written_by=launch_index)
        pointer = tensor.untyped_storage().data_ptr()
        start, end = span(tensor)
        for key in [k for k in self._writes if k[0] == pointer and k != region_key(tensor)]:
            other_start, other_end = key[4]
            if other_start < end and start < other_end:
                del self._writes[key]
        self._writes[region_key(tensor)] = region
        self._written_storages[pointer] += 1

    def _same_memory_write(self, tensor: torch.Tensor) -> Region | None:
        """The region last written over this memory under another name, shape or order, laid out as `tensor`.

        Inductor hands a buffer on in place (`buf45 = reinterpret_tensor(buf44, ...)`, then a kernel
        updates buf45): the elements are where the earlier write put them. A write whose layout tiles
        its span (dense) and covers `tensor`'s span says what every element of `tensor` holds.
        """
        pointer, (start, end) = tensor.untyped_storage().data_ptr(), span(tensor)
        for (other, offset, shape, stride, (first, last)), region in self._writes.items():
            if other != pointer or not first <= start < end <= last or region.before is not None or not region.mapped:
                continue
            if not is_non_overlapping_and_dense(torch.empty_strided(shape, stride, device="meta")):
                continue
            inner, size, steps = region.layout, tuple(tensor.shape), tuple(tensor.stride())
            at = tensor.storage_offset() - offset

            def relaid(value: torch.Tensor) -> torch.Tensor | None:
                value = inner(value)
                if value is None or tuple(value.shape) != shape:
                    return None
                memory = torch.empty_strided(shape, stride, dtype=value.dtype, device=value.device)
                memory.copy_(value)
                return memory.as_strided(size, steps, at)

            return dataclasses.replace(region, layout=relaid)
        return None

    def _known(self, local: str, tensor: torch.Tensor, before_writes: bool = False) -> Region:
        """A local read before any probed launch wrote it: a graph input, or a buffer an unprobed op made."""
        if not before_writes and self._written_storages[tensor.untyped_storage().data_ptr()]:
            return Region(local, reason=f"{local} is read after a write to part of its storage")
        if local in self.info.input_names:
            return Region(local, input=local)
        if local in self.info.buffers:
            return self._region_of(local)
        return Region(local, reason=f"{local} is not a buffer of this graph")

    def _written_local(self, launch: Launch, local: str, tensor: torch.Tensor) -> Region:
        fact = self.info.buffers.get(local)
        storage = fact.storage if fact is not None else local
        computed = self._computed(launch)
        if fact is not None and fact.view is not None and (computed is None or local in computed):
            return self._region_of(local)  # an alias local: the slice of a larger buffer this kernel computes
        if computed is not None:
            writers = [
                b
                for b in computed
                if b in self.info.buffers
                and self.info.buffers[b].storage == storage
                and self.info.buffers[b].view is None
            ]
            writers.sort(key=lambda b: self.info.order_of(self.info.buffers[b].value_node))
        else:
            # No kernel map: the k-th write to a storage in this call is its k-th writer in graph order.
            order = ([storage] if storage in self.info.buffers else []) + self.info.mutations_of(storage)
            writes = self._storage_writes[storage]
            self._storage_writes[storage] += 1
            writers = [order[min(writes, len(order) - 1)]] if order else []
        if not writers:
            return Region(local, reason=f"the kernel computes no buffer stored in {local}")
        # In graph order: a whole write replaces the storage's state, a partial one updates part of it.
        state: Region | None = None
        for writer in writers:
            region = self._region_of(writer)
            fact = self.info.buffers[writer]
            if fact.part_of is None or not region.mapped:
                state = region
                continue
            before = state or self._writes.get(region_key(tensor)) or self._known(local, tensor, before_writes=True)
            offset = fact.part_view[2] - tensor.storage_offset()
            state = Region(writer, node=region.node, before=before, part=(fact.part_view[0], fact.part_view[1], offset))
        return state

    def _region_of(self, buffer: str) -> Region:
        fact = self.info.buffers[buffer]
        if fact.value_node is None:
            return Region(buffer, reason=f"{buffer} {fact.unmapped_reason}")
        if fact.value_node in self.values.random:
            return Region(buffer, reason=f"{buffer} depends on random numbers (an eager rerun draws others)")
        if fact.reshaped:
            shape = fact.size
            return Region(buffer, node=fact.value_node, layout=lambda value: value.reshape(shape) if shape else None)
        return Region(buffer, node=fact.value_node)

    def _returned(self, launch: Launch, path: tuple[int, ...]) -> Region:
        """What a tensor a fallback returned holds: the value of the buffer codegen made for that result."""
        returned = _return_name(launch, path)
        if any(word in returned for word in _GENERATOR_STATE):
            # (SDPA kernels return their philox seed and offset whatever the dropout: never equal to eager's.)
            return Region(
                None,
                reason=f"{launch.kernel.name} returns the random generator's state ({returned}), "
                "not a value it computes",
            )
        made = self._computed(launch)
        if made is None:
            return Region(None, reason=f"codegen named no buffers for this call of {launch.kernel.name}")
        found = [b for b in made if self.info.buffers[b].result_path == path]
        if not found and path == () and len(made) == 1:  # a fallback whose one result is its own buffer
            found = made
        if len(found) != 1:
            return Region(None, reason=f"no buffer of {launch.kernel.name} holds its result{list(path)}")
        return self._region_of(found[0])

    def made_by(self, launch: Launch) -> list[str] | None:
        """The buffers a launch computes (a fallback call: its own, its results' and its written arguments')."""
        return self._computed(launch)

    def _computed(self, launch: Launch) -> list[str] | None:
        if launch.fallback is not None:
            ordinal = self._fallback_ordinals.get(launch.fallback)
            if ordinal is None:
                ordinal = self._fallback_ordinals[launch.fallback] = self._fallback_counts[launch.kernel.name]
                self._fallback_counts[launch.kernel.name] += 1
            found = self.info.fallback_call(launch.kernel.name, ordinal)
            return [b for b in found if b in self.info.buffers] if found is not None else None
        if launch.kernel.kind == "extern":
            found = self.info.extern_buffers(launch.kernel.name)
            return found or None
        return self.info.computed_by(launch.kernel.name)

    def _check(self, region: Region, tensor: torch.Tensor) -> Region:
        """A mapped region whose eager value does not fit the argument is unmapped, with the reason."""
        if not region.mapped:
            return region
        value = region.eager(self.values)
        if value is None:
            return Region(region.buffer, reason=f"no eager value for {region.node or region.input}")
        if value.shape != tensor.shape:
            return Region(
                region.buffer,
                reason=f"{region.buffer}: eager value of {region.node or region.input} "
                f"has shape {tuple(value.shape)}, the argument {tuple(tensor.shape)}",
            )
        return region


# Names of an op's returns that hold the random generator's state rather than a computed value.
_GENERATOR_STATE = ("philox", "rng_state", "seed")


def _return_name(launch: Launch, path: tuple[int, ...]) -> str:
    """The schema's name for what a fallback returned at `path` ("" when it has none)."""
    returns = getattr(getattr(launch.kernel.op, "_schema", None), "returns", None) or []
    position = path[0] if path else 0
    return (returns[position].name or "") if position < len(returns) else ""


def region_key(tensor: torch.Tensor) -> tuple:
    """Where a tensor lies: storage, offset, shape, stride (and its span, for overlap tests)."""
    return (
        tensor.untyped_storage().data_ptr(),
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        span(tensor),
    )


def _view_of(tensor: torch.Tensor, owner: torch.Tensor) -> tuple[list[int], list[int], int]:
    return (list(tensor.shape), list(tensor.stride()), tensor.storage_offset() - owner.storage_offset())


def _viewed(region: Region, owner: torch.Tensor, tensor: torch.Tensor) -> Region:
    """`region` (the whole of `owner`) narrowed to the view `tensor` takes of it.

    The owner's value is laid out with the owner's own strides, then the same
    view is taken, so each element is compared with its own twin.
    """
    if not region.mapped:
        return region
    if not is_non_overlapping(owner):
        return Region(region.buffer, reason=f"{region.buffer} overlaps itself: a view of it cannot be laid out")
    inner = region.layout

    def layout(value: torch.Tensor) -> torch.Tensor | None:
        value = inner(value)
        if value is None or value.numel() != owner.numel():
            return None
        laid_out = torch.empty_strided(owner.shape, owner.stride(), dtype=value.dtype, device=value.device)
        laid_out.copy_(value.reshape(owner.shape))
        return laid_out.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset() - owner.storage_offset())

    return Region(region.buffer, region.node, region.input, None, layout)


def describe_reason(reason: str | None) -> str:
    """A reason without the buffer it starts with and the particulars it ends with, so that reasons group."""
    if not reason:
        return "unknown"
    first, _, rest = reason.partition(" ")
    if first.rstrip(":").startswith(("buf", "arg")) and rest:
        reason = rest
    return reason.split(" (")[0] if reason.endswith(")") else reason
