"""torch_npu's Inductor backends: load the one a compile asks for, as that compile would, and say which loaded.

torch_npu loads its Inductor backend at the first compile, and the load writes Inductor's config
(`triton_experimental._activate`: `layout_optimization`, `coordinate_descent_tuning` and `split_reductions`
off, `size_asserts` off, ...). The harness restores the config after every case, so it must load the backend
before it saves the config: the state it restores is then the backend's own, whatever the case's place in the
run. And the name asked for is not always what loads: an unknown name falls back to the default backend
without a word.

Read in the torch-npu wheels on PyPI (`torch_npu/utils/_dynamo.py`, `torch_npu/_inductor/__init__.py`):

- 2.12.0 to 2.14.0: a compile runs in `_NpuBackendScope(backend)` (the option, else
  `torch._inductor.config.npu_backend`, else `TORCHINDUCTOR_NPU_BACKEND`: `_resolve_npu_backend`), which
  sets the variable and calls `_InductorNpuRegistry.register_inductor_npu()`: unless `_loaded_backend` is
  already that name, `_load_backend()` runs `_BACKEND_LOADERS.get(name, _load_triton_backend)` and sets
  `_loaded_backend` to the name asked for, whichever loader ran. 2.12.0 has the loaders `mlir` and
  `default`; 2.13.0 and 2.14.0 add `dvm`, `ascendc` and `triton_experimental`. A Triton loader without
  triton-ascend warns "triton-ascend is not installed" and loads nothing.
- 2.7.1 to 2.11.0: one backend. `register_inductor_npu()` imports `torch_npu._inductor` once; there is no
  `_loaded_backend`, and Inductor's config has no `npu_backend` option.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

DEFAULT = "default"
BACKEND_VARIABLE = "TORCHINDUCTOR_NPU_BACKEND"


@dataclass(frozen=True)
class LoadedBackend:
    asked: str  # the `npu_backend` option of the compile
    loaded: str | None  # the backend whose loader ran; None when none loaded
    warnings: list[str] = field(default_factory=list)  # what torch_npu warned while loading

    @property
    def mismatch(self) -> str | None:
        """Why the backend that loaded is not the one asked for; None when it is."""
        if self.loaded == self.asked:
            return None
        said = f" (torch_npu said: {'; '.join(self.warnings)})" if self.warnings else ""
        loaded = f"loaded {self.loaded!r}" if self.loaded else "loaded none"
        return f"npu_backend {self.asked!r} was asked for, but torch_npu {loaded}{said}"


def _registry_module():
    return importlib.import_module("torch_npu.utils._dynamo")


def selects_backends() -> bool:
    """Whether this torch_npu has several Inductor backends, chosen by the `npu_backend` option (2.12.0 on)."""
    return hasattr(getattr(_registry_module(), "_InductorNpuRegistry", None), "_loaded_backend")


def load(asked: str | None) -> LoadedBackend:
    """Load the backend a compile with `npu_backend=asked` would use, as that compile would; which one loaded.

    The compile resolves the name as torch_npu does (`default` gives way to the config and the variable), so a
    `default` asked for while the variable names another backend is a mismatch too. Idempotent: torch_npu
    loads again only when another name is asked for.
    """
    # A compile reaches torch_npu's loader from Inductor's `compile_fx`, imported by then; a loader may rely on it
    # (2.13.0rc1's `_inductor/utils.py` assigns `torch._inductor.compile_fx.has_triton` without importing it).
    importlib.import_module("torch._inductor.compile_fx")
    registry_module = _registry_module()
    if not selects_backends():  # one backend, loaded once (by its registry, or by importing it)
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            register = getattr(registry_module, "register_inductor_npu", None)
            if register is not None:
                register()
            else:
                importlib.import_module("torch_npu._inductor")
        return _loaded(asked or DEFAULT, DEFAULT if "torch_npu._inductor" in sys.modules else None, said)
    registry = registry_module._InductorNpuRegistry
    name = getattr(registry_module, "_resolve_npu_backend", _resolve)(asked)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        scope = getattr(registry_module, "_NpuBackendScope", None)
        if scope is not None:
            with scope(name):
                pass
        else:  # the registry reads the variable
            previous = os.environ.get(BACKEND_VARIABLE)
            os.environ[BACKEND_VARIABLE] = name
            try:
                registry_module.register_inductor_npu()
            finally:
                if previous is None:
                    os.environ.pop(BACKEND_VARIABLE, None)
                else:
                    os.environ[BACKEND_VARIABLE] = previous
    recorded = registry._loaded_backend  # the name asked for, whichever loader ran
    loaders = getattr(sys.modules.get("torch_npu._inductor"), "_BACKEND_LOADERS", None)
    loaded = recorded if loaders is None or recorded in loaders else DEFAULT
    return _loaded(asked or DEFAULT, loaded, said)


def _resolve(asked: str | None) -> str:
    """torch_npu's rule where it has no `_resolve_npu_backend` (2.12.0 spells it out in its wrapper): the
    option, else `torch._inductor.config.npu_backend`, else the variable; "default" gives way."""
    configured = getattr(sys.modules.get("torch._inductor.config"), "npu_backend", None)
    for name in (asked, configured):
        if name not in (None, "", DEFAULT):
            return name
    return os.environ.get(BACKEND_VARIABLE, DEFAULT)


def _loaded(asked: str, loaded: str | None, said: list[warnings.WarningMessage]) -> LoadedBackend:
    texts = [str(w.message) for w in said]
    # The Triton loaders return before loading anything when triton-ascend is missing, and only warn.
    if any("not installed" in text for text in texts):
        loaded = None
    return LoadedBackend(asked, loaded, texts)


def missing_codegen_imports(device: str = "npu") -> list[str]:
    """The modules every Triton kernel module of `device` imports that cannot be found here, in the order its
    codegen writes them; [] when all can, or when the device's kernels are not Triton.

    The imports are rendered as the device's registered scheduling renders them for a kernel module
    (`kernel_type.gen_common_triton_imports()`, torch 2.1 to 2.13, then torch_npu's
    `gen_triton_ext_imports`, `triton_experimental/codegen/triton.py` in 2.14.0, which reads only its config:
    with `select_extract_slice` on, the default, it imports `triton.language.extra.cann.extension`), and each
    module looked up with `importlib.util.find_spec`. A kernel module that cannot import fails at its first
    compile, in a compile worker, once per kernel."""
    import ast
    import importlib.util

    from torch._inductor.codegen.common import get_scheduling_for_device

    kernel = getattr(get_scheduling_for_device(device), "kernel_type", None)
    if kernel is None or not hasattr(kernel, "gen_common_triton_imports"):
        return []
    try:
        text = kernel.gen_common_triton_imports()
        extension = getattr(kernel, "gen_triton_ext_imports", None)
        if extension is not None:
            text += "\n" + extension(None)  # (an instance method that reads only its config)
        tree = ast.parse(text)
    except Exception:  # noqa: BLE001 - a codegen whose imports cannot be rendered so: nothing to check
        return []
    modules = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
    missing = []
    for module in dict.fromkeys(modules):
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            found = False
        except ValueError:  # in sys.modules without a spec (a module made at runtime): importable
            found = True
        if not found:
            missing.append(module)
    return missing


def codegen_import_problem(backend: str, missing: list[str], versions: dict[str, str]) -> str | None:
    """Why `backend`'s kernels cannot run, in one line, when modules they import are missing; None otherwise."""
    if not missing:
        return None
    triton = versions.get("triton-ascend") or versions.get("triton")
    triton_named = (
        f"triton-ascend {versions['triton-ascend']}"
        if "triton-ascend" in versions
        else f"triton {triton}"
        if triton
        else "no Triton"
    )
    return (
        f"torch_npu {versions.get('torch_npu', '(version unknown)')}'s {backend} codegen imports "
        f"{', '.join(missing)} in every kernel module, which cannot be imported with {triton_named} installed: "
        f"install the triton-ascend release made for this torch_npu, or run another --npu-backend"
    )


