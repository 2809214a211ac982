"""Eager values of a compiled graph's FX nodes, for one call of that graph, computed in step with it.

The post-grad graph runs eagerly (an FX interpreter) on the very inputs the
compiled graph receives, one node at a time and only as far as the launches
need. Neither side may change what the other reads: the interpreter copies an
input's storage before its first write into it, and a launch about to write
a storage eager still reads gets it copied first (`before_write`). A node's
value is computed when a launch asks for it, kept until every buffer holding
it was judged, then released. So the probe holds
about what an eager run of the graph holds, not every intermediate at once;
a released value asked for again (an isolation replay needs a kernel's
inputs) is computed again in a pass of its own. The graph's order is not the
launches' order: running to a value a launch asks for keeps the wanted values
before it too, and on a device all but the first few of those wait in host
memory until their launches ask for them (`AHEAD_KEPT_ON_DEVICE`).

Such a pass starts from the graph's inputs, so they are kept for the whole
call. On a device, one the compiled graph has let go of (a compiled
backward frees each saved activation after its last use) is moved to host
memory (`offload_released`) and brought back for a pass: device memory then
follows the compiled graph's, and every value stays computable. A pass makes
each input it reads (brought back, or converted to float64) at its first use
there and lets go of it after its last, as eager would. Whether a
shared input changed without a launch announcing it is checked before it
moves, and at the graph's end (`unannounced_write`).

Each kept value is the value the node had when it ran: the graph also updates
tensors in place (`index_put_`, `copy_` into an input, re-inplaced ops), so a
kept value that a node is about to write is copied first. Float64 twins come
from the same graph rewritten to compute in float64 (`float64_copy`, made
once per graph), run on float64 inputs, one node at a time: one float64 run
advances with the requests, as the eager one does, so a graph with many
buffers near tolerance costs one float64 run, not one per buffer. Values that depend on
random numbers are never compared: an eager rerun draws other numbers than
the compiled kernel did.
"""

from __future__ import annotations

import operator
import sys
from collections import Counter, deque
from typing import Any, Iterable, Iterator

import torch
import torch.fx

from harness.inductor_compat.graphs import AFTER, GraphInfo, ancestors, written_nodes
from harness.layout import clone_exact, is_non_overlapping
from harness.records import exception_line

# Tests set this to move released inputs and values kept ahead on CPU runs too (to host memory again): the
# same code path.
OFFLOAD_ON_CPU = False


def _references(items: list, index: int) -> int:
    """sys.getrefcount of one list item, read always in this one way (the count includes the read itself)."""
    return sys.getrefcount(items[index])


# How many values compared for the last time stay kept (see GraphValues.used). Measured on CPU models
# (transformer encoder, Longformer, BERT, GPT-2 training): the inputs a replay needed had been let go of
# at most 24 releases earlier, most at most 8.
RECENTLY_USED_KEPT = 32

# How many values kept ahead of the launches that ask for them stay on a device; the ones after them are moved
# to host memory until asked for. One launch asking for a value late in the eager graph's order makes the
# stepper run, and keep, every wanted value before it (docs/benchmarks.md: Longformer on the H200).
AHEAD_KEPT_ON_DEVICE = 16

# The count for an object that only a list holds: a graph input nothing but the probe keeps.
_HELD_BY_ONE_LIST = _references([object()], 0)

# Ops whose results an eager rerun cannot reproduce.
RANDOM_OPS = (
    "rand",
    "randn",
    "randint",
    "randperm",
    "bernoulli",
    "dropout",
    "native_dropout",
    "normal",
    "uniform",
    "exponential",
    "multinomial",
    "inductor_random",
    "inductor_seeds",
    "rand_like",
    "randn_like",
    "randint_like",
    "poisson",
)


