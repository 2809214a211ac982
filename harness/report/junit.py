"""JUnit XML from result records, for CI systems that read test reports (Jenkins, GitLab, GitHub Actions)."""

from __future__ import annotations

import math
from typing import Sequence
from xml.sax.saxutils import escape, quoteattr

from harness.records import ERROR, SKIP, XFAIL, CaseResult, is_failing, write_atomically


def _failure(record: CaseResult) -> bool:
    # Which statuses fail a run is `records.Status`'s to say; an error is reported as <error>, not <failure>.
    return is_failing(record.status) and record.status != ERROR


def junit_xml(records: Sequence[CaseResult], name: str = "torch.compile accuracy") -> str:
    failures = sum(_failure(r) for r in records)
    errors = sum(r.status == ERROR for r in records)
    skipped = sum(r.status in (SKIP, XFAIL) for r in records)
    total_time = sum(_seconds(r) for r in records)
    lines = ['<?xml version="1.0" encoding="utf-8"?>',
             f'<testsuites><testsuite name={quoteattr(name)} tests="{len(records)}" failures="{failures}" '
             f'errors="{errors}" skipped="{skipped}" time="{total_time:.3f}">']
    for record in records:
        classname = quoteattr(f"harness.{record.device}.{record.backend}")
        lines.append(f'<testcase classname={classname} name={quoteattr(record.run_id)} time="{_seconds(record):.3f}">')
        body = escape(_clean(record.summary() + (f"\nreproduce: {record.command}" if record.command else "")))
        message = quoteattr(_clean(record.summary().splitlines()[0]))
        if record.status == ERROR:
            lines.append(f"<error message={message}>{body}</error>")
        elif _failure(record):
            lines.append(f"<failure message={message}>{body}</failure>")
        elif record.status in (SKIP, XFAIL):
            lines.append(f"<skipped message={quoteattr(_clean(record.reason or str(record.status)))}/>")
        lines.append("</testcase>")
    lines.append("</testsuite></testsuites>")
    return "\n".join(lines) + "\n"


def _clean(text: str) -> str:
    """XML 1.0 allows no control characters and no lone surrogates."""
    text = text.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def write_junit(records: Sequence[CaseResult], path: str) -> str:
    write_atomically(path, junit_xml(records))
    return path


def _seconds(record: CaseResult) -> float:
    """A record's duration as JUnit can take it: a non-finite one ("inf" in the file) counts as 0."""
    return record.duration_s if math.isfinite(record.duration_s) else 0.0
