"""What lowering knew about each compiled graph: the post-grad graph, its buffers, its kernels.

Captured when `GraphLowering.compile_to_module` runs (see the package
docstring), and kept beside Inductor's own cache entry so that a warm cache
(which skips lowering) still has it:

- the post-grad FX graph (`GraphLowering.orig_gm`) and its input names;
- for every buffer (`name_to_buffer`): the FX node whose value it holds after
  the kernel that computes it, the storage it lives in (a mutation buffer
  writes its target's storage, a `NonOwningLayout` buffer a slice of another
  buffer), and its FX origins;
- which buffers each kernel computes, from the call Inductor's codegen makes
  for every kernel to `torch._inductor.debug.set_kernel_post_grad_provenance_tracing(
  node_schedule, kernel_name, is_extern)` (torch >= 2.8; the hook records the
  arguments and calls through; without it, buffers are matched by name).

Why the value node is not `origin_node`: Inductor sets `origin_node` to the FX
node being lowered when a buffer is created, so a zeros buffer realized for an
`index_put_` names the `index_put_`. A buffer's value is the last node, in graph
order, among its `origins` whose value has the buffer's shape and dtype: every
other origin was inlined into it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from harness.inductor_compat.launches import MODULE_ACCUMULATES, MODULE_KERNELS, _install, _install_lock, _state

# Sidecar files beside the wrapper module Inductor loads; the wrapper's path is the hash of its source.
SIDECAR_SUFFIX = ".harness-graph"
# Sidecars made by another version of this module are not read (see _sidecar_version).
SIDECAR_VERSION = 2


# Why a buffer written first by a lowering that then updates it in place has no eager twin at that first write.
# No FX node reads that state (it lies inside one node's lowering): once the node's final value is written over
# it, it can no longer carry a difference to anything.
STATE_BEFORE_IN_PLACE = "holds the state before the in-place part of its lowering"


@dataclass
class BufferFact:
    """One Inductor buffer: what it holds and where it lives."""

    name: str
    # The FX node whose value the buffer holds once computed; None with a reason when no node does.
    value_node: str | None
    # The buffer whose storage it writes: itself, a mutation's target, or the owner of a view.
    storage: str
    origins: list[str] = field(default_factory=list)
    unmapped_reason: str | None = None
    # A view into another buffer's storage (NonOwningLayout): (size, stride, offset) in that storage.
    view: tuple[list[int], list[int], int] | None = None
    # The value node's result has another shape with the same elements in the same order
    # (var_mean's keepdim mean over a flat buffer): compare it reshaped.
    reshaped: bool = False
    size: list[int] | None = None
    # Computed by summing many terms (a reduction, a matmul or other library kernel, an accumulating
    # scatter): its rounding depends on the order, so the verdict allows float32 summation noise.
    accumulates: bool = False
    # A mutation of part of its storage (an in-place op on a view): the storage's node (or graph input)
    # whose value it updates, and where the part lies: (size, stride, offset) in the storage.
    part_of: str | None = None
    part_view: tuple[list[int], list[int], int] | None = None
    # For a buffer holding STATE_BEFORE_IN_PLACE: the buffers of the same lowering that update it in place.
    completed_by: list[str] = field(default_factory=list)
    # The scheduler removed it (`GraphLowering.removed_buffers`): no kernel or call of the wrapper writes it.
    removed: bool = False
    # What a fallback call (an ATen fallback or custom op: `FallbackKernel`) made: the fallback's buffer, for each
    # tensor it returned (`MultiOutput`, with its index path in what the op returned) and each argument it writes
    # in place (`MutationOutput`, whose value is its target's state right after the op, "X@op").
    made_by: str | None = None
    result_path: tuple[int, ...] | None = None
    # A fallback call's own buffer: the post-grad FX node it calls its op for (whose arguments its call stands for).
    op_node: str | None = None


@dataclass
class GraphInfo:
    """What lowering knew about one compiled graph, kept for the probe."""

    module_path: str
    kind: str  # "forward", "backward" or "inference"
    graph_id: Any
    gm: Any  # the post-grad torch.fx.GraphModule
    input_names: list[str]
    buffers: dict[str, BufferFact]
    # (kernel name, buffers it computes) in codegen order, which is the wrapper's launch order.
    kernels: list[tuple[str, list[str]]]
    node_order: dict[str, int] = field(default_factory=dict)
    _written_inputs: set[int] | None = field(default=None, repr=False, compare=False)
    _float64_gm: Any = field(default=None, repr=False, compare=False)
    _functional: bool | None = field(default=None, repr=False, compare=False)

    def written_inputs(self) -> set[int]:
        """Positions of the inputs whose storage the graph may write (`written_inputs`), computed once."""
        if self._written_inputs is None:
            self._written_inputs = written_inputs(self.gm)
        return self._written_inputs

    def functional(self) -> bool:
        """Whether no node writes in place (`is_functional`), computed once."""
        if self._functional is None:
            self._functional = is_functional(self.gm)
        return self._functional

    def float64_gm(self) -> Any:
        """The post-grad graph computing in float64 (`float64_copy`), made once: making it generates and
        compiles the graph's Python code, about a second for a model's graph."""
        if self._float64_gm is None:
            self._float64_gm = float64_copy(self.gm)
        return self._float64_gm

    def order_of(self, value_node: str | None) -> int:
        """Graph position of the node whose value this is ("X@N": after N ran)."""
        return self.node_order.get((value_node or "").rpartition(AFTER)[2], -1)

    @property
    def accumulates(self) -> bool:
        return any(fact.accumulates for fact in self.buffers.values())

    def computed_by(self, kernel_name: str) -> list[str] | None:
        """Buffers a generated kernel computes (None when codegen did not say)."""
        found = [buffers for name, buffers in self.kernels if name == kernel_name]
        return found[0] if len(found) == 1 else None

    def extern_buffers(self, kernel_name: str) -> list[str]:
        """Buffers computed by calls of an extern or fallback kernel name (several calls share a name)."""
        return [b for name, buffers in self.kernels if name == kernel_name for b in buffers]

    def fallback_call(self, kernel_name: str, ordinal: int) -> list[str] | None:
        """The buffers the `ordinal`-th call (from 0, in the wrapper's order) of a fallback op makes: its own, the
        tensors it returns and the arguments it writes. None when codegen named no such call."""
        calls = [buffers for name, buffers in self.kernels if name == kernel_name]
        if ordinal >= len(calls):
            return None
        own = calls[ordinal]
        return own + [b.name for b in self.buffers.values() if b.made_by in own and b.name not in own]

    def mutations_of(self, storage: str) -> list[str]:
        """Buffers that write `storage` other than its own, in graph order of their values."""
        found = [b for b in self.buffers.values() if b.storage == storage and b.name != storage and b.view is None]
        return sorted((b.name for b in found), key=lambda n: self.order_of(self.buffers[n].value_node))


_GRAPHS: dict[str, GraphInfo] = {}
_lowering_kernels = threading.local()


def graph_info(path: str) -> GraphInfo | None:
    """The facts of the compiled graph whose wrapper module lives at `path`, from memory or its sidecar."""
    info = _GRAPHS.get(path)
    if info is None and path:
        info = _load_sidecar(path)
        if info is not None:
            _GRAPHS[path] = info
    return info


def _graph_info(
    lowering: Any, module: Any, kernels: list[tuple[str, list[str]]], lowered: list[tuple[str, Any]]
) -> GraphInfo:
    gm = lowering.orig_gm
    order = {node.name: i for i, node in enumerate(gm.graph.nodes)}
    values = {node.name: node.meta.get("val") for node in gm.graph.nodes}
    produced, unrealized = _produced_by(lowered), _unrealized(lowered)
    mutated = {
        target
        for name, buffer in lowering.name_to_buffer.items()
        for target in _mutated_names(buffer, BufferFact(name, None, _storage_of(buffer, name)))
    }
    # Several nodes ending in one buffer: it holds the first when later writes are buffers of their own
    # (a mutation of it), else the last (updates made while computing it).
    chosen = {name: (nodes[0] if name in mutated else nodes[-1]) for name, nodes in produced.items()}
    nodes = {node.name: node for node in gm.graph.nodes}
    buffers = {
        name: _buffer_fact(name, buffer, order, values, chosen.get(name), bool(lowered), unrealized, nodes)
        for name, buffer in lowering.name_to_buffer.items()
    }
    for name, buffer in lowering.name_to_buffer.items():
        # A lowering that copies, then updates in place (scatter_add: a clone, then a scatter kernel or an
        # ATen fallback that mutates it): the copy is reported as the node's result, but holds that value
        # only after the update.
        fact = buffers[name]
        for target in _mutated_names(buffer, fact):
            owner = buffers.get(target)
            if (
                owner is not None
                and owner.value_node is not None
                and owner.value_node in (fact.origins + ([fact.value_node] if fact.value_node else []))
            ):
                owner.value_node = None
                owner.unmapped_reason = STATE_BEFORE_IN_PLACE
            if owner is not None and owner.unmapped_reason == STATE_BEFORE_IN_PLACE:
                owner.completed_by.append(name)
    for name, fact in buffers.items():
        fact.accumulates = _accumulates(lowering.name_to_buffer[name])
        try:
            fact.size = _static(list(lowering.name_to_buffer[name].get_size()))
        except Exception:  # a multi-output buffer has no single size
            fact.size = None
    _fallback_facts(lowering.name_to_buffer, buffers, nodes)
    for name in getattr(lowering, "removed_buffers", ()):
        if name in buffers:
            buffers[name].removed = True
    for fact in buffers.values():
        if fact.part_of is not None:  # the storage's own value: its buffer's node, or the graph input itself
            owner = buffers.get(fact.storage)
            fact.part_of = owner.value_node if owner is not None else fact.storage
            if fact.part_of is None:
                fact.value_node, fact.unmapped_reason = None, f"mutates part of {fact.storage}, whose value is unknown"
    kind = "backward" if lowering.is_backward else "inference" if lowering.is_inference else "forward"
    return GraphInfo(
        getattr(module, "__file__", ""),
        kind,
        getattr(lowering, "graph_id", None),
        gm,
        list(lowering.graph_input_names),
        buffers,
        kernels,
        order,
    )


def _fallback_facts(lowered: dict[str, Any], buffers: dict[str, BufferFact], nodes: dict[str, Any]) -> None:
    """What each fallback call's buffers hold: the tensors it returns (`MultiOutput`), the arguments it writes
    (`MutationOutput`), and the copies lowering made of its inputs (a view realized for the op)."""
    import torch
    import torch.utils._pytree as pytree
    from torch._inductor import ir

    for name, buffer in lowered.items():
        fact = buffers[name]
        if isinstance(buffer, ir.MultiOutput) and buffer.inputs and hasattr(buffer.inputs[0], "get_name"):
            fact.made_by = buffer.inputs[0].get_name()
            fact.result_path = tuple(int(index) for _, index in buffer.indices)
        elif isinstance(buffer, ir.MutationOutput) and buffer.mutation_names:
            fact.made_by = buffer.mutating_node.get_name()
            target = buffer.mutation_names[0]
            owner = buffers.get(target)
            fact.storage = owner.storage if owner is not None else target
            op_node = _fx_node_of(buffer.mutating_node, nodes)
            # The op writes its argument, or a view of it (a custom op's mutable slice of a larger buffer): the
            # buffer then holds its base's state after the op.
            written = [_view_base(n) for n in written_nodes(op_node)] if op_node is not None else []
            mine = {n.name for n in written if n.name == target or (owner is not None and n.name in owner.origins)}
            if len(mine) == 1:
                fact.value_node, fact.unmapped_reason = f"{mine.pop()}{AFTER}{op_node.name}", None
            if owner is not None and owner.unmapped_reason == STATE_BEFORE_IN_PLACE:
                owner.completed_by.append(name)
    for name, buffer in lowered.items():
        if not isinstance(buffer, ir.FallbackKernel):
            continue
        op_node = _fx_node_of(buffer, nodes)
        if op_node is None:
            continue
        buffers[name].op_node = op_node.name
        fx_tensors = [
            n
            for n in pytree.tree_leaves((op_node.args, op_node.kwargs))
            if hasattr(n, "meta") and isinstance(n.meta.get("val"), torch.Tensor)
        ]
        inputs = list(getattr(buffer, "inputs", ()))
        if len(inputs) != len(fx_tensors):
            continue
        for given, fx_arg in zip(inputs, fx_tensors):
            copy = buffers.get(given.get_name()) if isinstance(given, ir.Buffer) else None
            value = fx_arg.meta["val"]
            if (
                copy is not None
                and copy.value_node is None
                and copy.unmapped_reason
                and copy.unmapped_reason.startswith("holds an intermediate made inside a lowering")
                and copy.size is not None
                and _dims(value.shape) == copy.size
                and given.get_dtype() == value.dtype
            ):
                copy.value_node, copy.unmapped_reason = fx_arg.name, None


def _view_base(node: Any) -> Any:
    """The node a chain of FX view ops (`slice`, `as_strided`, ...) starts from."""
    while (
        node.op == "call_function"
        and getattr(node.target, "is_view", False)
        and node.args
        and hasattr(node.args[0], "op")
    ):
        node = node.args[0]
    return node


def _fx_node_of(fallback: Any, nodes: dict[str, Any]) -> Any:
    """The post-grad FX node a fallback kernel calls its op for."""
    op = getattr(fallback, "op_overload", None)
    found = [nodes[o.name] for o in getattr(fallback, "origins", ()) if o.name in nodes and nodes[o.name].target is op]
    return found[0] if len(found) == 1 else None


def _accumulates(buffer: Any) -> bool:
    from torch._inductor import ir

    data = getattr(buffer, "data", None)
    return (
        isinstance(buffer, ir.ExternKernel)
        or isinstance(data, ir.Reduction)
        or (isinstance(data, ir.Scatter) and data.scatter_mode is not None)
    )


def _storage_of(buffer: Any, name: str) -> str:
    from torch._inductor.ir import MutationLayoutSHOULDREMOVE

    layout = getattr(buffer, "layout", None)
    return layout.get_buffer().get_name() if isinstance(layout, MutationLayoutSHOULDREMOVE) else name


def _mutated_names(buffer: Any, fact: BufferFact) -> list[str]:
    """Buffers this one writes in place, other than itself (mutation layouts and mutating fallbacks)."""
    names = [fact.storage] if fact.storage != fact.name and fact.view is None else []
    try:
        names += [n for n in buffer.get_mutation_names() if n != fact.name and n not in names]
    except Exception:
        pass
    return names


def _unrealized(lowered: list[tuple[str, Any]]) -> dict[str, type]:
    """FX node -> the IR class of its lowered result, for results never realized into a buffer of their own
    (inlined into consumers, or copied into one when a library call needed them as an input)."""
    from torch._inductor import ir

    found: dict[str, type] = {}
    for node_name, value in lowered:
        while isinstance(value, ir.MutableBox):
            value = value.data
        if isinstance(value, ir.ComputedBuffer) and getattr(value, "name", None) is None:
            value = value.data  # made but never registered: a buffer it was copied into holds its value
        if isinstance(value, ir.Loops):
            found[node_name] = type(value)
    return found


def _produced_by(lowered: list[tuple[str, Any]]) -> dict[str, list[tuple[str, bool]]]:
    """Buffer name -> the FX nodes (in lowering order) whose lowered result became that buffer, each
    with whether through a reshape.

    `GraphLowering.run_node` returns each node's IR value; once realized it is a
    named buffer, or a contiguous reshape of one. This is how a multi-output
    reduction's buffers (var_mean's mean) are told apart: each `getitem` lowers
    to its own buffer. Several nodes can end in one buffer (a zeros buffer that
    `slice_scatter`s then fill in place).
    """
    from torch._inductor import ir

    found: dict[str, list[tuple[str, bool]]] = {}
    for node_name, value in lowered:
        while isinstance(value, ir.MutableBox):
            value = value.data
        reshaped = False
        if isinstance(value, ir.ReinterpretView) and _is_plain_reshape(value):
            value, reshaped = value.data, True
            while isinstance(value, ir.MutableBox):
                value = value.data
        if isinstance(value, ir.Buffer) and not isinstance(value, ir.InputBuffer):
            try:
                found.setdefault(value.get_name(), []).append((node_name, reshaped))
            except Exception:  # an unnamed buffer
                continue
    return found


def _is_plain_reshape(view: Any) -> bool:
    """A view that reads its buffer's elements in storage order: contiguous, offset 0, same numel."""
    try:
        layout, inner = view.get_layout(), view.data.get_layout()
        size, stride, offset = _static(list(layout.size)), _static(list(layout.stride)), _static(layout.offset)
        inner_size, inner_stride = _static(list(inner.size)), _static(list(inner.stride))
    except Exception:
        return False
    if None in (size, stride, offset, inner_size, inner_stride) or offset != 0:
        return False
    from harness.layout import contiguous_stride

    numel = 1
    for dim in size:
        numel *= dim
    inner_numel = 1
    for dim in inner_size:
        inner_numel *= dim
    return (
        numel == inner_numel
        and _dense_strides(size, stride, contiguous_stride)
        and _dense_strides(inner_size, inner_stride, contiguous_stride)
    )


