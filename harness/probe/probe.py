"""The linear probe: every kernel launch's written buffers against eager, in launch order.

A `KernelProbe` is a graph observer and a launch handler in one. For each call
of a compiled graph it runs the post-grad graph eagerly on the call's inputs
(`GraphValues`; copies of those the graph writes, see `_eager_inputs`), in step
with the compiled graph, which runs unchanged;
after each launch (C++, Triton, extern) it resolves what every written
argument holds (`RegionMap`) and judges it with the verdict policy. It only
reads, except in substitution mode, where launches up to a threshold have
their outputs replaced by their eager values (to find where a drift starts).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from harness import records as R
from harness.judge.compare import VerdictPolicy
from harness.judge.results import same_values
from harness.inductor_compat import ROLE_IN, ROLE_INOUT, STATE_BEFORE_IN_PLACE, GraphInfo, Launch
from harness.inductor_compat.graphs import ancestors
from harness.inductor_compat.launches import handles_fallbacks
from harness.layout import clone_exact, dtype_name, is_non_overlapping, is_non_overlapping_and_dense, span
from harness.probe.glue import check_glue
from harness.probe.kernel_rerun import ALIASING, DRIFT, GLUE, LAYOUT, WRONG, ExactInputs, Isolation, isolate, replay
from harness.probe.dropped import DroppedUpdate, dropped_updates
from harness.probe.shares import share_answer
from harness.probe.regions import Region, RegionMap, describe_reason, region_key
from harness.probe.node_values import GraphValues, storage_pointer

MAX_SOURCE_CHARS = 20_000
# A failing run's probe stops comparing after this many differences from upstream (a kernel right on eager
# inputs, or one it could not isolate), those of immaterial kernels aside: past the difference that matters
# nearly every later buffer differs too, and isolating each costs a replay. A wrong kernel after them is still
# found, by the search (launches made eager until the outputs pass). docs/benchmarks.md has the figures.
UPSTREAM_DIFFERENCES_COMPARED = 8
MAX_UNMAPPED_NAMES = 20


@dataclass
class Divergence:
    """A launch whose written buffer missed the verdict policy, described for the record."""

    launch_index: int
    graph: str
    kernel: dict[
        str, Any
    ]  # Localization fields: name, kind, source, buffers, buffer, nodes, aten_ops, args, metrics, module_path
    isolation: Isolation
    # Launches in `isolation.group` (producers of intermediates with no eager twin), described like `kernel`.
    producers: dict[int, dict[str, Any]] = field(default_factory=dict)
    # A fallback launch's number (`aten:N`); its `launch_index` is then the next kernel launch's.
    fallback: int | None = None

    @property
    def key(self) -> int | str:
        """The launch, as `Launch.key` names it (what a substitution or a description is asked for by)."""
        return self.launch_index if self.fallback is None else f"aten:{self.fallback}"

    def as_buffer_divergence(self) -> R.BufferDivergence:
        metrics: R.OutputComparison = self.kernel["metrics"]
        return R.BufferDivergence(
            self.graph,
            self.launch_index,
            self.kernel["name"],
            self.kernel["buffer"],
            self.kernel["nodes"],
            metrics.bad,
            metrics.numel,
            metrics.max_abs,
            self.isolation.text,
            self.isolation.kind,
            fallback_index=self.fallback,
        )


@dataclass
class _GraphCall:
    info: GraphInfo
    label: str
    values: GraphValues
    regions: RegionMap
    # Outputs without an eager twin (a split reduction's partial sums), recomputed on eager inputs by
    # the launch that wrote them: region key -> (launch, tensor); and those launches, described.
    recomputed: dict[tuple, tuple[int, torch.Tensor]] = field(default_factory=dict)
    producers: dict[int, dict[str, Any]] = field(default_factory=dict)
    # Storage pointer -> the last launch that wrote into it (index, kernel): who made a graph output's layout.
    last_writer: dict[int, tuple[int, Any]] = field(default_factory=dict)

    def lookup(self, tensor: torch.Tensor) -> tuple[int, torch.Tensor] | None:
        return self.recomputed.get(region_key(tensor))


@dataclass
class KernelProbe:
    """Graph observer (`observe_graph`) and launch handler (`on_launch`) for one compiled run."""

    verdict: VerdictPolicy
    # The injection's launch handler, if any: the probe sees the program the user runs.
    inner: Callable[[Launch], Any] | None = None
    # Stop comparing after the first divergence whose kernel is wrong on exact inputs (a failing run),
    # or go on and absorb them all (a passing run).
    stop_at_wrong: bool = True
    # Compare only launches after this index (launches up to it were judged by an earlier run).
    compare_after: int = -1
    # Substitution mode: these launches (by `Launch.key`) get their mapped outputs replaced by eager values, and so
    # do the fallbacks called before kernel launch `substitute_fallbacks_before` + 1 (the search's "0..m").
    substitute: frozenset[int | str] | None = None
    substitute_fallbacks_before: int = -1
    # Kernels whose differences were shown not to matter: not isolated again (their other launches).
    immaterial: frozenset[str] = frozenset()
    # Substitution mode compares nothing, except the launches named here (described for the answer).
    describe: frozenset[int | str] = frozenset()
    # With stop_at_wrong: stop comparing after this many differences from upstream, too.
    upstream_limit: int = UPSTREAM_DIFFERENCES_COMPARED
    # The program diverges on its kernels' first launches only (each run loads it afresh): before each first
    # launch, whether its inputs hold exactly eager's values is noted, for the isolation.
    first_launches: bool = False
    launches: int = 0
    graphs: list[str] = field(default_factory=list)
    graph_launches: dict[str, list[int]] = field(default_factory=dict)
    log: list[R.LaunchEntry] = field(default_factory=list)
    compared: int = 0
    unmapped: dict[str, list[str]] = field(default_factory=dict)
    unmapped_count: int = 0
    # Unmapped buffers that held only a state inside one node's lowering, later written over whole by a
    # mapped write (see STATE_BEFORE_IN_PLACE): they cannot carry a difference once that write is made eager.
    superseded: int = 0
    problems: list[str] = field(default_factory=list)
    divergences: list[Divergence] = field(default_factory=list)
    described: dict[int, Divergence] = field(default_factory=dict)
    substituted: int = 0
    # Copy every graph input before the compiled graph runs, instead of only those its FX graph writes.
    copy_inputs: bool = False
    # Called as capture(launch, graph call, graph label) just before launch `capture_at` runs (extraction).
    capture: Callable[[Launch, Any, str], None] | None = None
    capture_at: int | str = -1
    # Graphs whose shared inputs changed without a launch announcing the write (see observe_graph).
    unannounced_writes: list[str] = field(default_factory=list)
    # Check written buffers' and graph outputs' layouts and dtypes against their nodes' eager values (a failing
    # result's layout or dtype is not eager's; each output's eager value may cost an eager pass).
    check_layouts: bool = False
    # Buffers laid out so that elements eager keeps apart share memory, or graph outputs of another dtype than
    # their node's (kind LAYOUT), in the order seen: written by a launch, or returned by a graph.
    layouts: list[Divergence] = field(default_factory=list)
    # In-place updates of the graphs that Inductor removed while the graph reads their target after them
    # (`dropped.py`): (graph label, module path, the update), each graph's once.
    dropped: list[tuple[str, str, DroppedUpdate]] = field(default_factory=list)
    _current: _GraphCall | None = None
    # Unmapped in-place lowering states not yet written over: (graph label, buffer) -> where each lies.
    _lowering_states: dict[tuple[str, str], list[_Memory]] = field(default_factory=dict)
    _labels: dict[str, str] = field(default_factory=dict)
    _stopped: bool = False
    _upstream_seen: int = 0
    # With first_launches: launch index -> what its inputs held before it ran (`_exact_inputs`).
    _inputs_before: dict[int | str, ExactInputs | None] = field(default_factory=dict)

    @property
    def comparing(self) -> bool:
        return self.substitute is None and not self._stopped

    def _diverged(self, divergence: Divergence) -> None:
        self.divergences.append(divergence)
        if not self.stop_at_wrong:
            return
        if divergence.isolation.kind in (WRONG, ALIASING, GLUE):
            self._stopped = True
        elif divergence.kernel["name"] not in self.immaterial:
            self._upstream_seen += 1
            if self._upstream_seen == self.upstream_limit:
                self._stopped = True
                self.problems.append(
                    f"launches after {divergence.launch_index} not compared: {self._upstream_seen} differences "
                    "from upstream seen by then (kernels right on eager inputs, or not isolated); the search "
                    "decides from there"
                )

    def _needs_values(self) -> bool:
        if self.substitute is None:
            return self.comparing
        # A fallback's key names no kernel count to be past: its values may be needed until the end.
        return self.substitute_fallbacks_before >= self.launches or any(
            isinstance(i, str) or i >= self.launches for i in self.substitute | self.describe
        )

    # Graph observer: capture_graphs(probe.observe_graph)
    def observe_graph(self, info: GraphInfo, args: list, call: Callable[[list], Any]) -> Any:
        label = self._labels.get(info.module_path)
        if label is None:  # one label per compiled graph, "forward 0", "backward 0", "forward 1", ...
            label = self._labels[info.module_path] = (
                f"{info.kind} {sum(l.startswith(info.kind + ' ') for l in self.graphs)}"
            )
            self.graphs.append(label)
            self.dropped += [(label, info.module_path, update) for update in dropped_updates(info)]
        first = self.launches
        try:
            if not self._needs_values():
                return call(args)
            inputs, shared = _eager_inputs(info, args, self.copy_inputs)
            uses = Counter(n for b in info.buffers.values() for n in (b.value_node, b.part_of) if n)
            values = GraphValues(info, inputs, set(uses), uses, shared=shared, float64_ahead=self.comparing)
            del inputs  # GraphValues holds them, and lets go of those the compiled graph is done with
            self._current = _GraphCall(info, label, values, RegionMap(info, values))
            try:
                result = call(args)
                if self.comparing and self.check_layouts:
                    self._output_layouts(self._current, result)
            finally:
                self.problems.extend(f"{label}: {p}" for p in values.problems if f"{label}: {p}" not in self.problems)
                self._current = None
            if values.unannounced_write():
                # Written by something no launch announced (an ATen fallback in the wrapper): eager may
                # have read the new contents. The run is made again with every input copied up front.
                self.unannounced_writes.append(label)
            return result
        finally:
            self.graph_launches.setdefault(label, [first, self.launches - first])

    # Launch handler: intercept_launches(probe.on_launch)
    def on_launch(self, launch: Launch) -> Any:
        call = self._current
        if launch.fallback is not None and not launch.replay and self.inner is not None and hasattr(self.inner, "glue"):
            self.inner.glue(launch)  # an emulation of the wrapper's glue builds the views the call is handed
        if call is not None and not launch.replay:
            if launch.fallback is not None and self.comparing and self._judges(launch):
                self._check_glue(launch, call)
            for _, tensor in launch.written_args():
                call.values.before_write(tensor)
            if self.first_launches and launch.first and self._judges(launch):
                self._inputs_before[launch.key] = _exact_inputs(launch, call)
            if self.capture is not None and launch.key == self.capture_at:
                self.capture(launch, call, call.label)
        result = self._run(launch)
        self.launches += launch.fallback is None  # fallbacks are numbered apart
        if call is not None and not launch.replay:
            self._after(launch, call)
        return result

    on_launch.handles_fallbacks = True  # fallback calls are launches of their own (launches.handles_fallbacks)

    def _judges(self, launch: Launch) -> bool:
        # A fallback's index is the next kernel's: one called after kernel `compare_after` has an index past it.
        return (self.comparing and launch.index > self.compare_after) or launch.key in self.describe

    def _check_glue(self, launch: Launch, call: _GraphCall) -> None:
        """Before a fallback call: a view the wrapper built for it that holds the wrong memory (see glue.py)."""
        problem = check_glue(launch, call.regions.made_by(launch), call.info, call.regions, call.values, self.verdict)
        if problem is None:
            return
        tensor = launch.args[problem.key]
        comparison = (
            self.verdict.tensors(problem.label, tensor, problem.expected)
            if tensor.shape == problem.expected.shape
            else None
        )
        region = Region(None, node=problem.node)
        described = _describe(launch, call.info, problem.key, problem.label, region, comparison)
        self.compared += 1
        self._diverged(
            Divergence(launch.index, call.label, described, Isolation(GLUE, problem.text), fallback=launch.fallback)
        )

    def _substitutes(self, launch: Launch) -> bool:
        if self.substitute is None:
            return False
        return launch.key in self.substitute or (
            launch.fallback is not None and launch.index <= self.substitute_fallbacks_before
        )

    def _run(self, launch: Launch) -> Any:
        if self.inner is None or (launch.fallback is not None and not handles_fallbacks(self.inner)):
            return launch.run()
        return self.inner(launch)

    def _after(self, launch: Launch, call: _GraphCall) -> None:
        index = launch.index
        entry = R.LaunchEntry(index, call.label, launch.kernel.name, fallback=launch.fallback)
        self.log.append(entry)
        judging = self._judges(launch)
        substituting = self._substitutes(launch)
        mapped: list[tuple[torch.Tensor, Region]] = []
        unmapped = []
        for key, tensor in launch.written_args():
            call.last_writer[tensor.untyped_storage().data_ptr()] = (index, launch.kernel)
            region = call.regions.written(launch, tensor)
            if not region.mapped:
                entry.unmapped += 1
                self._unmapped(call.label, region)
                unmapped.append(tensor)
                if region.buffer and describe_reason(region.reason) == STATE_BEFORE_IN_PLACE:
                    self._lowering_states.setdefault((call.label, region.buffer), []).append(_Memory.of(tensor))
            else:
                self._write_over_lowering_states(call, region.buffer, tensor)
                if judging:
                    entry.compared += 1
                    self.compared += 1
                    described = launch.key in self.describe
                    divergence = self._judge(launch, call, key, tensor, region, always=described)
                    if divergence is not None and described:
                        self._keep_described(divergence)
                    elif divergence is not None:
                        self._diverged(divergence)
            mapped.append((tensor, region))
        if launch.fallback is not None:
            # A fallback writing a view of a buffer (a custom op's mutable slice) leaves the whole buffer in the
            # state after the op: what a substitution makes eager, and what later reads of the buffer resolve to.
            for _, tensor in launch.written_args():
                owner = None if launch.local_names(tensor) else launch.owning_buffer(tensor)
                if owner is not None and not any(owner[1] is t for t, _ in mapped):
                    region = call.regions.written(launch, owner[1])
                    if region.mapped:
                        mapped.append((owner[1], region))
        if unmapped and judging:
            self._recompute(launch, call, unmapped)
        for tensor, region in mapped:
            if substituting and region.mapped:
                value = region.eager(call.values)
                if value is not None:
                    tensor.copy_(value)
                    self.substituted += 1
            call.regions.record_write(tensor, region, launch.key)
            for node in region.nodes():
                call.values.used(node)
        call.values.offload_released()

    def _judge(
        self,
        launch: Launch,
        call: _GraphCall,
        key: int | str,
        tensor: torch.Tensor,
        region: Region,
        always: bool = False,
    ) -> Divergence | None:
        """The launch described, when this buffer misses the verdict policy (or `always`)."""
        expected = region.eager(call.values)
        if (
            expected is not None
            and not always
            and self.comparing
            and self.check_layouts
            and (layout := self._layout(call, tensor, region.node)) is not None
        ):
            self.layouts.append(
                Divergence(
                    launch.index,
                    call.label,
                    _describe(
                        launch,
                        call.info,
                        key,
                        launch.local_name(tensor) or region.buffer or launch.param_name(key),
                        region,
                        self.verdict.tensors(region.buffer or "", tensor, expected),
                    ),
                    Isolation(LAYOUT, layout),
                    fallback=launch.fallback,
                )
            )
        if expected is None or (not always and self.verdict.quick_match(tensor, expected)):
            return None
        # Summation noise is allowed where this buffer's own kernel sums, not where it only reads a sum.
        verdict = dataclasses.replace(self.verdict, accumulated=_kernel_accumulates(launch, call.info, region))
        name = launch.local_name(tensor) or region.buffer or launch.param_name(key)
        comparison = verdict.tensors(name, tensor, expected)
        if verdict.wants_reference(comparison) and (reference := region.float64(call.values)) is not None:
            comparison = verdict.tensors(name, tensor, expected, reference)
        if comparison.passed and not always:
            return None
        if launch.kernel.name in self.immaterial and not always:
            isolation = Isolation(
                DRIFT, "not isolated again: the same kernel's difference, at an earlier launch, moved no output"
            )
        else:
            isolation = isolate(
                launch, call.regions, call.values, verdict, self._run, call.lookup, self._inputs_before.get(launch.key)
            )
            if launch.fallback is not None:
                isolation = _as_fallback(isolation, launch)
            if isolation.kind == WRONG and isolation.group and (share := _share_of_partials(launch, call, verdict)):
                isolation = Isolation(WRONG, f"{isolation.text}; {share}", isolation.group)
        producers = {i: call.producers[i] for i in isolation.group if i in call.producers}
        return Divergence(
            launch.index,
            call.label,
            _describe(launch, call.info, key, name, region, comparison),
            isolation,
            producers,
            fallback=launch.fallback,
        )

    def _layout(self, call: _GraphCall, tensor: torch.Tensor, node: str | None) -> str | None:
        """What is wrong with a compiled buffer's layout, if its elements share memory where its node's eager value
        keeps them apart (a scatter or clone that kept an expanded input's stride 0): no value written into it can
        be eager's. Only a layout that overlaps is questioned; Inductor is free to choose any other."""
        if node is None or tensor.numel() < 2 or is_non_overlapping(tensor):
            return None
        value = call.values.value(node)
        if value is None or value.shape != tensor.shape or not is_non_overlapping(value):
            return None
        return (
            f"its output layout cannot hold the value of {node}: strides {tuple(tensor.stride())} make elements "
            f"share memory where eager's value has strides {tuple(value.stride())} (size {tuple(tensor.shape)}): "
            "the layout is wrong before any value is"
        )

    def _output_layouts(self, call: _GraphCall, result: Any) -> None:
        """A graph output laid out so that its elements share memory where eager's is not, or of another dtype
        than its node's: named with the node it returns and the last launch that wrote its storage (a returned
        view of a buffer is written by no launch whole, and a buffer of another dtype than its node's is not
        mapped, so both are checked here)."""
        outputs = result if isinstance(result, (list, tuple)) else [result]
        returned = call.info.gm.graph.output_node().args[0]
        returned = returned if isinstance(returned, (list, tuple)) else [returned]
        for tensor, node in zip(outputs, returned):
            if not isinstance(tensor, torch.Tensor) or not isinstance(node, torch.fx.Node) or node.op == "placeholder":
                continue
            layout = self._layout(call, tensor, node.name) if tensor.layout == torch.strided else None
            layout = layout or _retyped(tensor, node, call.values)
            writer = call.last_writer.get(tensor.untyped_storage().data_ptr()) if layout else None
            if writer is None:
                continue
            index, kernel = writer
            # No metrics: eager's value of the node is kept as it was made, not after the graph's later in-place
            # writes into it, so a comparison here would not be the output's (the record's outputs have that).
            described = {
                "name": kernel.name,
                "kind": kernel.kind,
                "source": kernel.source[:MAX_SOURCE_CHARS],
                "buffers": [node.name],
                "buffer": node.name,
                "nodes": [node.name],
                "aten_ops": [str(node.target)],
                "args": [],
                "metrics": None,
                "module_path": call.info.module_path,
            }
            self.layouts.append(
                Divergence(
                    index, call.label, described, Isolation(LAYOUT, f"the graph returns {node.name}, and {layout}")
                )
            )

    def _recompute(self, launch: Launch, call: _GraphCall, unmapped: list[torch.Tensor]) -> None:
        """Run a launch whose outputs have no eager twin again on eager inputs, keeping those outputs: a
        later kernel reading them can then be judged together with it (a split reduction's two halves)."""
        again = replay(launch, call.regions, call.values, self._run, call.lookup)
        if again.error is not None:
            return
        if launch.fallback is not None:  # the group of a replay names kernel launches only
            return
        for (_, tensor), (_, _, fresh) in zip(launch.written_args(), again.outputs):
            if any(tensor is t for t in unmapped):
                call.recomputed[region_key(tensor)] = (launch.index, fresh)
        call.producers[launch.index] = _describe_launch(launch, call.info)

    def _keep_described(self, divergence: Divergence) -> None:
        """Of a described launch's buffers, keep the one furthest from eager."""
        kept = self.described.get(divergence.launch_index)
        if kept is None or _severity(divergence) > _severity(kept):
            self.described[divergence.launch_index] = divergence

    def _write_over_lowering_states(self, call: _GraphCall, writer: str | None, tensor: torch.Tensor) -> None:
        """A mapped write of `writer`: the in-place lowering states it completes (the state's own buffer, or
        one its lowering updates it through) and covers element for element are superseded."""
        if not writer:
            return
        memory = None
        for (label, buffer), states in self._lowering_states.items():
            fact = call.info.buffers.get(buffer)
            completes = writer == buffer or (fact is not None and writer in fact.completed_by)
            if label != call.label or not states or not completes:
                continue
            memory = memory or _Memory.of(tensor)
            live = [state for state in states if not memory.covers(state)]
            self.superseded += len(states) - len(live)
            self._lowering_states[(label, buffer)] = live

    def _unmapped(self, label: str, region: Region) -> None:
        self.unmapped_count += 1
        names = self.unmapped.setdefault(describe_reason(region.reason), [])
        if len(names) < MAX_UNMAPPED_NAMES:
            names.append(f"{label}:{region.buffer or '?'}")

    def restart(self, copy_inputs: bool | None = None) -> None:
        """Forget everything seen (a run that has to be made again), keeping the mode and the problems."""
        problems, copy = self.problems, self.copy_inputs if copy_inputs is None else copy_inputs
        fresh = KernelProbe(
            self.verdict,
            self.inner,
            self.stop_at_wrong,
            self.compare_after,
            self.substitute,
            self.substitute_fallbacks_before,
            self.immaterial,
            self.describe,
            self.upstream_limit,
            self.first_launches,
            capture=self.capture,
            capture_at=self.capture_at,
            check_layouts=self.check_layouts,
        )
        self.__dict__.update(fresh.__dict__)
        self.problems, self.copy_inputs = problems, copy


@dataclass(frozen=True)
class _Memory:
    """The bytes a tensor's elements occupy, and whether they tile that stretch exactly (no gaps)."""

    key: tuple  # region_key: storage pointer first
    start: int
    end: int
    dense: bool

    @classmethod
    def of(cls, tensor: torch.Tensor) -> "_Memory":
        first, last = span(tensor)
        size = tensor.element_size()
        return cls(region_key(tensor), first * size, last * size, is_non_overlapping_and_dense(tensor))

    def covers(self, other: "_Memory") -> bool:
        """Whether a write here stores every element `other` holds."""
        if self.key[0] != other.key[0] or not (self.start <= other.start and other.end <= self.end):
            return False
        return self.dense or self.key == other.key


def _retyped(tensor: torch.Tensor, node: torch.fx.Node, values: GraphValues) -> str | None:
    """What is wrong with a graph output of another dtype than its node's eager value (an op's type promotion
    lost in its lowering): its kernel wrote another type than the program computes. (The node's FX metadata
    says its dtype; a graph read back from the cache has none, and its eager value says it then.)"""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        value = values.value(node.name)
    if not isinstance(value, torch.Tensor) or value.dtype == tensor.dtype:
        return None
    return (
        f"its kernel wrote it as {str(tensor.dtype).removeprefix('torch.')} where the graph computes "
        f"{node.name} as {str(value.dtype).removeprefix('torch.')}: the output's dtype is wrong before any value is"
    )


def _exact_inputs(launch: Launch, call: _GraphCall) -> ExactInputs | None:
    """Before a kernel's first launch: whether everything it only reads holds exactly eager's values (None
    when something differs or cannot be compared). Arguments it updates in place whose state is not eager's
    are named apart: the kernel may write them before it reads them back (a fresh buffer)."""
    unchecked = []
    for key, tensor in launch.tensor_args():
        role = launch.role(key)
        if role not in (ROLE_IN, ROLE_INOUT):
            continue
        region = call.regions.read(launch, tensor)
        if region.input is not None:
            continue  # a graph input not written before: the same values on both sides
        expected = region.eager(call.values) if region.mapped else None
        if expected is not None and same_values(tensor, expected):
            continue
        if role != ROLE_INOUT:
            return None
        unchecked.append(call.regions.local_of(launch, tensor) or launch.param_name(key))
    return ExactInputs(unchecked)


def _eager_inputs(info: GraphInfo, args: list, copy_all: bool) -> tuple[list, set[int]]:
    """The inputs eager runs on, and the storages it shares with the compiled graph (by data pointer).

    An input the FX graph writes is copied up front: the compiled graph updates it in place, maybe
    through an ATen fallback no launch handler sees. The others are shared: a backward graph's inputs
    are the saved activations, and a copy of them all would hold them twice. A launch writing a shared
    storage (Inductor reusing an input's memory for a buffer) gets it copied first (`before_write`).
    """
    keys = [storage_pointer(a) for a in args]
    written = range(len(args)) if copy_all else info.written_inputs()
    copied = {keys[i] for i in written if i < len(args) and keys[i] is not None}  # with every view on them
    inputs = [clone_exact(a) if key in copied else a for a, key in zip(args, keys)]
    shared = {key for key in keys if key is not None and key not in copied}
    return inputs, shared


def fallback_title(launch: Launch) -> str:
    """How an answer names a fallback: an ATen op (on the NPU, a CANN operator), or a custom op."""
    op = launch.kernel.name.removeprefix("torch.ops.")
    if op.startswith("aten."):
        return f"ATen fallback `{op}` (on the NPU: a CANN operator)"
    return f"custom op `{op}`"


def _as_fallback(isolation: Isolation, launch: Launch) -> Isolation:
    """The isolation's sentence, said of the op a fallback calls rather than of a generated kernel."""
    text = isolation.text
    if isolation.kind == WRONG and text.startswith("kernel is wrong"):
        text = f"{fallback_title(launch)} is wrong{text.removeprefix('kernel is wrong')}"
    elif text.startswith("not isolated: the kernel"):
        text = text.replace("the kernel", f"the op ({fallback_title(launch)})", 1)
    return dataclasses.replace(isolation, text=text)


def _kernel_accumulates(launch: Launch, info: GraphInfo, region: Region) -> bool:
    if launch.kernel.kind in ("extern", "fallback"):
        return True
    computed = info.computed_by(launch.kernel.name)
    facts = [info.buffers[b] for b in computed or [region.buffer or ""] if b in info.buffers]
    return not facts or any(fact.accumulates for fact in facts)


def _severity(divergence: Divergence) -> tuple[bool, int, float]:
    metrics = divergence.kernel["metrics"]
    return (not metrics.passed, metrics.bad, metrics.max_abs)


def _share_of_partials(launch: Launch, call: "_GraphCall", verdict: VerdictPolicy) -> str | None:
    """A combine kernel judged together with the rsplit partial kernel whose workspace it reads: whether each
    partial holds its share (`shares.py`), against eager's value of what the combine writes."""
    written = launch.written_args()
    if len(written) != 1:
        return None
    region = call.regions.written(launch, written[0][1])
    expected = region.eager(call.values) if region.mapped else None
    if expected is None:
        return None
    for _, tensor in launch.read():
        found = call.lookup(tensor)
        if found is not None and call.producers.get(found[0], {}).get("rsplit_partial"):
            return share_answer(found[1], expected, verdict)
    return None


def _describe(
    launch: Launch, info: GraphInfo, key: int | str, name: str, region: Region, comparison: R.OutputComparison
) -> dict[str, Any]:
    buffer = region.buffer
    fact = info.buffers.get(buffer or "")
    own = fact.origins if fact is not None and fact.origins else ([region.node] if region.node else [])
    nodes = computed_from(info, launch.kernel.name, own)
    targets = {n.name: n.target for n in info.gm.graph.nodes}
    param = launch.param_name(key)
    return {
        "name": launch.kernel.name,
        "kind": launch.kernel.kind,
        "source": launch.kernel.source[:MAX_SOURCE_CHARS],
        "buffers": [param, name] if name != param else [param],
        "buffer": name,
        "nodes": nodes,
        "aten_ops": sorted({str(targets[n]) for n in nodes if n in targets}),
        "args": describe_args(launch),
        "metrics": comparison,
        "module_path": info.module_path,
        "text_findings": list(launch.kernel.text_findings),
    }


def computed_from(info: GraphInfo, kernel_name: str, origins: list[str]) -> list[str]:
    """The nodes a diverging buffer is computed from inside its kernel, in graph order: its own origins, and those
    of the kernel's other buffers it reads (a fused reduction whose result a pointwise tail of the same kernel
    takes: `mul, sum, sqrt`, not the tail's `sqrt` alone)."""
    computed = info.computed_by(kernel_name) or []
    in_kernel = {o for b in computed if b in info.buffers for o in info.buffers[b].origins}
    found = set(origins) | (ancestors(info.gm, origins) & in_kernel)
    order = {node.name: position for position, node in enumerate(info.gm.graph.nodes)}
    return sorted(found, key=lambda name: order.get(name, len(order)))


def _describe_launch(launch: Launch, info: GraphInfo) -> dict[str, Any]:
    """What a kernel is, without a comparison: for a producer named together with its consumer."""
    computed = info.computed_by(launch.kernel.name) or []
    nodes = [o for b in computed if b in info.buffers for o in info.buffers[b].origins]
    targets = {n.name: n.target for n in info.gm.graph.nodes}
    return {
        "name": launch.kernel.name,
        "kind": launch.kernel.kind,
        "source": launch.kernel.source[:MAX_SOURCE_CHARS],
        "nodes": list(dict.fromkeys(nodes)),
        "aten_ops": sorted({str(targets[n]) for n in nodes if n in targets}),
        "args": describe_args(launch),
        "module_path": info.module_path,
        "rsplit_partial": launch.kernel.rsplit_partial,
        "text_findings": list(launch.kernel.text_findings),
    }


def describe_args(launch: Launch) -> list[R.KernelArgument]:
    return [
        R.KernelArgument(
            name=launch.param_name(key),
            buffer=launch.local_name(value) or (launch.owning_buffer(value) or (None,))[0],
            role=launch.role(key),
            dtype=dtype_name(value.dtype),
            size=list(value.shape),
            stride=list(value.stride()),
            storage_offset=value.storage_offset(),
        )
        for key, value in launch.tensor_args()
    ]
