"""`harness list | run | report` (also `python -m harness ...`).

Exit codes: 0 every run passed (skips and expected failures included), 1 a run
diverged, errored or passed unexpectedly, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness import records as R
from harness.frontends import colour
from harness.isolation import confine
from harness.records.journal import Journal, journal_path, read_records
from harness.frontends.options import (
    RUN_OPTIONS,
    SELECTION_OPTIONS,
    add_to_argparse,
    expectations,
    parse_positive,
    run_config_from,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130
# Terminal control sequences and other control characters: a case's text must never redraw the console.
_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


class UsageError(Exception):
    pass


class _ErrorsSaid(UsageError):
    """A usage error whose lines were said already (the load errors that left nothing to run): no line more."""


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
    listing.add_argument(
        "--skipped", action="store_true", help="list what case sources (OpInfo) leave out, and why"
    )  # harness/registry/sources.py

    run = commands.add_parser(
        "run",
        help="run cases: eager vs compiled, element by element",
        epilog=CONSOLE_LEGEND,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run_arguments(run)
    extract = commands.add_parser(
        "extract", help="run cases with --bisect and write a verified, standalone repro of each kernel it names"
    )
    extract.add_argument("-o", "--output", required=True, metavar="DIR", help="the directory to write repros into")
    _add_run_arguments(extract)

    report = commands.add_parser("report", help="render result files as one HTML report")
    report.add_argument("results", nargs="+", help="results JSON files (shards are merged)")
    report.add_argument("-o", "--output", help="the HTML file to write (default: beside the first results file)")
    report.add_argument("--baseline", help="an earlier results file to diff against")
    report.add_argument("--json", dest="json_path", help="write the merged results here too (a next baseline)")
    report.add_argument("--junit", help="write JUnit XML here too (with --baseline, its known failures as skips)")
    report.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a run failed or, with --baseline, only when one newly failed (the verdict of a sharded run)",
    )
    return parser


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    _add_selection(run)
    add_to_argparse(run, RUN_OPTIONS)
    run.add_argument("--json", dest="json_path", help="write the result records here (and each as it ends to .jsonl)")
    run.add_argument("--report-dir", help="write results.json(l) and an HTML report into this directory")
    run.add_argument("--junit", help="write JUnit XML here too")
    run.add_argument("--resume", metavar="FILE", help="skip the runs a journal (.jsonl) or results file already has")
    run.add_argument("--shard", type=_shard, metavar="I/N", help="run the I-th of N equal parts of the selection")
    run.add_argument(
        "--workers",
        type=_count,
        default=1,
        help="worker processes side by side (GPUs/NPUs: one device each; default 1)",
    )
    run.add_argument(
        "--baseline",
        metavar="FILE",
        help="an earlier results file: report what changed; only a new failure fails the run",
    )
    run.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        help="seconds one case may run, from its start in the worker (default: 300, or 1800 for a case tagged "
        "model or of size full)",
    )
    run.add_argument(
        "--isolation",
        choices=("case", "module"),
        default="case",
        help="a fresh process for every case run (case, the default), or one for consecutive runs of one "
        "case module, replaced when a case leaves something behind (module: faster where imports and "
        "compiles dominate)",
    )
    run.add_argument(
        "--no-isolation", action="store_true", help="run cases in this process (a crash then ends the run)"
    )
    run.add_argument("-x", "--exitfirst", action="store_true", help="stop after the first failing run")
    run.add_argument("-q", "--quiet", action="store_true", help="print failing runs and the totals only")
    run.add_argument("-v", "--verbose", action="store_true", help="print every run's reproduction command too")
    run.add_argument(
        "--last-failed",
        metavar="RESULTS",
        help="run again the runs that failed in a results file or "
        "journal (with the selection, only those it also selects)",
    )


class _Progress:
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
            f"about {_duration(elapsed / self.done * (self.total - self.done))} left"
            if self.done
            else "no estimate before the first run ends"
        )
        long = [
            f"{run} {_duration(seconds)}"
            for run, seconds in sorted(running, key=lambda r: -r[1])
            if seconds >= self.EVERY_S
        ]
        line = f"progress: {self.done}/{self.total} done in {_duration(elapsed)}, {eta}" + (
            f"; running long: {', '.join(long[:3])}" if long else ""
        )
        if self.finished_s and long:
            median = sorted(self.finished_s)[len(self.finished_s) // 2]
            if max(seconds for _, seconds in running) > self.HANG_FACTOR * max(median, 1.0):
                line += (
                    f" (over {self.HANG_FACTOR}x the median run, {_duration(median)}: if it hangs, "
                    "--timeout SECONDS stops such a run sooner)"
                )
        return line


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


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


# What a failing output's console line says (docs/verdict.md, "Reading a failure").
CONSOLE_LEGEND = """\
a failing output's line: bad=elements beyond tolerance/all (%), max_abs and max_rel (the largest absolute
and relative differences), out_max (the largest finite value in the compiled output), cos (the cosine similarity of
compiled and eager), [rule FAILED: what the rule that judged it asks] (docs/verdict.md)"""


def _add_selection(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cases", nargs="*", help="case names (default: all but full-size cases)")
    parser.add_argument(
        "-k",
        dest="keyword",
        help="pytest-style expression over each run's words: case name, tags, size, "
        "dtype, mode, and dynamic for a dynamic run (as pytest ids and keywords)",
    )
    parser.add_argument("--tag", action="append", default=[], help="only cases with this tag (repeatable)")
    add_to_argparse(parser, SELECTION_OPTIONS)
    parser.add_argument(
        "--shipped-cases",
        action="store_true",
        help="with --case-path: the cases shipped with the harness too (without --case-path they are the default)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A run's SIGTERM/SIGINT is held from the first moment: one that comes while the command line is read or the
    # cases load still leaves a results file (with no record) and exit 128 + signal.
    stop = _StopSignals() if argv[:1] in (["run"], ["extract"]) else contextlib.nullcontext()
    try:
        with stop:
            _import_torch(argv)
            args = build_parser().parse_args(argv)
            if getattr(args, "keyword", None):
                _check_keyword(args.keyword)  # before any case module loads: seconds, for a typo
            if args.command == "extract":  # a run that localizes and extracts
                if args.extract and args.extract != args.output:
                    raise UsageError("extract writes into -o DIR: --extract names another directory")
                args.extract, args.bisect = args.output, args.bisect or "on-failure"
            if args.command in ("run", "extract"):
                return _run(args, stop)
            return {"list": _list, "report": _report}[args.command](args)
    except UsageError as exc:
        if not isinstance(exc, _ErrorsSaid):
            say(f"error: {exc}", error=True)
        return EXIT_USAGE
    except _Stopped as exc:  # before the run had anywhere to publish
        say(f"stopped by {exc} before any case ran", error=True)
        return 128 + exc.signum
    except KeyboardInterrupt:  # Ctrl-C outside a run (a run stops on it itself)
        say("interrupted", error=True)
        return EXIT_INTERRUPTED


def _import_torch(argv: list[str]) -> None:
    """torch imported for the device the command line asks for, before the parser imports it (a device backend
    that `import torch` loads and that fails is one usage line, not a traceback). `report` needs no torch."""
    from harness import torch_import

    if argv[:1] in (["run"], ["extract"], ["list"]) and not {"-h", "--help"} & set(argv):
        problem = torch_import.prepare(torch_import.device_in(argv))
        if problem is not None:
            raise UsageError(problem)


def say(text: str, error: bool = False, paint: Callable[[str], str] | None = None) -> None:
    """Print a line with control characters removed and unprintable bytes escaped, whatever the encoding; `paint`
    colours the clean line where the stream takes colour (`colour.enabled`)."""
    stream = sys.stderr if error else sys.stdout
    text = _CONTROL.sub("", text)
    encoding = getattr(stream, "encoding", None) or "utf-8"
    text = text.encode(encoding, errors="backslashreplace").decode(encoding, errors="replace")
    if paint is not None and colour.enabled(stream):
        text = paint(text)
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:  # `harness run | head`: the reader left; the run goes on, quietly
        _silence(stream)


def _silence(stream) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, stream.fileno())


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _select(args: argparse.Namespace, in_process: bool = False):
    """The cases the selection names, and what loading them found (`case_loader.Loaded`, or the registry itself
    with `in_process`). Case modules are imported in a loader process unless the run is in-process anyway."""
    request = {
        "kind": "select",
        "paths": list(args.case_path),
        "names": list(args.cases),
        "keyword": args.keyword,
        "tags": list(args.tag),
        "include_full": args.full,
        "include_default": _with_shipped(args),
        "dynamic": bool(getattr(args, "dynamic", None)),
    }
    if in_process:
        loaded = _select_in_process(request)
    else:
        from harness.isolation.loader import LoaderFailed, load

        try:
            loaded = load(request)
        except LoaderFailed as exc:
            raise UsageError(f"cannot load cases: {exc}") from None
    for error in loaded.errors:
        say(f"error: {error}", error=True)
    if loaded.usage:
        raise UsageError(loaded.usage)
    if loaded.errors and not loaded.chosen:  # (the errors said why: "no case matches" would be a second line)
        raise _ErrorsSaid()
    if not loaded.case_count and not loaded.errors:
        raise UsageError(
            f"no cases found: this installation has no cases/ directory ({loaded.describe_sources()}); "
            "point at case modules with --case-path DIR"
        )
    return loaded, loaded.chosen


def _with_shipped(args: argparse.Namespace) -> bool:
    """The shipped cases are the default selection; `--case-path` replaces them, as in pytest, unless
    `--shipped-cases` asks for both."""
    return not args.case_path or args.shipped_cases


def _select_in_process(request: dict[str, Any]):
    """`--no-isolation`: the same selection, made with the case modules imported here (for a debugger)."""
    from harness.isolation.loader import Loaded
    from harness.registry import load_registry

    registry = load_registry(request["paths"], include_default=request["include_default"])
    loaded = Loaded(sources=registry.sources)
    try:
        loaded.chosen = registry.select(
            request["names"],
            request["keyword"],
            request["tags"],
            include_full=request["include_full"],
            dynamic=request["dynamic"],
        )
    except KeyError as exc:
        loaded.usage = exc.args[0]
    except Exception as exc:  # noqa: BLE001 - a malformed -k expression
        loaded.usage = f"bad selection: {exc}"
    loaded.errors, loaded.case_count = list(registry.errors), len(registry.cases)
    return loaded


def _list(args: argparse.Namespace) -> int:
    if args.injections:
        from harness.inject.launch import injection_named, injection_names

        say(f"{'INJECTION':28} {'SELECTOR':10} WHAT IT DOES")
        for name in injection_names():
            injection = injection_named(name)
            selector = "required" if injection.needs_selector else "optional" if injection.takes_selector else "-"
            source = f" [{injection.source}]" if injection.source else ""
            say(f"{name:28} {selector:10} {injection.summary}{source}")
        say(
            "A selector picks kernel launches: NAME@LAUNCH (a launch index from 0, e.g. fault-scale@3) or "
            "NAME@GLOB (kernel names, e.g. fault-scale@'triton_per_*'; torch_npu names its kernels triton_unk_*); "
            "without one, every launch it applies to."
        )
        return EXIT_OK
    from harness.layout import dtype_name
    from harness.run.config import runs_of

    if args.skipped:  # case sources' skips, with reasons (OpInfo: harness/registry/sources.py)
        return _list_skipped(args)
    loaded, chosen = _select(args)
    say(f"{'CASE':40} {'SIZE':4} {'MODES':20} {'DTYPES':22} TAGS")
    runs = 0
    listed = 0
    for case in chosen:
        kept = runs_of(case, args.dtype, args.mode, args.keyword)  # what `run` with the same selection would run
        if not kept:
            continue
        listed += 1
        runs += len(kept)
        modes = ",".join(dict.fromkeys(mode for _, mode in kept))
        dtypes = ",".join(dict.fromkeys(dtype_name(dtype) for dtype, _ in kept))
        say(f"{case.name:40} {case.size:4} {modes:20} {dtypes:22} {R.one_line(' '.join(case.tags))}")
    say(f"{_plural(listed, 'case')}, {_plural(runs, 'case run')}", error=True)
    if not runs:
        say("error: no case, dtype and mode matches the selection", error=True)
    return EXIT_USAGE if loaded.errors or not runs else EXIT_OK


def _list_skipped(args: argparse.Namespace) -> int:
    """What the selected case sources leave out, and why (asked of the loader process)."""
    from harness.isolation.loader import LoaderFailed, load

    try:
        loaded = load(
            {
                "kind": "skipped",
                "paths": list(args.case_path),
                "names": list(args.cases),
                "keyword": args.keyword,
                "tags": list(args.tag),
                "include_default": _with_shipped(args),
            }
        )
    except LoaderFailed as exc:
        raise UsageError(f"cannot load cases: {exc}") from None
    if loaded.skipped is None:
        say("no case source matches the selection (try --tag opinfo)")
        return EXIT_OK
    if loaded.skipped_error:
        say(f"error: {loaded.skipped_error}", error=True)
        return EXIT_USAGE
    say(f"{'SKIPPED':60} REASON")
    for what, why in loaded.skipped:
        say(f"{R.one_line(what):60} {R.one_line(why)}")
    say(f"{len(loaded.skipped)} skipped")
    return EXIT_OK


class _Stopped(Exception):
    """SIGTERM or SIGINT arrived: stop the workers, publish what finished, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _StopSignals:
    """SIGTERM and SIGINT for the whole of a run. Until `raising()`, a signal is only noted (the run is not set
    up: nothing to stop, nowhere to publish yet), and `check()` raises it at the next step; from then on, it
    raises `_Stopped` at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._raise = False

    def __enter__(self) -> "_StopSignals":
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if self._raise:
            raise _Stopped(signum)

    def check(self) -> None:
        if self.received is not None:
            raise _Stopped(self.received)

    def raising(self) -> None:
        self._raise = True
        self.check()


def _check_targets(args: argparse.Namespace) -> None:
    """Every file the run will write, checked before the first case: a directory where a file goes, a file where
    a directory goes, a place that cannot be written to is a usage error now, not a traceback after the run."""
    from harness.records.journal import journal_path

    files = [(args.json_path, "--json"), (args.junit, "--junit")]
    if getattr(args, "extract", None):
        _check_directory(args.extract, "--extract" if args.command == "run" else "-o")
    if args.report_dir:
        _check_directory(args.report_dir, "--report-dir")
        files += [(os.path.join(args.report_dir, name), "--report-dir") for name in ("results.json", "index.html")]
    journal = journal_path(args.json_path, args.report_dir)
    files += [(journal, "the journal"), (journal and journal + ".lock", "the journal's lock")]
    # What the run reads and must not overwrite (a run resumes from its own journal or results: that is read first).
    inputs = [
        (getattr(args, name, None), option)
        for name, option in (
            ("known_issues", "--known-issues"),
            ("baseline", "--baseline"),
            ("last_failed", "--last-failed"),
        )
    ]
    # (--json and --report-dir's results.json may be one file: both hold the same results.)
    outputs = [(p, o) for p, o in files if p and not (o == "--report-dir" and p.endswith("results.json"))]
    _distinct_files(outputs, [(p, o) for p, o in inputs if p])
    for path, option in files:
        if path:
            _check_file_target(path, option)


def _distinct_files(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """Two outputs that are one file, or an output that is an input: a usage error naming both (one would
    overwrite the other, or the run its own input)."""
    seen: dict[str, str] = {}
    for path, option in outputs:
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"{seen[key]} and {option} {path} are one file: give each output its own path")
        seen[key] = f"{option} {path}"
    for path, option in inputs:
        if os.path.realpath(path) in seen:
            raise UsageError(
                f"{seen[os.path.realpath(path)]} would overwrite {option} {path}, which the run "
                "reads: write it elsewhere"
            )


def _check_keyword(expression: str) -> None:
    """A `-k` expression pytest's grammar parses (`_pytest.mark.expression`, as the selection uses), else one
    usage line as pytest words it (`at column 11: expected not OR left parenthesis OR identifier; got end of
    input`). pytest 9 raises SyntaxError (column in `offset`); pytest 7 and 8 their ParseError (`column`)."""
    from _pytest.mark.expression import Expression

    try:
        Expression.compile(expression)
    except Exception as exc:  # noqa: BLE001 - SyntaxError or ParseError, by pytest's version
        column = getattr(exc, "offset", None) or getattr(exc, "column", None)
        message = getattr(exc, "msg", None) or getattr(exc, "message", None) or str(exc)
        raise UsageError(f"wrong -k expression {expression!r}: at column {column}: {message}") from None


def _other_selection_in(report_dir: str | None, json_path: str | None, selection: str | None) -> str | None:
    """The command of the run whose report `report_dir` holds, when it was another selection than this run's
    (its results file's `selection` fingerprint differs); None when there is none, or it is this selection's."""
    if not report_dir or not selection:
        return None
    previous = json_path or os.path.join(report_dir, "results.json")
    try:
        with R.open_input(previous) as handle:
            meta = json.load(handle).get("run") or {}
    except (OSError, ValueError, AttributeError):
        return None
    if not isinstance(meta, dict) or meta.get("selection") == selection:
        return None
    return str(meta.get("command") or "a run of another selection")[:500]


def _check_cache_dir() -> None:
    """Inductor's cache directory, where every compile writes: one that cannot be made (TORCHINDUCTOR_CACHE_DIR
    under a regular file) failed every worker at its first compile, with nothing said of why."""
    from harness.inductor_compat import inductor_cache_dir

    where = inductor_cache_dir()
    said = "TORCHINDUCTOR_CACHE_DIR" if os.environ.get("TORCHINDUCTOR_CACHE_DIR") else "Inductor's cache directory"
    _check_directory(where, said)
    if not os.access(where, os.W_OK | os.X_OK):
        raise UsageError(f"{said} {where}: cannot write there")


def _check_directory(path: str, option: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{option} {path}: not a directory")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot create it ({exc.strerror or exc})") from None


def _check_file_target(path: str, option: str) -> None:
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: a directory is in the way (give a file path)")
    if os.path.exists(path) and not os.path.isfile(path):  # (opening a FIFO to write blocks until a reader comes)
        raise UsageError(f"{option} {path}: not a regular file (a FIFO, device or socket is in the way)")
    directory = os.path.dirname(os.path.abspath(path))
    _check_directory(directory, option)
    try:
        if os.path.exists(path):
            with open(path, "a"):  # writable as it is (appending nothing changes nothing)
                pass
        import tempfile

        with tempfile.NamedTemporaryFile(dir=directory, prefix=".harness-check-"):
            pass  # the file will be replaced through a temporary file beside it
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write it ({exc.strerror or exc})") from None


def _run(args: argparse.Namespace, stop: _StopSignals) -> int:
    """Everything the command line asks for is checked before a worker starts or a case module loads."""
    from harness.devices import compiler_problem, get_device

    _check_cache_dir()  # (before anything imports Dynamo, which writes there as it loads)
    try:
        config = run_config_from(vars(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    device = get_device(config.device)
    unavailable = device.unavailable_reason() or compiler_problem(device, config)
    if unavailable:
        raise UsageError(f"device {config.device} is not usable: {unavailable}")
    _check_torch_version()
    _check_targets(args)
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

    expectations: Any
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


def _resumed(args: argparse.Namespace, config: Any) -> list[R.CaseResult]:
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


def _worker_pool(args: argparse.Namespace, config: Any):
    """The run's workers, started now: they import torch and the compiler while the case modules load."""
    from harness.isolation.pool import WorkerPool

    log_dir = os.path.join(args.report_dir, "logs") if args.report_dir else None
    pool = WorkerPool(
        None, [], 0.0, args.workers, log_dir=log_dir, early_device=config.device, isolation=args.isolation
    )
    pool.start_idle()
    return pool


