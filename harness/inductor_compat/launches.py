"""Kernel launches of compiled wrapper modules, observed through proxies (see the package docstring)."""

from __future__ import annotations

import contextlib
import re
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from harness.layout import span
from harness.inductor_compat.kernel_checks import text_findings
from harness.inductor_compat.kernel_pointers import PointerUse, pointer_use
from harness.inductor_compat.kernel_variants import attach_variants

ROLE_IN, ROLE_OUT, ROLE_INOUT, ROLE_SCALAR = "in", "out", "inout", "scalar"
# Kinds of launch: generated kernels ("cpp", "triton"), library calls (`extern_kernels.<op>`, "extern"), and every
# other op the wrapper calls (`torch.ops.<namespace>.<op>.<overload>`: ATen fallbacks, custom ops; on the NPU the
# fallbacks are CANN operators), "fallback". Fallbacks are numbered apart (`Launch.fallback`, selector `aten:N`).
KIND_EXTERN, KIND_FALLBACK = "extern", "fallback"


@dataclass
class KernelInfo:
    name: str
    kind: str  # "cpp" or "triton"
    arg_names: list[str]
    mutated: frozenset[str] = frozenset()
    source: str = ""
    module_path: str = ""
    # Variants compiled from rewritten source, by rewriter (None: not affected); see kernel_variants.py.
    variants: dict[str, Any] = field(default_factory=dict)
    # Whether it sums many terms (a reduction, a scan, a matmul template), read off what it was compiled as:
    # Triton's heuristic type, a C++ kernel's accumulators. Not from its name: the NPU's Triton kernels are
    # decorated by its own heuristics module, and Inductor then names them `triton_unk_*`.
    accumulates: bool = False
    # Launches since the wrapper module defining it was loaded (each load makes its kernels afresh).
    launched: int = 0
    # A fallback's op (`torch._ops.OpOverload`), whose schema gives its arguments' roles.
    op: Any = None
    # Arguments the kernel's own launcher narrows from 64 bits, with their signature type (torch_npu's
    # `triton_meta["downcast_args"]`: its codegen marks `*i64`/`*fp64`/`fp64` arguments,
    # `_wrap_launcher_with_downcast` converts the pointers' tensors).
    launcher_narrowed: dict[str, str] = field(default_factory=dict)
    # Times autotuning benchmarked a Triton kernel's configs (each on cloned arguments, before a launch).
    benchmark_rounds: int = 0
    # A Triton kernel's pointer arguments (`*fp32` in its signature), and what its source stores to, loads
    # from and names (kernel_pointers.py); None where the source was not read (C++ kernels: their names hold).
    pointers: frozenset[str] = frozenset()
    uses: PointerUse | None = None
    # Pointer -> dtype, for each argument it adds to atomically in float16 or bfloat16: every add rounds to that
    # dtype, in an order that changes from run to run (`low_precision_atomics`).
    low_precision_atomics: dict[str, str] = field(default_factory=dict)
    # The partial kernel of torch_npu's cross-core reduction split (`npu_rsplit_partial` in its inductor_meta): it
    # writes one row per core of a workspace, which a combine kernel sums.
    rsplit_partial: bool = False
    # What the checks on its text found (`kernel_checks.py`): "name: sentence".
    text_findings: list[str] = field(default_factory=list)
    # A Triton kernel's autotuner (`CachingAutotuner`), whose launchers a replay may launch on another grid
    # (`torch_npu_backend.launcher_grid`): its `run` is not always a bound method (torch_npu's `fast_run`).
    autotuner: Any = field(default=None, repr=False, compare=False)

    def role(self, position: int) -> str:
        if position >= len(self.arg_names):
            return ROLE_SCALAR
        name = self.arg_names[position]
        if name.startswith("in_out_ptr") or name in self.mutated:
            return ROLE_INOUT
        if self.uses is not None and name in self.pointers:
            # What the body does decides where it says (an rsplit partial kernel stores to `ws_ptr` and never
            # touches `out_ptr0`); a pointer it names in a way not read here (a call) keeps its name's role.
            if name in self.uses.stored:
                return ROLE_INOUT if name in self.uses.loaded else ROLE_OUT
            if name not in self.uses.used:
                return ROLE_SCALAR  # never touched: neither read nor written by this launch
            if name in self.uses.loaded and not name.startswith("out_ptr"):
                return ROLE_IN
        if name.startswith("out_ptr"):
            return ROLE_OUT
        if name.startswith("in_ptr") or name in self.pointers:
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
    caller_locals: dict[str, Any] = field(default_factory=dict, repr=False)
    replay: bool = False  # a second run of this launch (bisection's isolation), not a new launch
    # The kernel's first launch since its wrapper module was loaded.
    first: bool = False
    # Autotuning benchmarks the kernel's configs inside this call, before this launch, on cloned arguments
    # (`CachingAutotuner.autotune_to_one_config`; torch_npu's clones every tensor argument): the compiled
    # binaries' first launches are the benchmark's, not this one. Known before the launch runs when the
    # autotuner was precompiled with several launchers; set after it ran when the benchmark came unannounced.
    autotunes: bool = False
    # A fallback's number among the fallback calls of the block (selector `aten:N`), None for kernels. A fallback's
    # `index` is the number the next kernel launch gets: kernel numbers are those of a program without fallbacks.
    fallback: int | None = None
    # A fallback's arguments flattened (`args` holds the leaves: tensors inside lists too): each leaf's label
    # (`self`, `indices[1]`) and role, from the op's schema. After it ran, the tensors it returned (that alias no
    # argument) are appended to `args` as role "out", labelled `result[i]`: `results` says how many.
    labels: list[str] | None = None
    roles: list[str] | None = None
    results: int = 0
    # An emulation of the wrapper's glue rebuilt its views (`glue(launch)`, once, before anything reads them).
    glued: bool = False

    @property
    def key(self) -> int | str:
        """What names this launch among a run's launches: its kernel index, or `aten:N` for a fallback."""
        return self.index if self.fallback is None else f"aten:{self.fallback}"

    @property
    def selector(self) -> str:
        return f"aten:{self.fallback}" if self.fallback is not None else str(self.index)

    def run(self, args: list[Any] | None = None, kwargs: dict[str, Any] | None = None) -> Any:
        result = self.invoke(*(self.args if args is None else args), **(self.kwargs if kwargs is None else kwargs))
        if self.fallback is not None and not self.replay and not self.results:
            self._take_results(result)
        return result

    def _take_results(self, result: Any) -> None:
        """A fallback's returned tensors become written arguments of its launch (those aliasing an argument, as an
        in-place op's `self`, already are)."""
        for path, tensor in fresh_results(result, self.args):
            self.args.append(tensor)
            self.labels.append("result" + "".join(f"[{i}]" for i in path))
            self.roles.append(ROLE_OUT)
            self.results += 1

    def result_path(self, tensor: Any) -> tuple[int, ...] | None:
        """Where a returned tensor of this fallback sits in what it returned (`()` for a lone tensor)."""
        if self.fallback is None:
            return None
        for position in range(len(self.args) - self.results, len(self.args)):
            if self.args[position] is tensor:
                label = self.labels[position]
                return tuple(int(i) for i in re.findall(r"\[(\d+)\]", label))
        return None

    def role(self, position: int | str) -> str:
        """The role of a positional or keyword argument; extern kernels write only their `out=`."""
        if self.roles is not None:
            return self.roles[position] if isinstance(position, int) and position < len(self.roles) else ROLE_SCALAR
        if self.kernel.kind == KIND_EXTERN:
            return ROLE_OUT if position == "out" else ROLE_IN
        return self.kernel.role(position) if isinstance(position, int) else ROLE_SCALAR

    def tensor_args(self) -> list[tuple[int | str, Any]]:
        """(position or keyword, tensor) of every tensor argument."""
        items = list(enumerate(self.args)) + list(self.kwargs.items())
        return [(key, value) for key, value in items if hasattr(value, "untyped_storage")]

    def written(self) -> list[tuple[str, Any]]:
        """(parameter name, tensor) of every argument this launch writes."""
        return [(self.param_name(key), value) for key, value in self.written_args()]

    def written_args(self) -> list[tuple[int | str, Any]]:
        """(position or keyword, tensor) of every argument this launch writes."""
        return [(key, value) for key, value in self.tensor_args() if self.role(key) in (ROLE_OUT, ROLE_INOUT)]

    def param_name(self, key: int | str) -> str:
        if self.labels is not None and isinstance(key, int) and key < len(self.labels):
            return self.labels[key]
        return key if isinstance(key, str) else self.kernel.arg_name(key)

    def local_name(self, tensor: Any) -> str | None:
        """The wrapper's local that is this very tensor (`buf3`, `arg0_1`), if any."""
        return next(iter(self.local_names(tensor)), None)

    def local_names(self, tensor: Any) -> list[str]:
        """Every wrapper local bound to this very tensor (`buf1 = buf0` binds two)."""
        return [name for name, value in self.caller_locals.items() if value is tensor]

    def read(self) -> list[tuple[int | str, Any]]:
        """(position or keyword, tensor) of every tensor argument this launch only reads."""
        return [(key, value) for key, value in self.tensor_args() if self.role(key) == ROLE_IN]

    def buffer_name(self, tensor: Any) -> str | None:
        """The wrapper's name for a tensor argument (`buf3`, `arg0_1`), found among the caller's locals."""
        found = self.owning_buffer(tensor)
        return found[0] if found else None

    def owning_buffer(self, tensor: Any) -> tuple[str, Any] | None:
        """(name, local) of the wrapper buffer a tensor argument is, or is a view of.

        An argument passed as `reinterpret_tensor(buf3, ...)` is no local itself:
        it belongs to the smallest local over the same storage whose memory
        span holds the argument's (a buffer may be written a slice at a time).
        """
        for name, value in self.caller_locals.items():
            if value is tensor:
                return name, value
        pointer, start, end = tensor.untyped_storage().data_ptr(), *span(tensor)
        owners = [
            (name, value)
            for name, value in self.caller_locals.items()
            if hasattr(value, "untyped_storage")
            and value.untyped_storage().data_ptr() == pointer
            and span(value)[0] <= start
            and end <= span(value)[1]
        ]
        return min(owners, key=lambda item: item[1].numel()) if owners else None