class _Stepper(torch.fx.Interpreter):
    """Runs a post-grad graph eagerly node by node, keeping wanted values as they were when produced."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        inputs: Iterable[Any],
        keep: set[str],
        only: set[str] | None = None,
        offload_ahead: bool = False,
    ):
        super().__init__(gm, garbage_collect_values=True)
        # Move values kept ahead of their request to host memory, past AHEAD_KEPT_ON_DEVICE (a device's run).
        self.offload_ahead = offload_ahead
        self._target: str | None = None  # the value `advance_to` is running to
        self._ahead: dict[str, None] = {}  # kept on the device, not asked for yet (insertion-ordered)
        # Run only these nodes (and the placeholders): a pass of a graph without in-place writes needs only
        # what its wanted values are computed from.
        self.only = only
        self.keep: set[str] = set()
        self.kept: dict[str, torch.Tensor] = {}
        self.done: set[str] = set()
        # Storage -> the kept values on it, and the nodes whose live values are (or hold) views of it: a
        # relocation visits only those, not every value (a graph with many writes into its inputs, an
        # optimizer step, relocates once per written input).
        self._by_storage: dict[int, list[str]] = {}
        self._env_by_storage: dict[int, set[torch.fx.Node]] = {}
        # "X@N": keep X's state right after N runs (N updates X in place).
        self._after: dict[str, list[tuple[str, str]]] = {}
        for key in keep:
            self.want(key)
        self._nodes_by_name = {node.name: node for node in gm.graph.nodes}
        self.node_names = self._nodes_by_name.keys()
        # The graph's outputs are not needed here (only kept values are): a value dies after its last use
        # by another node, not at the end of the graph, so saved activations do not pile up.
        self._dead_after = _last_uses_before_output(gm.graph)
        self.env = {}
        # The caller's inputs are read where they are, not copied: a node about to write into one (through
        # any view of it) first gets a copy of that storage (`_own`). A backward graph's inputs are the saved
        # activations, so a copy up front would hold them twice; most graphs write none of them.
        self._borrowed = {_storage_key(a) for a in inputs if isinstance(a, torch.Tensor)}
        # Handed out one at a time and let go of: an input made for this run alone (a float64 copy) then
        # dies after its last use, as in eager, instead of living until the run ends.
        self._args_left = inputs if isinstance(inputs, deque) else deque(inputs)
        self.args_iter: Iterator[Any] = _popping(self._args_left)
        self._pending: Iterator[torch.fx.Node] = iter(gm.graph.nodes)

    def want(self, name: str) -> None:
        """Keep `name`'s value too, when it runs (it must not have run yet)."""
        if AFTER in name:
            target, _, node = name.partition(AFTER)
            self._after.setdefault(node, []).append((target, name))
        else:
            self.keep.add(name)

    def advance_to(self, name: str) -> None:
        """Run nodes in graph order until `name` ran (or the graph ended)."""
        key = name.rpartition(AFTER)[2]
        self._target = name
        with torch.no_grad():
            while key not in self.done:
                node = next(self._pending, None)
                if node is None or node.op == "output":
                    return
                self.done.add(node.name)
                if self.only is not None and node.op != "placeholder" and node.name not in self.only:
                    continue
                self._set(node, self.run_node(node))
                for dead in self._dead_after.get(node, ()):
                    self.env.pop(dead, None)

    def take(self, name: str) -> torch.Tensor | None:
        """A kept value, on its device: brought back if it was moved to host memory."""
        self._ahead.pop(name, None)
        value = self.kept.get(name)
        if isinstance(value, _OnHost):
            value = self.kept[name] = value.back()
            self._by_storage.setdefault(_storage_key(value), []).append(name)
        return value

    def release(self, name: str) -> None:
        """Let go of `name`'s value, and do not keep it if it has not run yet."""
        self._ahead.pop(name, None)
        self.kept.pop(name, None)
        self.keep.discard(name)
        node = name.partition(AFTER)[2]
        if node in self._after:
            self._after[node] = [pair for pair in self._after[node] if pair[1] != name]

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        # Post-grad passes re-inplace ops (`_foreach_add_` returns None) and leave dead getitems behind.
        if target is operator.getitem and args[0] is None:
            return None
        return super().call_function(target, args, kwargs)

    def run_node(self, node: torch.fx.Node) -> Any:
        for argument in node.all_input_nodes:
            if isinstance(self.env.get(argument), _Deferred):
                self._set(argument, self._made(self.env[argument]))
        for argument in written_nodes(node):
            if isinstance(self.env.get(argument), torch.Tensor):
                self._own(self.env[argument])
        written = [self.env[n] for n in written_nodes(node) if isinstance(self.env.get(n), torch.Tensor)]
        for tensor in written:
            self._protect(tensor)
        if any(not is_non_overlapping(t) for t in written):
            self._densify_written(node)
        value = super().run_node(node)
        if isinstance(value, _Deferred) and node.name in self.keep:
            value = self._made(value)
        if node.name in self.keep and isinstance(value, torch.Tensor):
            self._keep(node.name, value.detach())
        for target, key in self._after.get(node.name, ()):
            state = self.env.get(self._nodes_by_name.get(target))
            if isinstance(state, torch.Tensor):
                self.kept[key] = clone_exact(state.detach())
        return value

    def _keep(self, name: str, value: torch.Tensor) -> None:
        if self.offload_ahead and name != self._target and (OFFLOAD_ON_CPU or value.device.type != "cpu"):
            if len(self._ahead) >= AHEAD_KEPT_ON_DEVICE:
                # A snapshot: the value as it is now, whatever later nodes write into its storage.
                self.kept[name] = _OnHost(_host_copy(value.untyped_storage()), value)
                return
            self._ahead[name] = None
        self.kept[name] = value
        self._by_storage.setdefault(_storage_key(value), []).append(name)

    def _set(self, node: torch.fx.Node, value: Any) -> None:
        self.env[node] = value
        for key in _storage_keys(value):
            self._env_by_storage.setdefault(key, set()).add(node)

    def _made(self, deferred: "_Deferred") -> Any:
        value, borrowed = deferred.make()
        if borrowed and isinstance(value, torch.Tensor):  # the caller's own: copied before a write, like any input
            self._borrowed.add(_storage_key(value))
        return value

    def _protect(self, tensor: torch.Tensor) -> None:
        """Copy every kept value sharing `tensor`'s storage: the node about to run writes it."""
        for name in self._by_storage.pop(_storage_key(tensor), []):
            if isinstance(self.kept.get(name), torch.Tensor):  # (one moved to host memory is a copy already)
                self.kept[name] = clone_exact(self.kept[name])

    def _own(self, tensor: torch.Tensor) -> None:
        """Before the first write into a caller's input: copy its storage, and move every value on it there."""
        key = _storage_key(tensor)
        if key in self._borrowed:
            self._borrowed.discard(key)
            self.relocate(key, tensor.untyped_storage().clone(), borrowed=False)

    def relocate(self, key: int, copy: Any, borrowed: bool = True) -> None:
        """Point every value on storage `key` (inputs still to be read, computed and kept values) at `copy`."""
        moved = _mover(key, copy)
        for node in self._env_by_storage.pop(key, ()):
            if node in self.env:  # not dead since
                self._set(node, moved(self.env[node]))
        for _ in range(len(self._args_left)):  # inputs not handed out yet (none once a placeholder ran)
            self._args_left.append(moved(self._args_left.popleft()))
        on_storage = self._by_storage.pop(key, [])
        for name in on_storage:  # a value kept "X@N" is a copy of its own, never on a caller's storage
            if isinstance(self.kept.get(name), torch.Tensor):
                self.kept[name] = moved(self.kept[name])
        if on_storage:
            self._by_storage.setdefault(copy.data_ptr(), []).extend(on_storage)
        if key in self._borrowed:
            self._borrowed.discard(key)
            if borrowed:
                self._borrowed.add(copy.data_ptr())

    def _densify_written(self, node: torch.fx.Node) -> None:
        """An in-place op on an expanded or overlapping tensor cannot run eagerly: give it a dense copy."""
        for argument in written_nodes(node):
            value = self.env.get(argument)
            if isinstance(value, torch.Tensor) and not is_non_overlapping(value):
                self._set(argument, value.contiguous())


