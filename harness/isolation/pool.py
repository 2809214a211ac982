"""Runs cases in worker processes, so one that crashes, hangs or OOMs takes down only itself.

Each worker (`harness.isolation.worker`) runs no case code: it forks a process for
each task (`harness.isolation.case_process`), judges the values that process sends
(`harness.judge.sent_values`) and answers here. Workers run in a process session of
their own: a timeout, a signal to the harness or its exit kills the worker
and every process it started (the worker is a subreaper: a case's children
stay its descendants, even in a session of their own). Every answer names
its task's run id and is checked against the task in flight
(`WorkerPool._message`): a line a case forged, a record of another case, or
a worker lost mid-message makes that task an error record and the run goes
on. A case process that dies costs its task's record alone; a task that
outlives its timeout (counted from the moment its process starts the case)
costs its worker too, and the next task starts a fresh one. Several workers
run side by side with `workers=N`; on a device with several GPUs or NPUs
each is pinned to one through its visibility variable, and all share
Inductor's compile cache.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Callable, Iterable, Iterator

from harness.isolation import process_tree
from harness import records as R
from harness.isolation import child as child_process
from harness.isolation.channel import ChannelCorrupted, Receiver, new_token
from harness.isolation.child import IMPORT_GRACE_S
from harness.isolation.stacks import STACKS_CHARS, case_frames, stacks_in

from harness.judge.known_failures import Expectation, Expectations
from harness.records.run_config import RunConfig

if TYPE_CHECKING:  # the registry imports torch: imported where it is used, not with this module
    import torch

    from harness.registry import Case

POLL_S = 0.25
# What a worker answers a task with (`harness.isolation.worker`); each message names the task's run id.
WORKER_MESSAGES = ("loading", "started", "verdict", "record", "missing", "lost", "corrupted")


@dataclass(frozen=True)
class Task:
    """One run to make. The dtype is a `torch.dtype` from the moment a frontend chooses it: its name is written
    only where it leaves this process (the worker's message, a record's key, a label)."""

    case: Case
    dtype: torch.dtype
    mode: str
    # False: a failure of this run is not localized even under --bisect (it failed in the baseline too: known).
    localize: bool = True

    @property
    def key(self) -> tuple[str, str, str]:
        """What its record is found by: (case, dtype name, mode)."""
        from harness.layout import dtype_name

        return (self.case.name, dtype_name(self.dtype), self.mode)

    @property
    def label(self) -> str:
        return "{}[{}-{}]".format(*self.key)


def run_in_process(
    tasks: Iterable[Task], config: RunConfig, expectations: Expectations | None = None
) -> Iterator[R.CaseResult]:
    """No isolation: for debugging under pdb. Each run decided in this process, with its expected failure."""
    from harness.run.case import run_case

    expectations = expectations or Expectations()
    for task in tasks:
        yield run_case(
            task.case, task.dtype, task.mode, task_config(config, task.localize), expectations.for_case(task.case)
        )


@dataclass
class _Worker:
    slot: int
    process: subprocess.Popen
    results: IO[bytes]
    log_path: str
    receiver: Receiver
    task: Task | None = None
    run: str | None = None  # the task's run id
    loading: float | None = None
    started: float | None = None
    # The system's count of out-of-memory kills when the task was sent (None where the kernel does not say).
    oom_kills_before: int | None = None
    # The size of the worker's log when the task was sent: what the task's process printed comes after it.
    log_offset: int = 0
    # The worker said it cannot run another case (its device faulted): replaced before the next task.
    retiring: bool = False
    # The task's record as judged, sent before `--extract` writes its repros: what stands if extraction then
    # crashes or hangs the worker.
    verdict: R.CaseResult | None = None

    @property
    def busy(self) -> bool:
        return self.task is not None

    def send(self, task: Task, config: RunConfig, timeout_s: float, expectation: Expectation) -> None:
        """Give the worker its next task, with what it is expected to fail (the run is decided in the worker's
        judge: `harness.judge.decision`); OSError (a broken pipe) when the worker is gone. `timeout_s`: the case's
        own, after which its process prints where each of its threads is (`case_process`)."""
        from harness.judge.sent_values import policy_of

        run = new_token()[:16]  # every answer to this task names it
        self.process.stdin.write(
            json.dumps(
                {
                    "case": task.case.name,
                    "source": task.case.source,
                    "dtype": task.key[1],
                    "mode": task.mode,
                    "localize": task.localize,
                    "run": run,
                    "policy": policy_of(task.case, config),
                    "expectation": expectation.to_dict(),
                    "timeout_s": timeout_s,
                }
            )
            + "\n"
        )
        self.process.stdin.flush()
        self.task, self.run, self.loading, self.started, self.verdict = task, run, None, None, None
        self.oom_kills_before = oom_kills()
        try:
            self.log_offset = os.path.getsize(self.log_path)
        except OSError:
            self.log_offset = 0

    def kill(self) -> None:
        """Kill the worker and every process it started (a case's children, in any session) and reap it."""
        process_tree.kill_tree(self.process.pid)
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
            with open(self.log_path, "rb") as handle:
                return child_process.read_tail(handle)
        except OSError:
            return ""

    def task_stacks(self) -> str:
        """The stacks the task in flight's process printed before its timeout (`stacks`), never an earlier
        task's: only what the log gained since the task was sent is read."""
        try:
            with open(self.log_path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(self.log_offset, handle.tell() - 4 * STACKS_CHARS))
                return stacks_in(handle.read().decode("utf-8", errors="backslashreplace")[-STACKS_CHARS:])
        except OSError:
            return ""


@dataclass
class WorkerPool:
    """Worker processes running tasks side by side; `close()` kills them all."""

    config: RunConfig | None  # None until `configure`: a pool spawned before the run's options are known
    case_paths: list[str]
    timeout_s: float | None  # None: each case's own default (`Case.default_timeout_s`)
    size: int = 1
    log_dir: str | None = None
    workers: dict[int, _Worker] = field(default_factory=dict)
    selector: selectors.BaseSelector = field(default_factory=selectors.DefaultSelector)
    # Worker logs go to `log_dir`, or to a temporary directory removed on close (a lost worker's
    # record carries the end of its log); the compile caches (`compile_root`) are removed on close too.
    _temporary_dirs: list[str] = field(default_factory=list)
    compile_root: str | None = None
    # The device a pool started before its run's config (`configure`) is for: workers on several devices are
    # pinned to one each from the start.
    early_device: str = "cpu"
    # Case modules the loader found broken (exits or crashes at import): workers never import them.
    broken_modules: set[str] = field(default_factory=set)
    # One case, one process ("case"), or one process for consecutive cases of a module ("module"):
    # `harness.isolation.case_process`.
    isolation: str = "case"
    # What the run expects to fail (`harness.judge.known_failures`): sent with each task, to decide its run by.
    expectations: Expectations | None = None
    # How many tasks the run holds, where its caller said (`configure`): each worker's share goes with its setup.
    runs: int | None = None

    def configure(
        self,
        config: RunConfig,
        case_paths: list[str],
        timeout_s: float | None,
        size: int = 1,
        log_dir: str | None = None,
        broken_modules: Iterable[str] = (),
        isolation: str | None = None,
        expectations: Expectations | None = None,
        runs: int | None = None,
    ) -> "WorkerPool":
        """Give an early pool its run (`runs`: how many tasks it holds, where known): workers already started get
        their setup now."""
        self.config, self.case_paths, self.timeout_s = config, list(case_paths), timeout_s
        self.runs = runs
        self.expectations = expectations
        if isolation and isolation != self.isolation:  # workers started for the other isolation: their set-up differs
            for worker in list(self.workers.values()):
                self._stop(worker)
            self.isolation = isolation
        self.broken_modules = set(broken_modules)
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

    def run(
        self, tasks: list[Task], on_wait: Callable[[list[tuple[str, float]]], None] | None = None
    ) -> Iterator[R.CaseResult]:
        """The tasks' records as they end, decided (by the worker's judge, or here for a run whose worker never
        answered), each with its expected failure applied. `on_wait` hears, at every poll, the runs in flight and
        how long each has run (a progress line's material)."""
        if self.config is None:
            raise RuntimeError("WorkerPool.run before configure()")
        pending = list(tasks)
        undelivered = self._dispatch(pending)
        while pending or undelivered or any(w.busy for w in self.workers.values()):
            finished = undelivered + list(self._poll())
            # Idle workers get their next task before the caller sees these records: its bookkeeping (the
            # journal's fsync, the console) then overlaps the workers' cases instead of holding them up.
            undelivered = self._dispatch(pending)
            yield from finished
            if on_wait is not None:
                now = time.perf_counter()
                on_wait([(w.task.label, now - (w.started or now)) for w in self.workers.values() if w.busy])

    def _dispatch(self, pending: list[Task]) -> list[R.CaseResult]:
        """Give every idle worker slot the next pending task (starting a worker where the slot has none). A task
        no fresh worker would take is returned as an error record."""
        undelivered = []
        for slot in range(self.size):
            worker = self.workers.get(slot)
            if worker is not None and not worker.busy and (worker.retiring or worker.process.poll() is not None):
                self._stop(worker)  # died between tasks, or cannot run another
                worker = None
            if not pending or (worker is not None and worker.busy):
                continue
            task = pending.pop(0)
            for attempt in range(2):  # a worker that died since its last task gets one replacement
                if worker is None:
                    worker = self.workers[slot] = self._start(slot)
                try:
                    worker.send(task, self.config, self.timeout_of(task), self.expectation_of(task))
                    break
                except OSError as exc:
                    tail = worker.log_tail()
                    self._stop(worker)
                    worker = None
                    if attempt:
                        record = self._failed(
                            task,
                            R.Stage.WORKER,
                            R.Symptom.CRASH,
                            R.ErrorInfo("WorkerCrash", f"no worker process would take the case ({exc})", tail),
                            0.0,
                        )
                        undelivered.append(record)
        return undelivered

    def _poll(self) -> Iterator[R.CaseResult]:
        for key, _ in self.selector.select(POLL_S):
            worker: _Worker = key.data
            chunk = os.read(worker.results.fileno(), 1 << 20)
            if not chunk:  # the result pipe closed: the worker died
                continue
            try:
                for message in worker.receiver.feed(chunk):
                    record = self._message(worker, message)
                    if record is not None:
                        yield record
            except ChannelCorrupted as exc:
                if worker.busy:
                    yield self._lost(
                        worker,
                        R.Symptom.CRASH,
                        f"the worker's answer is not one to its task: {exc}",
                        kind="ChannelCorrupted",
                    )
                else:
                    self._stop(worker)
        now = time.perf_counter()
        for worker in list(self.workers.values()):
            if not worker.busy:
                continue
            if worker.process.poll() is not None:
                yield self._lost(worker, R.Symptom.CRASH, _exit_text(worker.process.returncode))
            elif worker.started is not None and now - worker.started > self.timeout_of(worker.task):
                yield self._lost(
                    worker,
                    R.Symptom.TIMEOUT,
                    f"no result after {self.timeout_of(worker.task):g}s ({self.timeout_option})",
                )
            elif worker.started is None and worker.loading is not None and now - worker.loading > import_deadline_s():
                # The module's own import deadline did not fire (an import stuck in C code).
                yield self._lost(
                    worker,
                    R.Symptom.TIMEOUT,
                    f"importing the case module took more than {import_deadline_s() - IMPORT_GRACE_S:g}s",
                )

    def _message(self, worker: _Worker, message: dict) -> R.CaseResult | None:
        """One answer of the worker, checked against the task in flight: ChannelCorrupted for one that is not
        an answer to it. Only the first `loading` and `started` of a task set its clocks."""
        kinds = [k for k in WORKER_MESSAGES if k in message]
        if not worker.busy or message.get("run") != worker.run or len(kinds) != 1:
            raise ChannelCorrupted(f"a message that answers no task in flight: {json.dumps(message)[:120]}")
        kind = kinds[0]
        if kind == "loading":
            worker.loading = worker.loading or time.perf_counter()
            return None
        if kind == "started":
            worker.started = worker.started or time.perf_counter()
            return None
        if kind == "verdict":
            worker.verdict = self._record_of(worker, message["verdict"])
            return None
        if kind == "lost":
            said = f"{message['lost']}"
            if message.get("harness_failed") is True:
                said = (
                    f"{R.HARNESS_FAILED} in the case's process (a harness bug; the worker's log ends with its "
                    f"traceback): {said}"
                )
            return self._lost(worker, R.Symptom.CRASH, said, stop=False)
        if kind == "corrupted":
            return self._lost(
                worker,
                R.Symptom.CRASH,
                f"the case process's channel was written to by the case: {message['corrupted']}",
                kind="ChannelCorrupted",
                stop=False,
            )
        if kind == "missing":
            task, worker.task = worker.task, None
            return self._failed(
                task,
                R.Stage.SETUP,
                R.Symptom.CRASH,
                R.ErrorInfo(
                    "CaseNotLoaded",
                    f"the worker could not load case {message['missing']!r}: "
                    f"{message.get('reason') or 'see the load errors'}",
                ),
                0.0,
            )
        record = self._record_of(worker, message["record"])
        worker.task = None
        worker.retiring = bool(message.get("retire"))
        return record

    def _record_of(self, worker: _Worker, data: object) -> R.CaseResult:
        """A record the worker sent for the task in flight; ChannelCorrupted if it is none, or another run's."""
        task = worker.task
        try:
            record = R.CaseResult.from_dict(data)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - whatever is wrong with it, it is no record of the runner's
            raise ChannelCorrupted(f"a record that cannot be read ({type(exc).__name__})") from None
        if (record.case, record.dtype, record.mode) != task.key:
            raise ChannelCorrupted(f"a record of {record.case}[{record.dtype}-{record.mode}] for the task {task.label}")
        return record

    def _lost(
        self, worker: _Worker, symptom: str, message: str, kind: str | None = None, stop: bool = True
    ) -> R.CaseResult:
        """The task in flight's record when its answer will not come. `stop`: the worker goes too (it died, timed
        out or corrupted its channel); else only the task's case process was lost, and the worker stays."""
        elapsed = time.perf_counter() - (worker.started or time.perf_counter())
        task, verdict = worker.task, worker.verdict
        tail = worker.log_tail()
        # A timed-out run's stacks (`stacks`): every thread's, up to 100 frames each, longer than the tail quoted.
        stacks = worker.task_stacks() if symptom == R.Symptom.TIMEOUT else ""
        if stop:
            self._stop(worker)
        else:
            worker.task = None
        if verdict is not None:  # lost while extracting: the run was judged, and its verdict stands
            from harness.extraction.extract import discard_unfinished

            verdict.extracted = R.Reproduction.DOES_NOT_REPRODUCE
            removed = self.config.extract_dir and discard_unfinished(self.config.extract_dir, *task.key)
            verdict.warnings.append(
                f"--extract: the case's process was lost while extracting ({symptom}: {message}); "
                "the run's verdict stands, no repro was kept" + (" (the unfinished one was removed)" if removed else "")
            )
            return verdict
        if symptom == R.Symptom.CRASH and "SIGKILL" in message:
            # Nothing here sent it. The kernel counts its out-of-memory kills: one since the task began is
            # most likely this one; none, and the case (or someone) killed the worker itself.
            before, now = worker.oom_kills_before, oom_kills()
            if before is None or now is None:
                symptom, message = R.Symptom.OOM, message + " (the out-of-memory killer?)"
            elif now > before:
                symptom, message = R.Symptom.OOM, message + " (the kernel's out-of-memory killer acted meanwhile)"
            else:
                message += " (not by the harness, and not by the out-of-memory killer: by the case, or another process)"
        if frames := case_frames(stacks):
            message += f"; stopped in {' <- '.join(frames)}"
        kind = kind or ("WorkerCrash" if symptom != R.Symptom.TIMEOUT else "Timeout")
        if stacks:
            traceback = f"where each thread of the case's process was ({worker.log_path}):\n{stacks}"
        else:
            traceback = f"last output of the worker ({worker.log_path}):\n{tail}" if tail else ""
        return self._failed(task, R.Stage.WORKER, symptom, R.ErrorInfo(kind, message, traceback), elapsed)

    def _start(self, slot: int) -> _Worker:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if self.isolation == "case":
            # Inductor's pool of compile workers would start anew in every case process (each imports torch),
            # and one the worker started would be unusable in its forks: compiles run in the case's process.
            env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
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
            self._temporary_dirs.append(self.log_dir)
        os.makedirs(self.log_dir, exist_ok=True)
        log_path = os.path.join(self.log_dir, f"worker-{slot}-{time.strftime('%H%M%S')}-{os.getpid()}.log")
        log = open(log_path, "w")
        child = child_process.start("harness.isolation.worker", log, env=env, text=True, cwd=os.getcwd())
        log.close()
        worker = _Worker(slot, child.process, child.results, log_path, child.receiver)
        self.selector.register(worker.results, selectors.EVENT_READ, worker)
        if self.config is not None:
            self._send_setup(worker)
        return worker

    def _send_setup(self, worker: _Worker) -> None:
        setup = {
            "config": self.config.to_json(),
            "case_paths": self.case_paths,
            "broken_modules": sorted(self.broken_modules),
            "isolation": self.isolation,
            "compile_root": self._compile_root(),
            # A worker's share of the run (None: not known): a warm-up that must be tried first pays from a
            # worker's second case on (`harness.isolation.worker._warm_up`).
            "runs_per_worker": -(-self.runs // self.size) if self.runs else None,
        }
        try:
            worker.process.stdin.write(json.dumps(setup) + "\n")
            worker.process.stdin.flush()
        except OSError:  # the worker is gone already: the first task sent to it finds out and replaces it
            pass

    def _compile_root(self) -> str:
        """The run's directory for its workers' and case processes' compile caches (`inductor_compat.compile_caches`),
        removed with the pool."""
        if self.compile_root is None:
            _remove_orphaned_compile_roots()
            self.compile_root = tempfile.mkdtemp(prefix=f"{COMPILE_ROOT_PREFIX}{os.getpid()}-")
            self._temporary_dirs.append(self.compile_root)
        return self.compile_root

    # The option a user changes the timeout with, as the message of a timed-out run names it.
    timeout_option: str = "--timeout"

    def expectation_of(self, task: Task) -> Expectation:
        return (self.expectations or Expectations()).for_case(task.case)

    def _failed(self, task: Task, stage: str, symptom: str, error: R.ErrorInfo, elapsed: float) -> R.CaseResult:
        """The record of a run whose worker never answered, decided here: it stopped at `stage` with `error`."""
        from harness.run.case import not_run

        record = not_run(
            task.case,
            task.dtype,
            task.mode,
            self.config,
            stage,
            error=error,
            symptom=symptom,
            expectation=self.expectation_of(task),
        )
        record.duration_s = round(elapsed, 3)
        return record

    def timeout_of(self, task: Task) -> float:
        return self.timeout_s if self.timeout_s is not None else task.case.default_timeout_s

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
        for directory in self._temporary_dirs:
            shutil.rmtree(directory, ignore_errors=True)
        self._temporary_dirs.clear()


# A run's compile caches: `<temp>/harness-compile-<the harness's pid>-<random>`.
COMPILE_ROOT_PREFIX = "harness-compile-"


def _remove_orphaned_compile_roots() -> None:
    """The compile caches of runs whose harness is gone (killed with SIGKILL: nothing of it could remove them),
    each holding a precompiled header per worker (155 MB): removed by the next run in the same temp dir."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(COMPILE_ROOT_PREFIX)]
    except OSError:
        return
    for name in names:
        owner = name[len(COMPILE_ROOT_PREFIX) :].split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:  # alive, another user's
            pass


def task_config(config: RunConfig, localize: bool) -> RunConfig:
    """The run's configuration for one task: without localization (nor extraction, which starts from it) when
    the task is not to be localized."""
    import dataclasses

    if localize or not config.bisect:
        return config
    return dataclasses.replace(config, bisect=None, extract_dir=None)


def import_deadline_s() -> float:
    """How long the parent waits for a worker's import of a case module: the registry's deadline, which the
    worker enforces itself on Python code, and a grace for an import stuck in C code."""
    from harness.registry import DEFAULT_IMPORT_TIMEOUT_S  # imports torch: not at this module's import

    return DEFAULT_IMPORT_TIMEOUT_S + IMPORT_GRACE_S


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills since boot (`oom_kill` in /proc/vmstat, Linux 4.13+), or None."""
    try:
        with open("/proc/vmstat") as handle:
            for line in handle:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _device(name: str):
    from harness.devices import get_device

    try:
        return get_device(name)
    except ValueError:
        return None


def _exit_text(code: int | None) -> str:
    return process_tree.exit_text(code, "worker process")
