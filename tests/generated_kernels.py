"""Kernels exactly as this torch's Inductor writes them: C++ compiled here, Triton generated without Triton or a GPU.

Inductor's Triton codegen also serves CPUs (`config.cpu_backend = "triton"`).
Code generation needs Triton only for a backend hash that goes into
`inductor_meta`; with that one function stubbed, the wrapper module is
written in full and only its load fails (`import triton`). Its
`async_compile.triton(...)` calls hold the kernels: the same `TritonKernel`
codegen (loop headers, accumulators, index decomposition) as for CUDA, with
scheduling decided for a 2-"SM" CPU device (so splits and persistence may
differ from a GPU's choices). For testing source transformations only.
"""

from __future__ import annotations

import ast
import contextlib
from typing import Any, Callable
from unittest import mock

import torch


def generated_triton_kernels(fn: Callable[..., Any], *args: Any, dynamic: bool = False) -> dict[str, str]:
    """Kernel name -> the source Inductor passes to `async_compile.triton` for `fn(*args)`."""
    import torch._inductor.config as inductor_config
    import torch.utils._triton as torch_triton
    from torch._inductor.codecache import PyCodeCache

    written: list[str] = []
    original_write = PyCodeCache.write.__func__

    def write(cls: Any, source_code: str, extra: str = "") -> Any:
        written.append(source_code)
        return original_write(cls, source_code, extra)

    torch._dynamo.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch_triton, "triton_hash_with_backend", lambda: "no-triton"))
        stack.enter_context(mock.patch.object(PyCodeCache, "write", classmethod(write)))
        stack.enter_context(inductor_config.patch(cpu_backend="triton", compile_threads=1, fx_graph_cache=False))
        try:
            torch.compile(fn, dynamic=dynamic)(*args)
        except Exception as exc:  # the load of the wrapper module: `import triton`
            if "triton" not in str(exc):
                raise
    torch._dynamo.reset()
    return _compile_calls(written, "triton", source_position=1)


def generated_cpp_kernels(fn: Callable[..., Any], *args: Any) -> dict[str, str]:
    """Kernel name -> the C++ source Inductor passes to `async_compile.cpp_pybinding` for `fn(*args)` on CPU."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn), *args)
    torch._dynamo.reset()
    return _compile_calls(sources, "cpp_pybinding", source_position=1)


def _compile_calls(wrappers: list[str], method: str, source_position: int) -> dict[str, str]:
    kernels = {}
    for wrapper in wrappers:
        for node in ast.parse(wrapper).body:
            call = node.value if isinstance(node, ast.Assign) else None
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == method
                and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "async_compile"
            ):
                kernels[node.targets[0].id] = ast.literal_eval(call.args[source_position])
    return kernels
