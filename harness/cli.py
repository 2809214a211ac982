"""`harness list | run | report` (also `python -m harness ...`).

Exit codes: 0 every run passed (skips and expected failures included), 1 a run
diverged, errored or passed unexpectedly, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from . import records as R
from .journal import Journal, journal_path, read_records
from .options import RUN_OPTIONS, SELECTION_OPTIONS, add_to_argparse, parse_positive, run_config_from

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
# Terminal control sequences and other control characters: a case's text must never redraw the console.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage dump) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="harness", description="Differential accuracy testing for torch.compile.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    listing = commands.add_parser("list", help="list the cases a selection would run")
    _add_selection(listing)
    listing.add_argument("--injections", action="store_true", help="list the --inject names instead")
    listing.add_argument("--skipped", action="store_true", help="list what case sources (OpInfo) leave out, and why")  # harness/sources.py

    run = commands.add_parser("run", help="run cases: eager vs compiled, element by element")
    _add_selection(run)
    add_to_argparse(run, RUN_OPTIONS)
    run.add_argument("--json", dest="json_path", help="write the result records here (and each as it ends to .jsonl)")
    run.add_argument("--report-dir", help="write results.json(l) and an HTML report into this directory")
    run.add_argument("--junit", help="write JUnit XML here too")
    run.add_argument("--resume", metavar="FILE", help="skip the runs a journal (.jsonl) or results file already has")
    run.add_argument("--shard", type=_shard, metavar="I/N", help="run the I-th of N equal parts of the selection")
    run.add_argument("--workers", type=_count, default=1,
                     help="worker processes side by side (GPUs/NPUs: one device each; default 1)")
    run.add_argument("--known-issues", metavar="FILE", help="triaged failures (TOML) applied as strict expected failures")
    run.add_argument("--baseline", metavar="FILE", help="an earlier results file: report what changed; only a new "
                     "failure fails the run")
    run.add_argument("--timeout", type=_seconds, default=1800.0,
                     help="seconds one case may run, from its start in the worker (default 1800)")
    run.add_argument("--no-isolation", action="store_true", help="run cases in this process (a crash then ends the run)")

    report = commands.add_parser("report", help="render result files as one HTML report")
    report.add_argument("results", nargs="+", help="results JSON files (shards are merged)")
    report.add_argument("-o", "--output", help="the HTML file to write (default: beside the first results file)")
    report.add_argument("--baseline", help="an earlier results file to diff against")
    report.add_argument("--json", dest="json_path", help="write the merged results here too (a next baseline)")
    report.add_argument("--check", action="store_true", help="exit 1 when a run failed or, with --baseline, "
                        "only when one newly failed (the verdict of a sharded run)")
    return parser


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 1 <= I <= N")
    return int(index), int(count)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


def _seconds(text: str) -> float:
    try:
        return parse_positive(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cases", nargs="*", help="case names (default: all but full-size cases)")
    parser.add_argument("-k", dest="keyword", help="pytest-style expression over case names and tags")
    parser.add_argument("--tag", action="append", default=[], help="only cases with this tag (repeatable)")
    add_to_argparse(parser, SELECTION_OPTIONS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    early = _early_worker(argv)
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            return _run(args, early)
        return {"list": _list, "report": _report}[args.command](args)
    except UsageError as exc:
        say(f"error: {exc}", error=True)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside a run (a run stops on it itself)
        say("interrupted", error=True)
        return EXIT_INTERRUPTED
    finally:
        if early is not None:
            early.close()


def _early_worker(argv: list[str]):
    """For `run` with isolated workers: start them before anything here imports torch. Their start-up (torch and
    the compiler, the longest part of a short run: 11 s on a 16-core GPU host) then overlaps this process's own.
    Several workers on an accelerator are pinned to its devices, which needs torch here: those start later."""
    if not argv or argv[0] != "run" or "--no-isolation" in argv or "-h" in argv or "--help" in argv:
        return None
    # The two options read as plain strings: the run's parser checks them with torch (`parse_device`).
    early = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    early.add_argument("--workers", default="1")
    early.add_argument("--device", default="cpu")
    try:
        known, _ = early.parse_known_args(argv[1:])
    except argparse.ArgumentError:  # `--workers` with no value: the run's parser says so
        return None
    workers, device = known.workers, known.device
    if not workers.isdigit() or int(workers) < 1 or (int(workers) > 1 and device != "cpu"):
        return None  # a bad count is the run's parser's to report
    from .executor import WorkerPool

    return WorkerPool.spawned_early(int(workers), device)


def say(text: str, error: bool = False) -> None:
    """Print a line with control characters removed and unprintable bytes escaped, whatever the encoding."""
    stream = sys.stderr if error else sys.stdout
    text = _CONTROL.sub("", text)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    text = text.encode(encoding, errors="backslashreplace").decode(encoding, errors="replace")
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:  # `harness run | head`: the reader left; the run goes on, quietly
        _silence(stream)


def _silence(stream) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _select(args: argparse.Namespace):
    from .registry import load_registry

    registry = load_registry(args.case_path)
    try:
        chosen = registry.select(args.cases, args.keyword, args.tag, include_full=args.full)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    except Exception as exc:  # a malformed -k expression
        raise UsageError(f"bad selection: {exc}") from None
    finally:
        # After the selection: it loads the case sources it asks for, and one may be unavailable here.
        for error in registry.errors:
            say(f"error: {error}", error=True)
    if not registry.cases and not registry.errors:
        raise UsageError(f"no cases found: this installation has no cases/ directory ({registry.describe_sources()}); "
                         "point at case modules with --case-path DIR")
    return registry, chosen


def _list(args: argparse.Namespace) -> int:
    if args.injections:
        from .emulation import injection_named, injection_names

        say(f"{'INJECTION':28} WHAT IT DOES")
        for name in injection_names():
            say(f"{name:28} {injection_named(name).summary}")
        return EXIT_OK
    from .run_identity import dtype_name, runs_of

    if args.skipped:  # case sources' skips, with reasons (OpInfo: harness/sources.py)
        from .sources import list_skipped
        return list_skipped(args, say)
    registry, chosen = _select(args)
    say(f"{'CASE':40} {'SIZE':4} {'MODES':20} {'DTYPES':22} TAGS")
    runs = 0
    listed = 0
    for case in chosen:
        kept = runs_of(case, args.dtype, args.mode)  # what `run` with the same --dtype/--mode would run
        if not kept:
            continue
        listed += 1
        runs += len(kept)
        modes = ",".join(dict.fromkeys(mode for _, mode in kept))
        dtypes = ",".join(dict.fromkeys(dtype_name(dtype) for dtype, _ in kept))
        say(f"{case.name:40} {case.size:4} {modes:20} {dtypes:22} {' '.join(case.tags)}")
    say(f"{_plural(listed, 'case')}, {_plural(runs, 'case run')}", error=True)
    return EXIT_USAGE if registry.errors else EXIT_OK


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived: stop the workers, publish what finished, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    def stop(signum: int, frame: Any) -> None:
        raise _Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run(args: argparse.Namespace, early: Any = None) -> int:
    from .devices import compiler_problem, get_device

    try:
        config = run_config_from(vars(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    device = get_device(config.device)
    unavailable = device.unavailable_reason() or compiler_problem(device, config)
    if unavailable:
        raise UsageError(f"device {config.device} is not usable: {unavailable}")
    _check_torch_version()
    pool = None if args.no_isolation else _worker_pool(args, config, early)
    try:
        return _run_with(args, config, pool)
    finally:
        if pool is not None:
            pool.close()


def _worker_pool(args: argparse.Namespace, config: Any, early: Any):
    """The run's workers, started now (or earlier, by `main`): they import torch while this process loads the
    case modules."""
    from .executor import WorkerPool

    log_dir = os.path.join(args.report_dir, "logs") if args.report_dir else None
    pool = early or WorkerPool(None, [], 0.0, args.workers)
    pool.configure(config, list(args.case_path), args.timeout, args.workers, log_dir)
    pool.start_idle()
    return pool


def _run_with(args: argparse.Namespace, config: Any, pool: Any) -> int:
    from .devices import get_device
    from .executor import run_in_process
    from .known_issues import apply_known_issues

    registry, chosen = _select(args)
    plan = _plan(args, chosen)
    known = _known_issues(args.known_issues)
    baseline = _baseline(args.baseline)

    started_at, started = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    journal_file = journal_path(args.json_path, args.report_dir)
    journal = Journal(journal_file, plan.carried) if journal_file else None
    surrogate = get_device(config.device).surrogate()
    say(f"running {_plural(len(plan.tasks), 'case run')} on {config.device}"
        + (f" ({surrogate})" if surrogate else "") + f" with backend {config.backend}"
        + (f" (emulation: {config.inject})" if config.inject else "")
        + (f", {_plural(len(plan.carried), 'run')} carried from {args.resume}" if plan.carried else "")
        + (f", shard {args.shard[0]}/{args.shard[1]}" if args.shard else ""))
    results: list[R.CaseResult] = list(plan.carried)
    stopped: _Stopped | None = None
    try:
        with _stop_on_signals():
            records = pool.run(plan.tasks) if pool is not None else run_in_process(plan.tasks, config)
            for position, record in enumerate(records, 1):
                apply_known_issues(record, known)
                results.append(record)
                if journal:
                    journal.append(record)
                say(f"[{position}/{len(plan.tasks)}] {record.summary()}")
                if R.is_failing(record.status) and record.command:
                    say(f"    reproduce: {record.command}")
    except _Stopped as exc:
        stopped = exc
        say(f"stopped by {exc}: {_plural(len(results), 'record')} kept", error=True)
    finally:
        if journal:
            journal.close()

    from .publish import publish, run_metadata

    meta = run_metadata(results, command=" ".join(["harness", *sys.argv[1:]]) if argv_is_cli() else None,
                        device=config.device, backend=config.backend, emulation=config.inject, surrogate=surrogate,
                        started_at=started_at, duration_s=round(time.perf_counter() - started, 3),
                        load_errors=[str(e) for e in registry.errors], shard=args.shard,
                        stopped_by=str(stopped) if stopped else None, journal=journal_file)
    for path in publish(results, meta, args.json_path, args.report_dir, args.junit):
        say(f"{'report' if path.endswith('.html') else 'junit' if path.endswith('.xml') else 'results'}: {path}")
    from .report.summary import console_lines  # per op and per layout, when OpInfo cases ran (harness/report/summary.py)
    for line in console_lines(results):
        say(line)
    say(totals(results))
    if stopped is not None:
        return 128 + stopped.signum
    if registry.errors:
        return EXIT_USAGE
    if baseline is not None:
        return _against_baseline(results, baseline)
    return EXIT_FAILED if any(R.is_failing(r.status) for r in results) else EXIT_OK


@dataclass
class _Plan:
    tasks: list
    carried: list[R.CaseResult]


def _plan(args: argparse.Namespace, chosen: list) -> _Plan:
    """The runs of this invocation: the selection, this shard of it, less what `--resume` already has."""
    from .executor import Task
    from .run_identity import runs_of

    tasks = [Task(case, str(dtype).removeprefix("torch."), mode)
             for case in chosen for dtype, mode in runs_of(case, args.dtype, args.mode)]
    if not tasks:
        raise UsageError("no case, dtype and mode matches the selection (`harness list` shows the cases)")
    if args.shard:
        index, count = args.shard
        tasks = [t for position, t in enumerate(sorted(tasks, key=lambda t: t.key)) if position % count == index - 1]
    carried: list[R.CaseResult] = []
    if args.resume:
        try:
            carried = read_records(args.resume)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        done = {(r.case, r.dtype, r.mode) for r in carried}
        carried = [r for r in carried if (r.case, r.dtype, r.mode) in {t.key for t in tasks}]
        tasks = [t for t in tasks if t.key not in done]
    return _Plan(tasks, carried)


def _known_issues(path: str | None) -> list:
    if not path:
        return []
    from .known_issues import load_known_issues

    try:
        return load_known_issues(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _baseline(path: str | None) -> list[R.CaseResult] | None:
    if not path:
        return None
    try:
        return read_records(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_torch_version() -> None:
    from .inductor_compat import torch_version_problem

    problem = torch_version_problem()
    if problem is not None:
        fatal, message = problem
        if fatal:
            raise UsageError(message)
        say(f"warning: {message}", error=True)


def _against_baseline(results: list[R.CaseResult], baseline: list[R.CaseResult]) -> int:
    """Say what changed since the baseline; only a new failure fails the run."""
    from .report.baseline import diff_against_baseline

    diff = diff_against_baseline(results, baseline)
    worse = [m for m in diff.moved if m.worse]
    say(f"against the baseline: {len(diff.new_failures)} new failures, {len(diff.fixes)} fixed, "
        f"{len(worse)} metrics worse, {len(diff.moved) - len(worse)} better, {diff.matched} runs matched")
    for difference in diff.setup_differences:
        say(f"    warning: the baseline was run differently ({difference.text}): changes may come from that")
    for change in diff.new_failures:
        say(f"    new failure: {change.record.run_id} ({change.before} -> {change.after})")
    for change in diff.fixes:
        say(f"    fixed: {change.record.run_id} ({change.before} -> {change.after})")
    for move in worse[:20]:
        say(f"    worse: {move.current.run_id} {move.output} {move.metric} {move.before:.4g} -> {move.after:.4g}")
    return EXIT_FAILED if diff.new_failures else EXIT_OK


def argv_is_cli() -> bool:
    return os.path.basename(sys.argv[0]) in ("__main__.py", "harness")


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.results + ([args.baseline] if args.baseline else []) if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such results file: {', '.join(missing)}")
    from .report import merge_results, write_report

    output = args.output or os.path.splitext(args.results[0])[0] + ".html"
    try:
        run_meta, records = merge_results(args.results)
        baseline = read_records(args.baseline) if args.baseline else None
        if args.json_path:
            R.write_results(args.json_path, records, run_meta)
            say(f"results: {args.json_path}")
        say(f"report: {write_report(args.results, output, args.baseline)}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if not args.check:
        return EXIT_OK
    say(totals(records))
    if baseline is not None:
        return _against_baseline(records, baseline)
    return EXIT_FAILED if any(R.is_failing(r.status) for r in records) else EXIT_OK


def totals(results: Sequence[R.CaseResult]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in R.Status}
    return "== " + ", ".join(f"{n} {status}" for status, n in counts.items() if n) + " =="
