"""The surrogate's torch_npu mode (`NPU_SURROGATE_CODEGEN=torch_npu`): torch_npu's own Inductor backend, from a
released wheel, compiling for the surrogate device "npu"; its kernels run by triton-ascend's interpreter.

    PYTHONPATH=tests/npu_surrogate:$(.venv/bin/python tests/npu_surrogate/install_triton.py):$(.venv/bin/python \
        tests/npu_surrogate/install_torch_npu.py) NPU_SURROGATE_CODEGEN=torch_npu .venv/bin/python -m harness run ...

The line between the two: torch_npu's compiler side is the wheel's code, run as it ships; torch_npu proper (the
device runtime: its C extension, streams, device properties, the CANN operators) is the surrogate's.

The wheel's code that runs (found on the path: `install_torch_npu.py`'s folder):
- `torch_npu/utils/_dynamo.py`: the compile wrapper (`patch_inductor_wrapper`: the `npu_backend` option,
  `_NpuBackendScope`), the backend registry (`_InductorNpuRegistry`), `has_triton` (`patch_has_triton`), its
  Dynamo integration (`_lazy_dynamo_setup`), and the device interface `utils/_dynamo_device.py`;
- `torch_npu/_inductor/`, loaded by that registry at the first compile (`_load_backend`): its lowerings,
  decompositions and FX passes, the `triton_experimental` codegen and wrapper (or the `default` backend's),
  `NPUCachingAutotuner` with its config tiers, `make_launcher` (the grid it launches, 40 programs on a 910B)
  and the launcher narrowing of int64/float64 arguments (`_wrap_launcher_with_downcast`).

What the surrogate supplies is `STAND_INS`, each with why (docs/npu.md has the same table): stand-ins for
torch_npu proper and CANN, and the shims the interpreter needs. None is falsy where torch_npu reads it: a
`torch_npu._C` entry without a stand-in raises AttributeError naming it (`NO_STAND_IN`), and a run that reaches
one is a skip saying so (`_limits.py`), never a branch steered by a stub.

Inductor's compile-cache keys hold the device's codegen config (`_codegen_config.codegen`: "torch_npu" and the
wheel's version), so a program compiled in another mode, or by another torch_npu, is never loaded in this one.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import types

from ._triton_codegen import _LibdeviceThroughMath

MODE = "torch_npu"
CORES = 40  # the Ascend910B3's vector cores: torch_npu's grid (`total_thread`)
SOC_VERSION = 222  # Ascend910B3 (torch_npu/_inductor/config.py: Ascend910B1 = 220, Ascend950 = 260)
DEVICE_NAME = "Ascend910B3"
CANN_VERSION = "not known"  # torch_npu's get_cann_version() where no CANN is installed
# `npu::` ops with a kernel here: the casts torch_npu's decompositions write (a `.to(dtype)` on any device).
CAST_OPS = ("npu_dtype_cast", "_npu_dtype_cast")

# (backend package, the helpers module whose `libdevice` its kernels import)
LIBDEVICE_HOMES = (
    ("torch_npu._inductor.triton_experimental", "torch_npu._inductor.triton_experimental.npu_triton_helpers"),
    ("torch_npu._inductor.runtime", "torch_npu._inductor.runtime.triton_helpers"),
)
TYPED_TENSORS = tuple(
    f"{kind}Tensor" for kind in ("Bool", "Byte", "Char", "Double", "Float", "Half", "Int", "Long", "Short", "BFloat16")
)

# (what, why): every stand-in and shim of this mode.
STAND_INS = (
    ("torch_npu._C", "the C extension: raw streams, allocation, the SoC version, _NPUShapeHandling, properties"),
    ("torch_npu.npu.streams", "Stream and Event of host memory (the wheel's device interface imports them)"),
    ("torch.npu.get_device_properties", f"{DEVICE_NAME}: {CORES} vector cores, {CORES // 2} cube cores"),
    ("torch_npu.npu.utils", "the device guard, CANN's version ('not known'), no CANN feature on"),
    ("torch_npu.npu._backends.get_soc_version", f"the SoC probe: {SOC_VERSION} ({DEVICE_NAME})"),
    ("torch_npu.utils._graph_tree", "NPU graphs (aclgraph capture, mode='reduce-overhead'): not applied"),
    ("torch_npu.profiler", "its package entered without its __init__ (which binds the C profiler)"),
    ("torch.npu.FloatTensor and the other typed tensors", "classes of their names, never constructed here"),
    ("torch.npu.are_compatible_impl_enabled", "True: eager ops are the CPU's, torch's semantics (compatible mode)"),
    ("torch.version.cann", f"{CANN_VERSION!r}, what torch_npu's import sets without CANN"),
    ("npu:: schemas", "from the wheel's csrc/aten yaml; kernels for npu_dtype_cast only"),
    ("triton.language.extra.cann.extension", "absent from triton-ascend 3.2.0; extract_slice in numpy, as MLIR's"),
    ("triton.compile", "an interpreted kernel gets InterpretedBinary, launched by torch_npu's own make_launcher"),
    ("NPUCachingAutotuner._precompile_worker", "the first config only: the interpreter has no timings"),
    ("InterpretedFunction.constexprs", "what JITFunction has and the autotuner reads"),
    ("GridExecutor.__call__", "a config's keywords the kernel does not declare are dropped, as a compile does"),
    ("libdevice of npu_triton_helpers and runtime.triton_helpers", "as the Triton mode's shim 3: tl.math, numpy"),
    ("TORCH_WARM_POOL=0", "no compile-worker pool at import: the harness's worker forks case processes"),
    ("torch.utils._triton, imported", "2.13.0rc1's patch_has_triton assigns into it without importing it"),
)


NO_STAND_IN = "torch_npu's C extension, which the surrogate has no stand-in for"


class WheelMissing(ImportError):
    pass


class WheelUnloadable(ImportError):
    """torch_npu's Python from a wheel or checkout that the surrogate cannot load: the release, and where it
    stopped (the innermost frame in the wheel's folder), in one line."""

    def __init__(self, version: str, folder: str, error: BaseException):
        import traceback

        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename.startswith(folder)]
        where = f" at {os.path.relpath(frames[-1].filename, folder)}:{frames[-1].lineno}" if frames else ""
        super().__init__(
            f"torch_npu {version}'s Python ({folder}) does not load on the surrogate{where}: "
            f"{type(error).__name__}: {error}"
        )


