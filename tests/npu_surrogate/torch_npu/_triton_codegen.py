"""The surrogate's Triton mode (`NPU_SURROGATE_CODEGEN=triton`): Inductor's Triton codegen for device "npu", as
torch_npu registers it, its kernels run by triton-ascend's interpreter (`TRITON_INTERPRET=1`) on host memory.

On an NPU, Inductor writes Triton kernels that triton-ascend compiles, launched through autotuner and launcher
classes that subclass Inductor's. Here the same kernel text (Inductor's `TritonScheduling` and Python wrapper)
runs through Triton's interpreter, so the harness's Triton side (launch interception, kernel source, the
triton-ascend bug-class rewriters, extraction's kernel-level repro) runs on a machine with no GPU.

Needs triton-ascend (3.2.0: `pip install --no-deps triton-ascend pybind11 'numpy<2.3'`), never beside upstream
`triton` (both own `triton/`). What the interpreter lacks, shimmed here (each one found running it):

1. `torch.utils._triton.triton_hash_with_backend` asks the active driver: with no device there is none
   ("0 active drivers"); the interpreter needs no backend hash.
2. `InterpreterBuilder.get_int1_ty` / `get_void_ty` are missing (upstream triton #6200).
3. triton-ascend's `libdevice` functions are stubs its compiler maps; the interpreter patches `tl.math` only,
   so Inductor's `libdevice.exp(x)` would be None: `libdevice` names that `tl.math` has go there, those it lacks
   (`nearbyint`, `tanh`, `pow`, ...) to the numpy ufunc that computes them (`NUMPY_LIBDEVICE`), and any other
   raises `InterpreterLimit` (the run is a skip that names it: `_limits.py`).
4. `triton_helpers.set_driver_to_gpu` asks for a GPU driver: none is needed.
5. `InterpretedFunction` has no `.src` (the harness reads a kernel's source from it, as from `JITFunction`).
6. `InterpreterBuilder.get_all_ones_value` (what `~mask` builds) has no bool case: all ones is `True`.
7. The interpreter hands each kernel `.cpu()` copies of its arguments and copies them back: a copy of an
   overlapping view (the seed's `as_strided`) is dense, and writes back element by element (162 of 192
   elements wrong on the seed). The device's memory is host memory, so it gets CPU tensors over the very
   same bytes instead (same storage, offset and strides), and nothing is copied back.
8. The interpreter loads and stores through raw addresses: one past a buffer's end corrupts the host heap, and the
   process dies later, nothing named. Every unmasked lane's address is checked against the launch's buffers
   first (`_memory_check.py`): a kernel that reads or writes outside them stops with `OutOfBounds`, naming itself,
   the argument and the offset.
9. A comparison's result keeps its operands' type in the interpreter (`InterpreterBuilder.binary_op` types every
   result as `lhs`): a scalar `x == x` of float32 is a bool value typed fp32, which a splat turns into a float32
   block, and `&` with a bool block then fails in numpy (`ufunc 'bitwise_and' not supported for the input
   types`; `nan_to_num`'s backward, `(x == x) & (abs(x) != inf)` on a scalar load). Compiled, a comparison is
   `i1`: each `create_fcmp*` / `create_icmp*` result is typed `int1` here.

A process runs one mode: the C++ mode's registration (`host_codegen`, which makes Inductor treat "npu" nodes as
CPU nodes) never runs in this one.
"""

from __future__ import annotations

import ctypes
import inspect
import os
import re
import sys
import textwrap

from . import _memory_check

MODE_VARIABLE = "NPU_SURROGATE_CODEGEN"
TRITON = "triton"


def wanted() -> bool:
    return os.environ.get(MODE_VARIABLE, "").strip().lower() == TRITON


def prepare_environment() -> None:
    """Before triton is imported anywhere (its `jit` decides at decoration whether to interpret)."""
    os.environ["TRITON_INTERPRET"] = "1"


class TritonMissing(ImportError):
    pass


_shimmed = False
_registered = False