LaunchHandler = Callable[[Launch], Any]


class _State:
    """Process-wide, not thread-local: CUDA's autograd engine runs backward graphs on its own thread."""

    handler: LaunchHandler | None = None
    launches: int = 0
    fallbacks: int = 0
    # Called as observer(module_path, args, call) for each run of a wrapper's `call`; must return call(args).
    graph_observer: Callable[[str, list, Callable[[list], Any]], Any] | None = None


_state = _State()
# Wrapper module path -> the names of the generated kernels it defines.
MODULE_KERNELS: dict[str, list[str]] = {}
# Wrapper module path -> whether its program sums many terms (what lowering facts say better, when kept).
MODULE_ACCUMULATES: dict[str, bool] = {}
# Wrapper module path -> "kernel (pointer, dtype)" for each low-precision atomic add of its kernels.
MODULE_LOW_PRECISION_ATOMICS: dict[str, list[str]] = {}


def low_precision_atomics(paths: list[str]) -> list[str]:
    """The atomic adds in float16 or bfloat16 of these compiled graphs' kernels, as "kernel (pointer, dtype)"."""
    return [found for path in dict.fromkeys(paths) for found in MODULE_LOW_PRECISION_ATOMICS.get(path, [])]


def _accumulates(source: str, kernels: list[KernelInfo]) -> bool:
    """Read off the wrapper when lowering facts are missing: a kernel that sums (`KernelInfo.accumulates`),
    or a library or fallback call (`extern_kernels.`, `aten.`, `torch.ops.`)."""
    call = source[source.find("def call(") :]
    return (
        any(k.accumulates for k in kernels)
        or re.search(r"\b(extern_kernels|aten|torch\.ops\.\w+)\.\w+(\.\w+)?\(", call) is not None
    )


