"""What lowering knew about each compiled graph (see the package docstring)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .launches import _install, _install_lock, _state

@dataclass
class GraphInfo:
    """What lowering knew about one compiled graph, kept for bisection."""

    module_path: str
    kind: str  # "forward", "backward" or "inference"
    graph_id: Any
    gm: Any  # the post-grad torch.fx.GraphModule
    input_names: list[str]
    # Buffer (or mutated graph input) name -> the FX node whose value it holds.
    buffer_node: dict[str, str]
    # Buffer name -> every FX node fused into the kernels that compute it.
    buffer_origins: dict[str, list[str]]


_GRAPHS: dict[str, GraphInfo] = {}


def _graph_info(lowering: Any, module: Any) -> GraphInfo:
    gm = lowering.orig_gm
    order = {node.name: i for i, node in enumerate(gm.graph.nodes)}
    buffer_node, buffer_origins = {}, {}
    for name, buffer in lowering.name_to_buffer.items():
        origins = sorted((n.name for n in getattr(buffer, "origins", ()) if n.name in order), key=order.get)
        origin = getattr(buffer, "origin_node", None)
        if origin is not None and origin.name in order:
            buffer_node[name] = origin.name
        elif len(origins) == 1:
            buffer_node[name] = origins[0]
        buffer_origins[name] = origins
    # A mutated graph input holds, after the graph, the source of the `copy_` into it.
    for node in gm.graph.nodes:
        if node.op == "call_function" and "copy_" in str(node.target) and node.args[0].op == "placeholder":
            if hasattr(node.args[1], "name"):
                buffer_node[node.args[0].name] = node.args[1].name
                buffer_origins[node.args[0].name] = [node.args[1].name]
    kind = "backward" if lowering.is_backward else "inference" if lowering.is_inference else "forward"
    return GraphInfo(getattr(module, "__file__", ""), kind, getattr(lowering, "graph_id", None), gm,
                     list(lowering.graph_input_names), buffer_node, buffer_origins)


GraphObserver = Callable[[GraphInfo, list, Callable[[list], Any]], Any]


@contextlib.contextmanager
def capture_graphs(observer: GraphObserver) -> Iterator[None]:
    """Record lowering facts for graphs compiled inside this block, and route their calls to `observer`.

    `observer(info, args, call)` must return `call(args)`. Inductor's FX graph
    and AOT autograd caches are off inside, so every graph is lowered here.
    """
    import torch._functorch.config as functorch_config
    from torch._inductor import config as inductor_config

    _install()
    _install_lowering_hook()

    def observe(path: str, args: list, call: Callable[[list], Any]) -> Any:
        info = _GRAPHS.get(path)
        return call(args) if info is None else observer(info, args, call)

    _capture.active, _state.graph_observer = True, observe
    try:
        with inductor_config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            yield
    finally:
        _capture.active, _state.graph_observer = False, None


class _Capture:
    active = False
    installed = False


_capture = _Capture()


def _install_lowering_hook() -> None:
    with _install_lock:
        if _capture.installed:
            return
        from torch._inductor.graph import GraphLowering

        original_compile = GraphLowering.compile_to_module

        def compile_to_module(self: Any, *args: Any, **kwargs: Any) -> Any:
            module = original_compile(self, *args, **kwargs)
            if _capture.active:
                _GRAPHS[getattr(module, "__file__", "")] = _graph_info(self, module)
            return module

        GraphLowering.compile_to_module = compile_to_module
        _capture.installed = True