def _run_with(args: argparse.Namespace, config: Any, pool: Any, stop: _StopSignals, inputs: _Inputs) -> int:
    from harness.devices import get_device
    from harness.isolation.pool import run_in_process

    started_at, started = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter()
    surrogate = get_device(config.device).surrogate()
    journal_file = journal_path(args.json_path, args.report_dir)
    results: list[R.CaseResult] = []
    loaded = None
    journal = None
    plan: _Plan | None = None
    stopped: _Stopped | None = None
    try:
        loaded, chosen = _select(args, in_process=pool is None)
        plan = _plan(args, chosen, inputs.carried, inputs.baseline, config)
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
            )
        results = list(plan.carried)
        journal = Journal(journal_file, plan.carried) if journal_file else None
        say(
            f"running {_plural(len(plan.tasks), 'case run')} on {config.device}"
            + (f" ({surrogate})" if surrogate else "")
            + f" with backend {config.backend}"
            + (f" ({R.injection_label(config.inject)})" if config.inject else "")
            + (f", {_plural(len(plan.carried), 'run')} carried from {args.resume}" if plan.carried else "")
            + (f", shard {args.shard[0]}/{args.shard[1]}" if args.shard else "")
        )
        if pool is not None and (unconfined := confine.unconfined_reason()):
            say(f"note: case processes run unconfined ({unconfined}): a case can write any file this user can")
        stop.raising()
        progress = _Progress(len(plan.tasks), quiet=args.quiet)
        records = (
            pool.run(plan.tasks, on_wait=progress.waiting)
            if pool is not None
            else run_in_process(plan.tasks, config, inputs.expectations)
        )
        for position, record in enumerate(records, 1):
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
            if record.status == R.FAIL and not config.bisect and record.command:
                say(f"    localize: {record.command} --bisect")
            if args.exitfirst and R.is_failing(record.status):
                say("stopping at the first failing run (-x)", error=True)
                break
    except _Stopped as exc:
        stopped = exc
        say(f"stopped by {exc}: {_plural(len(results), 'record')} kept", error=True)
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
        load_errors=load_errors,
        shard=args.shard,
        selection=plan.selection if plan is not None else None,
        # What a case could not reach: other cases (each ran in its own process, or its module's),
        # never other processes of this user (no pid namespace is made).
        isolation={"process_per": "none" if args.no_isolation else args.isolation, "pid_namespace": False},
        stopped_by=str(stopped) if stopped else None,
        journal=journal_file,
    )
    replaced = _other_selection_in(args.report_dir, args.json_path, meta.get("selection"))
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
        say(f"error: the run's results were not all written ({_plural(len(problems), 'problem')} above)", error=True)
        return EXIT_FAILED
    if inputs.baseline is not None:
        return _against_baseline(results, inputs.baseline)
    return EXIT_FAILED if any(R.is_failing(r.status) for r in results) else EXIT_OK