_install_lock = threading.Lock()
_installed_original: Any = None


@contextlib.contextmanager
def intercept_launches(handler: LaunchHandler) -> Iterator[None]:
    """Route every generated-kernel launch of programs run inside this block through `handler`.

    Launch indices count from 0 at the block's start, over every compiled graph
    (forward, backward, pieces between graph breaks) in launch order; fallback
    calls (`torch.ops.*` in the wrapper) are counted apart, from 0 too.
    """
    if _state.handler is not None:
        raise RuntimeError("kernel launch interception does not nest")
    _install()
    _state.handler, _state.launches, _state.fallbacks = handler, 0, 0
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
            attach_variants(module)  # source-rewriting emulations only (kernel_variants.py)
            return module

        PyCodeCache.load_by_key_path = classmethod(load_by_key_path)
        _installed_original = original


def load_generated_module(path: str, rewriters: Any = ()) -> Any:
    """A generated wrapper module copied out of Inductor's cache (an extracted repro's), loaded as Inductor
    loads one: its kernels compiled (from Inductor's caches when warm), observed, and rewritten by a
    source-rewriting emulation."""
    import importlib.util

    from harness.inductor_compat.kernel_variants import rewriting

    spec = importlib.util.spec_from_file_location(f"harness_generated_{abs(hash(path)):x}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    with rewriting(rewriters):
        spec.loader.exec_module(module)
        _wrap_module(module)
        attach_variants(module)
    return module


def extern_kernel(module: Any, name: str) -> Callable[..., Any]:
    """The extern kernel `extern_kernels.<op>` as a generated module calls it (observed when the module was)."""
    namespace = getattr(module, "extern_kernels", None)
    if namespace is None:
        from torch._inductor.select_algorithm import extern_kernels as namespace
    return getattr(namespace, name.split(".", 1)[1])


def raw_stream(device: Any) -> int:
    """The device's current stream as a generated Triton launch takes it (`stream=`), through the device
    interface Dynamo keeps for each device type (CUDA's; torch_npu registers the NPU's)."""
    from torch._dynamo.device_interface import get_interface_for_device

    return get_interface_for_device(device.type).get_raw_stream(device.index or 0)


def _wrap_module(module: Any) -> None:
    """Replace each kernel global with a proxy; idempotent, pass-through when no handler is active."""
    if getattr(module, "__harness_wrapped__", False):
        return
    source = _module_source(module)
    cpp_params = _cpp_kernel_params(source)
    path = getattr(module, "__file__", "")
    MODULE_KERNELS[path] = kernels = []
    infos = []
    for name, value in list(vars(module).items()):
        info = _kernel_info(name, value, cpp_params, path)
        if info is not None:
            kernels.append(name)
            infos.append(info)
            setattr(module, name, _TritonProxy(value, info) if info.kind == "triton" else _CppProxy(value, info))
    MODULE_ACCUMULATES[path] = _accumulates(source, infos)
    MODULE_LOW_PRECISION_ATOMICS[path] = [
        f"{info.name} ({pointer}, {dtype})" for info in infos for pointer, dtype in info.low_precision_atomics.items()
    ]
    for name in _UNSEEN_KERNEL.findall(source):
        if callable(vars(module).get(name)):
            setattr(module, name, _UnseenKernel(vars(module)[name], name))
    if "extern_kernels" in vars(module):
        module.extern_kernels = _ExternKernelsProxy(module.extern_kernels, path)
    # Fallbacks and custom ops: `torch.ops.<namespace>.<op>.<overload>(...)`, and `aten.<op>.<overload>(...)`.
    fallbacks = _FallbackOps(path)
    if isinstance(vars(module).get("torch"), types.ModuleType):
        module.torch = _TorchProxy(module.torch, fallbacks)
    if "aten" in vars(module):
        module.aten = fallbacks.namespace("aten")
    if callable(getattr(module, "call", None)):
        module.call = _CallProxy(module.call, path)
    module.__harness_wrapped__ = True


def _kernel_info(name: str, value: Any, cpp_params: dict[str, tuple[list[str], str]], path: str) -> KernelInfo | None:
    if name in cpp_params and callable(value):
        params, source = cpp_params[name]
        return KernelInfo(
            name,
            "cpp",
            params,
            source=source,
            module_path=path,
            accumulates="tmp_acc" in source,
            low_precision_atomics=_cpp_low_precision_atomics(source),
        )
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # no Triton in this torch build
        return None
    if isinstance(value, CachingAutotuner):
        signature = value.triton_meta.get("signature", {})
        names = [n for n in value.fn.arg_names if signature.get(n) != "constexpr"]
        # `cached_autotune` moves mutated_arg_names from inductor_meta onto the autotuner.
        mutated = frozenset(
            getattr(value, "mutated_arg_names", None) or value.inductor_meta.get("mutated_arg_names", ())
        )
        source = getattr(value.fn, "src", "")
        pointers = frozenset(n for n in names if str(signature.get(n, "")).startswith("*"))
        uses = pointer_use(source, getattr(value.fn, "__name__", None) or name, sorted(pointers))
        atomics = {
            p: _TRITON_LOW_PRECISION[str(signature.get(p))]
            for p in sorted(uses.atomic_added if uses else ())
            if str(signature.get(p)) in _TRITON_LOW_PRECISION
        }
        return KernelInfo(
            name,
            "triton",
            names,
            mutated,
            source,
            path,
            accumulates=_sums(getattr(value, "heuristic_type", None)),
            launcher_narrowed=dict(value.triton_meta.get("downcast_args") or {}),
            pointers=pointers,
            uses=uses,
            low_precision_atomics=atomics,
            rsplit_partial=bool(value.inductor_meta.get("npu_rsplit_partial")),
            text_findings=text_findings(source) if source else [],
            autotuner=value,
        )
    return None


_TRITON_LOW_PRECISION = {"*fp16": "float16", "*bf16": "bfloat16"}
# C++ kernels add atomically through cpp_prefix.h's `atomic_add(&out_ptr0[i], v)` or `atomic_add_vec<T, ...>(out_ptr0,
# ...)`; the parameter's declared type says the dtype the sum rounds to.
_CPP_ATOMIC_ADD = re.compile(r"\batomic_add(?:_vec\s*<[^>]*>)?\s*\(\s*&?\s*(\w+)")
_CPP_LOW_PRECISION = {
    "at::BFloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "c10::BFloat16": "bfloat16",
    "at::Half": "float16",
    "half": "float16",
    "c10::Half": "float16",
}


def _cpp_low_precision_atomics(source: str) -> dict[str, str]:
    signature = CPP_SIGNATURE.search(source)
    declared = {}
    for param in signature.group(1).split(",") if signature else []:
        words = param.replace("*", " ").replace("&", " ").split()
        if len(words) >= 2:
            declared[words[-1]] = next((_CPP_LOW_PRECISION[w] for w in words[:-1] if w in _CPP_LOW_PRECISION), None)
    return {name: declared[name] for name in dict.fromkeys(_CPP_ATOMIC_ADD.findall(source)) if declared.get(name)}


def _sums(heuristic_type: Any) -> bool:
    """Whether a Triton kernel of this heuristic type (`runtime.hints.HeuristicType`) sums many terms."""
    return getattr(heuristic_type, "name", None) in ("REDUCTION", "PERSISTENT_REDUCTION", "SPLIT_SCAN", "TEMPLATE")


# `name = async_compile.cpp_pybinding([...], r'''<source>''')`; the source's
# `extern "C" ... kernel(const int64_t* in_ptr0, int64_t* out_ptr0)` names the parameters.
CPP_KERNEL = re.compile(r"^(\w+) = async_compile\.cpp_pybinding\(\[.*?\], r'''(.*?)'''\)", re.S | re.M)
CPP_SIGNATURE = re.compile(r'extern "C"[^(]*\bkernel\((.*?)\)', re.S)


def _cpp_kernel_params(source: str) -> dict[str, tuple[list[str], str]]:
    found = {}
    for match in CPP_KERNEL.finditer(source):
        name, kernel_source = match.group(1), match.group(2)
        signature = CPP_SIGNATURE.search(kernel_source)
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


def _dispatch_fallback(info: KernelInfo, args: tuple, kwargs: dict) -> Any:
    """A fallback call: a launch with its arguments flattened (lists of tensors too) and roles from the schema."""
    args, kwargs = _ops_unproxied(args), dict(zip(kwargs, _ops_unproxied(tuple(kwargs.values()))))
    handler = _state.handler
    info.launched += 1
    if handler is None:
        return info.op(*args, **kwargs)
    if not handles_fallbacks(handler):  # numbered all the same: `aten:N` means one call whoever watches
        _state.fallbacks += 1
        return info.op(*args, **kwargs)
    leaves, labels, roles, rebuild = _flatten_call(info.op, args, kwargs)

    def invoke(*given: Any) -> Any:
        # A replay hands fresh tensors for the results too (after the arguments): they receive what it returns.
        call_args, call_kwargs = rebuild(given[: len(leaves)])
        result = info.op(*call_args, **call_kwargs)
        for target, (_, value) in zip(given[len(leaves) :], fresh_results(result, given[: len(leaves)])):
            target.copy_(value)
        return result

    # Two frames up is the wrapper's `call` (an op proxy's __call__ -> _dispatch_fallback).
    launch = Launch(
        info,
        _state.launches,
        leaves,
        {},
        invoke,
        sys._getframe(2).f_locals,
        first=info.launched == 1,
        fallback=_state.fallbacks,
        labels=labels,
        roles=roles,
    )
    _state.fallbacks += 1
    try:
        return handler(launch)
    finally:
        launch.caller_locals = {}


def handles_fallbacks(handler: Any) -> bool:
    """Whether a launch handler takes fallback launches (marked `handles_fallbacks = True`); the others (most
    injections, which act on generated kernels) never see them."""
    return bool(getattr(handler, "handles_fallbacks", False))


def _flatten_call(op: Any, args: tuple, kwargs: dict) -> tuple[list, list[str], list[str], Callable]:
    """The call's leaves (a list argument's elements each one), their labels and roles, and how to rebuild it."""
    schema = getattr(op, "_schema", None)
    params = {a.name: a for a in schema.arguments} if schema is not None else {}
    names = [a.name for a in schema.arguments] if schema is not None else []
    leaves: list[Any] = []
    labels: list[str] = []
    roles: list[str] = []
    shape: list[tuple[str | int, int | None]] = []  # (position or keyword, list length or None)

    def add(key: str | int, value: Any) -> None:
        name = key if isinstance(key, str) else (names[key] if key < len(names) else f"arg{key}")
        alias = getattr(params.get(name), "alias_info", None)
        written = alias is not None and alias.is_write
        role = (ROLE_OUT if name.startswith("out") else ROLE_INOUT) if written else ROLE_IN
        if isinstance(value, (list, tuple)):
            shape.append((key, len(value)))
            for i, item in enumerate(value):
                leaves.append(item)
                labels.append(f"{name}[{i}]")
                roles.append(role if hasattr(item, "untyped_storage") else ROLE_SCALAR)
        else:
            shape.append((key, None))
            leaves.append(value)
            labels.append(name)
            roles.append(role if hasattr(value, "untyped_storage") else ROLE_SCALAR)

    for position, value in enumerate(args):
        add(position, value)
    for name, value in kwargs.items():
        add(name, value)
    kinds = [type(v) if isinstance(v, (list, tuple)) else None for v in [*args, *kwargs.values()]]

    def rebuild(given: tuple) -> tuple[list, dict]:
        call_args, call_kwargs, at = [], {}, 0
        for (key, length), kind in zip(shape, kinds):
            if length is None:
                value, at = given[at], at + 1
            else:
                value, at = kind(given[at : at + length]), at + length
            if isinstance(key, int):
                call_args.append(value)
            else:
                call_kwargs[key] = value
        return call_args, call_kwargs

    return leaves, labels, roles, rebuild


def returned_tensors(result: Any, path: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Any]]:
    """(index path, tensor) of every tensor in what an op returned (nested tuples and lists)."""
    if hasattr(result, "untyped_storage"):
        return [(path, result)]
    if isinstance(result, (list, tuple)):
        return [found for i, item in enumerate(result) for found in returned_tensors(item, path + (i,))]
    return []