FAST_LAUNCH_VARIABLE = "TORCHINDUCTOR_NPU_FAST_LAUNCH"


def fast_launch() -> str | None:
    """Why the launch hooks would not see this torch_npu's launches, in one line: its fast launch
    (`_inductor/config.py` `enable_fast_launch`, from `TORCHINDUCTOR_NPU_FAST_LAUNCH`, read at import;
    `experimental/python_wrapper_fast_launch/patch.py` rewrites the wrapper to call each kernel's launcher
    directly, past `kernel.run(..., stream=...)`). None when it is off."""
    config = sys.modules.get("torch_npu._inductor.config")
    on = getattr(config, "enable_fast_launch", None)
    if on is None:  # not imported (yet): the variable it will be read from
        on = os.environ.get(FAST_LAUNCH_VARIABLE, "0").strip().lower() in ("1", "true", "yes", "on", "y")
    if not on:
        return None
    return (
        f"{FAST_LAUNCH_VARIABLE}={os.environ.get(FAST_LAUNCH_VARIABLE, '1')}: torch_npu's fast launch calls "
        "each kernel's launcher directly, past the kernel.run(...) the harness sees launches through; unset it"
    )


# torch_npu's launcher narrowing (`triton_experimental/npu_triton_heuristics.py`, 2.14.0: `_DTYPE_DOWNCAST_MAP`,
# `_wrap_launcher_with_downcast`): each tensor argument its codegen typed `*i64`/`*fp64` in `downcast_args` is
# converted at every launch with `Tensor.to()` (input-only ones, memoized), or `empty_like` (outputs), then
# written back with `copy_`. `.to()` and `empty_like` keep strides only for a non-overlapping-and-dense tensor:
# any other comes back dense, while the kernel still addresses it with its compile-time strides (seed 000).
LAUNCHER_NARROWING = {"*i64": ("int64", "int32"), "*fp64": ("float64", "float32")}