class GraphValues:
    """Eager (and on demand float64) values of the nodes a compiled graph's buffers hold, for one call."""

    def __init__(
        self,
        info: GraphInfo,
        inputs: list[Any],
        wanted: Iterable[str],
        uses: Counter | None = None,
        shared: Iterable[int] = (),
        float64_ahead: bool = True,
    ):
        self.info = info
        # Whether the float64 run keeps the wanted values it passes on its way to a request (a probe comparing
        # every launch asks for many, not in graph order), or only those asked for (a probe that describes
        # one launch needs that launch's alone).
        self.float64_ahead = float64_ahead
        # The graph's inputs as they were when it was called; an `_OnHost` where one was moved off the device.
        self.inputs: list[Any] = inputs
        # Storage -> the indices of the inputs on it (a write into a shared storage moves only those).
        self._inputs_on: dict[int, list[int]] = {}
        for index, value in enumerate(inputs):
            for key in set(_storage_keys(value)):
                self._inputs_on.setdefault(key, []).append(index)
        # Storages of `inputs` that the compiled graph runs on too: it may write them (an input mutation, a
        # buffer reused in place of an input), so a launch about to write one first gets `before_write`.
        self.shared = set(shared)
        # Each shared storage's fingerprint on entry, and per device whether one was seen changed since
        # (`unannounced_write`). Both stay on the device: read once, at the graph's end, not once per check.
        self._entry_prints = {_storage_key(v): fingerprint(v.untyped_storage()) for v in inputs if _on(v, self.shared)}
        self._changed: dict[torch.device, torch.Tensor] = {}
        # Shared storages on a device (on any, under OFFLOAD_ON_CPU) -> the indices of the inputs on each.
        self._on_device = _offloadable_storages(inputs, self._inputs_on, self.shared)
        self.wanted = set(wanted)
        self.random = _random_dependent(info.gm)
        self.problems: list[str] = []
        # How many more times each value will be asked for by a comparison; at 0 it is released.
        self.uses = Counter(uses or {})
        self._recently_used: deque[str] = deque()  # values compared for the last time, newest last
        self._stepper = _Stepper(info.gm, inputs, self.wanted, offload_ahead=True)
        self._broken = False
        self._again: dict[str, torch.Tensor] = {}  # released values computed again on demand
        # Float64 values: those of the float64 run in step with the requests, and those of passes of their own.
        self._stepper64: _Stepper | None = None
        self._float64: dict[str, torch.Tensor | None] = {}
        self._float64_broken = False

    def offload_released(self) -> None:
        """Move to host memory each shared input, on a device, that only this object still holds (the compiled
        graph and the step-by-step eager run are done with it)."""
        for key, indices in list(self._on_device.items()):
            if key not in self.shared:  # copied for a write (`before_write`): eager's own now
                del self._on_device[key]
                continue
            if any(_references(self.inputs, i) > _HELD_BY_ONE_LIST for i in indices):
                continue
            first = self.inputs[indices[0]]
            self._check_unchanged(first)
            try:
                host = _host_copy(first.untyped_storage())
            except (RuntimeError, NotImplementedError):  # a tensor without plain storage: it stays
                continue
            for index in indices:
                self.inputs[index] = _OnHost(host, self.inputs[index])
            del self._on_device[key]
            # Checked just now; the storage may be freed and its address given to a new buffer. The key stays
            # shared: an eager value viewing this storage (a permute of the input) still moves away before
            # a launch writes it.
            self._entry_prints.pop(key, None)

    def unannounced_write(self) -> bool:
        """Whether a shared input was found changed by something no launch announced (an ATen fallback in the
        wrapper): eager may have read the new contents."""
        for value in self.inputs:
            if _on(value, self.shared):
                self._check_unchanged(value)
        return any(bool(changed) for changed in self._changed.values())

    def _check_unchanged(self, value: torch.Tensor) -> None:
        entry = self._entry_prints.get(_storage_key(value))
        if entry is None:
            return
        differs = fingerprint(value.untyped_storage()) != entry
        seen = self._changed.get(differs.device)
        self._changed[differs.device] = differs if seen is None else seen | differs

    def _pass_inputs(self, dtype: torch.dtype | None = None) -> deque:
        """The inputs for a pass of its own, each made on its first use there (`_Deferred`): brought back
        from host memory, and with its floats converted to `dtype` if given. A pass then holds an input
        from its first use to its last, as eager would, and never makes those it stops before reading."""
        return deque(_Deferred(self.inputs, index, dtype) for index in range(len(self.inputs)))

    def before_write(self, tensor: torch.Tensor) -> None:
        """The compiled program is about to write `tensor`: if eager still reads that storage, copy it first
        and move every eager value on it to the copy."""
        key = _storage_key(tensor)
        if key not in self.shared:
            return
        self._check_unchanged(tensor)
        self.shared.discard(key)
        copy = tensor.untyped_storage().clone()
        moved = _mover(key, copy)
        for index in self._inputs_on.pop(key, ()):  # in place: passes read inputs from this list
            self.inputs[index] = moved(self.inputs[index])
        self._again = {name: moved(value) for name, value in self._again.items()}
        self._stepper.relocate(key, copy)
        if self._stepper64 is not None:
            self._stepper64.relocate(key, copy)

    def value(self, node: str) -> torch.Tensor | None:
        if self._broken or not node:
            return None
        if node in self._stepper.kept:
            return self._stepper.take(node)
        if node.rpartition(AFTER)[2] not in self._stepper.done:
            try:
                self._stepper.advance_to(node)
            except Exception as exc:
                self._broken = True
                self.problems.append(
                    f"eager run of the post-grad graph failed ({type(exc).__name__}: {exception_line(exc, 300)})"
                )
                return None
            if node in self._stepper.kept:
                return self._stepper.take(node)
        if node not in self._again:  # computed and released earlier: once more, in a pass of its own
            found = self._interpret(self.info.gm, self._pass_inputs(), {node})
            if found is None:
                return None
            self._again[node] = found.get(node)
        return self._again.get(node)

    def snapshot(self, nodes: Iterable[str]) -> dict[str, torch.Tensor]:
        """Values of these nodes from one eager pass of their own over the graph (extraction's: the
        step-by-step run is left where it is)."""
        found = self._interpret(self.info.gm, self._pass_inputs(), set(nodes))
        return dict(found or {})

    def prefetch(self, nodes: Iterable[str]) -> None:
        """Make released values available again in one pass (an isolation replay needs several)."""
        missing = {
            n
            for n in nodes
            if n
            and n not in self._stepper.kept
            and n not in self._again
            and n.rpartition(AFTER)[2] in self._stepper.done
        }
        if missing and not self._broken:
            found = self._interpret(self.info.gm, self._pass_inputs(), missing)
            if found is not None:
                self._again.update({n: found[n] for n in missing if n in found})

    def used(self, node: str | None) -> None:
        """One comparison of `node` is done; release its value when no other will come."""
        if not node:
            return
        self.uses[node] -= 1
        if self.uses[node] != 0:
            return
        # Kept a little longer: a launch whose outputs have no eager twin is replayed on eager values of
        # its inputs, which the launches just before it made (and were judged on). Values let go of at
        # once cost one eager pass from the graph's start per replay.
        self._recently_used.append(node)
        while len(self._recently_used) > RECENTLY_USED_KEPT:
            self._release(self._recently_used.popleft())

    def _release(self, node: str) -> None:
        self._stepper.release(node)
        self._again.pop(node, None)
        self._float64.pop(node, None)
        if self._stepper64 is not None:
            self._stepper64.release(node)

    def input(self, name: str) -> torch.Tensor | None:
        if name not in self.info.input_names:
            return None
        value = self.inputs[self.info.input_names.index(name)]
        value = value.back() if isinstance(value, _OnHost) else value
        return value if isinstance(value, torch.Tensor) else None

    def float64(self, node: str) -> torch.Tensor | None:
        """The node's value computed in float64; None when the float64 graph cannot run (said once in problems).

        One float64 run goes through the graph in step with the requests, as the eager one does (a
        comparison asks in launch order); a node it already passed without keeping gets a pass of its own."""
        if self._float64_broken or not node:
            return None
        if self._stepper64 is None:
            # It keeps what the eager run keeps, until compared: launches need not come in graph order.
            wanted = {name for name in self.wanted if self.uses[name] > 0} if self.float64_ahead else set()
            self._stepper64 = _Stepper(
                self.info.float64_gm(), self._pass_inputs(torch.float64), wanted, offload_ahead=True
            )
        stepper, runs_at = self._stepper64, node.rpartition(AFTER)[2]
        if runs_at not in stepper.node_names:  # asked for nothing: do not run to the end
            return None
        if node in stepper.kept:
            return stepper.take(node)
        if runs_at not in stepper.done:
            stepper.want(node)
            try:
                stepper.advance_to(node)
            except Exception as exc:  # some ops have no float64 kernel on some devices
                self._float64_failed(exc)
                return None
            return stepper.take(node)
        if node not in self._float64:
            found = self._interpret(self.info.float64_gm(), self._pass_inputs(torch.float64), {node}, float64=True)
            self._float64[node] = None if found is None else found.get(node)
        return self._float64[node]

    def _float64_failed(self, exc: Exception) -> None:
        self._float64_broken = True
        self._stepper64 = None
        self.problems.append(
            f"float64 run of the post-grad graph failed ({type(exc).__name__}: "
            f"{exception_line(exc, 300)}); buffers were judged by tolerance alone"
        )

    def _interpret(
        self, gm: torch.fx.GraphModule, inputs: Iterable[Any], keep: set[str], float64: bool = False
    ) -> dict[str, torch.Tensor] | None:
        only = ancestors(gm, {name.rpartition(AFTER)[2] for name in keep}) if self.info.functional() else None
        stepper = _Stepper(gm, inputs, keep, only)
        try:
            for name in keep:
                stepper.advance_to(name)
        except Exception as exc:  # some ops have no float64 kernel on some devices
            if float64:
                self._float64_failed(exc)
            else:
                self._broken = True
                self.problems.append(
                    f"eager run of the post-grad graph failed ({type(exc).__name__}: {exception_line(exc, 300)})"
                )
            return None
        return stepper.kept


