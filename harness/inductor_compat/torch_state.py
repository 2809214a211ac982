"""Process-wide torch state a case can change, saved before it and restored after it.

A worker runs many cases one after another. A case that sets, say,
`torch._dynamo.config.suppress_errors = True` in its build would otherwise turn
the next case's compile failure into a silent eager fallback: a verdict would
depend on which cases ran before. `preserved()` snapshots Dynamo's, Inductor's
and functorch's config modules (`get_config_copy()`, torch >= 2.1), those of a
loaded compiler backend (`BACKEND_CONFIG_MODULES`) and the
global flags below, restores them after the block, and returns what changed.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch


# A compiler backend's own config modules, where the backend is loaded (never imported here): torch_npu
# 2.14.0's `triton_experimental` tunables (`torch_npu/_inductor/triton_experimental/config.py`, a ConfigModule:
# `rsplit_outer`, `elide_reduction_where`, `codegen_linearize`, ...), which its codegen reads.
BACKEND_CONFIG_MODULES = ("torch_npu._inductor.triton_experimental.config",)


def _config_modules() -> dict[str, Any]:
    import sys

    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    found = {
        "torch._dynamo.config": dynamo_config,
        "torch._inductor.config": inductor_config,
        "torch._functorch.config": functorch_config,
    }
    for name in BACKEND_CONFIG_MODULES:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "get_config_copy"):
            found[name] = module
    return found


def _set_default_device(device: torch.device) -> None:
    # No default set reads as the CPU: restored as none set (setting "cpu" would enter a TorchFunctionMode).
    torch.set_default_device(None if device == torch.device("cpu") else device)


def _set_mkldnn(enabled: bool) -> None:
    with backend_flags_mutable():
        torch.backends.mkldnn.enabled = enabled


def _autocast(device_type: str) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """Read and write autocast's state of one device type (torch 2.4 on: `is_autocast_enabled(device_type)`)."""

    def read() -> tuple[bool, torch.dtype]:
        return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)

    def write(value: tuple[bool, torch.dtype]) -> None:
        torch.set_autocast_enabled(device_type, value[0])
        torch.set_autocast_dtype(device_type, value[1])

    return read, write


# name -> (read, write) of a process-wide flag.
_FLAGS: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "torch.get_default_dtype()": (torch.get_default_dtype, torch.set_default_dtype),
    "torch.get_default_device()": (torch.get_default_device, _set_default_device),
    "torch.is_anomaly_enabled()": (
        lambda: (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
        lambda v: torch.set_anomaly_enabled(v[0], v[1]),
    ),
    "torch.is_autocast_enabled('cpu')": _autocast("cpu"),
    "torch.is_autocast_enabled('cuda')": _autocast("cuda"),
    "torch.backends.mkldnn.enabled": (lambda: torch.backends.mkldnn.enabled, _set_mkldnn),
    "torch.is_grad_enabled()": (torch.is_grad_enabled, torch.set_grad_enabled),
    "torch.are_deterministic_algorithms_enabled()": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
    ),
    "torch.get_float32_matmul_precision()": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "torch.backends.cudnn.allow_tf32": (
        lambda: torch.backends.cudnn.allow_tf32,
        lambda v: setattr(torch.backends.cudnn, "allow_tf32", v),
    ),
    "torch.backends.cudnn.deterministic": (
        lambda: torch.backends.cudnn.deterministic,
        lambda v: setattr(torch.backends.cudnn, "deterministic", v),
    ),
    "torch.backends.cudnn.benchmark": (
        lambda: torch.backends.cudnn.benchmark,
        lambda v: setattr(torch.backends.cudnn, "benchmark", v),
    ),
    "torch.backends.cuda.matmul.allow_tf32": (
        lambda: torch.backends.cuda.matmul.allow_tf32,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v),
    ),
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", v),
    ),
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        lambda v: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", v),
    ),
}


def _snapshot() -> dict[str, Any]:
    saved: dict[str, Any] = {}
    for module_name, module in _config_modules().items():
        for key, value in module.get_config_copy().items():
            saved[f"{module_name}.{key}"] = value
    for name, (read, _) in _FLAGS.items():
        try:
            saved[name] = read()
        except Exception:  # a backend flag this build does not have
            pass
    return saved


def _restore(saved: dict[str, Any], changed: list[str]) -> None:
    modules = _config_modules()
    for name in changed:
        if name in _FLAGS:
            _FLAGS[name][1](saved[name])
            continue
        module_name, _, key = name.rpartition(".")
        setattr(modules[module_name], key, saved[name])


def _differs(a: Any, b: Any) -> bool:
    # A config's copy (`get_config_copy` deep-copies) of a custom graph pass object is another object: Inductor tells
    # passes apart by their `uuid()` (`CustomGraphPass`, torch 2.6 on), and so does this.
    if type(a) is type(b) and callable(getattr(a, "uuid", None)):
        try:
            return a.uuid() != b.uuid()
        except Exception:  # noqa: BLE001 - a pass whose uuid cannot be made: compared as any object
            pass
    try:
        return bool(a != b)
    except Exception:  # values whose comparison is not a truth value
        return a is not b


@contextlib.contextmanager
def preserved(changed: list[str]) -> Iterator[None]:
    """Restore torch's global config and flags after the block; `changed` receives what the block changed."""
    saved = _snapshot()
    try:
        yield
    finally:
        now = _snapshot()
        found = [name for name in saved if name in now and _differs(now[name], saved[name])]
        _restore(saved, found)
        changed.extend(found)


def config_set() -> dict[str, Any]:
    """The config entries whose values differ from their declared defaults now (set by a compiler backend as it
    loaded, an environment variable, the user), by qualified name: what a record says the case ran under
    besides its own options. `ConfigModule._get_dict(skip_default=True)` (torch 2.5 to 2.13) names every entry
    ever assigned, and `config.patch` assigns the old value back when it ends: an entry is kept only if its
    value is not its `_config` entry's `default`."""
    found: dict[str, Any] = {}
    for module_name, module in _config_modules().items():
        export, entries = getattr(module, "_get_dict", None), getattr(module, "_config", {})
        if export is None:
            continue
        for key, value in export(skip_default=True).items():
            entry = entries.get(key)
            if entry is None or _differs(value, entry.default):
                found[f"{module_name}.{key}"] = value
    return found


def backend_flags_mutable() -> contextlib.AbstractContextManager:
    """Allow setting cuDNN/MKLDNN flags by attribute while the block runs.

    Importing torch's test utilities (`torch.testing._internal.common_utils`, which
    OpInfo's database imports) freezes them (`torch.backends.disable_global_flags()`):
    an assignment then raises, and only `torch.backends.cudnn.flags(...)`, whose
    parameters change between releases, may set them. That context manager unfreezes
    them with `torch.backends.__allow_nonbracketed_mutation()` (torch 1.x to 2.13), as
    this does; without it, nothing to unfreeze.
    """
    unfreeze = getattr(torch.backends, "__allow_nonbracketed_mutation", None)
    return unfreeze() if unfreeze is not None else contextlib.nullcontext()
