"""Runs cases in worker processes, so one that crashes, hangs or OOMs takes down only itself.

Each worker (`harness.worker`) runs tasks one after another (keeping Inductor's
in-process caches warm), in a process session of its own: a timeout, a signal
to the harness or its exit kills the worker's whole process group, a case's
own child processes included. When a task kills its worker or outlives its
timeout (counted from the moment the worker starts it), that task gets an
error record, with the end of the worker's log, and the next task starts a
fresh worker; so does the task after one that left the device faulted (the
worker retires). Several workers run side by side with `workers=N`; on a
device with several GPUs or NPUs each is pinned to one through its visibility
variable, and all share Inductor's compile cache.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Iterable, Iterator

from . import records as R

if TYPE_CHECKING:  # the registry imports torch, which a worker pool started early must not wait for
    from .registry import Case

POLL_S = 0.25
# Beyond the import deadline the worker enforces itself, before the parent gives up on an import.
IMPORT_GRACE_S = 10.0
LOG_TAIL_CHARS = 2000


@dataclass(frozen=True)
class Task:
    case: Case
    dtype: str
    mode: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.case.name, self.dtype, self.mode)


def run_in_process(tasks: Iterable[Task], config) -> Iterator[R.CaseResult]:
    """No isolation: for debugging under pdb."""
    import torch

    from .runner import run_case

    for task in tasks:
        yield run_case(task.case, getattr(torch, task.dtype), task.mode, config)


@dataclass
class _Worker:
    slot: int
    process: subprocess.Popen
    results: IO[str]
    log_path: str
    task: Task | None = None
    loading: float | None = None
    started: float | None = None
    buffer: str = ""
    # The worker said it cannot run another case (its device faulted): replaced before the next task.
    retiring: bool = False

    @property
    def busy(self) -> bool:
        return self.task is not None

    def send(self, task: Task) -> None:
        self.task, self.loading, self.started = task, None, None
        self.process.stdin.write(json.dumps({"case": task.case.name, "source": task.case.source, "dtype": task.dtype,
                                             "mode": task.mode}) + "\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        """Kill the worker's whole process group (a case's children too) and reap it."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for stream in (self.process.stdin, self.results):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        self.process.wait()

    def log_tail(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="backslashreplace") as handle:
                return handle.read()[-LOG_TAIL_CHARS:]
        except OSError:
            return ""