def _dense_strides(size: list[int], stride: list[int], contiguous_stride: Any) -> bool:
    return all(s == c for n, s, c in zip(size, stride, contiguous_stride(size)) if n != 1)


def _buffer_fact(
    name: str,
    buffer: Any,
    order: dict[str, int],
    values: dict[str, Any],
    produced_by: tuple[str, bool] | None,
    lowering_known: bool,
    unrealized: dict[str, type] | None = None,
    nodes: dict[str, Any] | None = None,
) -> BufferFact:
    """What one buffer holds. With the lowering's own record (`lowering_known`), a buffer is the value of
    the FX node whose lowered result it is; else of an origin whose unrealized result it copies (the same
    kind of loop: an elementwise value copied for a library call); else it is an intermediate of some
    lowering (the sum inside a `mean`) that no FX node has. Without the record, the last origin of the
    buffer's shape and dtype is taken."""
    from torch._inductor.ir import MutationLayoutSHOULDREMOVE, NonOwningLayout

    origins = sorted((n.name for n in getattr(buffer, "origins", ()) if n.name in order), key=order.get)
    layout = getattr(buffer, "layout", None)
    storage, view, partial, mutation = name, None, False, isinstance(layout, MutationLayoutSHOULDREMOVE)
    if mutation:
        real = layout.get_buffer()
        storage = real.get_name()
        try:
            partial = _static(list(buffer.get_size())) != _static(list(real.get_size()))
            target = layout.target.get_layout()
            part_view = _static((list(target.size), list(target.stride), target.offset)) if partial else None
        except Exception:
            partial, part_view = False, None
    elif isinstance(layout, NonOwningLayout):
        target = layout.view
        inner = target.get_layout()
        owner = target.unwrap_view() if hasattr(target, "unwrap_view") else None
        storage = owner.get_name() if owner is not None and hasattr(owner, "get_name") else name
        view = _static((list(inner.size), list(inner.stride), inner.offset))
    try:
        size, dtype = _static(list(buffer.get_size())), buffer.get_dtype()
    except Exception:  # MultiOutputLayout and friends have no single size
        return BufferFact(name, None, storage, origins, "holds several outputs (a multi-output kernel)", view)
    if size is None:  # a dynamic graph: sizes are expressions in the graph's size symbols, matched as such
        size = _dims(list(buffer.get_size()))
        if size is None:
            return BufferFact(name, None, storage, origins, "has a size that is no expression of its symbols", view)
    origin_node = getattr(buffer, "origin_node", None)
    candidates = origins or ([origin_node.name] if origin_node is not None and origin_node.name in order else [])
    if not mutation and lowering_known:
        if produced_by is None or produced_by[0] not in order:
            # A library call or a cat needs its input in a buffer: lowering it copies an unrealized input
            # value there. Taken only when exactly one input of the op being lowered fits.
            loop = type(getattr(buffer, "data", None))
            lowered_op = (
                origin_node if origin_node is not None else ((nodes or {}).get(origins[-1]) if origins else None)
            )
            inputs = lowered_op.all_input_nodes if lowered_op is not None else []
            copied = [
                n.name
                for n in inputs
                if (unrealized or {}).get(n.name) is loop
                and hasattr(values.get(n.name), "shape")
                and _dims(values[n.name].shape) == size
                and values[n.name].dtype == dtype
            ]
            if len(copied) == 1:
                return BufferFact(name, copied[0], storage, origins, None, view)
            made_in = f" ({candidates[-1]})" if candidates else ""
            return BufferFact(
                name, None, storage, origins, f"holds an intermediate made inside a lowering{made_in}", view
            )
        node, reshaped = produced_by  # the lowering said so: no guessing from origins
        value = values.get(node)
        if (
            hasattr(value, "shape")
            and value.dtype == dtype
            and (
                _dims(value.shape) == size
                or (reshaped and all(isinstance(d, int) for d in size) and value.numel() == _numel(size))
            )
        ):
            return BufferFact(name, node, storage, origins, None, view, reshaped=_dims(value.shape) != size)
        candidates = [node]
    for candidate in reversed(candidates):
        value = values.get(candidate)
        if hasattr(value, "shape") and _dims(value.shape) == size and value.dtype == dtype:
            if partial and part_view is None:
                return BufferFact(
                    name, None, storage, origins, f"mutates a part of {storage} at a symbolic place", view
                )
            return BufferFact(
                name,
                candidate,
                storage,
                origins,
                None,
                view,
                part_of=storage if partial else None,
                part_view=part_view if partial else None,
            )
    if mutation and not partial and nodes is not None:
        # An in-place op with several outputs (`_foreach_add_` of an optimizer step) leaves no node holding
        # the new value: the probe keeps the mutated input's state right after that op ("<input>@<op>").
        for candidate in reversed(candidates):
            node = nodes.get(candidate)
            if node is not None and storage in {n.name for n in written_nodes(node)}:
                return BufferFact(name, f"{storage}{AFTER}{candidate}", storage, origins, None, view)
    multi = [c for c in candidates if isinstance(values.get(c), (tuple, list))]
    if multi:
        reason = f"holds an intermediate of a multi-output op that no FX node has ({multi[-1]})"
    elif candidates:
        reason = f"no FX node among its origins has its shape and dtype ({', '.join(candidates)}: {size})"
    else:
        reason = "has no FX origin"
    return BufferFact(name, None, storage, origins, reason, view)


