"""The wrapper's glue before a fallback call: each view it hands the op, against eager's value of the node it
stands for.

A fallback call (an ATen fallback, a custom op) receives the wrapper's views of its buffers (`reinterpret_tensor`,
`as_strided`), built from the layouts lowering computed. The op's post-grad FX node names, argument by argument, the
node whose value each view must hold. A view whose elements differ from that value while the buffer it views holds
eager's values was built wrong (a dropped storage offset, a stride of another layout): the call is handed the wrong
memory before the op runs, and the answer names the call, the argument and both layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.judge.compare import VerdictPolicy
from harness.inductor_compat import GraphInfo, Launch
from harness.probe.regions import RegionMap
from harness.probe.node_values import GraphValues


@dataclass
class GlueProblem:
    key: int  # the argument's position among the launch's leaves
    label: str
    node: str
    expected: torch.Tensor
    text: str


def check_glue(
    launch: Launch,
    buffers: list[str] | None,
    info: GraphInfo,
    regions: RegionMap,
    values: GraphValues,
    verdict: VerdictPolicy,
) -> GlueProblem | None:
    """The first argument of a fallback call that holds the wrong memory, when the buffer it views is right."""
    op_node = _op_node(buffers, info)
    schema = getattr(launch.kernel.op, "_schema", None)
    if op_node is None or schema is None:
        return None
    bound = _bound(op_node, [a.name for a in schema.arguments])
    for key, tensor in launch.tensor_args():
        if not isinstance(key, int) or launch.local_names(tensor):
            continue  # a wrapper local itself is no view the glue built (and before the call there are no results)
        label = launch.param_name(key)
        node = _argument_node(bound, label)
        owner = launch.owning_buffer(tensor)
        if node is None or owner is None:
            continue
        expected = values.value(node.name)
        if not isinstance(expected, torch.Tensor):
            continue
        layout_wrong = tuple(expected.shape) != tuple(tensor.shape)
        if not layout_wrong and _matches(verdict, label, tensor, expected):
            continue
        owner_name, owner_tensor = owner
        region = regions.read(launch, owner_tensor)
        owner_value = region.eager(values) if region.mapped else None
        if owner_value is None or not _matches(verdict, owner_name, owner_tensor, owner_value):
            continue  # the buffer itself differs: a drift from upstream, not the view
        bad = "its size differs" if layout_wrong else _bad(verdict, label, tensor, expected)
        text = (
            f"the wrapper's glue is wrong: it hands {label} to {launch.kernel.name.removeprefix('torch.ops.')} as a "
            f"view of {owner_name} with {_layout(tensor)}, where eager's value of {node.name} has "
            f"{_layout(expected)}; {bad} while {owner_name} holds eager's values"
        )
        return GlueProblem(key, label, node.name, expected, text)
    return None


def _op_node(buffers: list[str] | None, info: GraphInfo) -> Any:
    for name in buffers or ():
        fact = info.buffers.get(name)
        if fact is not None and fact.op_node:
            return next((n for n in info.gm.graph.nodes if n.name == fact.op_node), None)
    return None


def _bound(node: Any, names: list[str]) -> dict[str, Any]:
    bound = {names[i]: value for i, value in enumerate(node.args) if i < len(names)}
    bound.update(node.kwargs)
    return bound


def _argument_node(bound: dict[str, Any], label: str) -> Any:
    """The FX node an argument label (`self`, `tensors[2]`) stands for."""
    name, _, rest = label.partition("[")
    value = bound.get(name)
    if rest and isinstance(value, (list, tuple)):
        index = int(rest.rstrip("]"))
        value = value[index] if index < len(value) else None
    return value if isinstance(value, torch.fx.Node) else None


def _matches(verdict: VerdictPolicy, name: str, actual: torch.Tensor, expected: torch.Tensor) -> bool:
    if actual.shape != expected.shape:
        return False
    return verdict.quick_match(actual, expected) or verdict.tensors(name, actual, expected, pictures=False).passed


def _layout(tensor: torch.Tensor) -> str:
    return f"size {tuple(tensor.shape)} stride {tuple(tensor.stride())} storage offset {tensor.storage_offset()}"


def _bad(verdict: VerdictPolicy, label: str, tensor: torch.Tensor, expected: torch.Tensor) -> str:
    comparison = verdict.tensors(label, tensor, expected, pictures=False)
    return f"{comparison.bad}/{comparison.numel} of its elements differ"