@dataclass
class _Plan:
    tasks: list
    carried: list[R.CaseResult]
    selection: str  # the whole selection's fingerprint, which its shards share (`report.shards`)


def _plan(
    args: argparse.Namespace,
    chosen: list,
    resumed: list[R.CaseResult],
    baseline: list[R.CaseResult] | None,
    config: Any,
) -> _Plan:
    """The runs of this invocation: the selection, this shard of it, less what `--resume` already has. Against a
    baseline, `--bisect` localizes only new failures: a run that failed there too is known."""
    from harness.isolation.pool import Task
    from harness.layout import dtype_name
    from harness.report.baseline import known_failing
    from harness.report.shards import selection_fingerprint
    from harness.run.config import runs_of

    known = {key[:3] for key in known_failing(baseline)} if baseline and args.bisect != "always" else set()
    tasks = [
        Task(case, dtype, mode, localize=(case.name, dtype_name(dtype), mode) not in known)
        for case in chosen
        for dtype, mode in runs_of(case, args.dtype, args.mode, args.keyword, bool(args.dynamic))
    ]
    if not tasks:
        raise UsageError("no case, dtype and mode matches the selection (`harness list` shows the cases)")
    # Shards of one night: the same runs under the same identity (`--resume`'s rule; how much each localizes is not
    # part of it).
    selection = selection_fingerprint((t.key for t in tasks), config.identity())
    if args.shard:
        index, count = args.shard
        tasks = [t for position, t in enumerate(sorted(tasks, key=lambda t: t.key)) if position % count == index - 1]
    if args.last_failed:
        failed = _failed_runs(args.last_failed)
        tasks = [t for t in tasks if t.key in failed]
        if not tasks:
            raise UsageError(f"--last-failed {args.last_failed}: none of its failing runs is in the selection")
    done = {(r.case, r.dtype, r.mode) for r in resumed}
    # A journal may hold a run twice (a pass, then a fail): it is carried once, with the worse status.
    resumed, _ = R.worst_of_each(resumed, lambda r: (r.case, r.dtype, r.mode))
    carried = [r for r in resumed if (r.case, r.dtype, r.mode) in {t.key for t in tasks}]
    return _Plan([t for t in tasks if t.key not in done], carried, selection)