class _Deferred:
    """A pass's graph input, made on the pass's first use of it from the graph's list of inputs (read then,
    so a copy made since for a write, or a move to host memory, is followed). It holds that list, not the
    GraphValues: a pass kept by a GraphValues must not keep it alive in a cycle (device memory would then
    wait for the garbage collector)."""

    __slots__ = ("inputs", "index", "dtype")

    def __init__(self, inputs: list[Any], index: int, dtype: torch.dtype | None):
        self.inputs, self.index, self.dtype = inputs, index, dtype

    def make(self) -> tuple[Any, bool]:
        """The input, brought back from host memory and converted to `dtype` where asked, and whether it is
        the caller's own tensor rather than a copy made for the pass."""
        value, borrowed = self.inputs[self.index], True
        if isinstance(value, _OnHost):
            value, borrowed = value.back(), False
        if self.dtype is not None and isinstance(value, torch.Tensor) and value.is_floating_point():
            value, borrowed = clone_exact(value, self.dtype), False
        return value, borrowed


class _OnHost:
    """A graph input, or a value kept ahead, in host memory: a view, with the tensor's layout, of a host copy
    of its storage."""

    def __init__(self, storage: Any, tensor: torch.Tensor):
        self.storage, self.device, self.dtype = storage, tensor.device, tensor.dtype
        self.size, self.stride, self.offset = tensor.size(), tensor.stride(), tensor.storage_offset()

    def back(self) -> torch.Tensor:
        """The input on its device again (a new copy, laid out as it was)."""
        on_device = _host_copy(self.storage, self.device)
        return torch.empty((0,), dtype=self.dtype, device=self.device).set_(
            on_device, self.offset, self.size, self.stride
        )


