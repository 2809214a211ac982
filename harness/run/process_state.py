"""Process state a case can change that is not torch's, saved before it and restored after it.

A worker runs the next case in the same interpreter: a case that changes the working directory (a later
relative case path no longer loads), the environment (`TORCHINDUCTOR_*` read by the next compile), the umask
(files the next case's compile writes) or a signal handler (the worker's own SIGTERM handling) would change
what runs after it. `preserved(changed)` snapshots them, restores them after the block, and names what
changed, as `inductor_compat.torch_state.preserved` does for torch's flags and config.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any, Iterator

# Set by torch itself the first time it compiles, unset before (torch 2.13: `runtime/cache_dir_utils.py`,
# `runtime/triton_heuristics.py`, `runtime/compile_tasks.py`): set from unset, they are torch's own lazy setup,
# not the case's change, and stay. A change of a value set before is the case's.
SET_BY_TORCH = frozenset({"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TRITON_PTXAS_PATH", "TRITON_LIBDEVICE_PATH"})
# Written by torch on every C++ module it loads (an address, `_inductor/codecache.py`): never the case's.
REWRITTEN_BY_TORCH = frozenset({"_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR"})
# The handlers a worker relies on, and those a case most often installs.
_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGCHLD", "SIGALRM", "SIGPIPE", "SIGHUP")
    if hasattr(signal, name)
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _snapshot() -> dict[str, Any]:
    saved: dict[str, Any] = {"cwd": os.getcwd(), "environ": dict(os.environ), "umask": _umask()}
    for number in _SIGNALS:
        saved[f"signal {signal.Signals(number).name}"] = signal.getsignal(number)
    return saved


def _restore(name: str, value: Any) -> None:
    if name == "cwd":
        os.chdir(value)
    elif name == "environ":
        for key in set(os.environ) - set(value):
            del os.environ[key]
        os.environ.update(value)
    elif name == "umask":
        os.umask(value)
    elif name.startswith("signal "):
        signal.signal(signal.Signals[name.removeprefix("signal ")], value if value is not None else signal.SIG_DFL)


@contextlib.contextmanager
def preserved(changed: list[str]) -> Iterator[None]:
    """Restore the working directory, environment, umask and signal handlers after the block; `changed` receives
    what the block changed (environment variables by name)."""
    saved = _snapshot()
    try:
        yield
    finally:
        now = _snapshot()
        for name, value in saved.items():
            if now.get(name) == value:
                continue
            if name == "environ":
                torch_own = {k for k in SET_BY_TORCH if k not in value and k in now[name]} | {
                    k for k in REWRITTEN_BY_TORCH if k in now[name]
                }
                value = {**value, **{k: now[name][k] for k in torch_own}}
                keys = sorted(k for k in set(value) | set(now[name]) if value.get(k) != now[name].get(k))
                if not keys:
                    continue
                changed.extend(f"environment variable {key}" for key in keys)
            else:
                changed.append(name)
            try:
                _restore(name, value)
            except (OSError, ValueError):  # a working directory removed meanwhile: nothing to go back to
                pass