def _failed_runs(path: str) -> set[tuple[str, str, str]]:
    try:
        records = read_records(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return {(r.case, r.dtype, r.mode) for r in records if R.is_failing(r.status)}


def _baseline(path: str | None) -> list[R.CaseResult] | None:
    if not path:
        return None
    try:
        return read_records(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _check_torch_version() -> None:
    from harness.inductor_compat import torch_version_problem

    problem = torch_version_problem()
    if problem is not None:
        fatal, message = problem
        if fatal:
            raise UsageError(message)
        say(f"warning: {message}", error=True)


# Metrics that moved for the worse, printed one a line; the rest are counted (the report has them all).
SHOWN_MOVES = 20


def _against_baseline(results: list[R.CaseResult], baseline: list[R.CaseResult]) -> int:
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


def argv_is_cli() -> bool:
    return os.path.basename(sys.argv[0]) in ("__main__.py", "harness")


def _report(args: argparse.Namespace) -> int:
    missing = [p for p in args.results + ([args.baseline] if args.baseline else []) if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such results file: {', '.join(missing)}")
    from harness.report import merge_results, write_report

    output = args.output or os.path.splitext(args.results[0])[0] + ".html"
    _distinct_files(
        [(p, o) for p, o in ((output, "-o"), (args.json_path, "--json"), (args.junit, "--junit")) if p],
        [(p, "its input") for p in args.results] + ([(args.baseline, "--baseline")] if args.baseline else []),
    )
    _check_file_target(output, "-o")
    for path, option in ((args.json_path, "--json"), (args.junit, "--junit")):
        if path:
            _check_file_target(path, option)
    try:
        run_meta, records = merge_results(args.results)
        if run_meta.get("repeated_runs_dropped"):
            say(
                f"warning: {_plural(run_meta['repeated_runs_dropped'], 'record')} of runs already read "
                "(overlapping shards, or a file given twice) counted once",
                error=True,
            )
        baseline = read_records(args.baseline) if args.baseline else None
        if args.json_path:
            R.write_results(args.json_path, records, run_meta)
            say(f"results: {args.json_path}")
        say(f"report: {write_report(args.results, output, args.baseline)}")
        if args.junit:
            from harness.report.baseline import known_failing
            from harness.report.junit import write_junit

            say(f"junit: {write_junit(records, args.junit, known_failing(baseline or []))}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report: {exc.strerror or exc} ({exc.filename or output})") from None
    # What changed is always said; `--check` decides whether the exit code says it too.
    say(totals(records))
    code = (
        _against_baseline(records, baseline)
        if baseline is not None
        else (EXIT_FAILED if any(R.is_failing(r.status) for r in records) else EXIT_OK)
    )
    return code if args.check else EXIT_OK


def totals(results: Sequence[R.CaseResult], load_errors: int = 0) -> str:
    """The last line: each status's count, and the case modules that did not load (they make the exit code 2)."""
    counts = {status: sum(r.status == status for r in results) for status in R.Status}
    said = [f"{n} {status}" for status, n in counts.items() if n]
    if load_errors:
        said.append(_plural(load_errors, "load error"))
    return "== " + (", ".join(said) or "no run finished") + " =="
