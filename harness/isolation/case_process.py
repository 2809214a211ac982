"""One case, one clean process: the worker forks a process per task (or per case module), and one to judge it.

The worker (`harness.isolation.worker`) imports torch, the compiler and the harness,
and then runs no case code: it is a template the case processes are forked from. For each task it forks a case
process, which imports the case's module, builds and runs the case as
`harness.run.case.gather` does (its record undecided, with what the run found),
and sends its messages on a pipe of its own to
the worker, never to the harness. So a case meets only the state the
template left; nothing one case changes (the tolerance table, `builtins`,
the dispatcher, `sys.modules`, an entered mode, the residue check itself)
reaches another case.

The worker checks every message against the task in flight (its run id; a
record must name the task's case, dtype and mode, and carry no status), has
the values the case's process sent judged, and the run decided, in a process
forked from it for that (`harness.judge.sent_values`, `harness.judge.decision`,
with the task's expectation), and only then answers the harness. The values come
as an anonymous file over a socket each case process shares with its worker
alone: no path under a folder every case can reach.
When the case's process is done, the worker kills whatever it left running
(the worker is a subreaper: a daemon in a session of its own included).

Isolation `module` keeps one case process for consecutive tasks of the same
case module (a generated source counts as one module), retired, as pooled
workers were, when the residue check (`harness.isolation.residue`) finds
something left behind: cheaper where imports or compiles dominate, and only
cases of one module (one author) share a process.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, IO

from harness import records as R
from harness.isolation import process_tree
from harness.isolation.channel import ChannelCorrupted, Receiver, Sender, new_token, private_copy
from harness.records.run_config import RunConfig

ISOLATIONS = ("case", "module")
POLL_S = 0.25
# How long a case process that closed its channel may take to exit before it is killed.
CLOSED_CHANNEL_GRACE_S = 2.0
# The exit code of a case process the harness failed in: an exception out of its own loop, never the case's (run_case
# records those).
HARNESS_FAILED_EXIT = 70
# The exit code of a case process whose case took its file descriptors (opened them all, or closed the harness's):
# the harness's own code then fails for want of one, which is the case's doing, not a harness bug.
DESCRIPTORS_TAKEN_EXIT = 71
# Case sources whose `prepare` is the harness's own and runs no case code (OpInfo's: torch's op_db), by name: the
# worker runs it before its first case process of the source, where `setup["preload_sources"]` says an import leaves
# forks usable, so that no case process loads it again (0.9 s of every OpInfo run on two cores, measured).
HARNESS_SOURCE_PRELOADS = {"opinfo": ("harness.opinfo.catalog", "ops_by_piece")}
# The messages a case process may send, and the one that ends its task.
CHILD_MESSAGES = ("loading", "started", "verdict", "record", "missing")


@dataclass
class _CaseProcess:
    pid: int
    tasks: IO[str]  # to the case process
    results: int  # its messages (a descriptor)
    receiver: Receiver
    origin: str
    values: socket.socket  # the values it sends (`judge.sent_values.send_values`)
    compiles: str | None  # its own compile caches (`inductor_compat.compile_caches`), removed when it ends
    retiring: bool = False


@dataclass
class _Decided:
    """A task's record as decided when its case's process sent it before extracting, and how many warnings that
    process had given it then."""

    record: R.CaseResult
    sent_warnings: int

    def with_extraction_of(self, final: R.CaseResult) -> R.CaseResult:
        """The decided record with what the case's process added since: its repros, timings and warnings."""
        record = self.record
        record.extraction, record.extracted, record.timings = final.extraction, final.extracted, final.timings
        record.warnings.extend(final.warnings[self.sent_warnings :])
        return record