# A value node "X@N": the value of node (or graph input) X right after node N ran (N updated X in place).
AFTER = "@"


def written_nodes(node: Any) -> list[Any]:
    """The argument nodes an FX op writes in place, from its schema (`Tensor(a!)`)."""
    import torch.fx

    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.is_mutable:
        return []
    written = []
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, torch.fx.Node):
                written.append(item)
    return written


def is_functional(gm: Any) -> bool:
    """Whether no node of the graph may write a tensor in place: every op has a schema, and none mutates.
    A node's value then depends only on the nodes it reads, through any number of steps."""
    import operator

    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node.op == "call_function" and node.target is operator.getitem:
            continue
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None or schema.is_mutable:
            return False
    return True


def ancestors(gm: Any, names: Iterable[str]) -> set[str]:
    """The nodes whose values the named nodes are computed from, the named nodes included."""
    by_name = {node.name: node for node in gm.graph.nodes}
    found: set[str] = set()
    pending = [by_name[name] for name in names if name in by_name]
    while pending:
        node = pending.pop()
        if node.name not in found:
            found.add(node.name)
            pending.extend(node.all_input_nodes)
    return found


def written_inputs(gm: Any) -> set[int]:
    """Positions of the graph inputs whose storage the graph may write, through any view of them.

    Read off the ops' schemas: an output annotated `Tensor(a)` shares its
    argument's storage, `Tensor(a!)` is written. An op without a schema (a
    higher-order op, a user Triton kernel) is taken to write every tensor it
    is given: a copy too many costs memory, a missed write a false blame.
    """
    import operator

    import torch.fx

    parent: dict[Any, Any] = {}

    def root(node: Any) -> Any:
        while parent.get(node, node) is not node:
            node = parent[node]
        return node

    written: set[Any] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:  # an item of a list of views shares their storage
            parent[root(node)] = root(node.args[0])
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            written.update(root(a) for a in node.all_input_nodes)
            continue
        returned = {
            alias for ret in schema.returns if ret.alias_info is not None for alias in ret.alias_info.before_set
        }
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None:
                continue
            value = node.args[position] if position < len(node.args) else node.kwargs.get(argument.name)
            items = [
                v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.fx.Node)
            ]
            for item in items:
                if argument.alias_info.is_write:
                    written.add(root(item))
                if returned & set(argument.alias_info.before_set):
                    parent[root(node)] = root(item)
    written = {root(n) for n in written}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return {i for i, n in enumerate(placeholders) if root(n) in written}