def _offloadable_storages(inputs: list[Any], inputs_on: dict[int, list[int]], shared: set[int]) -> dict[int, list[int]]:
    """Shared storage -> the indices of the tensor inputs on it, for inputs on a device (or any, under
    OFFLOAD_ON_CPU); from `inputs_on`, the inputs already grouped by storage."""
    groups: dict[int, list[int]] = {}
    for key, indices in inputs_on.items():
        if key not in shared:
            continue
        on_device = [
            i
            for i in indices
            if isinstance(inputs[i], torch.Tensor) and (OFFLOAD_ON_CPU or inputs[i].device.type != "cpu")
        ]
        if on_device:
            groups[key] = on_device
    return groups


def _host_copy(storage: Any, device: torch.device | str = "cpu") -> Any:
    """A copy of a storage's bytes on `device` (a copy even when it is there already).

    Between a device and host memory the copy goes through page-locked memory without waiting for it: it
    is queued on the device's current stream, as every later use of either copy is (a pass brings the
    input back through that stream; memory freed meanwhile is reused only by work queued after it)."""
    data = torch.empty((0,), dtype=torch.uint8, device=storage.device).set_(storage)
    target = torch.device(device)
    if data.device.type != "cpu" and target.type == "cpu":
        try:
            host = torch.empty(data.shape, dtype=torch.uint8, pin_memory=True)
        except RuntimeError:  # no page-locked memory here: a plain copy, which waits
            return data.to(target, copy=True).untyped_storage()
        return host.copy_(data, non_blocking=True).untyped_storage()
    if data.device.type == "cpu" and target.type != "cpu" and data.is_pinned():
        return data.to(target, copy=True, non_blocking=True).untyped_storage()
    return data.to(target, copy=True).untyped_storage()


