"""Updates the compiled program never makes: an in-place write of the post-grad graph that Inductor removed.

A post-grad graph may update a buffer in place through a view (`copy_(as_strided(clone_1, ...), add)`, as
functionalization and reinplacing write `x.as_strided(...).add_(u)`). Inductor lowers the write into the view's
base, unless it does not know the view aliases the base: a view op made an ATen fallback (torch_npu's
`triton_experimental` does that for `aten.as_strided`) returns a buffer of its own, the write lands in that buffer,
nothing reads it, and the scheduler removes it (`GraphLowering.removed_buffers`). The program then returns the base
without the update, and every kernel computes what it was given: no kernel is wrong.

`dropped_updates` finds such writes in a graph's lowering facts: a removed buffer whose node writes in place a view
whose base the graph still reads after the write (or returns). The localization confirms one before answering
with it: the post-grad graph run eagerly passes, and run eagerly without those writes it gives the compiled
program's results (`LocalizationHooks.graphs_without`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.inductor_compat import GraphInfo

# View ops a write can reach its base through (`aten.<name>.*`).
_VIEWS = {
    "as_strided",
    "slice",
    "select",
    "view",
    "reshape",
    "permute",
    "transpose",
    "t",
    "expand",
    "diagonal",
    "unfold",
    "squeeze",
    "unsqueeze",
    "alias",
    "_reshape_alias",
    "narrow",
    "view_as",
}


@dataclass(frozen=True)
class DroppedUpdate:
    node: str  # the write (`copy__default`)
    buffer: str  # its buffer, removed
    view: str  # what it writes into
    base: str  # the node or graph input that view is of, read after the write

    def text(self) -> str:
        through = f" through {self.view}" if self.view != self.base else ""
        return f"{self.node} (an in-place update of {self.base}{through}; its buffer {self.buffer} was removed)"


def dropped_updates(info: GraphInfo) -> list[DroppedUpdate]:
    nodes = {node.name: node for node in info.gm.graph.nodes}
    order = {name: position for position, name in enumerate(nodes)}
    found = []
    for fact in info.buffers.values():
        node = nodes.get(fact.value_node or "")
        if not fact.removed or node is None or node.op != "call_function" or not _writes_first_argument(node):
            continue
        target = node.args[0] if node.args else None
        if not hasattr(target, "name"):
            continue
        base = _base(target)
        if _read_after(base, order[node.name]):
            found.append(DroppedUpdate(node.name, fact.name, target.name, base.name))
    return found


def _writes_first_argument(node: Any) -> bool:
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


def _base(node: Any) -> Any:
    """The node a chain of views starts from."""
    while node.op == "call_function" and node.args and hasattr(node.args[0], "name") and _is_view(node):
        node = node.args[0]
    return node


def _is_view(node: Any) -> bool:
    name = str(getattr(node.target, "__name__", node.target)).split(".")[0]
    return name in _VIEWS


def _read_after(base: Any, position: int) -> bool:
    """Whether the graph reads `base` (or a view of it) after `position`, or returns it."""
    order = {node.name: i for i, node in enumerate(base.graph.nodes)}
    pending = [base]
    while pending:
        node = pending.pop()
        for user in node.users:
            if user.op == "output" or (order[user.name] > position and not _is_view(user)):
                return True
            if _is_view(user):
                pending.append(user)
    return False