def fresh_results(result: Any, args: Any) -> list[tuple[tuple[int, ...], Any]]:
    """The tensors an op returned that share no storage with its arguments (an in-place op's `self` does)."""
    return [
        (path, tensor)
        for path, tensor in returned_tensors(result)
        if not any(tensor is a or _shares_storage(tensor, a) for a in args)
    ]


def _shares_storage(tensor: Any, other: Any) -> bool:
    if not (hasattr(tensor, "untyped_storage") and hasattr(other, "untyped_storage")):
        return False
    try:
        pointer = tensor.untyped_storage().data_ptr()
        return pointer != 0 and pointer == other.untyped_storage().data_ptr()
    except RuntimeError:  # a tensor without storage (sparse, a tensor subclass)
        return False


def is_fallback_launch(op: Any) -> bool:
    """Whether a call of this op in the wrapper is a launch: it computes tensors (returns one that is not a view of
    an argument) or writes one. Views, asserts and the wrapper's own allocation ops are glue."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return True  # an op packet called without an overload: judged by what it returns
    if str(op).startswith(_GLUE_OPS):
        return False
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    computes = any(r.alias_info is None and "Tensor" in str(r.type) for r in schema.returns)
    return writes or computes


# The wrapper's memory-planning ops: they allocate or resize storage, never compute.
_GLUE_OPS = (
    "inductor._alloc_from_pool",
    "inductor.resize_storage_bytes_",
    "aten.set_.",
    "aten._assert",
    "aten.sym_",
    "aten.empty",
    "aten.resize_",
)


class _FallbackOps:
    """`torch.ops` as one wrapper module sees it: each op overload a launch of kind "fallback"."""

    def __init__(self, path: str):
        self.path = path
        self._namespaces: dict[str, _OpNamespaceProxy] = {}
        self._infos: dict[str, KernelInfo] = {}

    def namespace(self, name: str) -> "_OpNamespaceProxy":
        found = self._namespaces.get(name)
        if found is None:
            import torch

            found = self._namespaces[name] = _OpNamespaceProxy(getattr(torch.ops, name), self)
        return found

    def info(self, op: Any) -> KernelInfo:
        name = f"torch.ops.{op}"  # as the wrapper writes it, and as codegen names it to provenance tracing
        found = self._infos.get(name)
        if found is None:
            found = self._infos[name] = KernelInfo(
                name, KIND_FALLBACK, [], module_path=self.path, accumulates=True, op=op
            )
        return found


class _TorchProxy:
    """The wrapper module's `torch`, with `torch.ops` observed; everything else is torch's own."""

    def __init__(self, torch_module: types.ModuleType, fallbacks: _FallbackOps):
        self.__dict__["_torch"], self.__dict__["_ops"] = torch_module, _OpsProxy(fallbacks)

    def __getattr__(self, name: str) -> Any:
        return self._ops if name == "ops" else getattr(self._torch, name)


class _OpsProxy:
    def __init__(self, fallbacks: _FallbackOps):
        self._fallbacks = fallbacks

    def __getattr__(self, name: str) -> Any:
        return self._fallbacks.namespace(name)


class _CachedAttributes:
    """A proxy of `target` whose attributes are looked up once, each wrapped by `_wrap`."""

    def __init__(self, target: Any, fallbacks: _FallbackOps):
        self._target, self._fallbacks = target, fallbacks
        self._found: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        found = self._found.get(name)
        if found is None:
            found = self._found[name] = self._wrap(getattr(self._target, name))
        return found

    def _wrap(self, value: Any) -> Any:
        raise NotImplementedError


class _OpNamespaceProxy(_CachedAttributes):
    """`torch.ops.<namespace>`: its ops' packets."""

    def _wrap(self, value: Any) -> Any:
        return _OpPacketProxy(value, self._fallbacks) if callable(value) else value


