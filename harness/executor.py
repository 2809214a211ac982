"""Runs cases in a worker process, so one that crashes, hangs or OOMs takes down only itself.

One worker runs tasks one after another (keeping Inductor's in-process caches
warm); when a task kills it or outlives its timeout, that task gets an error
record and the next task starts a fresh worker.
"""

from __future__ import annotations

import multiprocessing
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Iterable, Iterator, Sequence

from . import records as R
from .registry import Case

POLL_S = 0.25


@dataclass(frozen=True)
class Task:
    case: Case
    dtype: str
    mode: str


def run_in_process(tasks: Iterable[Task], config) -> Iterator[R.CaseResult]:
    """No isolation: for debugging under pdb and for pytest, which isolates with xdist."""
    import torch

    from .runner import run_case

    for task in tasks:
        yield run_case(task.case, getattr(torch, task.dtype), task.mode, config)


def run_isolated(tasks: Sequence[Task], config, case_paths: Sequence[str], timeout_s: float) -> Iterator[R.CaseResult]:
    context = multiprocessing.get_context("spawn")  # never fork a process that may hold a CUDA context
    worker: _Worker | None = None
    try:
        for task in tasks:
            if worker is None:
                worker = _Worker(context, config, case_paths)
            record, healthy = worker.run(task, timeout_s)
            if not healthy:
                worker.kill()
                worker = None
            yield record
    finally:
        if worker is not None:
            worker.close()


class _Worker:
    def __init__(self, context, config, case_paths: Sequence[str]):
        self.conn, child_conn = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child_conn, config, list(case_paths)), daemon=True)
        self.process.start()
        child_conn.close()
        self.config = config

    def run(self, task: Task, timeout_s: float) -> tuple[R.CaseResult, bool]:
        started = time.perf_counter()
        self.conn.send((task.case.name, task.dtype, task.mode))
        while True:
            elapsed = time.perf_counter() - started
            try:
                if self.conn.poll(POLL_S):
                    return R.CaseResult.from_dict(self.conn.recv()), True
            except (EOFError, ConnectionError, OSError):
                pass
            if not self.process.is_alive():
                self.process.join(1)
                return self._lost(task, elapsed, "crash", _exit_text(self.process.exitcode)), False
            if elapsed > timeout_s:
                return self._lost(task, elapsed, "timeout", f"no result after {timeout_s:.0f}s (--timeout)"), False

    def _lost(self, task: Task, elapsed: float, symptom: str, message: str) -> R.CaseResult:
        import torch

        from .runner import apply_known_failure, new_record

        record = new_record(task.case, getattr(torch, task.dtype), task.mode, self.config)
        record.status, record.stage, record.symptom = R.ERROR, "worker", symptom
        record.error = R.ErrorInfo("WorkerCrash" if symptom == "crash" else "Timeout", message)
        record.duration_s = round(elapsed, 3)
        return apply_known_failure(record, task.case)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()

    def close(self) -> None:
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.process.join(10)
        self.kill()


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of host memory?)" if name == "SIGKILL" else ""
        return f"worker process killed by {name}{hint}"
    return f"worker process exited with code {code}"


def _worker_main(conn: Connection, config, case_paths: list[str]) -> None:
    import torch

    from .registry import load_registry
    from .runner import run_case

    registry = load_registry(case_paths)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        name, dtype, mode = message
        record = run_case(registry.cases[name], getattr(torch, dtype), mode, config)
        conn.send(record.to_dict())
