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
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.fx

from .compare import compare_tensors
from .inductor_compat import ROLE_IN, ROLE_INOUT, ROLE_OUT, GraphInfo, Launch
from .inputs import clone_exact, is_non_overlapping_and_dense
from .records import OutputComparison
from .tolerances import Tolerance

MAX_SOURCE_CHARS = 20_000


class _KeepingInterpreter(torch.fx.Interpreter):
    """Runs a post-grad graph eagerly, keeping the values of the nodes buffers hold."""

    def __init__(self, gm: torch.fx.GraphModule, keep: set[str]):
        super().__init__(gm, garbage_collect_values=True)
        self.keep, self.kept = keep, {}

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

    def reference(self, node: str) -> torch.Tensor | None:
        """The node's value computed in float64, made on first need (one more eager run)."""
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
        return self.values64.get(node)


@dataclass
class KernelBisector:
    """A graph observer and a launch handler in one; wraps the injection handler, if any."""

    inner: Callable[[Launch], Any] | None = None
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)
    # As the case's own verdict: may a float buffer that misses its tolerance pass by the RMSE rule?
    use_fp64_reference: bool = True
    launches: int = 0
    graphs: list[str] = field(default_factory=list)
    compared: int = 0
    unmapped: int = 0
    problems: list[str] = field(default_factory=list)
    found: dict[str, Any] | None = None
    _current: _GraphRun | None = None
    _kind_counts: dict[str, int] = field(default_factory=dict)

    # Graph observer: capture_graphs(bisector.observe_graph)
    def observe_graph(self, info: GraphInfo, args: list, call: Callable[[list], Any]) -> Any:
        index = self._kind_counts.get(info.kind, 0)
        self._kind_counts[info.kind] = index + 1
        label = f"{info.kind} {index}"
        self.graphs.append(label)
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
        for param, tensor in launch.written():
            name = launch.buffer_name(tensor)
            comparison = self._compare(run, name, tensor)
            if comparison is None:
                self.unmapped += 1
                continue
            self.compared += 1
            if not comparison.passed:
                self.found = self._report(launch, run, param, name, comparison, before)
                return
        for _, tensor in launch.written():
            node = run.info.buffer_node.get(launch.buffer_name(tensor) or "")
            if node is not None:
                run.last_written[(tensor.data_ptr(), tensor.numel())] = node

    def _compare(self, run: _GraphRun, name: str | None, tensor: torch.Tensor) -> OutputComparison | None:
        node = run.info.buffer_node.get(name or "")
        expected = run.values.get(node or "")
        if expected is None or expected.numel() != tensor.numel():
            return None
        if expected.shape != tensor.shape:
            expected = expected.reshape(tensor.shape)
        comparison = compare_tensors(name or "?", tensor, expected, tolerances=self.tolerances)
        if not comparison.passed and comparison.rule == "tolerance" and self.use_fp64_reference:
            reference = run.reference(node)
            if reference is not None and reference.numel() == tensor.numel():
                comparison = compare_tensors(name or "?", tensor, expected, tolerances=self.tolerances,
                                             reference=reference.reshape(tensor.shape))
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
            value = self._eager_value(run, name, tensor)
            if value is None or not is_non_overlapping_and_dense(tensor):
                kept.append(name or f"arg{position}")
                continue
            fresh = clone_exact(tensor)
            fresh.copy_(value.reshape(tensor.shape))
            args[position] = fresh
        written = {}
        for position, tensor in enumerate(launch.args):
            if id(tensor) in before and launch.kernel.role(position) in (ROLE_INOUT, ROLE_OUT):
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
            name = launch.buffer_name(tensor)
            comparison = self._compare(run, name, again) if again is not None else None
            if comparison is not None and not comparison.passed:
                still_wrong.append(f"{name} bad={comparison.bad}/{comparison.numel}")
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

    @staticmethod
    def _eager_value(run: _GraphRun, name: str | None, tensor: torch.Tensor) -> torch.Tensor | None:
        value = run.values.get(run.info.buffer_node.get(name or "", ""))
        return value if value is not None and value.numel() == tensor.numel() else None

    def result(self) -> dict[str, Any]:
        summary = {"launches": self.launches, "graphs": self.graphs, "compared_buffers": self.compared,
                   "unmapped_buffers": self.unmapped}
        if self.problems:
            summary["problems"] = self.problems
        if self.found is None:
            return {"diverged": False, **summary}
        return {**self.found, **summary}


def _describe_args(launch: Launch) -> list[dict[str, Any]]:
    described = []
    items = list(enumerate(launch.args)) + [(key, value) for key, value in launch.kwargs.items()]
    for position, value in items:
        if not isinstance(value, torch.Tensor):
            continue
        if launch.kernel.kind == "extern":
            role = ROLE_OUT if position == "out" else ROLE_IN
        else:
            role = launch.kernel.role(position)
        described.append({
            "name": launch.kernel.arg_name(position) if isinstance(position, int) else position,
            "buffer": launch.buffer_name(value),
            "role": role,
            "dtype": str(value.dtype).removeprefix("torch."),
            "size": list(value.shape),
            "stride": list(value.stride()),
            "storage_offset": value.storage_offset(),
        })
    return described
