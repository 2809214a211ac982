"""What extraction keeps of one launch: the kernel's arguments on eager values, and its graph's eager values.

Captured during one more probe run of the compiled program (no recompilation),
just before the named launch runs (`KernelProbe.capture`):

- every argument as launched: size, stride, storage offset, the whole
  storage, and arguments sharing a storage still sharing one copy; read
  arguments hold the eager values of what they should hold (as isolation
  replays them), written ones their state before the launch (eager's where
  it has a twin);
- for each written argument, the node of the post-grad graph it holds after
  the launch, and whether it is that node's whole value (then `repro.py`
  recomputes it from the subgraph; otherwise its eager value is saved);
- the eager values, in one pass of their own over the graph, of every value
  the kernel's subgraph, and each wider ring of it, reads from outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from harness.judge.results import same_values
from harness.inductor_compat import GraphInfo, Launch
from harness.probe.kernel_rerun import fill_in
from harness.extraction import subgraph as S

# How many rings of neighbouring kernels a graph-level repro may widen to.
MAX_WIDENING = 3


@dataclass
class WrittenArgument:
    key: int | str
    name: str  # the kernel's parameter name
    node: str | None  # the post-grad node it holds after the launch
    # Whether it holds that node's whole value (reshaped to the argument): recomputed from the subgraph.
    whole_value: bool
    expected: torch.Tensor | None  # its eager value, laid out as the argument (saved when not whole_value)


@dataclass
class CapturedLaunch:
    graph: str  # "backward 0"
    graph_kind: str
    launch_index: int
    kernel_name: str
    kernel_kind: str  # cpp, triton, extern
    kernel_source: str
    module_path: str
    # Whether the kernel sums many terms (the verdict then allows summation noise, as the probe's did).
    accumulates: bool
    args: list[Any]
    kwargs: dict[str, Any]
    written: list[WrittenArgument]
    gm: torch.fx.GraphModule
    # The kernel's nodes, and each widening's, innermost first (rings[0] is the kernel's own).
    rings: list[list[str]]
    # Eager values of every node a ring reads from outside, on the host.
    values: dict[str, torch.Tensor]
    # The node held by the buffer localization found diverging (the answer's `buffer`), if it is mapped.
    diverging: str | None = None
    # Whether rings[0] is the kernel's own nodes. Where codegen names none (torch_npu's schedulings trace no
    # provenance, and an rsplit partial kernel writes a workspace no node holds), the one ring is the whole graph:
    # no kernel-level repro, and the graph-level forms are the whole program's.
    own_nodes_known: bool = True


def capture_launch(launch: Launch, call: Any, label: str, diverging_buffer: str | None = None) -> CapturedLaunch:
    """Capture `launch` of a probed graph call (`call`: the probe's `_GraphCall`) before it runs;
    `diverging_buffer` is the written buffer localization named."""
    info: GraphInfo = call.info
    regions, values = call.regions, call.values
    args, kwargs = _arguments_on_eager_values(launch, regions, values)
    written = []
    for key, tensor in launch.written_args():
        region = regions.written(launch, tensor)
        expected = region.eager(values) if region.mapped else None
        node = region.node if region.mapped and region.before is None else None
        whole = False
        if node is not None and expected is not None:
            value = values.value(node)
            whole = (
                value is not None
                and value.numel() == expected.numel()
                and same_values(value.reshape(expected.shape), expected)
            )
        name = regions.local_of(launch, tensor) or launch.param_name(key)
        host = None if expected is None else expected.detach().to("cpu", copy=True)
        written.append(WrittenArgument(key, name, node, whole, host))
    rings = _rings(info, launch.kernel.name, [w.node for w in written if w.node])
    own_nodes_known = bool(rings)
    if not rings:
        whole = S.kernel_node_names(info.gm, [node.name for node in info.gm.graph.nodes])
        rings = [whole] if whole else []
    needed = {name for ring in rings for name in S.cut(info.gm, ring).inputs} if rings else set()
    return CapturedLaunch(
        graph=label,
        graph_kind=info.kind,
        launch_index=launch.index,
        kernel_name=launch.kernel.name,
        kernel_kind=launch.kernel.kind,
        kernel_source=launch.kernel.source,
        module_path=launch.kernel.module_path,
        accumulates=launch.kernel.accumulates,
        args=args,
        kwargs=kwargs,
        written=written,
        gm=info.gm,
        rings=rings,
        values=_eager_values(info, values, needed),
        diverging=next((w.node.rpartition("@")[2] for w in written if w.name == diverging_buffer and w.node), None),
        own_nodes_known=own_nodes_known,
    )


def _arguments_on_eager_values(launch: Launch, regions: Any, values: Any) -> tuple[list[Any], dict[str, Any]]:
    """The launch's arguments copied to the host, storages shared as in the launch, read arguments holding
    eager's values of what they should hold."""
    copies: dict[int, torch.UntypedStorage] = {}

    def copied(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in copies:
            copies[key] = storage.cpu() if storage.device.type != "cpu" else storage.clone()
            if copies[key].data_ptr() == key:  # `.cpu()` of a host storage is the storage itself
                copies[key] = copies[key].clone()
        fresh = torch.empty(0, dtype=tensor.dtype)
        return fresh.set_(copies[key], tensor.storage_offset(), tensor.shape, tensor.stride())

    args = [copied(a) if isinstance(a, torch.Tensor) else a for a in launch.args]
    kwargs = {k: copied(v) if isinstance(v, torch.Tensor) else v for k, v in launch.kwargs.items()}
    for key, tensor in launch.tensor_args():
        prior = regions.read(launch, tensor)
        value = prior.eager(values) if prior.mapped else None
        target = kwargs[key] if isinstance(key, str) else args[key]
        if value is not None and value.shape == target.shape:
            fill_in(target, value)  # an overlapping view is left as it was
    return args, kwargs


def _rings(info: GraphInfo, kernel: str, written_nodes: list[str]) -> list[list[str]]:
    """The kernel's own nodes, then each ring of neighbouring kernels' nodes around them."""
    kernel_of: dict[str, int] = {}
    members: dict[int, list[str]] = {}
    for index, (name, buffers) in enumerate(info.kernels):
        origins = [o for b in buffers if b in info.buffers for o in info.buffers[b].origins]
        members[index] = origins
        for origin in origins:
            kernel_of.setdefault(origin, index)
    computed = info.computed_by(kernel) or info.extern_buffers(kernel)
    origins = [o for b in computed if b in info.buffers for o in info.buffers[b].origins]
    own = S.kernel_node_names(info.gm, origins + [n.rpartition("@")[2] for n in written_nodes])
    if not own:
        return []
    rings = [own]
    for _ in range(MAX_WIDENING):
        wider = S.widen(info.gm, rings[-1], kernel_of, members)
        if len(wider) == len(rings[-1]):
            break
        rings.append(wider)
    return rings


def _eager_values(info: GraphInfo, values: Any, names: set[str]) -> dict[str, torch.Tensor]:
    """Eager values of `names` on the host: graph inputs as they were on entry, other nodes from one eager pass
    of their own over the post-grad graph."""
    found: dict[str, torch.Tensor] = {}
    computed = {n for n in names if n not in info.input_names}
    passed = values.snapshot(computed) if computed else {}
    for name in names:
        value = values.input(name) if name in info.input_names else passed.get(name)
        if isinstance(value, torch.Tensor):
            found[name] = _host_copy(value)
    return found


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor on the host with its size, stride, offset and whole storage."""
    from harness.layout import clone_exact

    return clone_exact(tensor.detach(), device="cpu")
