"""Every use of Inductor internals, in one place.

Supported: torch 2.6 to 2.13 (checked: 2.13 on CPU, 2.11 on CUDA with Triton 3.6).
What is relied on, and why there is no public API for it:

- `PyCodeCache.load_by_key_path(key, path, ...)` loads each compiled wrapper
  module (fresh compiles and cache hits alike). Its module-level globals hold
  the generated kernels the wrapper's `call()` launches by name: C++ kernels as
  plain callables (`cpp_fused_*(*tensors)`), Triton kernels as
  `CachingAutotuner` objects (`triton_*.run(*args, stream=...)`; the NPU's
  autotuners subclass it). Replacing those globals with proxies observes every
  launch of the program the user runs without changing what was compiled.
- Kernel parameters follow Inductor's naming (`in_ptr*` read, `out_ptr*`
  written, `in_out_ptr*` both); Triton also lists `mutated_arg_names` in
  `inductor_meta` (C++ kernels have no such list). C++ kernels have no metadata object: their parameter names
  come from the `extern "C" void kernel(...)` line of their source, the one
  piece of generated text read here.
"""

from __future__ import annotations

import contextlib
import re
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

ROLE_IN, ROLE_OUT, ROLE_INOUT, ROLE_SCALAR = "in", "out", "inout", "scalar"


@dataclass
class KernelInfo:
    name: str
    kind: str  # "cpp" or "triton"
    arg_names: list[str]
    mutated: frozenset[str] = frozenset()
    source: str = ""
    module_path: str = ""

    def role(self, position: int) -> str:
        if position >= len(self.arg_names):
            return ROLE_SCALAR
        name = self.arg_names[position]
        if name.startswith("in_out_ptr") or name in self.mutated:
            return ROLE_INOUT
        if name.startswith("out_ptr"):
            return ROLE_OUT
        if name.startswith("in_ptr"):
            return ROLE_IN
        return ROLE_SCALAR

    def arg_name(self, position: int) -> str:
        return self.arg_names[position] if position < len(self.arg_names) else f"arg{position}"


@dataclass
class Launch:
    """One kernel launch, handed to the active handler, which must call `run`."""

    kernel: KernelInfo
    index: int
    args: list[Any]
    kwargs: dict[str, Any]
    invoke: Callable[..., Any] = field(repr=False)

    def run(self, args: list[Any] | None = None) -> Any:
        return self.invoke(*(self.args if args is None else args), **self.kwargs)


LaunchHandler = Callable[[Launch], Any]


class _State(threading.local):
    handler: LaunchHandler | None = None
    launches: int = 0


_state = _State()
_install_lock = threading.Lock()
_installed_original: Any = None


@contextlib.contextmanager
def intercept_launches(handler: LaunchHandler) -> Iterator[None]:
    """Route every generated-kernel launch of programs run inside this block through `handler`.

    Launch indices count from 0 at the block's start, over every compiled graph
    (forward, backward, pieces between graph breaks) in launch order.
    """
    if _state.handler is not None:
        raise RuntimeError("kernel launch interception does not nest")
    _install()
    _state.handler, _state.launches = handler, 0
    try:
        yield
    finally:
        _state.handler = None


def _install() -> None:
    global _installed_original
    with _install_lock:
        if _installed_original is not None:
            return
        from torch._inductor.codecache import PyCodeCache

        original = PyCodeCache.load_by_key_path.__func__

        def load_by_key_path(cls: Any, *args: Any, **kwargs: Any) -> Any:
            module = original(cls, *args, **kwargs)
            _wrap_module(module)
            return module

        PyCodeCache.load_by_key_path = classmethod(load_by_key_path)
        _installed_original = original


def _wrap_module(module: Any) -> None:
    """Replace each kernel global with a proxy; idempotent, pass-through when no handler is active."""
    if getattr(module, "__harness_wrapped__", False):
        return
    source = _module_source(module)
    cpp_params = _cpp_kernel_params(source)
    for name, value in list(vars(module).items()):
        info = _kernel_info(name, value, cpp_params, getattr(module, "__file__", ""))
        if info is not None:
            setattr(module, name, _TritonProxy(value, info) if info.kind == "triton" else _CppProxy(value, info))
    module.__harness_wrapped__ = True


def _kernel_info(name: str, value: Any, cpp_params: dict[str, tuple[list[str], str]], path: str) -> KernelInfo | None:
    if name in cpp_params and callable(value):
        params, source = cpp_params[name]
        # C++ kernels carry no mutation metadata, and a mutated graph input is
        # often passed only as an `out_ptr` (a scatter writes part of it): every
        # `out_ptr` counts as in/out. For a fully written output that changes nothing.
        mutated = frozenset(p for p in params if p.startswith("out_ptr"))
        return KernelInfo(name, "cpp", params, mutated, source, path)
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # no Triton in this torch build
        return None
    if isinstance(value, CachingAutotuner):
        signature = value.triton_meta.get("signature", {})
        names = [n for n in value.fn.arg_names if signature.get(n) != "constexpr"]
        mutated = frozenset(value.inductor_meta.get("mutated_arg_names", ()))
        return KernelInfo(name, "triton", names, mutated, getattr(value.fn, "src", ""), path)
    return None


# `name = async_compile.cpp_pybinding([...], r'''<source>''')`; the source's
# `extern "C" ... kernel(const int64_t* in_ptr0, int64_t* out_ptr0)` names the parameters.
_CPP_KERNEL = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\(\[.*?\], r'''(.*?)'''\)", re.S | re.M)
_CPP_SIGNATURE = re.compile(r'extern "C"[^(]*\bkernel\((.*?)\)', re.S)


def _cpp_kernel_params(source: str) -> dict[str, tuple[list[str], str]]:
    found = {}
    for match in _CPP_KERNEL.finditer(source):
        name, kernel_source = match.group(1), match.group(2)
        signature = _CPP_SIGNATURE.search(kernel_source)
        params = [p.strip().split()[-1].lstrip("*&") for p in signature.group(1).split(",")] if signature else []
        found[name] = (params, kernel_source.strip())
    return found


def _module_source(module: Any) -> str:
    path = getattr(module, "__file__", None)
    if not path:
        return ""
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def _dispatch(info: KernelInfo, invoke: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    handler = _state.handler
    if handler is None:
        return invoke(*args, **kwargs)
    launch = Launch(info, _state.launches, list(args), kwargs, invoke)
    _state.launches += 1
    return handler(launch)


class _CppProxy:
    def __init__(self, kernel: Callable[..., Any], info: KernelInfo):
        self.kernel, self.info = kernel, info

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _dispatch(self.info, self.kernel, args, kwargs)


class _TritonProxy:
    def __init__(self, kernel: Any, info: KernelInfo):
        self.kernel, self.info = kernel, info

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return _dispatch(self.info, self.kernel.run, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)