# torch_npu's launcher chooses each launch's grid itself (`triton_experimental/npu_triton_heuristics.py`,
# `NPUTritonCompileResult.make_launcher`, 2.13.0 and 2.14.0): it writes the source of
# `def launcher(<kernel args>, stream, runner=runner, ..., slow_runner=...)`, whose body computes `grid_0` from
# `xnumel`, the config's XBLOCK and the vector core count (`NPU_CU_COUNT`, the `total_thread` its codegen writes
# into each kernel's body among which the kernel divides its tiles: `codegen/triton.py` line 4455 in 2.14.0) and
# calls `runner(grid_0, grid_1, grid_2, stream, ...)` (the fast launch's `runner` takes the same order). The
# runner is a parameter default, so replacing that default changes this one launcher's launches alone. The
# autotuner holds the launcher itself or `_wrap_launcher_with_downcast`'s wrapper around it (a closure).
RUNNER_PARAMETERS = ("runner", "slow_runner")


@dataclass
class LauncherGrid:
    """The grids (`grid_0`, programs) a kernel's own launcher computed, one per launch seen."""

    seen: list[int] = field(default_factory=list)


def vector_core_count() -> int | None:
    """The vector core count torch_npu's triton_experimental codegen divides a kernel's tiles among (None where
    that backend is not there)."""
    props = sys.modules.get("torch_npu._inductor.triton_experimental.device_props")
    count = getattr(props, "get_npu_vector_core_count", None)
    try:
        return int(count()) if count is not None else None
    except Exception:  # noqa: BLE001 - no device answered: no figure
        return None


def _generated_launcher(launcher: Any) -> Any:
    """The launcher torch_npu generated (the function with a `runner` parameter), itself or inside the
    narrowing wrapper's closure; None for another autotuner's launchers."""
    for candidate in (launcher, *(c.cell_contents for c in getattr(launcher, "__closure__", None) or ())):
        code = getattr(candidate, "__code__", None)
        if code is not None and "runner" in code.co_varnames[: code.co_argcount] and candidate.__defaults__:
            return candidate
    return None


@contextlib.contextmanager
def launcher_grid(autotuner: Any, programs: int | None = None) -> Iterator[LauncherGrid | None]:
    """While active, each launch of `autotuner` through torch_npu's generated launcher records the grid that
    launcher computed, and runs on `programs` programs instead where given. Yields None where the autotuner's
    launchers are not torch_npu's generated ones (no grid to see or change)."""
    launchers = [found for each in getattr(autotuner, "launchers", None) or () if (found := _generated_launcher(each))]
    if not launchers:
        yield None
        return
    grid = LauncherGrid()

    def observed(runner: Callable[..., Any]) -> Callable[..., Any]:
        def run(grid_0: int, *rest: Any, **kwargs: Any) -> Any:
            grid.seen.append(int(grid_0))
            return runner(grid_0 if programs is None else programs, *rest, **kwargs)

        return run

    saved = []
    for launcher in launchers:
        code = launcher.__code__
        names = code.co_varnames[: code.co_argcount]
        defaults = list(launcher.__defaults__)
        first = len(names) - len(defaults)
        for name in RUNNER_PARAMETERS:
            if name in names[first:]:
                defaults[names.index(name) - first] = observed(defaults[names.index(name) - first])
        saved.append((launcher, launcher.__defaults__))
        launcher.__defaults__ = tuple(defaults)
    try:
        yield grid
    finally:
        for launcher, defaults in saved:
            launcher.__defaults__ = defaults


# The loads torch_npu's triton_experimental codegen rewrites, known by the variables it names them with
# (`_inductor/triton_experimental/codegen/triton.py`, 2.14.0; the same names in 2.13.0 and 2.13.0rc1): the
# select-lane rewrite widens a strided load into a contiguous tile of `k` lanes per element and keeps every k-th
# (`_es_slane{n}`/`_es_sfull{n}`, lines 5082-5098); its sibling widens a load of one element of each K-element row
# (`x[..., 0]`, its "Case A") into all K lanes and slices one out (`_es_lane{n}`/`_es_full{n}`, lines 4987-4995).
# Each: (the variable's prefix, the mechanism's name in a record's `mechanism`, what the load is, in words).
REWRITTEN_LOADS = (
    ("_es_sfull", "select-lane-load", "torch_npu's select-lane rewrite's widened load (codegen/triton.py 5082-5098)"),
    (
        "_es_full",
        "extract-slice-load",
        "torch_npu's widened select load, sliced by extract_slice (codegen/triton.py 4987-4995)",
    ),
)


def rewritten_load(line: str | None) -> tuple[str, str] | None:
    """(mechanism, what it is) where a kernel's source line is a load torch_npu's codegen rewrote (`REWRITTEN_LOADS`);
    None for any other line."""
    for prefix, mechanism, said in REWRITTEN_LOADS:
        if line and re.match(rf"\s*{prefix}\d+\s*=\s*tl\.load\(", line):
            return mechanism, said
    return None