class CannExtensionMissing(NotImplementedError):
    """A triton-ascend CANN extension a kernel calls that triton-ascend 3.2.0 lacks and the surrogate has no numpy
    form of (`extract_slice` has one: `extract_slice` below)."""


def wanted() -> bool:
    from ._triton_codegen import MODE_VARIABLE

    return os.environ.get(MODE_VARIABLE, "").strip().lower() == MODE


def wheel_folder() -> str:
    """The folder on the path that holds torch_npu's Python from a wheel (not this surrogate's package)."""
    own = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for entry in sys.path:
        folder = os.path.abspath(entry or os.getcwd())
        if folder != own and os.path.isfile(os.path.join(folder, "torch_npu", "_inductor", "__init__.py")):
            return folder
    raise WheelMissing(
        "NPU_SURROGATE_CODEGEN=torch_npu needs torch_npu's Python on PYTHONPATH, after the surrogate: "
        "$(.venv/bin/python tests/npu_surrogate/install_torch_npu.py)"
    )


def wheel_version(folder: str) -> str:
    """The wheel's `torch_npu/version.py` `__version__`; a checkout without one is "unknown"."""
    try:
        text = open(os.path.join(folder, "torch_npu", "version.py")).read()
    except OSError:
        return "unknown"
    found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else "unknown"


_installed = False


