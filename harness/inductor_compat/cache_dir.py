"""Inductor's cache directory (TORCHINDUCTOR_CACHE_DIR, or its default under the temp directory).

The harness keeps what it learns once per host and torch there (the CPU ISA verdicts, the OpInfo
catalogue): a run's workers share that directory, and a nightly host keeps it between runs.
Inductor's own `cache_dir()` (`torch._inductor.runtime.cache_dir_utils`, earlier `codecache`;
torch 2.6 to 2.13) is asked where the compiler is loaded already. Elsewhere (the harness process,
which never compiles) its rule is applied here: importing `torch._inductor` imports Dynamo, about
2 s of a run's start.

A case's process compiles into a directory of its own (`compile_caches`); the harness's remembered files stay in
the directory shared by the run (`shared_cache_dir`).
"""

from __future__ import annotations

import getpass
import os
import re
import sys
import tempfile


def inductor_cache_dir() -> str:
    if "torch._inductor" in sys.modules:
        try:
            from torch._inductor.runtime.cache_dir_utils import cache_dir
        except ImportError:  # before the runtime package had it
            from torch._inductor.codecache import cache_dir
        return cache_dir()
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if configured is not None:
        return os.path.abspath(configured)
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        user = f"uid_{os.getuid()}" if hasattr(os, "getuid") else "unknown_user"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


_shared: list[str] = []


def remember_shared() -> None:
    """Called once a process's compiles are sent elsewhere (`compile_caches.use_private_caches`)."""
    if not _shared:
        _shared.append(inductor_cache_dir())


def shared_cache_dir() -> str:
    """Where the harness keeps what it learns once per host: Inductor's cache directory, as it was before this
    process's compiles were made private."""
    return _shared[0] if _shared else inductor_cache_dir()