def _numel(size: list[int]) -> int:
    numel = 1
    for dim in size:
        numel *= dim
    return numel


def _dims(sizes: Any) -> list[Any] | None:
    """Sizes as ints where static and sympy expressions where symbolic (an FX value's SymInts and a buffer's
    sizes share the graph's ShapeEnv symbols), so that shapes of a dynamic graph compare as expressions."""
    import sympy
    import torch

    found = []
    for size in sizes:
        expr = size.node.expr if isinstance(size, torch.SymInt) else size
        if isinstance(expr, int) or isinstance(expr, sympy.Integer):
            found.append(int(expr))
        elif isinstance(expr, sympy.Expr):
            found.append(sympy.expand(expr))
        else:
            return None
    return found


def _static(value: Any) -> Any:
    """Nested sizes as ints, or None when any is symbolic."""
    try:
        if isinstance(value, (list, tuple)):
            items = [_static(v) for v in value]
            return None if any(i is None for i in items) else type(value)(items)
        return int(value)
    except (TypeError, ValueError):
        return None


GraphObserver = Callable[[GraphInfo, list, Callable[[list], Any]], Any]


@dataclass
class Capture:
    """Graphs called inside a `capture_graphs` block: all of them, and those without facts."""

    called: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@contextlib.contextmanager