class _OpPacketProxy(_CachedAttributes):
    """`torch.ops.<namespace>.<op>`: its overloads; called itself (no overload named), a launch too."""

    def __init__(self, packet: Any, fallbacks: _FallbackOps):
        super().__init__(packet, fallbacks)
        self._info = fallbacks.info(packet)

    def _wrap(self, value: Any) -> Any:
        return _OpProxy(value, self._fallbacks) if hasattr(value, "_schema") and callable(value) else value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _dispatch_fallback(self._info, args, kwargs)


class _OpProxy:
    """One op overload: a launch when it computes or writes tensors (`is_fallback_launch`), else called as is."""

    def __init__(self, op: Any, fallbacks: _FallbackOps):
        self._op = op
        self._info = fallbacks.info(op) if is_fallback_launch(op) else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._info is None:
            args, kwargs = _ops_unproxied(args), dict(zip(kwargs, _ops_unproxied(tuple(kwargs.values()))))
            return self._op(*args, **kwargs)
        return _dispatch_fallback(self._info, args, kwargs)


def _ops_unproxied(values: tuple) -> tuple:
    """An op the wrapper passes as an argument (`with_effects(token, torch.ops.aten._linalg_check_errors.default,
    ...)`), as itself: the proxy only observes calls, and a higher-order op checks its argument's type."""
    return tuple(
        value._op if isinstance(value, _OpProxy) else value._target if isinstance(value, _OpPacketProxy) else value
        for value in values
    )


