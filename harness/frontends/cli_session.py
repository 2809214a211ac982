"""`harness run` and `harness extract`: a run's session, from its inputs and journal through the pool to its
results, with progress."""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness import records as R
from harness.frontends import colour
from harness.frontends.cli_checks import check_cache_dir, check_targets, check_torch_version, other_selection_in
from harness.frontends.cli_console import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    argv_is_cli,
    duration,
    plural,
    say,
    totals,
)
from harness.frontends.cli_selection import Plan, plan_runs, select_cases
from harness.frontends.options import (
    expectations,
    run_config_from,
)
from harness.frontends.stop_signals import Stopped, StopSignals
from harness.isolation import confine
from harness.judge.known_failures import Expectations
from harness.records.journal import Journal, journal_path, read_records
from harness.records.run_config import RunConfig

if TYPE_CHECKING:
    from harness.isolation.pool import WorkerPool


class Progress:
    """A progress line on stderr at least every `EVERY_S` seconds while runs are in flight: done/total, an ETA
    from the pace so far, and the runs that have run longer than `EVERY_S`."""

    EVERY_S = 30.0

    # A run this many times longer than the median finished one (and running long) may hang: the line says how
    # to stop such runs sooner.
    HANG_FACTOR = 10

    def __init__(self, total: int, quiet: bool = False):
        self.total, self.quiet, self.done = total, quiet, 0
        self.started = self.last = time.perf_counter()
        self.finished_s: list[float] = []

    def finished(self, seconds: float) -> None:
        self.done += 1
        self.finished_s.append(seconds)

    def waiting(self, running: list[tuple[str, float]]) -> None:
        now = time.perf_counter()
        if self.quiet or now - self.last < self.EVERY_S:
            return
        self.last = now
        say(self.line(now - self.started, running), error=True)

    def line(self, elapsed: float, running: list[tuple[str, float]]) -> str:
        eta = (
            f"about {duration(elapsed / self.done * (self.total - self.done))} left"
            if self.done
            else "no estimate before the first run ends"
        )
        long = [
            f"{run} {duration(seconds)}"
            for run, seconds in sorted(running, key=lambda r: -r[1])
            if seconds >= self.EVERY_S
        ]
        line = f"progress: {self.done}/{self.total} done in {duration(elapsed)}, {eta}" + (
            f"; running long: {', '.join(long[:3])}" if long else ""
        )
        if self.finished_s and long:
            median = sorted(self.finished_s)[len(self.finished_s) // 2]
            if max(seconds for _, seconds in running) > self.HANG_FACTOR * max(median, 1.0):
                line += (
                    f" (over {self.HANG_FACTOR}x the median run, {duration(median)}: if it hangs, "
                    "--timeout SECONDS stops such a run sooner)"
                )
        return line


def run_command(args: argparse.Namespace, stop: StopSignals) -> int:
    """Everything the command line asks for is checked before a worker starts or a case module loads."""
    from harness.devices import compiler_problem, get_device

    check_cache_dir()  # (before anything imports Dynamo, which writes there as it loads)
    try:
        config = run_config_from(vars(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    device = get_device(config.device)
    unavailable = device.unavailable_reason() or compiler_problem(device, config)
    if unavailable:
        raise UsageError(f"device {config.device} is not usable: {unavailable}")
    check_torch_version()
    check_targets(args)
    try:
        expected = expectations(vars(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    baseline = _baseline(args.baseline)
    lock = _lock_journal(args)
    try:
        carried = _resumed(args, config)
        pool = None if args.no_isolation else _worker_pool(args, config)
        try:
            return _run_with(args, config, pool, stop, _Inputs(expected, baseline, carried))
        finally:
            if pool is not None:
                pool.close()
    finally:
        lock.release()


@dataclass
class _Inputs:
    """What the run read before it started: what it expects to fail, the baseline, the records `--resume`
    carries."""

    expectations: Expectations
    baseline: list[R.CaseResult] | None
    carried: list[R.CaseResult]


@dataclass
class _Locks:
    held: list

    def release(self) -> None:
        for lock in self.held:
            lock.release()


def _lock_journal(args: argparse.Namespace) -> _Locks:
    """The journal's lock, and one on every file the run writes (`records.journal.output_lock`)."""
    from harness.records.journal import JournalBusy, JournalLock, journal_path, output_lock

    holder = " ".join(["harness", *sys.argv[1:]]) if argv_is_cli() else "harness run"
    locks = _Locks([])
    outputs = [args.json_path, args.junit]
    if args.report_dir:
        outputs += [os.path.join(args.report_dir, name) for name in ("results.json", "index.html")]
    try:
        if (path := journal_path(args.json_path, args.report_dir)) is not None:
            locks.held.append(JournalLock(path, holder))
        for output in dict.fromkeys(os.path.realpath(p) for p in outputs if p):
            locks.held.append(output_lock(output, holder))
    except JournalBusy as exc:
        locks.release()
        raise UsageError(str(exc)) from None
    return locks


def _resumed(args: argparse.Namespace, config: RunConfig) -> list[R.CaseResult]:
    """The records `--resume` names, if every one was made by a run of this run's identity (same device,
    backends, options, injection, torch); otherwise a usage error naming the difference."""
    if not args.resume:
        return []
    from harness.run.config import identity_difference

    try:
        carried = read_records(args.resume)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    identity = config.identity()
    for record in carried:
        difference = identity_difference(record, identity)
        if difference:
            raise UsageError(
                f"--resume {args.resume}: {record.run_id} was made by another run ({difference}); "
                "run without --resume, or resume a journal of this run"
            )
    return carried


def _worker_pool(args: argparse.Namespace, config: RunConfig) -> WorkerPool:
    """The run's workers, started now: they import torch and the compiler while the case modules load."""
    from harness.isolation.pool import WorkerPool

    log_dir = os.path.join(args.report_dir, "logs") if args.report_dir else None
    pool = WorkerPool(
        None, [], 0.0, args.workers, log_dir=log_dir, early_device=config.device, isolation=args.isolation
    )
    pool.start_idle()
    return pool


def _run_with(
    args: argparse.Namespace, config: RunConfig, pool: WorkerPool | None, stop: StopSignals, inputs: _Inputs
) -> int:
    from harness.devices import get_device
    from harness.isolation.pool import run_in_process

    started_at, started = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    surrogate = get_device(config.device).surrogate()
    journal_file = journal_path(args.json_path, args.report_dir)
    results: list[R.CaseResult] = []
    loaded = None
    journal = None
    plan: Plan | None = None
    stopped: Stopped | None = None
    first_record_s: float | None = None  # the run's set-up (selection, plan, workers' start) and its first run
    try:
        loaded, chosen = select_cases(args, in_process=pool is None)
        plan = plan_runs(args, chosen, inputs.carried, inputs.baseline, config)
        if pool is not None:
            pool.configure(
                config,
                list(args.case_path),
                args.timeout,
                args.workers,
                pool.log_dir,
                broken_modules=loaded.broken_modules,
                isolation=args.isolation,
                expectations=inputs.expectations,
                runs=len(plan.tasks),
            )
        results = list(plan.carried)
        journal = Journal(journal_file, plan.carried) if journal_file else None
        say(
            f"running {plural(len(plan.tasks), 'case run')} on {config.device}"
            + (f" ({surrogate})" if surrogate else "")
            + f" with backend {config.backend}"
            + (f" ({R.injection_label(config.inject)})" if config.inject else "")
            + (f", {plural(len(plan.carried), 'run')} carried from {args.resume}" if plan.carried else "")
            + (f", shard {args.shard[0]}/{args.shard[1]}" if args.shard else "")
        )
        if pool is not None and (unconfined := confine.unconfined_reason()):
            say(f"note: case processes run unconfined ({unconfined}): a case can write any file this user can")
        stop.raising()
        progress = Progress(len(plan.tasks), quiet=args.quiet)
        records = (
            pool.run(plan.tasks, on_wait=progress.waiting)
            if pool is not None
            else run_in_process(plan.tasks, config, inputs.expectations)
        )
        for position, record in enumerate(records, 1):
            if first_record_s is None:
                first_record_s = round(time.perf_counter() - started, 3)
            progress.finished(record.duration_s)
            results.append(record)
            if journal:
                journal.append(record)
            if args.quiet and not R.is_failing(record.status):
                continue
            say(
                f"[{position}/{len(plan.tasks)}] {record.summary(verbose=args.verbose)}",
                paint=lambda line, status=record.status: colour.status_word(line, status),
            )
            if record.command and (R.is_failing(record.status) or args.verbose):
                say(f"    reproduce: {record.command}")
            if localize := record.localize_command(config.bisect):
                say(f"    localize: {localize}")
            if args.exitfirst and R.is_failing(record.status):
                say("stopping at the first failing run (-x)", error=True)
                break
    except Stopped as exc:
        stopped = exc
        say(f"stopped by {exc}: {plural(len(results), 'record')} kept", error=True)
    finally:
        if journal:
            journal.close()

    from harness.frontends.publish import publish, run_metadata

    load_errors = [str(e) for e in loaded.errors] if loaded is not None else []
    meta = run_metadata(
        results,
        command=" ".join(["harness", *sys.argv[1:]]) if argv_is_cli() else None,
        device=config.device,
        backend=config.backend,
        emulation=config.inject,
        surrogate=surrogate,
        started_at=started_at,
        duration_s=round(time.perf_counter() - started, 3),
        first_record_s=first_record_s,
        load_errors=load_errors,
        shard=args.shard,
        selection=plan.selection if plan is not None else None,
        # What a case could not reach: other cases (each ran in its own process, or its module's),
        # never other processes of this user (no pid namespace is made).
        isolation={"process_per": "none" if args.no_isolation else args.isolation, "pid_namespace": False},
        stopped_by=str(stopped) if stopped else None,
        journal=journal_file,
    )
    replaced = other_selection_in(args.report_dir, args.json_path, meta.get("selection"))
    written, problems = publish(results, meta, args.json_path, args.report_dir, args.junit, inputs.baseline)
    for kind, path in written:
        say(f"{kind}: {path}")
    if replaced and any(kind == "report" for kind, _ in written):
        say(f"note: {args.report_dir} held the report of another selection ({replaced}): replaced")
    if journal is not None and journal.problem:
        problems.insert(0, journal.problem)
    for problem in problems:
        say(f"error: {problem}", error=True)
    from harness.report.summary import (
        console_lines,
    )  # per op and per layout, when OpInfo cases ran (harness/report/summary.py)

    for line in console_lines(results):
        say(line)
    statuses = {r.status for r in results}
    say(totals(results, len(load_errors)), paint=lambda line: colour.totals_line(line, statuses, len(load_errors)))
    if stopped is not None:
        return 128 + stopped.signum
    if load_errors:
        return EXIT_USAGE
    if problems:
        say(f"error: the run's results were not all written ({plural(len(problems), 'problem')} above)", error=True)
        return EXIT_FAILED
    if inputs.baseline is not None:
        return against_baseline(results, inputs.baseline)
    return EXIT_FAILED if any(R.is_failing(r.status) for r in results) else EXIT_OK


def _baseline(path: str | None) -> list[R.CaseResult] | None:
    if not path:
        return None
    try:
        return read_records(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# Metrics that moved for the worse, printed one a line; the rest are counted (the report has them all).
SHOWN_MOVES = 20


def against_baseline(results: list[R.CaseResult], baseline: list[R.CaseResult]) -> int:
    """Say what changed since the baseline; only a new failure fails the run."""
    from harness.report.baseline import diff_against_baseline

    diff = diff_against_baseline(results, baseline)
    worse = [m for m in diff.moved if m.worse]
    say(
        f"against the baseline: {len(diff.new_failures)} new failures, {len(diff.fixes)} fixed, "
        f"{len(worse)} metrics worse, {len(diff.moved) - len(worse)} better, {diff.matched} runs matched"
    )
    for difference in diff.setup_differences:
        say(f"    warning: the baseline was run differently ({difference.text}): changes may come from that")
    for change in diff.new_failures:
        say(f"    new failure: {change.record.run_id} ({change.before} -> {change.after})")
    for change in diff.fixes:
        say(f"    fixed: {change.record.run_id} ({change.before} -> {change.after})")
    for move in worse[:SHOWN_MOVES]:
        say(f"    worse: {move.current.run_id} {move.output} {move.metric} {move.before:.4g} -> {move.after:.4g}")
    if len(worse) > SHOWN_MOVES:
        say(f"    ... {len(worse) - SHOWN_MOVES} more metrics worse (the report lists them)")
    return EXIT_FAILED if diff.new_failures else EXIT_OK
