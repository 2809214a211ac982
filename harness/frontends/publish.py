"""Publishing a run: the results JSON, the HTML report and the run's metadata, the same from the CLI and pytest."""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from harness import records as R


def run_metadata(
    records: Sequence[R.CaseResult],
    *,
    command: str | None,
    device: str,
    backend: str,
    emulation: str | None,
    started_at: str | None = None,
    duration_s: float | None = None,
    **more: Any,
) -> dict[str, Any]:
    """What a reader of the results needs besides the records: when, where, how, with what."""
    meta = {
        "started_at": started_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": duration_s,
        "device": device,
        "backend": backend,
        "emulation": emulation,
        "command": command,
        "versions": next((r.versions for r in records if r.versions), {}),
    }
    meta.update({k: v for k, v in more.items() if v not in (None, [], {})})
    return meta


def publish(
    records: Sequence[R.CaseResult],
    run_meta: dict[str, Any],
    json_path: str | None = None,
    report_dir: str | None = None,
    junit_path: str | None = None,
    baseline: Sequence[R.CaseResult] | None = None,
) -> tuple[list[tuple[str, str]], list[str]]:
    """Write the results JSON (to `json_path`, else into `report_dir`) first, then the HTML report and JUnit
    XML: (what was written, each as its kind, "results", "report" or "junit", and its path; one line per file
    that could not be written). A secondary file that fails (a full disk) never costs the results JSON, nor the
    other secondary file. With a `baseline`, JUnit reports the failures it already had as skips, as the exit code
    does."""
    written, problems = [], []
    if report_dir and not json_path:
        json_path = os.path.join(report_dir, "results.json")
    if json_path:
        try:
            R.write_results(json_path, records, run_meta)
            written.append(("results", json_path))
        except OSError as exc:
            problems.append(f"cannot write the results {json_path} ({exc.strerror or exc})")
    if report_dir and ("results", json_path) in written:
        from harness.report import write_report

        html = os.path.join(report_dir, "index.html")
        try:
            # A shard's run reports that shard: the check that a merge makes up a whole night is `harness report`'s.
            written.append(("report", write_report([json_path], html, shard_alone=True)))
        except OSError as exc:
            problems.append(f"cannot write the report {html} ({exc.strerror or exc})")
    if junit_path:
        from harness.report.baseline import known_failing
        from harness.report.junit import write_junit

        try:
            written.append(("junit", write_junit(records, junit_path, known_failing(list(baseline or [])))))
        except OSError as exc:
            problems.append(f"cannot write the JUnit XML {junit_path} ({exc.strerror or exc})")
    return written, problems