def install(torch_npu) -> None:
    """Before anything imports torch_npu's compiler side: the stand-ins, then the wheel's modules in front."""
    global _installed
    if _installed:
        return
    import torch

    folder = wheel_folder()
    _stand_in_runtime(torch, torch_npu)
    # The wheel's compiler packages first; the surrogate's packages stay (they are torch_npu proper here), so they
    # are imported before the wheel's folders go in front.
    utils = importlib.import_module("torch_npu.utils")
    torch_npu.__path__.insert(0, os.path.join(folder, "torch_npu"))
    utils.__path__.insert(0, os.path.join(folder, "torch_npu", "utils"))
    # torch_npu.npu's Python the surrogate does not stand in for (`amp`, which Dynamo's integration names) comes
    # from the wheel, behind the surrogate's own modules.
    torch_npu.npu.__path__.append(os.path.join(folder, "torch_npu", "npu"))
    sys.modules.pop("torch_npu.utils._dynamo", None)
    # torch_npu's profiler package binds its C profiler in its `__init__`; the compiler side imports only pure-Python
    # helpers from its submodules (`_inductor/profiler.py`): the package is entered without running that `__init__`.
    profiler = types.ModuleType("torch_npu.profiler")
    profiler.__path__ = [os.path.join(folder, "torch_npu", "profiler")]

    def tensorboard_trace_handler(*args, **kwargs):  # (what select_algorithm imports; it profiles nothing here)
        raise NotImplementedError(f"torch_npu.profiler.tensorboard_trace_handler: {NO_STAND_IN}")

    profiler.tensorboard_trace_handler = tensorboard_trace_handler
    sys.modules["torch_npu.profiler"] = torch_npu.profiler = profiler
    _define_npu_schemas(torch, folder)
    _stand_in_cann_extension()
    dynamo = importlib.import_module("torch_npu.utils._dynamo")
    if hasattr(dynamo, "patch_has_triton"):  # (2.12.0 on; before, torch_npu patched it elsewhere)
        # 2.13.0rc1's patch assigns `torch.utils._triton.has_triton` without importing that module (2.14.0's imports
        # it first): the surrogate imports it.
        importlib.import_module("torch.utils._triton")
        dynamo.patch_has_triton()
    else:
        import torch.utils._triton as torch_triton

        torch_triton.has_triton = lambda *args, **kwargs: True
    dynamo.patch_inductor_wrapper()
    registry = dynamo._InductorNpuRegistry
    register = registry.register_inductor_npu.__func__

    def register_then_adapt(cls):
        register(cls)
        after_backend_loaded(torch_npu.__version__)

    registry.register_inductor_npu = classmethod(register_then_adapt)
    _installed = True


def install_launch_shims() -> None:
    """After the interpreter's own shims (`_triton_codegen.install_shims`): what torch_npu's launch path needs of
    a binary, of a JITFunction and of libdevice, for kernels the interpreter runs."""
    import triton
    from triton.runtime import interpreter

    interpreter.InterpretedFunction.constexprs = property(_constexprs)
    if not getattr(interpreter.GridExecutor.__call__, "_surrogate_filters", False):
        launch = interpreter.GridExecutor.__call__

        def kernel_keywords_only(self, *args, **kwargs):
            # A config's keywords the kernel does not declare are the compiler's (triton-ascend's `compile_mode`,
            # `multibuffer`; a block size a persistent kernel has none of): a compile takes only the kernel's
            # constexprs from them (torch_npu's `_precompile_config`), Inductor's interpreter branch passes all.
            kept = {*self.arg_names, *interpreter.RESERVED_KWS, "warmup"}
            return launch(self, *args, **{k: v for k, v in kwargs.items() if k in kept})

        kernel_keywords_only._surrogate_filters = True
        interpreter.GridExecutor.__call__ = kernel_keywords_only
    if not getattr(triton.compile, "_surrogate_interprets", False):
        compile_ = triton.compile

        def compile_or_interpret(src, *args, **kwargs):
            if isinstance(getattr(src, "fn", None), interpreter.InterpretedFunction):
                return InterpretedBinary(src, kwargs.get("options") or {})
            return compile_(src, *args, **kwargs)

        compile_or_interpret._surrogate_interprets = True
        triton.compile = compile_or_interpret


def after_backend_loaded(version: str) -> None:
    """Once torch_npu's registry has loaded a backend: its autotuner keeps one config, its libdevice is routed,
    and the device's codegen config (part of Inductor's cache keys) names this mode and the wheel's version."""
    from torch._inductor.codegen.common import custom_backend_codegen_configs

    from . import _codegen_config

    _codegen_config.codegen = f"{MODE} {version}"
    custom_backend_codegen_configs["npu"] = _codegen_config
    # Each backend's helpers module, whose `libdevice` its kernel modules import (imported here: the codegen
    # imports them lazily, the kernel modules at load).
    for package, helpers_name in LIBDEVICE_HOMES:
        if package in sys.modules:
            helpers = importlib.import_module(helpers_name)
            if not isinstance(helpers.libdevice, _LibdeviceThroughMath):
                helpers.libdevice = _LibdeviceThroughMath(helpers.libdevice)
    if "torch_npu._inductor.triton_experimental" not in sys.modules:
        return  # the default backend's autotuner has Inductor's interpreter branch (one config, configs[0])
    heuristics = importlib.import_module("torch_npu._inductor.triton_experimental.npu_triton_heuristics")
    if not getattr(heuristics.NPUCachingAutotuner, "_surrogate_first_config", False):
        precompile = heuristics.NPUCachingAutotuner._precompile_worker

        def first_config_only(self):
            if self.configs and not self.compile_results:
                self.configs = self.configs[:1]
            return precompile(self)

        heuristics.NPUCachingAutotuner._precompile_worker = first_config_only
        heuristics.NPUCachingAutotuner._surrogate_first_config = True


