"""`harness list | run | report` (also `python -m harness ...`).

Exit codes: 0 every run passed (skips and expected failures included), 1 a run
diverged, errored or passed unexpectedly, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Sequence

from . import records as R
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
    run.add_argument("--json", dest="json_path", help="write the result records here")
    run.add_argument("--report-dir", help="write results.json and an HTML report into this directory")
    run.add_argument("--timeout", type=_seconds, default=1800.0,
                     help="seconds one case may run before it is stopped (default 1800)")
    run.add_argument("--no-isolation", action="store_true", help="run cases in this process (a crash then ends the run)")

    report = commands.add_parser("report", help="render result files as one HTML report")
    report.add_argument("results", nargs="+", help="results JSON files (shards are merged)")
    report.add_argument("-o", "--output", help="the HTML file to write (default: beside the first results file)")
    report.add_argument("--baseline", help="an earlier results file to diff against")
    return parser


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
    try:
        args = build_parser().parse_args(argv)
        return {"list": _list, "run": _run, "report": _report}[args.command](args)
    except UsageError as exc:
        say(f"error: {exc}", error=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        say("interrupted", error=True)
        return EXIT_INTERRUPTED


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
    for error in registry.errors:
        say(f"error: {error}", error=True)
    try:
        chosen = registry.select(args.cases, args.keyword, args.tag, include_full=args.full)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    except Exception as exc:  # a malformed -k expression
        raise UsageError(f"bad selection: {exc}") from None
    if not registry.cases and not registry.errors:
        raise UsageError(f"no cases found: this installation has no cases/ directory ({registry.describe_sources()}); "
                         "point at case modules with --case-path DIR")
    return registry, chosen


def _list(args: argparse.Namespace) -> int:
    if args.injections:
        from .emulation import INJECTIONS

        say(f"{'INJECTION':28} WHAT IT DOES")
        for name, injection in INJECTIONS.items():
            say(f"{name:28} {injection.summary}")
        return EXIT_OK
    if args.skipped:  # case sources' skips, with reasons (OpInfo: harness/sources.py)
        from .sources import list_skipped
        return list_skipped(args, say)
    registry, chosen = _select(args)
    say(f"{'CASE':40} {'SIZE':4} {'MODES':20} {'DTYPES':22} TAGS")
    runs = 0
    for case in chosen:
        dtypes = ",".join(str(d).removeprefix("torch.") for d in case.dtypes)
        runs += len(case.dtypes) * len(case.modes)
        say(f"{case.name:40} {case.size:4} {','.join(case.modes):20} {dtypes:22} {' '.join(case.tags)}")
    say(f"{_plural(len(chosen), 'case')}, {_plural(runs, 'case run')}", error=True)
    return EXIT_USAGE if registry.errors else EXIT_OK


def _run(args: argparse.Namespace) -> int:
    from .devices import get_device
    from .executor import Task, run_in_process, run_isolated
    from .runner import runs_of

    try:
        config = run_config_from(vars(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    unavailable = get_device(config.device).unavailable_reason()
    if unavailable:
        raise UsageError(f"device {config.device} is not usable: {unavailable}")
    registry, chosen = _select(args)
    tasks = [Task(case, str(dtype).removeprefix("torch."), mode)
             for case in chosen for dtype, mode in runs_of(case, args.dtype, args.mode)]
    if not tasks:
        raise UsageError("no case, dtype and mode matches the selection (`harness list` shows the cases)")

    started_at, started = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    say(f"running {_plural(len(tasks), 'case run')} on {config.device} with backend {config.backend}"
        + (f" (emulation: {config.inject})" if config.inject else ""))
    runs = run_in_process(tasks, config) if args.no_isolation else run_isolated(tasks, config, args.case_path, args.timeout)
    results: list[R.CaseResult] = []
    for position, record in enumerate(runs, 1):
        results.append(record)
        say(f"[{position}/{len(tasks)}] {record.summary()}")
        if record.status in (R.FAIL, R.ERROR, R.XPASS) and record.command:
            say(f"    reproduce: {record.command}")

    from .publish import publish, run_metadata

    meta = run_metadata(results, command=" ".join(["harness", *sys.argv[1:]]) if argv_is_cli() else None,
                        device=config.device, backend=config.backend, emulation=config.inject,
                        started_at=started_at, duration_s=round(time.perf_counter() - started, 3),
                        load_errors=[str(e) for e in registry.errors])
    for path in publish(results, meta, args.json_path, args.report_dir):
        say(f"{'report' if path.endswith('.html') else 'results'}: {path}")
    from .report.summary import console_lines  # per op and per layout, when OpInfo cases ran (harness/report/summary.py)
    for line in console_lines(results):
        say(line)
    say(totals(results))
    if registry.errors:
        return EXIT_USAGE
    return EXIT_FAILED if any(R.is_failing(r.status) for r in results) else EXIT_OK


def argv_is_cli() -> bool:
    return os.path.basename(sys.argv[0]) in ("__main__.py", "harness")


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.results + ([args.baseline] if args.baseline else []) if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such results file: {', '.join(missing)}")
    from .report import write_report

    output = args.output or os.path.splitext(args.results[0])[0] + ".html"
    try:
        say(f"report: {write_report(args.results, output, args.baseline)}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return EXIT_OK


def totals(results: Sequence[R.CaseResult]) -> str:
    counts = {status: sum(r.status == status for r in results) for status in R.Status}
    return "== " + ", ".join(f"{n} {status}" for status, n in counts.items() if n) + " =="
