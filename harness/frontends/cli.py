"""`harness list | run | extract | report` (also `python -m harness ...`): the command line parsed and handed to
the module of its command (`cli_listing`, `cli_session`, `cli_report`).

Exit codes: 0 every run passed (skips and expected failures included), 1 a run
diverged, errored or passed unexpectedly, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Sequence

from harness.frontends.cli_checks import check_keyword
from harness.frontends.cli_console import (  # noqa: F401 - the exit codes and `totals`, where callers take them
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    ErrorsSaid,
    UsageError,
    say,
    totals,
)
from harness.frontends.cli_listing import list_command
from harness.frontends.cli_report import report_command
from harness.frontends.cli_session import run_command
from harness.frontends.options import (
    PROCESS_OPTIONS,
    RUN_OPTIONS,
    SELECTION_OPTIONS,
    add_to_argparse,
)
from harness.frontends.stop_signals import Stopped, StopSignals


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
    add_to_argparse(run, PROCESS_OPTIONS)
    run.add_argument("-x", "--exitfirst", action="store_true", help="stop after the first failing run")
    run.add_argument("-q", "--quiet", action="store_true", help="print failing runs and the totals only")
    run.add_argument("-v", "--verbose", action="store_true", help="print every run's reproduction command too")
    run.add_argument(
        "--last-failed",
        metavar="RESULTS",
        help="run again the runs that failed in a results file or "
        "journal (with the selection, only those it also selects)",
    )


def _shard(text: str) -> tuple[int, int]:
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise argparse.ArgumentTypeError(f"{text!r} is not I/N with 1 <= I <= N")
    return int(index), int(count)


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return int(text)


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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # A run's SIGTERM/SIGINT is held from the first moment: one that comes while the command line is read or the
    # cases load still leaves a results file (with no record) and exit 128 + signal.
    stop = StopSignals() if argv[:1] in (["run"], ["extract"]) else contextlib.nullcontext()
    try:
        with stop:
            _import_torch(argv)
            args = build_parser().parse_args(argv)
            if getattr(args, "keyword", None):
                check_keyword(args.keyword)  # before any case module loads: seconds, for a typo
            if args.command == "extract":  # a run that localizes and extracts
                if args.extract and args.extract != args.output:
                    raise UsageError("extract writes into -o DIR: --extract names another directory")
                args.extract, args.bisect = args.output, args.bisect or "on-failure"
            if args.command in ("run", "extract"):
                return run_command(args, stop)
            return {"list": list_command, "report": report_command}[args.command](args)
    except UsageError as exc:
        if not isinstance(exc, ErrorsSaid):
            say(f"error: {exc}", error=True)
        return EXIT_USAGE
    except Stopped as exc:  # before the run had anywhere to publish
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