def capture_graphs(observer: GraphObserver | None = None, cold: bool = False) -> Iterator[Capture]:
    """Route calls of compiled graphs with known facts to `observer`; record which graphs had none.

    `observer(info, args, call)` must return `call(args)`. Caches stay on: a
    graph whose lowering a cache hit skipped is found through its sidecar.
    A graph without facts (a cache entry made without this hook) is recorded in
    `missing`; `cold=True` (caches off) lowers every graph again.
    """
    from harness.inductor_compat.dynamo import compile_caches_off

    install_lowering_hook()
    capture = Capture()

    def observe(path: str, args: list, call: Callable[[list], Any]) -> Any:
        if path not in capture.called:
            capture.called.append(path)
        info = graph_info(path)
        if info is None:
            if path not in capture.missing:
                capture.missing.append(path)
            return call(args)
        return call(args) if observer is None else observer(info, args, call)

    previous = _state.graph_observer
    _state.graph_observer = observe
    try:
        if cold:
            with compile_caches_off():
                yield capture
        else:
            yield capture
    finally:
        _state.graph_observer = previous


def program_accumulates(paths: list[str]) -> bool:
    """Whether any of these compiled graphs sums many terms; from lowering facts, else from the wrapper."""
    if not paths:
        return True
    for path in paths:
        info = graph_info(path)
        if info.accumulates if info is not None else MODULE_ACCUMULATES.get(path, True):
            return True
    return False


