"""A worker process: runs case after case for its parent, and dies with it, its descendants included.

Started by `harness.executor` as `python -m harness.worker` in a process
session of its own, with stdout and stderr going to a log file (a case's own
output, or a child process it starts, never holds the harness's console).
Before any case code runs it takes its two channels out of the case's reach
(`harness.channel`): tasks arrive as JSON lines on what was stdin, answers go
out as framed lines on the pipe HARNESS_RESULT_FD named: `{"loading": ...}`
while it imports the case's module (under the import deadline),
`{"started": ...}` when the case begins (the timeout counts from there), then
`{"record": ...}`.

It is a child subreaper (`harness.process_tree`): every process a case starts
stays its descendant. If the parent dies (SIGKILL, a cancelled CI job), the
worker kills all of them and itself (a parent-death signal, and a watchdog
thread in case the signal's handler cannot run). After a case that left the
device faulted, replaced one of torch's functions or left a thread running
(`harness.case_residue`), the worker exits and the pool starts a fresh one.
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

from . import process_tree
from .channel import Sender, take_private

PARENT_POLL_S = 0.25


def _die() -> None:
    process_tree.kill_descendants(os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def _die_with_parent(parent: int) -> None:
    """Kill this process and every descendant when the parent goes away."""
    process_tree.become_subreaper()
    signal.signal(signal.SIGUSR2, lambda signum, frame: _die())
    process_tree.signal_on_parent_death(signal.SIGUSR2)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                _die()
            time.sleep(PARENT_POLL_S)

    threading.Thread(target=watch, daemon=True, name="harness-parent-watchdog").start()
    if os.getppid() != parent:  # it died before the signal was asked for
        _die()


def main() -> int:
    parent = int(os.environ.get("HARNESS_PARENT_PID", os.getppid()))
    _die_with_parent(parent)
    tasks, result_stream = take_private("HARNESS_RESULT_FD")
    results = Sender(result_stream, tasks.readline().strip())

    import gc

    import torch

    from . import case_residue
    from .inductor_compat import pick_cpu_vec_isa, preload_compiler
    from .executor import task_config
    from .records import encode_json
    from .registry import CASE_SOURCE_ORIGIN, DEFAULT_IMPORT_TIMEOUT_S, Registry, load_registry
    from .runner import run_case

    case_residue.track_thread_starts()
    # What is imported now lives as long as the worker: out of the collector's sight, its collections scan
    # only what cases create (a tenth of the objects, a tenth of the time).
    preload_compiler()
    gc.collect()
    gc.freeze()
    # The run's setup comes after the imports: a worker may be started before its run's options are known.
    line = tasks.readline()
    if not line:  # the harness stopped before there was a run (a usage error)
        return 0
    setup = json.loads(line)
    config = pickle.loads(base64.b64decode(setup["config"]))
    if getattr(config, "device", "") == "cpu":  # Inductor's CPU ISA probe, before the first case's clock starts
        pick_cpu_vec_isa()
    # Modules the harness's loader found broken (one that exits or crashes at import) are never imported here.
    broken = set(setup.get("broken_modules") or ())
    clean = case_residue.snapshot()

    # Only the module a task's case comes from is imported (once): a worker never pays for the whole registry.
    # A generated case (a case source's, e.g. OpInfo) is looked up by name in the registry of every case path.
    registries: dict[str, Registry] = {}
    frozen_origins: set[str] = set()

    def registry_of(source: str) -> Registry:
        if source not in registries:
            # Importing the case's module has the registry's deadline; the case's timeout starts with the case.
            results.send({"loading": source})
            paths = [source] if source else setup["case_paths"]
            registries[source] = load_registry(paths, include_default=not source, skip=broken,
                                               import_timeout_s=DEFAULT_IMPORT_TIMEOUT_S)
        return registries[source]

    for line in tasks:
        task = json.loads(line)
        source = origin = task.get("source") or ""
        if source.startswith(CASE_SOURCE_ORIGIN):
            source = ""
        registry = registry_of(source)
        case = registry.lookup(task["case"])
        if case is None and source:  # a source that is not a loadable module: look everywhere
            registry = registry_of("")
            case = registry.lookup(task["case"])
        if case is None:
            reasons = "; ".join(str(e) for e in registry.errors) or "no case of that name there"
            results.send({"missing": task["case"], "reason": reasons})
            continue
        if origin not in frozen_origins:
            # A case module, or what a case source loads for its first case (OpInfo's op_db: the most objects
            # of the worker), lives as long as the worker too. Loaded now, before the case's clock starts.
            frozen_origins.add(origin)
            registry.prepare(case)
            gc.collect()
            gc.freeze()
        results.send({"started": task["case"]})
        record = run_case(case, getattr(torch, task["dtype"]), task["mode"],
                          task_config(config, task.get("localize", True)),
                          on_verdict=lambda judged: results.send({"verdict": encode_json(judged.to_dict())}))
        # A kernel fault (misaligned address, illegal access) poisons the process's device context: every later
        # case here would fail with it. So do torch functions a case replaced and threads it left running.
        residue = case_residue.left_behind(clean)
        record.warnings.extend(residue)
        retire = bool(residue) or not _device_usable(config.device)
        results.send({"record": encode_json(record.to_dict()), "retire": retire})
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
