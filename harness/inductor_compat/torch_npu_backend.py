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

import importlib
import os
import sys
import warnings
from dataclasses import dataclass, field

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