def adopt_facts(cached: Capture, lowered: Capture) -> int:
    """Give cache-hit modules without facts the facts of the same graphs lowered again; returns how many.

    A cache entry made by another process can differ from a fresh lowering in
    comments only (its source, hence its path, differs). Graphs are paired in
    call order and accepted only when their modules define the same kernels.
    """
    adopted = 0
    for warm, cold in zip(cached.called, lowered.called):
        info = _GRAPHS.get(cold) if warm in cached.missing else None
        if info is None or MODULE_KERNELS.get(warm) != MODULE_KERNELS.get(cold):
            continue
        twin = GraphInfo(
            warm, info.kind, info.graph_id, info.gm, info.input_names, info.buffers, info.kernels, info.node_order
        )
        _GRAPHS[warm] = twin
        _save_sidecar(twin)
        adopted += 1
    return adopted


class _Hooks:
    installed = False


def install_lowering_hook() -> None:
    """Record facts of every graph lowered from now on, and wrap every wrapper module loaded (cheap; idempotent).

    Launch proxies pass straight through while no handler is active; they must
    be in place before a module loads for any later run of it to be observed.
    """
    _install()
    with _install_lock:
        if _Hooks.installed:
            return
        import torch._inductor.debug as inductor_debug
        from torch._inductor.graph import GraphLowering

        original_compile = GraphLowering.compile_to_module

        def compile_to_module(self: Any, *args: Any, **kwargs: Any) -> Any:
            outer = getattr(_lowering_kernels, "kernels", None)
            _lowering_kernels.kernels = kernels = []
            try:
                module = original_compile(self, *args, **kwargs)
            finally:
                _lowering_kernels.kernels = outer
            try:
                info = _graph_info(self, module, kernels, getattr(self, "_harness_lowered", []))
            except Exception:  # facts are for the probe; a failure here must never fail a compile
                return module
            _GRAPHS[info.module_path] = info
            _save_sidecar(info)
            return module

        GraphLowering.compile_to_module = compile_to_module
        original_run_node = GraphLowering.run_node

        def run_node(self: Any, node: Any) -> Any:
            result = original_run_node(self, node)
            lowered = self.__dict__.setdefault("_harness_lowered", [])
            lowered.append((node.name, result))
            return result

        GraphLowering.run_node = run_node
        tracing = getattr(inductor_debug, "set_kernel_post_grad_provenance_tracing", None)
        if tracing is not None:
            _patch_everywhere(tracing, _provenance_hook(tracing))
        _Hooks.installed = True