def _constexprs(self) -> list[int]:
    import inspect

    import triton.language as tl

    parameters = inspect.signature(self.fn).parameters.values()
    return [i for i, p in enumerate(parameters) if p.annotation is tl.constexpr or p.annotation == "tl.constexpr"]


class InterpretedBinary:
    """What `triton.compile` returns, for a kernel the interpreter runs: the attributes torch_npu's
    `NPUTritonCompileResult.make_launcher` reads of a binary. Its launcher calls `run(grid_0, grid_1, grid_2,
    stream, function, metadata, launch_metadata, enter_hook, exit_hook, *call_args)` (the branch for binaries
    with `launch_metadata`); `run` launches the kernel on that grid, its constexprs bound as the config set them.
    """

    launch_enter_hook = None
    launch_exit_hook = None

    def __init__(self, src, options):
        self.src = src
        self.constants = dict(src.constants)
        self.metadata = types.SimpleNamespace(
            shared=0, num_warps=options.get("num_warps", 1), num_ctas=1, cluster_dims=(1, 1, 1)
        )
        self.packed_metadata = {}
        self.shared = 0
        self.num_warps = self.metadata.num_warps
        self.function = None
        self.n_regs = self.n_spills = 0
        self.hash = None
        fn = src.fn
        names = fn.arg_names
        self._constexpr_kwargs = {
            names[i]: self.constants[names[i]] for i in fn.constexprs if names[i] in self.constants
        }
        self.run = self._launch

    def _init_handles(self) -> None:
        pass

    def launch_metadata(self, *args):
        return None

    def _launch(self, grid_0, grid_1, grid_2, stream, function, metadata, launch_metadata, enter, exit, *args):
        return self.src.fn[(grid_0, grid_1, grid_2)](*args, **self._constexpr_kwargs)


def _stand_in_runtime(torch, torch_npu) -> None:
    """torch_npu proper's pieces the compiler side calls (1-3 above)."""
    C = _StrictModule("torch_npu._C")
    C._npu_getCurrentRawStream = lambda device=0: 0
    C._npu_getCurrentRawStreamNoWait = lambda device=0: 0
    C._empty_strided_npu = lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype, device="npu")
    C._npu_get_soc_version = lambda: SOC_VERSION

    class _NPUShapeHandling:  # the base class of utils/_dynamo.py's NPUShapeHandling (shape handling is opt-in)
        def __init__(self, *args, **kwargs):
            raise NotImplementedError("torch_npu's shape handling is in its C extension: not on the surrogate")

    C._NPUShapeHandling = _NPUShapeHandling

    class _NPUDeviceProperties:  # what get_device_properties returns (Dynamo's trace rules fold it as a constant)
        def __init__(self, **facts):
            self.__dict__.update(facts)

    C._NPUDeviceProperties = _NPUDeviceProperties
    sys.modules["torch_npu._C"] = torch_npu._C = C

    npu = torch_npu.npu
    # The stream classes the wheel's device interface (`utils/_dynamo_device.py`, run as it ships) imports.
    streams = types.ModuleType("torch_npu.npu.streams")
    streams.Stream, streams.Event = _HostStream, _HostEvent
    sys.modules["torch_npu.npu.streams"] = npu.streams = streams
    npu.Stream, npu.Event = _HostStream, _HostEvent
    graphs = types.ModuleType("torch_npu.utils._graph_tree")  # NPU graph capture (aclgraph) is the runtime's
    graphs._apply_npugraph_tree_methods = lambda: None
    sys.modules["torch_npu.utils._graph_tree"] = graphs
    backends = types.ModuleType("torch_npu.npu._backends")
    backends.get_soc_version = lambda: SOC_VERSION
    sys.modules["torch_npu.npu._backends"] = npu._backends = backends
    npu.get_device_properties = lambda *a, **k: _NPUDeviceProperties(
        name=DEVICE_NAME,
        vector_core_num=CORES,
        cube_core_num=CORES // 2,
        multi_processor_count=CORES,
        warp_size=32,
        total_memory=64 << 30,
        type="npu",
    )
    npu.current_stream = lambda device=None: _HostStream()
    npu.set_stream = lambda stream: None
    npu.stream = lambda stream=None: contextlib.nullcontext()
    npu.is_current_stream_capturing = lambda: False
    for name in TYPED_TENSORS:  # the legacy typed-tensor constructors (Dynamo's integration lists them)
        setattr(npu, name, type(name, (), {"__module__": "torch_npu.npu"}))
    # The surrogate's eager ops are the CPU's, torch's own semantics: what torch_npu's compatible mode
    # (`torch_npu.npu.use_compatible_impl(True)`) asks of the NPU's eager kernels. Its decompositions follow the
    # mode (`_inductor/decomposition.py`: exact gelu as the erf polynomial, not CANN's default tanh form).
    npu.are_compatible_impl_enabled = lambda: True
    importlib.import_module("torch_npu.npu.utils")  # the surrogate's (device guard, CANN version): before the wheel's
    torch.version.cann = CANN_VERSION


