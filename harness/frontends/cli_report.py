"""`harness report`: results files merged into one HTML report (and JSON, JUnit), with `--check`."""

from __future__ import annotations

import argparse
import os

from harness import records as R
from harness.frontends.cli_checks import check_file_target, distinct_files
from harness.frontends.cli_console import EXIT_FAILED, EXIT_OK, UsageError, plural, say, totals
from harness.frontends.cli_session import against_baseline
from harness.records.journal import read_records


def report_command(args: argparse.Namespace) -> int:
    missing = [p for p in args.results + ([args.baseline] if args.baseline else []) if not os.path.isfile(p)]
    if missing:
        raise UsageError(f"no such results file: {', '.join(missing)}")
    from harness.report import merge_results, write_report

    output = args.output or os.path.splitext(args.results[0])[0] + ".html"
    distinct_files(
        [(p, o) for p, o in ((output, "-o"), (args.json_path, "--json"), (args.junit, "--junit")) if p],
        [(p, "its input") for p in args.results] + ([(args.baseline, "--baseline")] if args.baseline else []),
    )
    check_file_target(output, "-o")
    for path, option in ((args.json_path, "--json"), (args.junit, "--junit")):
        if path:
            check_file_target(path, option)
    try:
        run_meta, records = merge_results(args.results)
        if run_meta.get("repeated_runs_dropped"):
            say(
                f"warning: {plural(run_meta['repeated_runs_dropped'], 'record')} of runs already read "
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
        against_baseline(records, baseline)
        if baseline is not None
        else (EXIT_FAILED if any(R.is_failing(r.status) for r in records) else EXIT_OK)
    )
    return code if args.check else EXIT_OK