def _provenance_hook(original: Callable[..., Any]) -> Callable[..., Any]:
    def record(node_schedule: Any, kernel_name: Any, *args: Any, **kwargs: Any) -> Any:
        kernels = getattr(_lowering_kernels, "kernels", None)
        if kernels is not None and kernel_name:
            try:
                kernels.append((str(kernel_name), _scheduled_buffers(node_schedule)))
            except Exception:
                pass
        return original(node_schedule, kernel_name, *args, **kwargs)

    return record


def _scheduled_buffers(node_schedule: Any) -> list[str]:
    if not isinstance(node_schedule, (list, tuple)):  # an extern or fallback kernel: one IR node
        return [node_schedule.get_name()]
    names: list[str] = []
    for scheduled in node_schedule:
        for node in scheduled.get_nodes() if hasattr(scheduled, "get_nodes") else ():
            ir_node = getattr(node, "node", None)
            if ir_node is not None and hasattr(ir_node, "get_name") and ir_node.get_name() not in names:
                names.append(ir_node.get_name())
    return names


def _patch_everywhere(original: Callable[..., Any], replacement: Callable[..., Any]) -> None:
    """Replace a function in its module and in every loaded module that imported it by name."""
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "") or ""
        if not (name.startswith("torch._inductor") or name.startswith("torch_npu")):
            continue
        for attribute, value in list(vars(module).items()):
            if value is original:
                setattr(module, attribute, replacement)


def _sidecar_path(module_path: str) -> str:
    return module_path + SIDECAR_SUFFIX