def install_shims(device_interface: bool = True) -> None:
    """What the interpreter needs to run Inductor's kernels here: at import (a repro that only loads a kernel
    module and launches it needs them as much as a compile does)."""
    global _shimmed
    if _shimmed:
        return
    prepare_environment()
    try:
        import triton  # noqa: F401
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError as exc:
        raise TritonMissing(
            f"{MODE_VARIABLE}=triton needs triton-ascend importable (pip install --no-deps "
            f"triton-ascend pybind11 'numpy<2.3'): {exc}"
        ) from exc
    import torch.utils._triton as torch_triton

    torch_triton.triton_hash_with_backend = lambda: "interpreter"  # 1
    interpreter.InterpreterBuilder.get_int1_ty = lambda self: tl.int1  # 2
    interpreter.InterpreterBuilder.get_void_ty = lambda self: tl.void
    interpreter.InterpreterBuilder.get_all_ones_value = _all_ones(interpreter)  # 6
    interpreter.GridExecutor._init_args_hst = _init_args_hst  # 7
    interpreter.GridExecutor._restore_args_dev = _restore_args_dev
    interpreter.InterpretedFunction.src = property(_source)  # 5
    for name in [n for n in dir(interpreter.InterpreterBuilder) if n.startswith(("create_fcmp", "create_icmp"))]:
        setattr(
            interpreter.InterpreterBuilder, name, _boolean_result(getattr(interpreter.InterpreterBuilder, name))
        )  # 9
    from . import _interpreter_speed

    _interpreter_speed.install()  # (faster, the same results: its own docstring)
    _memory_check.install(interpreter)  # 8

    from torch._inductor.runtime import triton_helpers

    triton_helpers.set_driver_to_gpu = lambda: None  # 4
    triton_helpers.libdevice = _LibdeviceThroughMath(triton_helpers.libdevice)  # 3
    from torch._dynamo.device_interface import register_interface_for_device

    if device_interface:  # (torch_npu's own backend registers its own)
        register_interface_for_device("npu", _interpreted_interface())  # a kernel's launch asks it for the stream
    _shimmed = True


def register() -> None:
    """Inductor's Triton codegen for "npu": what a backend's loader does (at the first compile)."""
    global _registered
    if _registered:
        return
    install_shims()
    _register_backend()
    _registered = True


def _interpreted_interface():
    from types import SimpleNamespace

    from torch._dynamo.device_interface import CpuInterface

    class InterpretedInterface(CpuInterface):
        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def get_raw_stream(index: int) -> int:
            return 0

        @staticmethod
        def get_compute_capability(device=None) -> str:
            return "interpreter"

        @staticmethod
        def get_device_properties(device=None):
            # torch_npu's `triton_experimental` launches a grid of the cores' count (40 on the 910B it targets).
            return SimpleNamespace(multi_processor_count=40, warp_size=32, type="npu")

        @staticmethod
        def synchronize(device=None) -> None:
            return None

        @staticmethod
        def current_device() -> int:
            return 0

    return InterpretedInterface


def _register_backend() -> None:
    from torch._inductor.codegen.common import (
        DeviceOpOverrides,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.triton import TritonScheduling
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    class InterpretedOps(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(index): return 0"

        def set_device(self, device_idx: int) -> str:
            return "pass"

        def synchronize(self) -> str:
            return "pass"

        def device_guard(self, device_idx: int) -> str:
            return "contextlib.nullcontext()"

    register_device_op_overrides("npu", InterpretedOps())
    from . import _codegen_config as codegen_config

    codegen_config.codegen = TRITON
    register_backend_for_device("npu", TritonScheduling, PythonWrapperCodegen, device_custom_config=codegen_config)


def _host_alias(tensor):
    """A CPU tensor over the device tensor's very bytes (the surrogate's memory is host memory)."""
    import numpy as np
    import torch

    if tensor.device.type != "npu":
        return tensor.cpu()
    storage = tensor.untyped_storage()
    if storage.nbytes() == 0:
        return torch.empty(tensor.shape, dtype=tensor.dtype)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * storage.nbytes()).from_address(storage.data_ptr()))
    return torch.from_numpy(raw).view(tensor.dtype).as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def _boolean_result(compare):
    """A comparison of the interpreter's builder whose result is typed `int1`, as a compiled comparison is (9)."""
    import triton.language as tl
    from triton.runtime import interpreter

    def typed_int1(self, lhs, rhs):
        result = compare(self, lhs, rhs)
        return interpreter.TensorHandle(result.data, tl.int1)

    return typed_int1


def _all_ones(interpreter):
    import numpy as np

    original = interpreter.InterpreterBuilder.get_all_ones_value

    def get_all_ones_value(self, type):
        if interpreter._get_np_dtype(type) == np.bool_:
            return interpreter.TensorHandle(np.full(1, True), type.scalar)
        return original(self, type)

    return get_all_ones_value