@dataclass
class WorkerPool:
    """Worker processes running tasks side by side; `close()` kills them all."""

    config: object | None  # None until `configure`: a pool spawned before the run's options are known
    case_paths: list[str]
    timeout_s: float
    size: int = 1
    log_dir: str | None = None
    workers: dict[int, _Worker] = field(default_factory=dict)
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    # Worker logs go to `log_dir`, or to a temporary directory removed on close (a lost worker's
    # record carries the end of its log).
    _temporary_logs: list[str] = field(default_factory=list)
    # The device an early pool was started for (`spawned_early`), until `configure` gives the run's config.
    early_device: str = "cpu"

    @classmethod
    def spawned_early(cls, size: int = 1, device: str = "cpu") -> "WorkerPool":
        """Workers started before this process has even imported torch, for a run on `device`: their start-up
        (torch and the compiler, seconds) then overlaps the caller's own. `configure` must follow before `run`;
        it starts them again if the run turns out other (several workers are pinned to its devices)."""
        pool = cls(None, [], 0.0, size, early_device=device)
        pool.start_idle()
        return pool

    def configure(self, config: object, case_paths: list[str], timeout_s: float, size: int = 1,
                  log_dir: str | None = None) -> "WorkerPool":
        """Give an early pool its run: workers already started get their setup now."""
        self.config, self.case_paths, self.timeout_s = config, list(case_paths), timeout_s
        self.log_dir = log_dir or self.log_dir
        if size != self.size or (size > 1 and getattr(config, "device", "cpu") != self.early_device):
            for worker in list(self.workers.values()):  # started for another count, or unpinned
                self._stop(worker)
            self.size = size
        for worker in self.workers.values():
            self._send_setup(worker)
        return self

    def start_idle(self) -> None:
        """Start every worker now, before there are tasks (their start-up overlaps the caller's own)."""
        for slot in range(self.size):
            if slot not in self.workers:
                self.workers[slot] = self._start(slot)

    def run_one(self, task: Task) -> R.CaseResult:
        return next(iter(self.run([task])))

    def run(self, tasks: list[Task]) -> Iterator[R.CaseResult]:
        if self.config is None:
            raise RuntimeError("WorkerPool.run before configure()")
        pending = list(tasks)
        self._dispatch(pending)
        while pending or any(w.busy for w in self.workers.values()):
            finished = list(self._poll())
            # Idle workers get their next task before the caller sees these records: its bookkeeping (the
            # journal's fsync, the console) then overlaps the workers' cases instead of holding them up.
            self._dispatch(pending)
            yield from finished

    def _dispatch(self, pending: list[Task]) -> None:
        """Give every idle worker slot the next pending task (starting a worker where the slot has none)."""
        for slot in range(self.size):
            worker = self.workers.get(slot)
            if worker is not None and not worker.busy and (worker.retiring or worker.process.poll() is not None):
                self._stop(worker)  # died between tasks, or cannot run another
                worker = None
            if pending and (worker is None or not worker.busy):
                if worker is None:
                    worker = self.workers[slot] = self._start(slot)
                worker.send(pending.pop(0))

    def _poll(self) -> Iterator[R.CaseResult]:
        for key, _ in self.selector.select(POLL_S):
            worker: _Worker = key.data
            chunk = os.read(worker.results.fileno(), 1 << 20).decode("utf-8", errors="backslashreplace")
            if not chunk:  # the result pipe closed: the worker died
                continue
            worker.buffer += chunk
            while "\n" in worker.buffer:
                line, worker.buffer = worker.buffer.split("\n", 1)
                record = self._message(worker, json.loads(line))
                if record is not None:
                    yield record
        now = time.perf_counter()
        for worker in list(self.workers.values()):
            if not worker.busy:
                continue
            if worker.process.poll() is not None:
                yield self._lost(worker, "crash", _exit_text(worker.process.returncode))
            elif worker.started is not None and now - worker.started > self.timeout_s:
                yield self._lost(worker, "timeout", f"no result after {self.timeout_s:g}s (--timeout)")
            elif worker.started is None and worker.loading is not None and \
                    now - worker.loading > self.timeout_s + IMPORT_GRACE_S:
                # The module's own import deadline did not fire (an import stuck in C code).
                yield self._lost(worker, "timeout", f"importing the case module took more than {self.timeout_s:g}s")

    def _message(self, worker: _Worker, message: dict) -> R.CaseResult | None:
        if "loading" in message:
            worker.loading = time.perf_counter()
            return None
        if "started" in message:
            worker.started = time.perf_counter()
            return None
        task, worker.task = worker.task, None
        if "missing" in message:
            return _failed(task, self.config, "setup", "crash", "CaseNotLoaded",
                           f"the worker could not load case {message['missing']!r} (see the load errors)", 0.0)
        worker.retiring = bool(message.get("retire"))
        return R.CaseResult.from_dict(message["record"])

    def _lost(self, worker: _Worker, symptom: str, message: str) -> R.CaseResult:
        elapsed = time.perf_counter() - (worker.started or time.perf_counter())
        task = worker.task
        tail = worker.log_tail()
        self._stop(worker)
        if symptom == "crash" and "SIGKILL" in message:
            symptom = "oom"  # nothing here sent it: most likely the kernel's out-of-memory killer
            message += " (the out-of-memory killer?)"
        record = _failed(task, self.config, "worker", symptom, "WorkerCrash" if symptom != "timeout" else "Timeout",
                         message, elapsed)
        if tail:
            record.error.traceback = f"last output of the worker ({worker.log_path}):\n{tail}"
        return record

    def _start(self, slot: int) -> _Worker:
        read_end, write_end = os.pipe()
        env = dict(os.environ, HARNESS_RESULT_FD=str(write_end), HARNESS_PARENT_PID=str(os.getpid()),
                   PYTHONUNBUFFERED="1")
        device_name = getattr(self.config, "device", self.early_device)
        # Looked up only to pin a worker: the lookup imports torch, which an early start must not wait for.
        device = _device(device_name) if self.size > 1 and device_name != "cpu" else None
        variable = device.visibility_variable if device else None
        if variable and device.count() >= self.size:
            env[variable] = str(slot)
        elif self.size > 1 and device_name == "cpu":
            env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // self.size)))
        if self.log_dir is None:
            self.log_dir = tempfile.mkdtemp(prefix="harness-workers-")
            self._temporary_logs.append(self.log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, f"worker-{slot}-{time.strftime('%H%M%S')}-{os.getpid()}.log")
        log = open(log_path, "w")
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.worker"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(write_end,), env=env, start_new_session=True, text=True, cwd=os.getcwd())
        os.close(write_end)
        log.close()
        worker = _Worker(slot, process, os.fdopen(read_end, "rb", buffering=0), log_path)
        self.selector.register(worker.results, selectors.EVENT_READ, worker)
        if self.config is not None:
            self._send_setup(worker)
        return worker

    def _send_setup(self, worker: _Worker) -> None:
        setup = {"config": base64.b64encode(pickle.dumps(self.config)).decode("ascii"),
                 "case_paths": self.case_paths, "import_timeout_s": self.timeout_s}
        worker.process.stdin.write(json.dumps(setup) + "\n")
        worker.process.stdin.flush()

    def _stop(self, worker: _Worker) -> None:
        try:
            self.selector.unregister(worker.results)
        except (KeyError, ValueError):
            pass
        worker.kill()
        self.workers.pop(worker.slot, None)

    def close(self) -> None:
        for worker in list(self.workers.values()):
            self._stop(worker)
        self.selector.close()
        for directory in self._temporary_logs:
            shutil.rmtree(directory, ignore_errors=True)
        self._temporary_logs.clear()


def _failed(task: Task, config, stage: str, symptom: str, kind: str, message: str, elapsed: float) -> R.CaseResult:
    import torch

    from .run_identity import apply_known_failure, new_record

    record = new_record(task.case, getattr(torch, task.dtype), task.mode, config)
    record.status, record.stage, record.symptom = R.ERROR, stage, symptom
    record.error = R.ErrorInfo(kind, message)
    record.duration_s = round(elapsed, 3)
    return apply_known_failure(record, task.case)


def _device(name: str):
    from .devices import get_device

    try:
        return get_device(name)
    except ValueError:
        return None


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process killed by {name}"
    return f"worker process exited with code {code}"