def _dispatch(info: KernelInfo, invoke: Callable[..., Any], args: tuple, kwargs: dict, autotunes: bool = False) -> Any:
    handler = _state.handler
    info.launched += 1  # handled or not: a first launch is first whoever watches it
    if handler is None:
        return invoke(*args, **kwargs)
    # Two frames up is the wrapper's `call` (proxy method -> _dispatch).
    launch = Launch(
        info,
        _state.launches,
        list(args),
        kwargs,
        invoke,
        sys._getframe(2).f_locals,
        first=info.launched == 1,
        autotunes=autotunes,
    )
    _state.launches += 1
    rounds = info.benchmark_rounds
    try:
        return handler(launch)
    finally:
        launch.autotunes = launch.autotunes or info.benchmark_rounds > rounds
        launch.caller_locals = {}  # frames' locals hold buffers: never keep them past the launch


class _CallProxy:
    """The wrapper's `call(args)`: one run of one compiled graph."""

    def __init__(self, call: Callable[[list], Any], path: str):
        self.call, self.path = call, path

    def __call__(self, args: list) -> Any:
        observer = _state.graph_observer
        if observer is None:
            return self.call(args)
        return observer(self.path, args, self.call)


class _ExternKernelsProxy:
    """`extern_kernels.<op>(...)` calls become launches of kind "extern"."""

    def __init__(self, namespace: Any, path: str):
        self._namespace, self._path = namespace, path
        self._infos: dict[str, KernelInfo] = {}  # one per library call, counting its launches

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._namespace, name)
        if not callable(target):
            return target
        info = self._infos.get(name)
        if info is None:
            info = self._infos[name] = KernelInfo(
                f"extern_kernels.{name}", "extern", [], module_path=self._path, accumulates=True
            )

        def launch(*args: Any, **kwargs: Any) -> Any:
            return _dispatch(info, target, args, kwargs)

        return launch