class CaseForker:
    """The worker's side: forks case processes, relays and checks their messages, has them judged, answers the
    harness."""

    def __init__(self, setup: dict[str, Any], config: RunConfig, answer: Sender, forget: Callable[[], None]):
        self.setup, self.config, self.answer = setup, config, answer
        # Closes the worker's channel to the harness: a case process never holds it.
        self.forget = forget
        self.isolation = setup.get("isolation") or "case"
        self.child: _CaseProcess | None = None
        # What the case process sent for the task in flight (`judge.sent_values.received_values`), kept for its verdict
        # and its record alike.
        self._values: int | str | None = None
        # The task's record as decided on its `verdict` message (before `--extract`), which its `record` completes.
        self._decided: _Decided | None = None
        self._preloaded: set[str] = set()

    def run(self, task: dict[str, Any]) -> None:
        """Run one task in a case process and answer the harness; returns when the task has its answer."""
        origin = task.get("source") or ""
        child = self.child
        if child is not None and (
            self.isolation == "case" or child.origin != origin or child.retiring or not process_tree.running(child.pid)
        ):
            self.end_child()
        try:
            if self.child is None:
                self._preload(origin)
                self.child = self._fork(origin)
            try:
                self.child.tasks.write(json.dumps(task) + "\n")
                self.child.tasks.flush()
            except OSError:
                pass  # it died: the relay finds out and says so
            self._relay(self.child, task)
        finally:
            self._forget_values()
            self._decided = None
            if self.isolation == "case":
                self.end_child()

    def close(self) -> None:
        self.end_child()

    def _preload(self, origin: str) -> None:
        """A harness-owned case source's `prepare`, once, here (`HARNESS_SOURCE_PRELOADS`). One that fails is left
        to the case process, which loads it again and records what failed."""
        from harness.registry.cases import CASE_SOURCE_ORIGIN

        name = origin.removeprefix(CASE_SOURCE_ORIGIN)
        if not (origin.startswith(CASE_SOURCE_ORIGIN) and self.setup.get("preload_sources")):
            return
        if name not in HARNESS_SOURCE_PRELOADS or name in self._preloaded:
            return
        self._preloaded.add(name)
        import gc
        import importlib

        module, function = HARNESS_SOURCE_PRELOADS[name]
        try:
            getattr(importlib.import_module(module), function)()
        except Exception:  # noqa: BLE001 - the case process's own load fails the same way, inside its run
            return
        gc.collect()
        gc.freeze()  # as the worker's own imports: out of every case's collections

    def _forget_values(self) -> None:
        if isinstance(self._values, int):
            os.close(self._values)
        self._values = None

    # -- the case process -------------------------------------------------------------------------------------

    def _fork(self, origin: str) -> _CaseProcess:
        task_read, task_write = os.pipe()
        result_read, result_write = os.pipe()
        values_here, values_there = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        token = new_token()
        worker = os.getpid()
        compiles = None
        if self.setup.get("worker_root"):
            from harness.inductor_compat import compile_caches

            compiles = compile_caches.new_case_dir(self.setup["worker_root"])
        pid = os.fork()
        if pid == 0:  # the case process: never returns
            try:
                os.close(task_write)
                os.close(result_read)
                values_here.close()
                self.forget()
                process_tree.signal_on_parent_death(signal.SIGKILL)
                if os.getppid() != worker:  # the worker died before the signal was asked for
                    os._exit(1)
                tasks = os.fdopen(private_copy(task_read), "r", encoding="utf-8")
                results = os.fdopen(private_copy(result_write), "w", buffering=1, encoding="utf-8")
                values = socket.socket(fileno=private_copy(values_there.fileno()))
                os.close(task_read)
                os.close(result_write)
                values_there.close()
                if compiles:
                    _confine_to(compiles, self.setup.get("header_stamps") or {}, self.config.extract_dir)
                code = _case_loop(tasks, Sender(results, token), values, self.setup, self.config, self.isolation)
            except BaseException as exc:  # noqa: BLE001 - whatever happened, this process must not run the template's loop
                import traceback

                traceback.print_exc()
                code = DESCRIPTORS_TAKEN_EXIT if _descriptors_taken(exc) else HARNESS_FAILED_EXIT
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        os.close(task_read)
        os.close(result_write)
        values_there.close()
        return _CaseProcess(
            pid,
            os.fdopen(task_write, "w", encoding="utf-8"),
            result_read,
            Receiver(token),
            origin,
            values_here,
            compiles,
        )

    def end_child(self) -> None:
        """Kill the case process and everything left below the worker, and reap them."""
        child, self.child = self.child, None
        if child is not None:
            process_tree.kill_tree(child.pid)
            try:
                child.tasks.close()
            except OSError:  # a broken pipe: it is gone already
                pass
            os.close(child.results)
            child.values.close()
        process_tree.kill_descendants(os.getpid())
        _reap()
        if child is not None and child.compiles:
            shutil.rmtree(child.compiles, ignore_errors=True)

    def _relay(self, child: _CaseProcess, task: dict[str, Any]) -> None:
        run = task["run"]
        closed_at: float | None = None
        while True:
            ready, _, _ = select.select([child.results], [], [], POLL_S)
            if ready:
                chunk = os.read(child.results, 1 << 20)
                if chunk:
                    try:
                        for message in child.receiver.feed(chunk):
                            if self._on_message(child, task, message):
                                return
                    except ChannelCorrupted as exc:
                        self.answer.send({"corrupted": str(exc), "run": run})
                        self.end_child()
                        return
                    continue
                closed_at = closed_at or _now()
            status = _exit_status(child.pid)
            if status is not None or (closed_at is not None and _now() - closed_at > CLOSED_CHANNEL_GRACE_S):
                text = _exit_text(status) if status is not None else "the case's process closed its channel"
                harness_failed = {"harness_failed": True} if status == HARNESS_FAILED_EXIT else {}
                self.answer.send({"lost": text, "run": run, **harness_failed})
                self.end_child()
                return

    def _on_message(self, child: _CaseProcess, task: dict[str, Any], message: dict[str, Any]) -> bool:
        """Check, judge and pass on one message; True when it ends the task."""
        from harness.records import CaseResult, encode_json

        run = task["run"]
        kinds = [k for k in CHILD_MESSAGES if k in message]
        if message.get("run") != run or len(kinds) != 1:
            raise ChannelCorrupted(f"a message for another task or of no known kind: {json.dumps(message)[:120]}")
        kind = kinds[0]
        if kind in ("loading", "started"):
            self.answer.send({kind: str(message[kind]), "run": run})
            return False
        if kind == "missing":
            self.answer.send(
                {"missing": str(message["missing"]), "reason": str(message.get("reason") or ""), "run": run}
            )
            return True
        try:
            record = CaseResult.from_dict(message[kind])
            same_task = (record.case, record.dtype, record.mode) == (task["case"], task["dtype"], task["mode"])
        except Exception as exc:  # noqa: BLE001 - a record the runner did not write
            raise ChannelCorrupted(f"a {kind} that is no record ({type(exc).__name__})") from None
        if not same_task:
            raise ChannelCorrupted(f"a {kind} for {record.case}[{record.dtype}-{record.mode}], not this task's case")
        if record.status is not None:  # the judge's to give (`harness.judge.decision`), never a case's
            raise ChannelCorrupted(f"a {kind} with the status {record.status}, where no case's process gives one")
        if kind == "record" and self._decided is not None:
            # Decided when the case's process sent it before extracting: the repros are added to that record.
            record = self._decided.with_extraction_of(record)
        else:
            sent_warnings = len(record.warnings)
            record = self._judged(record, task, child)
            if record.first_divergent_kernel is not None and child.compiles:
                # Its kernel source lies in the case's own caches, removed when it ends: the record names a copy.
                from harness.inductor_compat import compile_caches

                located = record.first_divergent_kernel
                located.module_path = compile_caches.kept(located.module_path, child.compiles)
            if kind == "verdict":
                self._decided = _Decided(record, sent_warnings)
        if kind == "verdict":
            self.answer.send({"verdict": encode_json(record.to_dict()), "run": run})
            return False
        child.retiring = bool(message.get("retire"))
        self.answer.send({"record": encode_json(record.to_dict()), "retire": False, "run": run})
        return True

    def _judged(self, record: R.CaseResult, task: dict[str, Any], child: _CaseProcess) -> R.CaseResult:
        """The record decided: where its values decide it, once they are judged (`judge_record`), in a process
        forked for it (the worker itself runs no tensor operation: an OpenMP thread pool made here would deadlock
        every later fork); else (an error, a skip) here. The values came before the message that carries the
        record (the case's process sends them first)."""
        from harness.judge import decision
        from harness.judge.known_failures import Expectation
        from harness.judge.sent_values import received_values

        expectation = Expectation.from_dict(task.get("expectation"))
        facts = record.facts
        if not facts.compared or facts.error is not None or facts.untested is not None:
            decision.conclude(record, facts, expectation)  # an error or a skip: no value decides it
            return record
        latest = received_values(child.values, task["run"])
        if latest is not None:
            self._forget_values()
            self._values = latest
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the judge: never returns
            code = 0
            try:
                os.close(read_end)
                self.forget()
                process_tree.signal_on_parent_death(signal.SIGKILL)
                from harness.judge.sent_values import judge_record

                judged = judge_record(record, self._values, task.get("policy") or {}, expectation)
                with os.fdopen(write_end, "wb") as out:
                    out.write(json.dumps(R.encode_json(judged.to_dict()), allow_nan=False).encode())
            except BaseException:  # noqa: BLE001 - told to the worker by the exit code and the log
                import traceback

                traceback.print_exc()
                code = 70
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        os.close(write_end)
        chunks = []
        with os.fdopen(read_end, "rb") as answer:
            while chunk := answer.read(1 << 20):
                chunks.append(chunk)
        _, status = os.waitpid(pid, 0)
        try:
            if status != 0:
                raise ValueError(_exit_text(-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)))
            return R.CaseResult.from_dict(json.loads(b"".join(chunks)))
        except Exception as exc:  # noqa: BLE001 - the judge died or answered what is no record
            facts.failed(R.Stage.COMPARE, R.Symptom.CRASH)
            record.error = R.ErrorInfo(
                "JudgeFailed",
                f"the values this run sent could not be judged apart from the "
                f"case's code ({str(exc).replace('case process', 'judge process')})",
            )
            decision.conclude(record, facts, expectation)
            return record


