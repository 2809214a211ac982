"""What a case leaves behind in the process that ran it, where it could change a later case's verdict.

A worker runs case after case. A case that replaces one of torch's functions
(`torch.isclose = ...`) would decide the verdicts of the cases after it, and
a thread or a child process it leaves running could kill the worker, or
write to its channel, during an innocent case (which would then get the
crash). torch's own config and flags are restored
after every case (`inductor_compat.torch_state`); what cannot be restored is
looked for here. The worker compares the process with the snapshot it took
before its first case; anything found retires it (the pool starts a fresh
one) and is a warning on the record of the case that left it.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import threading
from dataclasses import dataclass
from typing import Any

import torch

from harness.isolation import process_tree

# The namespaces whose functions the harness and torch's own code call by attribute: a case replacing one
# of them changes what every later case computes or how it is judged.
WATCHED_NAMESPACES = (
    "torch",
    "torch.Tensor",
    "torch.nn.functional",
    "torch.testing",
    "torch.linalg",
    "torch.autograd",
    "torch.compiler",
)

# Who started a thread is decided by the innermost frame of `Thread.start`'s caller that belongs to torch or the
# harness (trusted: a compile pool, a progress bar's monitor) or to neither (a case), passing over the standard
# library's frames and other installed libraries' (a thread pool, tqdm) on the way out.
_TRUSTED_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (torch, __import__("harness")))
_PASS_THROUGH_DIRS = tuple(
    sorted(
        {
            os.path.abspath(p) + os.sep
            for p in (
                sysconfig.get_paths()["stdlib"],
                sysconfig.get_paths()["purelib"],
                sysconfig.get_paths()["platlib"],
                *site.getsitepackages(),
            )
            if p
        }
    )
)
_CASE_MODULE_PREFIXES = ("harness_case_module", "harness_cases")
_STARTER = "_harness_started_by_trusted_code"


def _trusted_dirs() -> tuple[str, ...]:
    """torch's and the harness's folders, and those of the NPU's compiler package where one is loaded (torch_npu's
    backends start their own pools as they load, as torch's compile does: its folders are read off its `__path__`,
    since it may be a checkout or a wheel's unpacked Python rather than an installed package)."""
    npu = getattr(sys.modules.get("torch_npu"), "__path__", ())
    return _TRUSTED_DIRS + tuple(os.path.abspath(p) + os.sep for p in npu)


def _started_by_trusted_code(frame: Any) -> bool:
    trusted = _trusted_dirs()
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        path = os.path.abspath(frame.f_code.co_filename)
        if module.startswith(_CASE_MODULE_PREFIXES):
            return False
        if path.startswith(trusted):
            return True
        if not path.startswith(_PASS_THROUGH_DIRS):
            return False  # a case's own file, or code with no file
        frame = frame.f_back
    return False


def track_thread_starts() -> None:
    """Note, on every thread started from now on in this process, whether torch or the harness started it."""
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        setattr(self, _STARTER, _started_by_trusted_code(sys._getframe(1)))
        original(self)

    threading.Thread.start = start  # type: ignore[method-assign]


def _namespace(name: str) -> Any:
    value: Any = torch
    for part in name.split(".")[1:]:
        value = getattr(value, part)
    return value


# Processes torch starts and keeps for later compiles (Inductor's pool of compile workers), by command line.
_TRUSTED_PROCESSES = ("torch/_inductor/compile_worker", "torch._inductor.compile_worker")


@dataclass
class Snapshot:
    functions: dict[str, dict[str, int]]
    threads: set[threading.Thread]  # the objects, not their ids: an id is reused once its thread is gone
    processes: set[int]


def snapshot() -> Snapshot:
    functions = {}
    for name in WATCHED_NAMESPACES:
        namespace = vars(_namespace(name))
        functions[name] = {key: id(value) for key, value in namespace.items() if callable(value)}
    return Snapshot(functions, set(threading.enumerate()), set(process_tree.descendants(os.getpid())))


def replaced_functions(before: Snapshot) -> list[str]:
    """torch's functions that are no longer the objects they were (replaced or deleted), but for those the NPU's
    compiler package replaced with its own as its backend loaded (torch_npu 2.13.0rc1 puts its
    `npu_scaled_dot_product_attention` in `torch.nn.functional` at its first compile, in the case's process)."""
    found = []
    for name, functions in before.functions.items():
        now = vars(_namespace(name))
        found += [
            f"{name}.{key}"
            for key, ident in functions.items()
            if key not in now or (id(now[key]) != ident and not _defined_by_the_npu_compiler(now[key]))
        ]
    return found


def _defined_by_the_npu_compiler(value: Any) -> bool:
    folders = tuple(os.path.abspath(p) + os.sep for p in getattr(sys.modules.get("torch_npu"), "__path__", ()))
    code = getattr(value, "__code__", None)
    return bool(folders) and code is not None and os.path.abspath(code.co_filename).startswith(folders)


def foreign_threads(before: Snapshot) -> list[threading.Thread]:
    """Threads started since the snapshot and still running that torch or the harness did not start (see
    `track_thread_starts`; a thread started past that record counts as foreign: nothing vouches for it).
    A thread `threading` did not start is left out: it is listed only once Python code runs in it
    (`threading._DummyThread`), as in the autograd engine's per-device threads, which torch starts in C++ for a
    backward on a GPU (on the H100 every training run showed one). Such threads are no more visible to this
    check when a case starts them than when torch does."""
    return [
        t
        for t in threading.enumerate()
        if t not in before.threads
        and t.is_alive()
        and not getattr(t, _STARTER, False)
        and not isinstance(t, threading._DummyThread)
    ]


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", errors="backslashreplace").strip()
    except OSError:
        return ""


def foreign_processes(before: Snapshot) -> list[tuple[int, str]]:
    """Processes started since the snapshot and still running below this one, but for torch's compile workers
    and what they start: (pid, command line). A case's child left running could act (write to a descriptor it
    inherited, kill something) during a later case."""
    found = [
        pid
        for pid in process_tree.descendants(os.getpid())
        if pid not in before.processes and process_tree.running(pid)
    ]
    trusted = {pid for pid in found if any(mark in _command_line(pid) for mark in _TRUSTED_PROCESSES)}
    for pid in list(trusted):
        trusted.update(process_tree.descendants(pid))
    return [(pid, _command_line(pid)) for pid in found if pid not in trusted]


def left_behind(before: Snapshot, ending: bool = False) -> list[str]:
    """One line per thing the case left that a later case must not meet; empty when nothing. `ending`: the
    process that ran the case ends with it (one case, one process), so nothing is left for a later case."""
    then = (
        "the process that ran it ended with it, so no other case runs or is judged with them"
        if ending
        else "its process was retired, so that no later case runs or is judged with them"
    )
    lines = []
    replaced = replaced_functions(before)
    if replaced:
        shown = ", ".join(replaced[:5]) + (f" and {len(replaced) - 5} more" if len(replaced) > 5 else "")
        lines.append(f"the case replaced torch functions ({shown}): {then}")
    threads = foreign_threads(before)
    if threads:
        names = ", ".join(repr(t.name) for t in threads[:5])
        lines.append(f"the case left {len(threads)} thread(s) running ({names}): {then}")
    processes = foreign_processes(before)
    if processes:
        shown = ", ".join(f"{pid} {command[:60]!r}" for pid, command in processes[:3])
        lines.append(f"the case left {len(processes)} process(es) running ({shown}): they were killed, and {then}")
    return lines