# Kernels a wrapper calls as plain functions with no signature to give their arguments roles: torch_npu's
# CATLASS GEMM templates (`name = async_compile.catlass(r'''...`, its `codegen/catlass/catlass_scheduling.py`).
_UNSEEN_KERNEL = re.compile(r"^(\w+) = async_compile\.catlass\(", re.M)


class UnseenLaunch(RuntimeError):
    """A kernel the launch hooks cannot see as a launch ran while they watched: refused, not judged blind."""


class _UnseenKernel:
    """Passes through when no handler watches (a plain run's verdict needs no launch); refuses otherwise."""

    def __init__(self, kernel: Callable[..., Any], name: str):
        self.kernel, self.name = kernel, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _state.handler is None:
            return self.kernel(*args, **kwargs)
        raise UnseenLaunch(
            f"CATLASS kernel {self.name} (torch_npu's async_compile.catlass) is called as a plain "
            "function, whose arguments the launch hooks cannot read: localizing or injecting through "
            "it is refused; run without it (CATLASS runs only with max_autotune and CATLASS among "
            "max_autotune_gemm_backends)"
        )


class _CppProxy:
    def __init__(self, kernel: Callable[..., Any], info: KernelInfo):
        self.kernel, self.info = kernel, info

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _dispatch(self.info, self.kernel, args, kwargs)