def _confine_to(compiles: str, header_stamps: dict, extract_dir: str | None) -> None:
    """Before any case code: this process compiles into `compiles`, keeps its temporary files beneath it, and may
    change no file elsewhere but the repros it is asked to write (`--extract`; `confine`: unconfined where the
    kernel cannot, as the run's header says)."""
    import tempfile

    from harness.inductor_compat import compile_caches
    from harness.isolation import confine

    compile_caches.use_private_caches(compiles, header_stamps)
    temporary = os.path.join(compiles, "tmp")
    os.makedirs(temporary, exist_ok=True)
    os.environ["TMPDIR"] = temporary
    tempfile.tempdir = temporary
    own = [compiles]
    if extract_dir:
        os.makedirs(extract_dir, exist_ok=True)
        own.append(extract_dir)
    if unconfined := confine.confine(own):  # (the run's header says so only where the kernel lacks Landlock)
        print(f"harness: this case process runs unconfined: {unconfined}", file=sys.stderr, flush=True)


def _case_loop(
    tasks: IO[str], results: Sender, values: socket.socket, setup: dict[str, Any], config: RunConfig, isolation: str
) -> int:
    """The case process: its tasks, one (isolation `case`) or those of one module until something is left
    behind (isolation `module`)."""
    import faulthandler
    import gc

    from harness.isolation import residue as case_residue
    from harness.isolation.pool import task_config
    from harness.isolation.stacks import before_timeout
    from harness.judge.sent_values import send_values
    from harness.records import encode_json
    from harness.registry import CASE_SOURCE_ORIGIN, DEFAULT_IMPORT_TIMEOUT_S, Registry, load_registry
    from harness.layout import dtype_named
    from harness.run.case import gather

    broken = set(setup.get("broken_modules") or ())
    clean = case_residue.snapshot()
    registries: dict[str, Registry] = {}
    frozen_origins: set[str] = set()

    def registry_of(source: str, run: str) -> Registry:
        if source not in registries:
            # Importing the case's module has the registry's deadline; the case's timeout starts with the case.
            results.send({"loading": source, "run": run})
            paths = [source] if source else setup["case_paths"]
            registries[source] = load_registry(
                paths, include_default=not source, skip=broken, import_timeout_s=DEFAULT_IMPORT_TIMEOUT_S
            )
        return registries[source]

    for line in tasks:
        task = json.loads(line)
        run = task["run"]
        source = origin = task.get("source") or ""
        if source.startswith(CASE_SOURCE_ORIGIN):
            source = ""
        registry = registry_of(source, run)
        case = registry.lookup(task["case"])
        if case is None and source:  # a source that is not a loadable module: look everywhere
            registry = registry_of("", run)
            case = registry.lookup(task["case"])
        if case is None:
            reasons = "; ".join(str(e) for e in registry.errors) or "no case of that name there"
            results.send({"missing": task["case"], "reason": reasons, "run": run})
            continue
        if origin not in frozen_origins:
            # What a case source loads for its first case (OpInfo's op_db) lives as long as the process: loaded
            # now, before the case's clock starts, and out of the collector's sight.
            frozen_origins.add(origin)
            registry.prepare(case)
            gc.collect()
            gc.freeze()
        results.send({"started": task["case"], "run": run})

        def on_values(sizes: list, run: str = run) -> None:
            send_values(values, run, sizes)

        if task.get("timeout_s"):  # where each thread is, in the log, shortly before the run is stopped
            faulthandler.dump_traceback_later(before_timeout(float(task["timeout_s"])), exit=False)
        record = gather(
            case,
            dtype_named(task["dtype"]),
            task["mode"],
            task_config(config, task.get("localize", True)),
            on_verdict=lambda found, run=run: results.send(
                {"verdict": encode_json(found.to_dict(with_facts=True)), "run": run}
            ),
            on_values=on_values,
        )
        faulthandler.cancel_dump_traceback_later()
        residue = case_residue.left_behind(clean, ending=isolation == "case")
        record.warnings.extend(residue)
        retire = bool(residue) or not _device_usable(config.device)
        results.send({"record": encode_json(record.to_dict(with_facts=True)), "retire": retire, "run": run})
        sys.stdout.flush()
        sys.stderr.flush()
        if retire or isolation == "case":
            return 0
    return 0


def _device_usable(name: str) -> bool:
    from harness.devices import get_device

    try:
        get_device(name).synchronize()
        return True
    except Exception:  # noqa: BLE001 - whatever the device runtime raises, this process cannot use it
        return False


def _now() -> float:
    import time

    return time.monotonic()


def _exit_status(pid: int) -> int | None:
    """The case process's exit (a negative signal number when killed), or None while it runs."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -signal.SIGKILL
    if done == 0:
        return None
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _exit_text(code: int) -> str:
    if code == DESCRIPTORS_TAKEN_EXIT:
        return "the case's process ran out of file descriptors: the case opened them all or closed the harness's"
    return process_tree.exit_text(code, "case process")


def _descriptors_taken(exc: BaseException) -> bool:
    """Whether the harness failed for want of a descriptor: none left (EMFILE, ENFILE), or one of its own closed
    under it (EBADF), anywhere in the exception's chain."""
    import errno

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE, errno.EBADF):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reap() -> None:
    """Reap every exited child (orphans of a case re-parented to this subreaper included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