def _init_args_hst(self, args_dev, kwargs):
    host = (
        [_host_alias(a) if hasattr(a, "data_ptr") else a for a in args_dev],
        {k: _host_alias(v) if hasattr(v, "data_ptr") else v for k, v in kwargs.items()},
    )
    # The buffers this launch may read and write: each tensor argument's storage (the memory checker's bounds).
    named = [*zip(self.arg_names, host[0]), *host[1].items()]
    buffers = []
    for name, tensor in named:
        if hasattr(tensor, "untyped_storage"):
            storage = tensor.untyped_storage()
            buffers.append((name, storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    _memory_check.launch_began(getattr(self.fn, "__name__", "a kernel"), buffers)
    return host


def _restore_args_dev(self, args_dev, args_hst, kwargs, kwargs_hst):
    _memory_check.launch_ended()
    # Kernels wrote the device's own bytes; only a CPU argument (never an alias) is copied back.
    for device_arg, host_arg in [*zip(args_dev, args_hst), *((kwargs[k], kwargs_hst[k]) for k in kwargs)]:
        if hasattr(device_arg, "data_ptr") and device_arg.device.type != "npu" and device_arg is not host_arg:
            device_arg.data.copy_(host_arg.to(device_arg.device).data)


def _source(self) -> str:
    """The kernel's source from its `def` on, as `JITFunction.src` holds it."""
    text = textwrap.dedent(inspect.getsource(self.fn))
    found = re.search(r"^def\s+\w+\s*\(", text, re.M)
    return text[found.start() :] if found else text


class InterpreterLimit(NotImplementedError):
    """A builtin the interpreter cannot run here: neither `tl.math` nor `NUMPY_LIBDEVICE` has it."""


# libdevice functions `tl.math` lacks, as the numpy ufuncs that compute them elementwise in the operands' dtype
# (libdevice's `round` rounds half away from zero; `nearbyint` and `rint` to even, as np.rint).
NUMPY_LIBDEVICE = {
    "nearbyint": "rint",
    "rint": "rint",
    "trunc": "trunc",
    "round": None,  # (below: half away from zero)
    "tanh": "tanh",
    "tan": "tan",
    "sinh": "sinh",
    "cosh": "cosh",
    "asin": "arcsin",
    "acos": "arccos",
    "atan": "arctan",
    "asinh": "arcsinh",
    "acosh": "arccosh",
    "atanh": "arctanh",
    "log1p": "log1p",
    "expm1": "expm1",
    "log10": "log10",
    "exp10": None,  # (below: 10 ** x)
    "pow": "power",
    "atan2": "arctan2",
    "hypot": "hypot",
    "fmod": "fmod",
    "copysign": "copysign",
    "nextafter": "nextafter",
    "isnan": "isnan",
    "isinf": "isinf",
}
# Those whose result is a predicate (libdevice types it int1: triton-ascend's `extra/ascend/libdevice.py`).
NUMPY_PREDICATES = frozenset({"isnan", "isinf"})


class _LibdeviceThroughMath:
    """`libdevice.<name>` as the interpreter can run it: `tl.math`'s patched function, looked up at call time, or
    the numpy form of the functions `tl.math` lacks (`NUMPY_LIBDEVICE`); any other raises `InterpreterLimit`
    (a stub of triton-ascend's would return None, and the kernel would fail further on for no visible reason)."""

    def __init__(self, libdevice):
        self._libdevice = libdevice

    def __getattr__(self, name: str):
        import triton.language as tl

        if name in NUMPY_LIBDEVICE:  # (first: triton-ascend's tl.math has some as externs the interpreter lacks)
            return _numpy_builtin(name)
        if hasattr(tl.math, name):
            return lambda *args, **kwargs: getattr(tl.math, name)(*args, **kwargs)
        if name.startswith("__"):
            raise AttributeError(name)

        def missing(*args, **kwargs):
            raise InterpreterLimit(f"libdevice.{name} is not in tl.math, and the surrogate has no numpy form of it")

        return missing


def _numpy_builtin(name: str):
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def compute(*data):
        if name == "round":
            return np.sign(data[0]) * np.floor(np.abs(data[0]) + 0.5)
        if name == "exp10":
            return np.power(np.asarray(10, dtype=data[0].dtype), data[0])
        return getattr(np, NUMPY_LIBDEVICE[name])(*data)

    def builtin(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, tl.core.tensor)]
        first = tensors[0]
        data = [
            a.handle.data
            if isinstance(a, tl.core.tensor)
            else np.asarray(getattr(a, "value", a), first.handle.data.dtype)
            for a in args
        ]
        scalar = tl.int1 if name in NUMPY_PREDICATES else first.dtype.scalar
        result = compute(*data).astype(np.bool_ if name in NUMPY_PREDICATES else first.handle.data.dtype, copy=False)
        block = next((a for a in tensors if a.type.is_block()), None)
        kind = tl.block_type(scalar, block.type.shape) if block is not None else scalar
        return tl.core.tensor(TensorHandle(result, scalar), kind)

    return builtin
