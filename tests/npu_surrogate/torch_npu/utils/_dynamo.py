"""The compiler registry of torch_npu 2.14.0 (`torch_npu/utils/_dynamo.py`), as far as the harness meets it.

- `_InductorNpuRegistry.register_inductor_npu()` loads the backend named by `TORCHINDUCTOR_NPU_BACKEND`
  ("default" when unset) unless `_loaded_backend` already is that name: the first time by importing
  `torch_npu._inductor` (whose import loads it), later by `_load_backend()`. It records the name asked
  for, whichever backend loaded.
- `_resolve_npu_backend`: the compile option, else `torch._inductor.config.npu_backend`, else the variable.
- `_NpuBackendScope`: sets the variable for one compile, registers, restores the variable.
- `patch_inductor_wrapper`: `torch.compile(backend="inductor")` runs each compile in that scope, and
  Inductor's config gains the `npu_backend` entry (so `options={"npu_backend": ...}` is accepted).
"""

from __future__ import annotations

import importlib
import os
import sys

BACKEND_VARIABLE = "TORCHINDUCTOR_NPU_BACKEND"


class _InductorNpuRegistry:
    _disabled_register = False
    _loaded_backend = None

    @classmethod
    def register_inductor_npu(cls):
        if cls._disabled_register:
            return
        current = os.getenv(BACKEND_VARIABLE, "default")
        if cls._loaded_backend != current:
            if "torch_npu._inductor" not in sys.modules:
                importlib.import_module("torch_npu._inductor")
            else:
                sys.modules["torch_npu._inductor"]._load_backend()
            cls._loaded_backend = current

    @classmethod
    def has_initialized(cls):
        return cls._loaded_backend is not None


def register_inductor_npu():
    _InductorNpuRegistry.register_inductor_npu()


def _resolve_npu_backend(selected_backend=None) -> str:
    """Compile option > config > environment, as torch_npu resolves it."""
    if selected_backend not in (None, "", "default"):
        return selected_backend
    inductor_config = sys.modules.get("torch._inductor.config")
    global_backend = getattr(inductor_config, "npu_backend", None)
    if global_backend not in (None, "", "default"):
        return global_backend
    return os.getenv(BACKEND_VARIABLE, "default")


class _NpuBackendScope:
    """The resolved backend for one compile: the variable set, the registry asked, the variable restored."""

    def __init__(self, backend: str):
        self.backend = backend
        self._old_env = None

    def __enter__(self):
        self._old_env = os.environ.get(BACKEND_VARIABLE)
        try:
            os.environ[BACKEND_VARIABLE] = self.backend
            register_inductor_npu()
        except BaseException:
            self._restore_backend_env()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self._restore_backend_env()
        return False

    def _restore_backend_env(self):
        if self._old_env is None:
            os.environ.pop(BACKEND_VARIABLE, None)
        else:
            os.environ[BACKEND_VARIABLE] = self._old_env


def patch_inductor_wrapper():
    from torch import _TorchCompileInductorWrapper
    from torch.utils._config_module import Config, ConfigModule, _ConfigEntry

    if getattr(_TorchCompileInductorWrapper, "_npu_surrogate_patched", False):
        return
    src_call = _TorchCompileInductorWrapper.__call__
    src_get_config_copy = ConfigModule.get_config_copy

    def new_get_config_copy(self):
        copied = src_get_config_copy(self)
        inductor_config = sys.modules.get("torch._inductor.config")
        if inductor_config is None or self is not inductor_config:
            return copied
        if "npu_backend" not in copied:
            copied["npu_backend"] = "default"
            self._config["npu_backend"] = _ConfigEntry(Config(default="default", value_type=str), name="npu_backend")
        return copied

    def new_call(self, model_, inputs_):
        with _NpuBackendScope(_resolve_npu_backend(self.config.get("npu_backend"))):
            return src_call(self, model_, inputs_)

    _TorchCompileInductorWrapper.__call__ = new_call
    _TorchCompileInductorWrapper._npu_surrogate_patched = True
    ConfigModule.get_config_copy = new_get_config_copy
