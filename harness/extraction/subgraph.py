"""The post-grad FX subgraph a kernel implements, cut out as a standalone function (torch.fx).

A kernel computes the nodes its buffers were fused from (their origins). Cut
out of the post-grad graph, those nodes become a graph of their own: every
value they read from outside becomes a placeholder, every value they write
that the kernel stores becomes an output. Widening adds the neighbouring
kernels' nodes, one ring at a time, for a fault whose fusion only happens in
its context.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Iterable

import torch
import torch.fx

# What generated code may name beyond `torch` and builtins, and where a standalone module imports it from.
_IMPORTABLE = {"device": "from torch import device", "inf": "from math import inf", "nan": "from math import nan"}
_HARMLESS = {"torch", "fx_pytree", "pytree", "_tensor_constant"}


class SubgraphError(Exception):
    """The nodes cannot be cut out as a standalone function (an unsupported global, nothing computed)."""


@dataclass
class Subgraph:
    gm: torch.fx.GraphModule
    # Names, in the parent graph, of the values read from outside (the placeholders, in order) and returned.
    inputs: list[str]
    outputs: list[str]
    nodes: list[str]
    # The function's source (`def graph(...)`) and the imports it needs.
    code: str
    imports: list[str] = field(default_factory=list)

    @property
    def lines(self) -> int:
        """Lines of graph code: the function's body."""
        return sum(1 for line in self.code.splitlines()[1:] if line.strip())


def kernel_node_names(gm: torch.fx.GraphModule, origins: Iterable[str]) -> list[str]:
    """The computing nodes among `origins`, closed over multi-output ops (a `getitem` needs its producer),
    in graph order."""
    by_name = {node.name: node for node in gm.graph.nodes}
    chosen = {name for name in origins if name in by_name and by_name[name].op == "call_function"}
    for name in list(chosen):
        node = by_name[name]
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            chosen.add(node.args[0].name)
    return [node.name for node in gm.graph.nodes if node.name in chosen]


def widen(
    gm: torch.fx.GraphModule, nodes: Iterable[str], kernel_of: dict[str, int], members: dict[int, list[str]]
) -> list[str]:
    """One ring wider: the nodes feeding these and those reading them, each with every node of its kernel."""
    by_name = {node.name: node for node in gm.graph.nodes}
    current = set(nodes)
    added: set[str] = set()
    for name in current:
        node = by_name[name]
        for neighbour in list(node.all_input_nodes) + list(node.users):
            if neighbour.op == "call_function" and neighbour.name not in current:
                added.add(neighbour.name)
    for name in list(added):
        if name in kernel_of:
            added.update(members[kernel_of[name]])
    return kernel_node_names(gm, current | added)


def closure(gm: torch.fx.GraphModule, nodes: Iterable[str], node: str) -> list[str]:
    """`node` and every node of `nodes` it is computed from, in graph order."""
    inside = set(nodes)
    by_name = {n.name: n for n in gm.graph.nodes}
    found, pending = set(), [by_name[node]]
    while pending:
        current = pending.pop()
        if current.name in found or current.name not in inside:
            continue
        found.add(current.name)
        pending.extend(current.all_input_nodes)
    return [n.name for n in gm.graph.nodes if n.name in found]


def reads_outside(gm: torch.fx.GraphModule, nodes: Iterable[str]) -> bool:
    """Whether the nodes read any value from outside themselves (a part made of constants alone tests nothing
    of the kernel's inputs)."""
    inside = set(nodes)
    by_name = {n.name: n for n in gm.graph.nodes}
    return any(source.name not in inside for name in inside for source in by_name[name].all_input_nodes)


def cut(
    gm: torch.fx.GraphModule, nodes: Iterable[str], outputs: Iterable[str] | None = None, only: bool = False
) -> Subgraph:
    """`nodes` as a graph of their own. Outputs: `outputs` when given (what a kernel stores), plus, unless
    `only`, every node read outside the set in the parent graph; in-place writes of a placeholder show in the
    placeholder itself."""
    by_name = {node.name: node for node in gm.graph.nodes}
    chosen = [node for node in gm.graph.nodes if node.name in set(nodes)]
    if not chosen:
        raise SubgraphError("no computing node to cut out")
    inside = {node.name for node in chosen}
    graph = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    inputs: list[str] = []
    for node in chosen:
        for source in node.all_input_nodes:
            if source.name not in inside and source not in mapping:
                placeholder = graph.placeholder(source.name)
                placeholder.meta = {k: v for k, v in source.meta.items() if k in ("val", "tensor_meta")}
                mapping[source] = placeholder
                inputs.append(source.name)
    for node in chosen:
        copied = graph.node_copy(node, lambda n: mapping[n])
        copied.meta = {k: v for k, v in node.meta.items() if k in ("val", "tensor_meta")}
        mapping[node] = copied
    wanted = list(dict.fromkeys(name for name in (outputs or ()) if name in inside))
    for node in [] if only and wanted else chosen:
        read_outside = any(user.name not in inside for user in node.users)
        # A constant (`full`, `scalar_tensor`: no input) read outside is no result of the subgraph's.
        if read_outside and node.name not in wanted and _is_tensor(node) and node.all_input_nodes:
            wanted.append(node.name)
    if not wanted:
        wanted = [chosen[-1].name]
    graph.output(tuple(mapping[by_name[name]] for name in wanted))
    sub = torch.fx.GraphModule(torch.nn.Module(), graph)
    code, imports = _function_source(sub)
    return Subgraph(sub, inputs, wanted, [n.name for n in chosen], code, imports)


def _is_tensor(node: torch.fx.Node) -> bool:
    value = node.meta.get("val")
    return value is None or isinstance(value, torch.Tensor)


def _function_source(gm: torch.fx.GraphModule, name: str = "graph") -> tuple[str, list[str]]:
    """The graph as `def graph(<inputs>):` with the imports it needs; FX's own code generation."""
    python = gm.graph.python_code(root_module="self")
    source = python.src.strip("\n")
    source = re.sub(r"def forward\(self,? ?", f"def {name}(", source, count=1)
    imports = []
    for global_name in python.globals:
        if not re.search(rf"\b{re.escape(global_name)}\b", source) or global_name in _HARMLESS:
            continue
        if global_name not in _IMPORTABLE:
            raise SubgraphError(f"the graph code names {global_name!r}, which a standalone module cannot import")
        imports.append(_IMPORTABLE[global_name])
    # FX frees each value after its last use (`x = None`): noise in a repro meant to be read.
    lines = [re.sub(r";\s+[\w\s=]+= None$", "", line).rstrip() for line in source.splitlines()]
    return "\n".join(line for line in lines if line), sorted(set(imports))