class _HostStream:
    """A stream of a device whose kernels have finished when they return."""

    npu_stream = 0

    def __init__(self, device=None, priority=0, **kwargs):
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def query(self) -> bool:
        return True


class _HostEvent:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        pass

    def record(self, stream=None) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class _StrictModule(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"{self.__name__}.{name}: {NO_STAND_IN}")


def _define_npu_schemas(torch, folder: str) -> None:
    """The `npu::` schemas from the wheel's operator lists (4 above); kernels for the casts only."""
    library = torch.library.Library("npu", "FRAGMENT")
    _define_npu_schemas.library = library  # kept alive: a Library undefines its ops when collected
    for listing in ("npu_native_functions_by_codegen.yaml", "npu_native_functions.yaml"):
        try:
            text = open(os.path.join(folder, "torch_npu", "csrc", "aten", listing)).read()
        except OSError:
            continue
        for found in re.finditer(r"func:\s*(\S.*)$", text, re.M):
            schema = found.group(1).strip()
            name = schema.split("(")[0]
            if hasattr(torch.ops.npu, name.split(".")[0]):  # defined already (by a case, or a run before)
                continue
            try:
                library.define(schema)
            except Exception:  # noqa: BLE001 - a schema torch cannot parse (a type of torch_npu's own): left out
                continue
    for op in CAST_OPS:
        if hasattr(torch.ops.npu, op):
            library.impl(op, lambda self, dtype: self.to(dtype), "CompositeExplicitAutograd")


def extract_slice(ful, offsets, sizes, strides, _builder=None, _generator=None):
    """triton-ascend's CANN `extract_slice`, which its compiler lowers to MLIR's `tensor.extract_slice`
    (`triton_patch/language/semantic.py`: a result of shape `sizes`, the rank of `ful`): element i of the result is
    `ful[offset + i * stride]` along each dim. The interpreter has no `create_extract_slice`: numpy indexes the
    tile here. torch_npu's codegen writes it to take one lane back out of a tile loaded with an extra lane axis."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def number(value) -> int:
        value = getattr(value, "value", value)  # a constexpr
        if isinstance(value, tl.core.tensor):
            return int(np.asarray(value.handle.data).reshape(-1)[0])
        return int(value)

    offsets, sizes, strides = ([number(v) for v in values] for values in (offsets, sizes, strides))
    data = ful.handle.data
    if not len(offsets) == len(sizes) == len(strides) == data.ndim:
        raise ValueError(f"extract_slice of a rank-{data.ndim} tile with offsets {offsets}, sizes {sizes}")
    # Along a dim where the tile has one element (a load broadcast there), every index takes that element: torch_npu
    # slices such tiles (isin's `extract_slice(_es_sfull0, [0, 0], [real_block_x1, real_block_x0], [1, 2])` of a
    # [1, 2 * real_block_x0] load), which only a broadcast gives a meaning to.
    picked = data[
        np.ix_(
            *(
                o + np.arange(n) * s if d > 1 else np.zeros(n, int)
                for o, n, s, d in zip(offsets, sizes, strides, data.shape)
            )
        )
    ]
    return tl.core.tensor(TensorHandle(picked, ful.dtype.scalar), tl.block_type(ful.dtype.scalar, sizes))


def _stand_in_cann_extension() -> None:
    """`triton.language.extra.cann` (5 above): triton-ascend 3.2.0 has its libdevice as `extra.ascend`, and no
    `extension` module."""
    if "triton.language.extra.cann.extension" in sys.modules:
        return
    import triton.language as tl
    from triton.language.extra.ascend import libdevice

    cann = types.ModuleType("triton.language.extra.cann")
    extension = types.ModuleType("triton.language.extra.cann.extension")

    extension.extract_slice = extract_slice
    cann.extension, cann.libdevice = extension, libdevice
    sys.modules.update({"triton.language.extra.cann": cann, "triton.language.extra.cann.extension": extension})
    tl.extra.cann = cann
