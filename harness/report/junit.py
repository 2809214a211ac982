"""JUnit XML from result records, for CI systems that read test reports (Jenkins, GitLab, GitHub Actions)."""

from __future__ import annotations

import math
from typing import Collection, Sequence
from xml.sax.saxutils import escape, quoteattr

from harness.records import ERROR, SKIP, XFAIL, CaseResult, is_failing, write_atomically


def _failure(record: CaseResult) -> bool:
    # Which statuses fail a run is `records.Status`'s to say; an error is reported as <error>, not <failure>.
    return is_failing(record.status) and record.status != ERROR


def junit_xml(
    records: Sequence[CaseResult],
    name: str = "torch.compile accuracy",
    known_in_baseline: Collection[tuple[str, ...]] = (),
) -> str:
    """JUnit that agrees with the run's exit code: a failure the baseline already had (`known_in_baseline`, run
    keys of `report.baseline.run_key`) is a skip "known in baseline", as it fails nothing."""
    from harness.report.baseline import run_key

    known = set(known_in_baseline)

    def outcome(record: CaseResult) -> str:
        if is_failing(record.status) and run_key(record) in known:
            return "known"
        if record.status == ERROR:
            return "error"
        return "failure" if _failure(record) else "skipped" if record.status in (SKIP, XFAIL) else "passed"

    outcomes = [outcome(r) for r in records]
    total_time = sum(_seconds(r) for r in records)
    lines = [
        '<?xml version="1.0" encoding="utf-8"?>',
        f'<testsuites><testsuite name={quoteattr(_clean(name))} tests="{len(records)}" '
        f'failures="{outcomes.count("failure")}" errors="{outcomes.count("error")}" '
        f'skipped="{outcomes.count("skipped") + outcomes.count("known")}" time="{total_time:.3f}">',
    ]
    for record, result in zip(records, outcomes):
        lines.append(
            f'<testcase classname={quoteattr(_clean(_group(record)))} name={quoteattr(_clean(record.run_id))} '
            f'time="{_seconds(record):.3f}">'
        )
        # The same text every night for the same failure: no duration, no path in the compile cache.
        body = escape(
            _clean(record.summary(stable=True) + (f"\nreproduce: {record.command}" if record.command else ""))
        )
        if result in ("error", "failure"):
            lines.append(f"<{result} message={quoteattr(_clean(_message(record)))}>{body}</{result}>")
        elif result == "known":
            lines.append(f"<skipped message={quoteattr(_clean('known in baseline: ' + _message(record)))}/>")
        elif result == "skipped":
            lines.append(f"<skipped message={quoteattr(_clean(record.reason or str(record.status)))}/>")
        elif rules := record.passed_by_rules():
            # A pass by a rule other than the tolerance says which (a CI shows a test's properties).
            value = quoteattr(_clean("; ".join(rules)))
            lines.append(f'<properties><property name="passed_by" value={value}/></properties>')
        lines.append("</testcase>")
    lines.append("</testsuite></testsuites>")
    return "\n".join(lines) + "\n"


def _group(record: CaseResult) -> str:
    """The case's group for a CI's test tree: its first tag (seed, layout, opinfo, ...), under the device."""
    return f"harness.{record.device.split(':')[0]}.{record.tags[0] if record.tags else 'cases'}"


def _message(record: CaseResult) -> str:
    """What failed, the same from night to night: no duration, no address."""
    head = f"{str(record.status).upper()} {record.run_id}"
    if record.error is not None:
        return f"{head}: {record.stage or ''} {record.error.type}".rstrip()
    failed = [o.name for o in record.outputs if not o.passed]
    return head + (
        f": {', '.join(failed[:5])}" + (f" and {len(failed) - 5} more" if len(failed) > 5 else "") + " diverged"
        if failed
        else ""
    )


def _clean(text: str) -> str:
    """XML 1.0 allows no control characters, no lone surrogates and not U+FFFE or U+FFFF: each is written as its
    escape (`\\x00`), so a name that holds one stays readable and distinct."""
    text = text.encode("utf-8", errors="backslashreplace").decode("utf-8")
    return "".join(
        c
        if c in "\t\n\r" or (0x20 <= ord(c) and c not in "\ufffe\uffff")
        else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def write_junit(records: Sequence[CaseResult], path: str, known_in_baseline: Collection[tuple[str, ...]] = ()) -> str:
    write_atomically(path, junit_xml(records, known_in_baseline=known_in_baseline))
    return path


def _seconds(record: CaseResult) -> float:
    """A record's duration as JUnit can take it: a non-finite one ("inf" in the file) counts as 0."""
    return record.duration_s if math.isfinite(record.duration_s) else 0.0
