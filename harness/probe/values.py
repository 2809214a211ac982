"""Eager values of a compiled graph's FX nodes, for one call of that graph.

The post-grad graph runs eagerly (an FX interpreter) on copies of the very
inputs the compiled graph receives. Each kept node value is the value the node
had when it ran: the graph also updates tensors in place (`index_put_`,
`copy_` into an input, re-inplaced ops), so a kept value that a later node is
about to write is copied first. Float64 twins come from the same graph
rewritten to compute in float64 (`float64_copy`), run on float64 inputs, made
on first need. Values that depend on random numbers are never compared: an
eager rerun draws other numbers than the compiled kernel did.
"""

from __future__ import annotations

import operator
from typing import Any, Iterable

import torch
import torch.fx

from ..inductor_compat.graphs import AFTER, GraphInfo, written_nodes, float64_copy
from ..layout import clone_exact, is_non_overlapping

# Ops whose results an eager rerun cannot reproduce.
RANDOM_OPS = ("rand", "randn", "randint", "randperm", "bernoulli", "dropout", "native_dropout", "normal",
              "uniform", "exponential", "multinomial", "inductor_random", "inductor_seeds", "rand_like",
              "randn_like", "randint_like", "poisson")


class _KeepingInterpreter(torch.fx.Interpreter):
    """Runs a post-grad graph eagerly, keeping each wanted node's value as it was when the node ran."""

    def __init__(self, gm: torch.fx.GraphModule, keep: set[str]):
        super().__init__(gm, garbage_collect_values=True)
        self.keep = keep
        self.kept: dict[str, torch.Tensor] = {}
        self._by_storage: dict[int, list[str]] = {}
        # "X@N": keep X's state right after N runs (N updates X in place).
        self._after: dict[str, list[tuple[str, str]]] = {}
        for key in keep:
            if AFTER in key:
                target, _, node = key.partition(AFTER)
                self._after.setdefault(node, []).append((target, key))
        self._nodes = {node.name: node for node in gm.graph.nodes}

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        # Post-grad passes re-inplace ops (`_foreach_add_` returns None) and leave dead getitems behind.
        if target is operator.getitem and args[0] is None:
            return None
        return super().call_function(target, args, kwargs)

    def run_node(self, node: torch.fx.Node) -> Any:
        written = _written_arguments(node, self.env)
        for tensor in written:
            self._protect(tensor)
        if any(not is_non_overlapping(t) for t in written):
            self._densify_written(node)
        value = super().run_node(node)
        if node.name in self.keep and isinstance(value, torch.Tensor):
            value = value.detach()
            self.kept[node.name] = value
            self._by_storage.setdefault(_storage_key(value), []).append(node.name)
        for target, key in self._after.get(node.name, ()):
            state = self.env.get(self._nodes.get(target))
            if isinstance(state, torch.Tensor):
                self.kept[key] = clone_exact(state.detach())
        return value

    def _protect(self, tensor: torch.Tensor) -> None:
        """Copy every kept value sharing `tensor`'s storage: the node about to run writes it."""
        for name in self._by_storage.pop(_storage_key(tensor), []):
            self.kept[name] = clone_exact(self.kept[name])

    def _densify_written(self, node: torch.fx.Node) -> None:
        """An in-place op on an expanded or overlapping tensor cannot run eagerly: give it a dense copy."""
        for argument in written_nodes(node):
            value = self.env.get(argument)
            if isinstance(value, torch.Tensor) and not is_non_overlapping(value):
                self.env[argument] = value.contiguous()


class GraphValues:
    """Eager (and on demand float64) values of the nodes a compiled graph's buffers hold, for one call."""

    def __init__(self, info: GraphInfo, inputs: list[Any], wanted: Iterable[str]):
        self.info = info
        self.inputs = inputs  # untouched copies of the graph's inputs
        self.wanted = set(wanted)
        self.random = _random_dependent(info.gm)
        self.problems: list[str] = []
        self._values: dict[str, torch.Tensor] | None = None
        self._float64: dict[str, torch.Tensor] | None = None

    def run(self) -> bool:
        """Run the graph eagerly; False (with a problem said) when it cannot run."""
        try:
            self._values = _interpret(self.info.gm, self.inputs, self.wanted)
            return True
        except Exception as exc:
            self.problems.append(f"eager run of the post-grad graph failed ({type(exc).__name__}: {_short(exc)})")
            self._values = {}
            return False

    def value(self, node: str) -> torch.Tensor | None:
        return (self._values or {}).get(node)

    def input(self, name: str) -> torch.Tensor | None:
        if name not in self.info.input_names:
            return None
        value = self.inputs[self.info.input_names.index(name)]
        return value if isinstance(value, torch.Tensor) else None

    def float64(self, node: str) -> torch.Tensor | None:
        """The node's value computed in float64; None when the float64 graph cannot run (said once in problems)."""
        if self._float64 is None:
            inputs64 = [clone_exact(x, torch.float64) if isinstance(x, torch.Tensor) and x.is_floating_point()
                        else clone_exact(x) if isinstance(x, torch.Tensor) else x for x in self.inputs]
            try:
                self._float64 = _interpret(float64_copy(self.info.gm), inputs64, self.wanted)
            except Exception as exc:  # some ops have no float64 kernel on some devices
                self.problems.append(f"float64 run of the post-grad graph failed ({type(exc).__name__}: {_short(exc)}); "
                                     "buffers were judged by tolerance alone")
                self._float64 = {}
        return self._float64.get(node)


def _interpret(gm: torch.fx.GraphModule, inputs: list[Any], keep: set[str]) -> dict[str, torch.Tensor]:
    interpreter = _KeepingInterpreter(gm, keep)
    with torch.no_grad():
        interpreter.run(*[clone_exact(a) if isinstance(a, torch.Tensor) else a for a in inputs])
    return interpreter.kept


def _written_arguments(node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> list[torch.Tensor]:
    return [env[n] for n in written_nodes(node) if isinstance(env.get(n), torch.Tensor)]


def _storage_key(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


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


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else repr(exc)
