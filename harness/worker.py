"""A worker process: runs case after case for its parent, and dies with it.

Started by `harness.executor` as `python -m harness.worker` in a process
session of its own, with stdout and stderr going to a log file (a case's own
output, or a child process it starts, never holds the harness's console).
The parent sends one JSON line per task on stdin; the worker answers on the
file descriptor named by HARNESS_RESULT_FD: `{"loading": ...}` while it
imports the case's module (under the import deadline), `{"started": ...}` when
the case begins (the timeout counts from there), then `{"record": ...}`.

If the parent dies (SIGKILL, a cancelled CI job), the worker notices within a
second and kills its whole process group: nothing is left running. After a
case that left the device faulted (an asynchronous kernel error poisons the
process's device context), the worker exits and the pool starts a fresh one.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import sys
import threading
import time

PARENT_POLL_S = 0.5


def _die_with_parent(parent: int) -> None:
    """Kill this process group when the parent goes away (Linux also gets a parent-death signal)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the watchdog below still works
        pass

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os.killpg(os.getpgid(0), signal.SIGKILL)
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, daemon=True, name="harness-parent-watchdog").start()


def main() -> int:
    parent = int(os.environ.get("HARNESS_PARENT_PID", os.getppid()))
    _die_with_parent(parent)
    results = os.fdopen(int(os.environ["HARNESS_RESULT_FD"]), "w", buffering=1, encoding="utf-8")

    import gc

    import torch

    from .inductor_compat import pick_cpu_vec_isa, preload_compiler
    from .records import encode_json
    from .registry import CASE_SOURCE_ORIGIN, Registry, load_registry
    from .runner import run_case

    # What is imported now lives as long as the worker: out of the collector's sight, its collections scan
    # only what cases create (a tenth of the objects, a tenth of the time).
    preload_compiler()
    gc.collect()
    gc.freeze()
    # The run's setup comes after the imports: a worker may be started before its run's options are known.
    line = sys.stdin.readline()
    if not line:  # the harness stopped before there was a run (a usage error)
        return 0
    setup = json.loads(line)
    config = pickle.loads(base64.b64decode(setup["config"]))
    if getattr(config, "device", "") == "cpu":  # Inductor's CPU ISA probe, before the first case's clock starts
        pick_cpu_vec_isa()

    # Only the module a task's case comes from is imported (once): a worker never pays for the whole registry.
    # A generated case (a case source's, e.g. OpInfo) is looked up by name in the registry of every case path.
    registries: dict[str, Registry] = {}
    frozen_origins: set[str] = set()
    for line in sys.stdin:
        task = json.loads(line)
        source = origin = task.get("source") or ""
        if source.startswith(CASE_SOURCE_ORIGIN):
            source = ""
        if source not in registries:
            # Importing the case's module has a deadline of its own (the registry's); the case's timeout
            # starts with the case.
            results.write(json.dumps({"loading": source}) + "\n")
            paths = [source] if source else setup["case_paths"]
            registries[source] = load_registry(paths, include_default=not source,
                                               import_timeout_s=setup.get("import_timeout_s"))
        registry = registries[source]
        case = registry.lookup(task["case"])
        if case is None and source:  # a source that is not a loadable module: look everywhere
            if "" not in registries:
                registries[""] = load_registry(setup["case_paths"], import_timeout_s=setup.get("import_timeout_s"))
            registry = registries[""]
            case = registry.lookup(task["case"])
        if case is None:
            results.write(json.dumps({"missing": task["case"]}) + "\n")
            continue
        if origin not in frozen_origins:
            # A case module, or what a case source loads for its first case (OpInfo's op_db: the most objects
            # of the worker), lives as long as the worker too. Loaded now, before the case's clock starts.
            frozen_origins.add(origin)
            registry.prepare(case)
            gc.collect()
            gc.freeze()
        results.write(json.dumps({"started": task["case"]}) + "\n")
        record = run_case(case, getattr(torch, task["dtype"]), task["mode"], config)
        # A kernel fault (misaligned address, illegal access) poisons the process's device context: every later
        # case here would fail with it. The pool replaces a worker that retires, before its next task.
        retire = not _device_usable(config.device)
        results.write(json.dumps({"record": encode_json(record.to_dict()), "retire": retire}, allow_nan=False) + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        if retire:
            return 0
    return 0


def _device_usable(name: str) -> bool:
    from .devices import get_device

    try:
        get_device(name).synchronize()
        return True
    except Exception:  # noqa: BLE001 - whatever the device runtime raises, this process cannot use it
        return False


if __name__ == "__main__":
    sys.exit(main())
