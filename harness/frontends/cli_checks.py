"""What the CLI checks before any case runs: output targets, a `-k` expression, the cache dir, torch's version."""

from __future__ import annotations

import argparse
import json
import os

from harness import records as R
from harness.frontends.cli_console import UsageError, say


def check_targets(args: argparse.Namespace) -> None:
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
    distinct_files(outputs, [(p, o) for p, o in inputs if p])
    for path, option in files:
        if path:
            check_file_target(path, option)


def distinct_files(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
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


def check_keyword(expression: str) -> None:
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


def other_selection_in(report_dir: str | None, json_path: str | None, selection: str | None) -> str | None:
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


def check_cache_dir() -> None:
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


def check_file_target(path: str, option: str) -> None:
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


def check_torch_version() -> None:
    from harness.inductor_compat import torch_version_problem

    problem = torch_version_problem()
    if problem is not None:
        fatal, message = problem
        if fatal:
            raise UsageError(message)
        say(f"warning: {message}", error=True)
