"""Backend loading as torch_npu 2.14.0 does it (`torch_npu/_inductor/__init__.py`): importing this loads one.

`_BACKEND_LOADERS.get(backend, _load_triton_backend)`: an unknown name loads the default backend, without a
word, and `_InductorNpuRegistry._loaded_backend` still records the name asked for. Every backend here
generates the device's kernels in one of two modes: Inductor's C++ CPU kernels (`host_codegen`, the default),
or with `NPU_SURROGATE_CODEGEN=triton` Inductor's Triton kernels run by triton-ascend's interpreter
(`triton_codegen`); `triton_experimental` also writes Inductor's config as its `_activate` does.

`NPU_SURROGATE_BACKENDS` (comma-separated names) keeps only those loaders, to stand for another release:
`default,mlir` is the v2.12.0 branch, which has no `triton_experimental`.
"""

from __future__ import annotations

import os

from ..utils._dynamo import BACKEND_VARIABLE, _InductorNpuRegistry
from .. import _triton_codegen as triton_codegen
from . import host_codegen


def _get_backend() -> str:
    return os.getenv(BACKEND_VARIABLE, "default")


def _register_codegen() -> None:
    (triton_codegen if triton_codegen.wanted() else host_codegen).register()


def _load_triton_backend():
    import torch

    _register_codegen()
    torch._inductor.config.comprehensive_padding = False


def _load_triton_experimental_backend():
    _register_codegen()
    from .triton_experimental import _activate

    _activate()


def _load_mlir_backend():
    _load_triton_backend()


_ALL_LOADERS = {
    "mlir": _load_mlir_backend,
    "default": _load_triton_backend,
    "triton_experimental": _load_triton_experimental_backend,
}
_kept = os.environ.get("NPU_SURROGATE_BACKENDS")
_BACKEND_LOADERS = (
    {name: loader for name, loader in _ALL_LOADERS.items() if name in _kept.split(",")} if _kept else dict(_ALL_LOADERS)
)


def _load_backend():
    backend = _get_backend()
    loader = _BACKEND_LOADERS.get(backend, _load_triton_backend)
    loader()
    _InductorNpuRegistry._loaded_backend = backend


_load_backend()