def _count_benchmarks(kernel: Any, info: KernelInfo) -> None:
    """Count the autotuner's benchmark rounds in `info`: its launches of each config on cloned arguments happen
    inside `run`, past the proxy, and are the compiled binaries' first launches (the instance attribute
    shadows the class's method, torch_npu's override included)."""
    benchmark = getattr(kernel, "benchmark_all_configs", None)
    if benchmark is None or getattr(benchmark, "counted_by_harness", False):
        return

    def benchmark_all_configs(*args: Any, **kwargs: Any) -> Any:
        info.benchmark_rounds += 1
        return benchmark(*args, **kwargs)

    benchmark_all_configs.counted_by_harness = True  # type: ignore[attr-defined]
    try:
        kernel.benchmark_all_configs = benchmark_all_configs
    except AttributeError:  # a kernel object that takes no attributes: its rounds stay uncounted
        pass


class _TritonProxy:
    # kernel_variants unwraps proxies by this mark (it cannot import this module: it is imported by it).
    wraps_an_observed_kernel = True

    def __init__(self, kernel: Any, info: KernelInfo):
        self.kernel, self.info = kernel, info
        _count_benchmarks(kernel, info)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        # Precompiled with several launchers: this call benchmarks them all first (`CachingAutotuner.run`, and
        # torch_npu's `NPUCachingAutotuner.run`), and a benchmark-only call is no launch of the program.
        autotunes = len(getattr(self.kernel, "launchers", None) or ()) > 1 and not kwargs.get("benchmark_run")
        return _dispatch(self.info, self.kernel.run, args, kwargs, autotunes)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)
