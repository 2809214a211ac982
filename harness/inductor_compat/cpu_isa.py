"""Inductor's CPU vector-ISA probe, remembered across processes.

Before its first C++ compile in a process, Inductor picks a vector ISA: for each
ISA the CPU reports (and each extension: AVX512-BF16, VNNI, AMX) it builds a
test library and loads it in a child Python (`VecISA.check_build`, cached per
process only). On torch 2.11 that child imports torch: on a 16-core GPU host,
35 to 45 s per process, paid again by every harness worker and counted in its
first case's time (a `--timeout 30` CPU run there timed out its first case).

A build that loaded once loads again on the same host, with the same torch,
compiler, flags and test code: that verdict is kept in a file in Inductor's
cache directory and read back by later processes. A failed check is not kept
(it may have been a timeout), so it is probed again as Inductor would.

Relies on `torch._inductor.cpu_vec_isa.VecISA.check_build(self, code) -> bool`
and `pick_vec_isa()` (torch 2.6 to 2.13); without them nothing is changed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
import tempfile

from harness.inductor_compat.cache_dir import shared_cache_dir

_VERDICTS_FILE = "harness-vec-isa-checks.json"


def _verdicts_path() -> str:
    return os.path.join(shared_cache_dir(), _VERDICTS_FILE)


@functools.cache
def _host() -> str:
    """What a verdict depends on besides the ISA and its test code (the cache directory may be shared)."""
    import torch
    from torch._inductor import config

    return "\0".join(
        [
            torch.__version__,
            sys.executable,
            platform.node(),
            platform.machine(),
            torch.backends.cpu.get_cpu_capability(),
            os.environ.get("CXX", ""),
            str(config.cpp.cxx),
        ]
    )


def _key(isa: object, code: str) -> str:
    text = "\0".join([_host(), str(isa), isa.build_arch_flags(), code])
    return hashlib.sha256(text.encode()).hexdigest()


def _read(path: str) -> dict:
    try:
        with open(path) as handle:
            verdicts = json.load(handle)
    except (OSError, ValueError):
        return {}
    return verdicts if isinstance(verdicts, dict) else {}


def _remember(path: str, key: str) -> None:
    """Add one passing verdict; written whole and renamed, so a reader never sees half a file (two processes
    writing at once may drop one's entry: it is probed again later)."""
    verdicts = _read(path)
    verdicts[key] = True
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".vec-isa-")
        with os.fdopen(handle, "w") as out:
            json.dump(verdicts, out)
        os.replace(temporary, path)
    except OSError:  # a read-only cache directory: the probe still works, just not remembered
        pass


def remember_vec_isa_checks() -> None:
    """Make Inductor's ISA build checks read and keep their passing verdicts on disk (once per process)."""
    try:
        from torch._inductor.cpu_vec_isa import VecISA
    except ImportError:
        return
    probe = getattr(VecISA, "check_build", None)
    if probe is None or getattr(probe, "remembered_on_disk", False):
        return

    @functools.wraps(probe)
    def check_build(self, code: str) -> bool:
        path, key = _verdicts_path(), _key(self, code)
        if _read(path).get(key) is True:
            return True
        passed = probe(self, code)
        if passed:
            _remember(path, key)
        return passed

    check_build.remembered_on_disk = True
    VecISA.check_build = check_build


def pick_cpu_vec_isa() -> None:
    """Run Inductor's ISA choice now (before a case's clock starts), as its first C++ compile would."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:
        return
    remember_vec_isa_checks()
    pick_vec_isa()