def _on(value: Any, storages: set[int]) -> bool:
    return isinstance(value, torch.Tensor) and _storage_key(value) in storages


def _popping(queue: deque) -> Iterator[Any]:
    """The values one at a time, each let go of once handed out; the deque is emptied as it goes (a list
    iterator, or a list the caller keeps, would hold them all until the run ends)."""
    while queue:  # holds only the queue, not what it was made from
        yield queue.popleft()


def _last_uses_before_output(graph: torch.fx.Graph) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """Node -> the values whose last use (the output node aside) it is; unused values die where made."""
    last: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        if node.op == "output":
            continue
        last.setdefault(node, node)
        for used in node.all_input_nodes:
            last[used] = node
    dead: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for value, user in last.items():
        dead.setdefault(user, []).append(value)
    return dead


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def storage_pointer(value: Any) -> int | None:
    """A tensor's storage (its data pointer); None for anything else, or a tensor without storage (sparse)."""
    try:
        return value.untyped_storage().data_ptr() if isinstance(value, torch.Tensor) else None
    except (RuntimeError, NotImplementedError):
        return None


def _storage_keys(value: Any) -> Iterator[int]:
    """The storages of the tensors in a value (a tensor, or lists and tuples of them); a tensor without
    storage has none, and is never relocated."""
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _storage_keys(item)
    elif (key := storage_pointer(value)) is not None:
        yield key