def _save_sidecar(info: GraphInfo) -> None:
    if not info.module_path:
        return
    try:
        from torch.fx._graph_pickler import GraphPickler, Options

        options = Options(ops_filter=None, node_metadata_key_filter=lambda key: False)
        graph = GraphPickler.dumps(info.gm, options)
        payload = pickle.dumps(
            {
                "version": _sidecar_version(),
                "graph": graph,
                "info": {
                    "kind": info.kind,
                    "input_names": info.input_names,
                    "buffers": info.buffers,
                    "kernels": info.kernels,
                    "node_order": info.node_order,
                },
            }
        )
        temporary = f"{_sidecar_path(info.module_path)}.{os.getpid()}.tmp"
        with open(temporary, "wb") as handle:
            handle.write(payload)
        os.replace(temporary, _sidecar_path(info.module_path))
    except Exception:  # no sidecar: a warm cache then needs one cold probe run
        pass


def _sidecar_version() -> str:
    """The format number and a digest of this module's source: facts change when the code deriving them does."""
    import hashlib

    with open(__file__, "rb") as handle:
        return f"{SIDECAR_VERSION}:{hashlib.sha1(handle.read()).hexdigest()[:12]}"


def _load_sidecar(module_path: str) -> GraphInfo | None:
    try:
        with open(_sidecar_path(module_path), "rb") as handle:
            payload = pickle.load(handle)
        if payload.get("version") != _sidecar_version():
            return None
        import torch.fx
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx._graph_pickler import GraphPickler

        gm = GraphPickler.loads(payload["graph"], FakeTensorMode())
        for module in gm.modules():  # pickled without code: subgraphs (higher-order ops) need theirs again
            if isinstance(module, torch.fx.GraphModule):
                module.recompile()
        facts = payload["info"]
        return GraphInfo(
            module_path,
            facts["kind"],
            None,
            gm,
            facts["input_names"],
            facts["buffers"],
            facts["kernels"],
            facts["node_order"],
        )
    except Exception:
        return None


def float64_copy(gm: Any) -> Any:
    """A copy of a post-grad graph computing in float64 wherever it names a floating dtype.

    torch's accuracy minifier's own rewrite (`torch._dynamo.debug_utils.cast_dtype_args_to_fp64`:
    `convert_element_type` and `dtype=` arguments), applied to a copy so the
    original graph is untouched.
    """
    import torch.fx
    from torch._dynamo.debug_utils import cast_dtype_args_to_fp64

    graph = torch.fx.Graph()
    output = graph.graph_copy(gm.graph, {})
    graph.output(output)
    return cast_dtype_args_to_fp64(torch.fx.GraphModule(gm, graph))


# Float dtypes a value is rounded to when a program casts to them on purpose, and those it is rounded from.
LOW_PRECISION = ("float16", "bfloat16")
WIDER_FLOATS = ("float32", "float64")


@dataclass(frozen=True)
class LowPrecisionCast:
    """An explicit cast of a post-grad graph from a wider float to float16 or bfloat16 (`x.half()`,
    `y.to(torch.bfloat16)`: `prims.convert_element_type` or `aten._to_copy`), and the kernel that computes it."""

    node: str
    source: str  # "float32"
    target: str  # "bfloat16"
    kernel: str | None  # the kernel whose buffers hold it (provenance), None where codegen named none

    def text(self) -> str:
        return f"{self.node} ({self.source} -> {self.target})"


def erases_low_precision_cast(erased: Iterable[str]) -> bool:
    """Whether the nodes a graph pass erased (`GraphPass.erased`: each node's op, target and arguments, as
    `passes._node_facts` writes them) hold a cast to float16/bfloat16 (its dtype is an argument)."""
    casts = ("prims.convert_element_type.", "aten._to_copy.")
    return any(
        any(target in facts for target in casts) and any(f"torch.{dtype}" in facts for dtype in LOW_PRECISION)
        for facts in erased
    )


def low_precision_casts(info: GraphInfo) -> list[LowPrecisionCast] | None:
    """The graph's explicit casts to float16/bfloat16 from a wider float, in graph order; None when its nodes carry
    no values to read dtypes from (a graph loaded from the facts kept beside a cache entry)."""
    import torch

    targets = {torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default}
    kernel_of = {
        o: name for name, buffers in info.kernels for b in buffers if b in info.buffers for o in info.buffers[b].origins
    }
    found = []
    for node in info.gm.graph.nodes:
        if node.op != "call_function" or node.target not in targets or not node.args:
            continue
        if "val" not in node.meta:
            return None
        value, source = node.meta.get("val"), getattr(node.args[0], "meta", {}).get("val")
        if not isinstance(value, torch.Tensor) or not isinstance(source, torch.Tensor):
            continue
        target_dtype, source_dtype = str(value.dtype).removeprefix("torch."), str(source.dtype).removeprefix("torch.")
        if target_dtype in LOW_PRECISION and source_dtype in WIDER_FLOATS:
            found.append(LowPrecisionCast(node.name, source_dtype, target_dtype, kernel_of.get(node.name)))
    return found
