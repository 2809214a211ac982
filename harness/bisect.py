"""Find the first generated kernel whose output diverges from eager.

For every graph Inductor compiled for the case (forward, backward, each piece
between graph breaks), the graph's call is observed: its post-grad FX graph
first runs eagerly on a copy of the very inputs the compiled graph receives,
then the compiled graph runs as it always does, and after each kernel launch
(C++, Triton, extern) the buffers the kernel wrote are compared with the eager
values of the FX nodes they hold. The first launch in launch order with a
diverging buffer is reported, with an isolation verdict: that one kernel is
run again on eager values of its inputs, which tells "this kernel is wrong"
from "drift from upstream amplified here".

The probe only reads: the compiled program (fusion, scheduling, tiling) is the
one the user runs. The record's `first_divergent_kernel` holds `diverged`,
`graph`, `launch_index`, `launches`, `name`, `kind`, `source`, `buffers`,
`nodes`, `aten_ops`, `args`, `metrics`, `isolated`, `stage`.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.fx

from .compare import compare_tensors
from .inductor_compat import ROLE_INOUT, ROLE_OUT, GraphInfo, Launch
from .inputs import clone_exact, is_non_overlapping, is_non_overlapping_and_dense
from .records import OutputComparison
from .tolerances import Tolerance

MAX_SOURCE_CHARS = 20_000


class _KeepingInterpreter(torch.fx.Interpreter):
    """Runs a post-grad graph eagerly, keeping the values of the nodes buffers hold."""

    def __init__(self, gm: torch.fx.GraphModule, keep: set[str]):
        super().__init__(gm, garbage_collect_values=True)
        self.keep, self.kept = keep, {}

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        # Post-grad passes re-inplace ops (`_foreach_add_` returns None) and leave dead getitems behind.
        if target is operator.getitem and args[0] is None:
            return None
        return super().call_function(target, args, kwargs)

    def run_node(self, node: torch.fx.Node) -> Any:
        value = super().run_node(node)
        if node.name in self.keep and isinstance(value, torch.Tensor):
            self.kept[node.name] = value.detach()
        return value


@dataclass
class _GraphRun:
    """One call of one compiled graph while it is being probed."""

    info: GraphInfo
    label: str
    inputs: list[Any]  # untouched copies of the graph's inputs
    values: dict[str, torch.Tensor]
    values64: dict[str, torch.Tensor] | None = None
    # (address, numel) -> the FX node whose value the last launch stored there:
    # what an in/out argument holds before the next kernel reads and rewrites it.
    last_written: dict[tuple[int, int], str] = field(default_factory=dict)

    def float64_values(self) -> dict[str, torch.Tensor]:
        """The nodes' values computed in float64, made on first need (one more eager run)."""
        if self.values64 is None:
            inputs64 = [clone_exact(x, torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point() else
                        clone_exact(x) if isinstance(x, torch.Tensor) else x for x in self.inputs]
            try:
                with torch.no_grad():
                    interpreter = _KeepingInterpreter(self.info.gm, set(self.values))
                    interpreter.run(*inputs64)
                self.values64 = interpreter.kept
            except Exception:  # some ops have no float64 kernel on some devices
                self.values64 = {}
        return self.values64


@dataclass
class KernelBisector:
    """A graph observer and a launch handler in one; wraps the injection handler, if any."""

    inner: Callable[[Launch], Any] | None = None
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)
    # As the case's own verdict: may a float buffer that misses its tolerance pass by the RMSE rule?
    use_fp64_reference: bool = True
    launches: int = 0
    graphs: list[str] = field(default_factory=list)
    # Graph label -> [first launch index, launches] of each graph call, in call order.
    graph_launches: dict[str, list[int]] = field(default_factory=dict)
    # Every launch: its kernel's name, and whether its output was compared with eager.
    kernels: list[dict[str, Any]] = field(default_factory=list)
    compared: int = 0
    unmapped: int = 0
    problems: list[str] = field(default_factory=list)
    found: dict[str, Any] | None = None
    _current: _GraphRun | None = None
    _labels: dict[str, str] = field(default_factory=dict)

    # Graph observer: capture_graphs(bisector.observe_graph)
    def observe_graph(self, info: GraphInfo, args: list, call: Callable[[list], Any]) -> Any:
        label = self._labels.get(info.module_path)
        if label is None:  # one label per compiled graph, "forward 0", "backward 0", "forward 1", ...
            label = self._labels[info.module_path] = f"{info.kind} {sum(l.startswith(info.kind + ' ') for l in self.graphs)}"
            self.graphs.append(label)
        first = self.launches
        try:
            return self._observe_graph(info, label, args, call)
        finally:
            self.graph_launches.setdefault(label, [first, self.launches - first])

    def _observe_graph(self, info: GraphInfo, label: str, args: list, call: Callable[[list], Any]) -> Any:
        if self.found is not None:
            return call(args)
        inputs = [clone_exact(a) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            with torch.no_grad():
                interpreter = _KeepingInterpreter(info.gm, set(info.buffer_node.values()))
                interpreter.run(*[clone_exact(a) if isinstance(a, torch.Tensor) else a for a in inputs])
        except Exception as exc:
            self.problems.append(f"{label}: eager run of the post-grad graph failed ({type(exc).__name__}: {exc})")
            return call(args)
        self._current = _GraphRun(info, label, inputs, interpreter.kept)
        try:
            return call(args)
        finally:
            self._current = None

    # Launch handler: intercept_launches(bisector.on_launch)
    def on_launch(self, launch: Launch) -> Any:
        run = self._current if self.found is None else None
        before = {id(t): clone_exact(t) for _, t in launch.written()} if run is not None else {}
        result = self._launch(launch)
        self.launches += 1
        if run is not None:
            self._check(launch, run, before)
        return result

    def _launch(self, launch: Launch) -> Any:
        return self.inner(launch) if self.inner is not None else launch.run()

    def _check(self, launch: Launch, run: _GraphRun, before: dict[int, torch.Tensor]) -> None:
        entry = {"index": launch.index, "graph": run.label, "name": launch.kernel.name, "compared": 0}
        self.kernels.append(entry)
        for param, tensor in launch.written():
            name = launch.buffer_name(tensor)
            comparison = self._compare(launch, run, tensor)
            if comparison is None:
                self.unmapped += 1
                continue
            self.compared += 1
            entry["compared"] += 1
            if not comparison.passed:
                self.found = self._report(launch, run, param, name, comparison, before)
                return
        for _, tensor in launch.written():
            node = run.info.buffer_node.get(launch.buffer_name(tensor) or "")
            if node is not None:
                run.last_written[(tensor.data_ptr(), tensor.numel())] = node

    def _compare(self, launch: Launch, run: _GraphRun, tensor: torch.Tensor,
                 written: torch.Tensor | None = None) -> OutputComparison | None:
        """`written` (default: `tensor`) against the eager values of the region of its buffer `tensor` covers."""
        expected = _eager_view(launch, run, tensor, run.values)
        if expected is None:
            return None
        actual = tensor if written is None else written
        name = launch.buffer_name(tensor) or "?"
        comparison = compare_tensors(name, actual, expected, tolerances=self.tolerances)
        if not comparison.passed and comparison.rule == "tolerance" and self.use_fp64_reference:
            reference = _eager_view(launch, run, tensor, run.float64_values())
            if reference is not None:
                comparison = compare_tensors(name, actual, expected, tolerances=self.tolerances, reference=reference)
        return comparison

    def _report(self, launch: Launch, run: _GraphRun, param: str, name: str | None,
                comparison: OutputComparison, before: dict[int, torch.Tensor]) -> dict[str, Any]:
        info = run.info
        nodes = info.buffer_origins.get(name or "", [])
        targets = {n.name: n.target for n in info.gm.graph.nodes}
        return {
            "diverged": True,
            "graph": run.label,
            "launch_index": launch.index,
            "launches": None,  # the total is known once the run ends
            "name": launch.kernel.name,
            "kind": launch.kernel.kind,
            "source": launch.kernel.source[:MAX_SOURCE_CHARS],
            "buffers": [param, name] if name and name != param else [param],
            "buffer": name,
            "nodes": nodes,
            "aten_ops": sorted({str(targets[n]) for n in nodes if n in targets}),
            "args": _describe_args(launch),
            "metrics": dataclasses.asdict(comparison),
            "isolated": self._isolate(launch, run, before),
            "module_path": info.module_path,
        }

    def _isolate(self, launch: Launch, run: _GraphRun, before: dict[int, torch.Tensor]) -> str:
        """Run the kernel again on eager values of its inputs; does it still diverge?"""
        args, kwargs = list(launch.args), dict(launch.kwargs)
        kept = []  # inputs that keep their computed values: no eager twin, or a layout copy_ cannot fill
        for position, tensor in launch.read():
            name = launch.buffer_name(tensor)
            if name in run.info.input_names:
                continue  # graph inputs are the same for eager and compiled
            value = _eager_view(launch, run, tensor, run.values, read=True)
            if value is None or not is_non_overlapping_and_dense(tensor):
                kept.append(name or f"arg{position}")
                continue
            fresh = clone_exact(tensor)
            fresh.copy_(value)
            if isinstance(position, str):
                kwargs[position] = fresh
            else:
                args[position] = fresh
        written = {}
        for position, tensor in enumerate(launch.args):
            if id(tensor) in before and launch.role(position) in (ROLE_INOUT, ROLE_OUT):
                args[position] = written[id(tensor)] = self._prior_state(run, tensor, before[id(tensor)], kept)
        if "out" in kwargs and id(kwargs["out"]) in before:
            out = launch.kwargs["out"]
            kwargs["out"] = written[id(out)] = clone_exact(before[id(out)])
        replay = dataclasses.replace(launch, args=args, kwargs=kwargs, caller_locals={}, replay=True)
        try:
            self._launch(replay)
        except Exception as exc:
            return f"not isolated: the kernel could not be run again ({type(exc).__name__}: {exc})"
        still_wrong = []
        for _, tensor in launch.written():
            again = written.get(id(tensor))
            comparison = self._compare(launch, run, tensor, written=again) if again is not None else None
            if comparison is not None and not comparison.passed:
                still_wrong.append(f"{launch.buffer_name(tensor)} bad={comparison.bad}/{comparison.numel}")
        inputs = "eager values of its inputs" + (f" (kept as computed: {', '.join(kept)})" if kept else "")
        if still_wrong:
            return f"kernel is wrong: on {inputs} it still diverges ({', '.join(still_wrong)})"
        return f"upstream drift amplified here: on {inputs} this kernel matches eager"

    def _prior_state(self, run: _GraphRun, tensor: torch.Tensor, before: torch.Tensor, kept: list[str]) -> torch.Tensor:
        """An in/out argument as eager would have it before this launch: the last value stored there."""
        restored = clone_exact(before)
        node = run.last_written.get((tensor.data_ptr(), tensor.numel()))
        value = run.values.get(node or "")
        if value is not None and value.numel() == tensor.numel() and is_non_overlapping_and_dense(tensor):
            restored.copy_(value.reshape(tensor.shape))
        elif node is not None:
            kept.append(node)
        return restored

    def result(self) -> dict[str, Any]:
        summary = {"launches": self.launches, "graphs": self.graphs, "graph_launches": self.graph_launches,
                   "compared_buffers": self.compared, "unmapped_buffers": self.unmapped, "kernels": self.kernels}
        if self.problems:
            summary["problems"] = self.problems
        if self.found is None:
            return {"diverged": False, **summary}
        return {**self.found, **summary}


def _eager_view(launch: Launch, run: _GraphRun, tensor: torch.Tensor, values: Mapping[str, torch.Tensor],
                read: bool = False) -> torch.Tensor | None:
    """Eager's values for exactly the elements `tensor` covers, laid out as `tensor` is.

    `tensor` is a wrapper buffer or a view of one (`reinterpret_tensor`: a
    slice written by one of several kernels, a transposed or flattened view).
    The buffer's node value is laid out with the buffer's own strides, then the
    same view is taken of it, so each element is compared with its own twin.
    A graph input read is its value on entry; one written is a mutated input,
    whose eager twin is the node copied into it.
    """
    found = launch.owning_buffer(tensor)
    if found is None:
        return None
    name, buffer = found
    if read and name in run.info.input_names:
        value = run.inputs[run.info.input_names.index(name)]
    else:
        value = values.get(run.info.buffer_node.get(name, ""))
    if not isinstance(value, torch.Tensor) or value.numel() != buffer.numel() or not is_non_overlapping(buffer):
        return None
    if tensor is buffer and value.shape == tensor.shape:
        return value
    laid_out = torch.empty_strided(buffer.shape, buffer.stride(), dtype=value.dtype, device=value.device)
    laid_out.copy_(value.reshape(buffer.shape))
    return laid_out.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset() - buffer.storage_offset())


def _describe_args(launch: Launch) -> list[dict[str, Any]]:
    return [{
        "name": launch.kernel.arg_name(key) if isinstance(key, int) else key,
        "buffer": launch.buffer_name(value),
        "role": launch.role(key),
        "dtype": str(value.dtype).removeprefix("torch."),
        "size": list(value.shape),
        "stride": list(value.stride()),
        "storage_offset": value.storage_offset(),
    } for key, value in launch.tensor_args()]