def _mover(key: int, copy: Any) -> Any:
    """value -> the same value (tensors in lists and tuples too) with views of storage `key` made views of `copy`."""

    def moved(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and _storage_key(value) == key:
            return torch.empty((0,), dtype=value.dtype, device=value.device).set_(
                copy, value.storage_offset(), value.size(), value.stride()
            )
        if isinstance(value, (list, tuple)):
            return type(value)(moved(item) for item in value)
        return value

    return moved


def fingerprint(storage: Any) -> torch.Tensor:
    """A sum over a storage's bytes, read as 32-bit words where they fit, as a 0-d int64 tensor on the
    storage's device (not read back: reading it would wait for the device). Any one changed word changes it
    (changes that cancel in the sum do not); integer sums are exact in any order, so equal contents give
    equal fingerprints on every device."""
    words = torch.empty((0,), dtype=torch.uint8, device=storage.device).set_(storage)
    if words.numel() % 4 == 0:
        words = words.view(torch.int32)
    return words.sum(dtype=torch.int64)


def _random_dependent(gm: torch.fx.GraphModule) -> set[str]:
    """Nodes whose values depend on a random op's output."""
    tainted: set[str] = set()
    for node in gm.graph.nodes:
        name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
        if node.op == "call_function" and name in RANDOM_OPS:
            tainted.add(node.name)
        elif any(arg.name in tainted for arg in node.all_input_nodes):
            tainted.add(node.name)
    return tainted
