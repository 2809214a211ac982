"""Inductor's and Triton's on-disk caches, private to each case's process.

Inductor and Triton key what they cache by content (the FX graph cache and AOT autograd's cache by the graph,
the code cache by the generated source, the C++ cache by the source and flags, Triton's by the kernel) and load
what they find there without checking it: a case that edits what Inductor cached for its own program (the `call`
of a cached output module) changes what a later case with the same program runs. So each case's process compiles
into a directory of its own, made empty for it by its worker and removed after it (`TORCHINDUCTOR_CACHE_DIR`,
`TRITON_CACHE_DIR`): what one case leaves in a cache is never loaded by another.

One file is shared on purpose. Inductor's precompiled C++ header (`codecache._HEADER_DIR`, placed under
`default_cache_dir()` whatever `TORCHINDUCTOR_CACHE_DIR` says; torch 2.11 and 2.13) takes 6 s to build on two
cores and would be built again by every case. The worker builds it once, before any case, in a directory of its
own (`use_worker_caches`), or copies in the one an earlier worker built, where case processes are confined and so
cannot write the store it comes from; a case process uses it only while its files are the ones the worker had
(same inode, size, modification and change time: writing or replacing a file changes them, and no process can set
a change time back), and otherwise builds its own (`use_private_caches`).

What this alone does not stop: a case that finds another case's directory while that case runs, as the same user,
can write there, unless case processes are confined (`isolation.confine`; docs/nightly.md says what remains where
they are not).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any

from harness.inductor_compat import cache_dir as _cache_dir

Stamps = dict[str, list[int]]


def _codecache() -> Any | None:
    try:
        from torch._inductor import codecache
    except ImportError:
        return None
    return codecache if hasattr(codecache, "_HEADER_DIR") else None


def new_root(parent: str | None = None, prefix: str = "harness-compile-") -> str:
    """A directory only this user can enter, for the caches of one run (the pool's) or one worker."""
    return tempfile.mkdtemp(prefix=prefix, dir=parent)


# Where workers keep the precompiled headers they built, for later workers (`use_worker_caches(stored=True)`).
HEADER_STORE = "harness-precompiled-headers"


def use_worker_caches(worker_root: str, stored: bool) -> None:
    """In a worker, before its first compile (the warm-up): its compiles, and the precompiled header the first
    C++ compile builds, go under its own directory, never a folder an earlier run's cases could have written.
    `stored`: the headers earlier workers built are copied in from the harness's store (`HEADER_STORE`, in the
    shared cache directory), which only workers write: trusted only where no case can write there either (case
    processes confined, `isolation.confine`); otherwise each worker builds its own."""
    _redirect(os.path.join(worker_root, "compiles"))
    codecache = _codecache()
    if codecache is not None:
        directory = os.path.join(worker_root, "precompiled_headers")
        os.makedirs(directory, exist_ok=True)
        if stored:
            _share_files(_store(), directory)
        _point_headers(codecache, directory)


def store_headers() -> None:
    """In a worker after its warm-up: the headers it built, put in the store for later workers."""
    codecache = _codecache()
    directory = getattr(codecache, "_HEADER_DIR", None) if codecache else None
    if directory and os.path.isdir(directory):
        _share_files(directory, _store())


def _store() -> str:
    return os.path.join(_cache_dir.shared_cache_dir(), HEADER_STORE)


def _share_files(source: str, destination: str) -> None:
    """Every regular file of `source` that `destination` lacks, copied there, each appearing whole (copied to a
    temporary name, then renamed). Copied, not linked: a link changes the file's change time, which the stamps
    of other workers' copies hold (0.16 s for a 155 MB header here)."""
    try:
        names = [n for n in os.listdir(source) if os.path.isfile(os.path.join(source, n))]
        os.makedirs(destination, exist_ok=True)
    except OSError:
        return
    for name in names:
        target = os.path.join(destination, name)
        if os.path.exists(target):
            continue
        temporary = os.path.join(destination, f".{name}.{os.getpid()}.tmp")
        try:
            shutil.copyfile(os.path.join(source, name), temporary)
            os.replace(temporary, target)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _redirect(directory: str) -> None:
    _cache_dir.remember_shared()
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")


def _point_headers(codecache: Any, directory: str) -> None:
    codecache._HEADER_DIR = directory
    codecache._HEADER_LOCK_DIR = os.path.join(directory, "locks")
    # The path of a header built before is remembered per process (`functools.cache`): forget it.
    cached = getattr(codecache, "_precompile_header", None)
    if hasattr(cached, "cache_clear"):
        cached.cache_clear()


def header_stamps() -> Stamps:
    """What identifies each precompiled header file the worker's own compiles used: empty where they used none
    (a warm-up on a device whose kernels are no C++, or none at all), even where headers lie in its folder
    (copied from the store). A forked case uses a header without its lock only where this process remembers it
    (`_precompile_header` is `functools.cache`d, torch 2.13); else it builds one, in a folder of its own."""
    codecache = _codecache()
    directory = getattr(codecache, "_HEADER_DIR", None) if codecache else None
    stamps: Stamps = {}
    if not directory or not os.path.isdir(directory):
        return stamps
    remembered = getattr(getattr(codecache, "_precompile_header", None), "cache_info", None)
    if remembered is not None and remembered().currsize == 0:
        return stamps
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            stamps[path] = _stamp(path)
    return stamps


def _stamp(path: str) -> list[int]:
    info = os.stat(path, follow_symlinks=False)
    return [info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def _headers_unchanged(stamps: Stamps) -> bool:
    codecache = _codecache()
    directory = getattr(codecache, "_HEADER_DIR", None) if codecache else None
    if not stamps or not directory:
        return False
    try:
        present = {os.path.join(directory, n) for n in os.listdir(directory)}
        present = {p for p in present if os.path.isfile(p) or os.path.islink(p)}
        return present == set(stamps) and all(_stamp(path) == list(stamp) for path, stamp in stamps.items())
    except OSError:
        return False


def new_case_dir(worker_root: str) -> str:
    return tempfile.mkdtemp(prefix="case-", dir=worker_root)


def use_private_caches(case_dir: str, worker_stamps: Stamps) -> bool:
    """In a case's process, before its case: compile into `case_dir`. The harness's own remembered files stay in
    the shared directory (`cache_dir.shared_cache_dir`). True when the worker's precompiled header is used."""
    _redirect(case_dir)
    codecache = _codecache()
    if codecache is None:
        return False
    if _headers_unchanged(worker_stamps):
        return True
    _point_headers(codecache, os.path.join(case_dir, "precompiled_headers"))
    return False


KEPT_KERNELS = "harness-kernels"


def kept(path: str | None, case_dir: str | None) -> str | None:
    """A file a record names under a case's own caches (the kernel source of `first_divergent_kernel`), copied
    where it outlives them: `<shared cache dir>/harness-kernels/<its name>` (Inductor names its modules by their
    content's hash). The path to name instead; `path` itself where it is elsewhere or cannot be copied."""
    if not path or not case_dir or not os.path.abspath(path).startswith(os.path.join(os.path.abspath(case_dir), "")):
        return path
    destination = os.path.join(_cache_dir.shared_cache_dir(), KEPT_KERNELS, os.path.basename(path))
    try:
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        shutil.copyfile(path, destination)
    except OSError:
        return path
    return destination
