"""Publishing a run: the results JSON, the HTML report and the run's metadata, the same from the CLI and pytest."""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

from . import records as R


def run_metadata(records: Sequence[R.CaseResult], *, command: str | None, device: str, backend: str,
                 emulation: str | None, started_at: str | None = None, duration_s: float | None = None,
                 **more: Any) -> dict[str, Any]:
    """What a reader of the results needs besides the records: when, where, how, with what."""
    meta = {
        "started_at": started_at or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "duration_s": duration_s, "device": device, "backend": backend, "emulation": emulation,
        "command": command, "versions": next((r.versions for r in records if r.versions), {}),
    }
    meta.update({k: v for k, v in more.items() if v not in (None, [], {})})
    return meta


def publish(records: Sequence[R.CaseResult], run_meta: dict[str, Any], json_path: str | None = None,
            report_dir: str | None = None, junit_path: str | None = None) -> list[str]:
    """Write the results JSON (to `json_path`, else into `report_dir`), the HTML report and JUnit XML;
    the paths written."""
    written = []
    if junit_path:
        from .report.junit import write_junit

        written.append(write_junit(records, junit_path))
    if report_dir and not json_path:
        json_path = os.path.join(report_dir, "results.json")
    if json_path:
        R.write_results(json_path, records, run_meta)
        written.append(json_path)
    if report_dir and json_path:
        from .report import write_report

        written.append(write_report([json_path], os.path.join(report_dir, "index.html")))
    return written
