"""Self-contained HTML reports rebuilt from results files alone.

Only `harness.records` is imported: reports render on machines without torch.
"""

from __future__ import annotations

import base64
import datetime as _dt
import functools
import hashlib
import os
from typing import Any

import jinja2
from markupsafe import Markup

from harness.records import CaseResult, read_results, write_atomically

from harness.report.formatting import FILTERS
from harness.report.merge import merge_run_meta
from harness.report.view import build_context, headline, rule_of, status_class

TEMPLATES = os.path.join(os.path.dirname(__file__), "templates")

__all__ = ["render_html", "write_report", "merge_results", "merge_run_meta"]


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        # Case names, kernel source and exception text are all untrusted.
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    env.filters["status_class"] = status_class
    env.filters["headline"] = headline
    env.filters["rule"] = rule_of
    return env


@functools.lru_cache(maxsize=1)
def _sort_script() -> tuple[Markup, str]:
    """The click-to-sort script and its CSP hash.

    The page's Content-Security-Policy allows this exact script and nothing else,
    so markup smuggled in through a case name could not run even if escaping failed.
    """
    source = _environment().loader.get_source(_environment(), "sort.js.j2")[0]
    digest = base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii")
    return Markup(source), Markup(f"'sha256-{digest}'")


def render_html(
    records: list[CaseResult],
    run_meta: dict[str, Any] | None = None,
    baseline: list[CaseResult] | None = None,
    baseline_meta: dict[str, Any] | None = None,
    output: str | None = None,
) -> str:
    """The report page for `records`, diffed against `baseline` records (and its run metadata) when given;
    files the records name (extracted repros) are linked relative to `output`, the page's path, when given."""
    context = build_context(list(records), dict(run_meta or {}), baseline, baseline_meta)
    context["link_to"] = lambda path: _relative_link(path, output)
    context["sort_script"], context["script_hash"] = _sort_script()
    context["generated_at"] = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return _environment().get_template("report.html.j2").render(**context)


def merge_results(result_paths: list[str], shard_alone: bool = False) -> tuple[dict[str, Any], list[CaseResult]]:
    """The run metadata and records of results files that are shards of one run. `shard_alone`: one shard's own
    results, shown as that shard (the report `harness run --shard I/N --report-dir` writes), not as a night."""
    if not result_paths:
        raise ValueError("merging needs at least one results file")
    from harness.report.shards import check_shards

    metas, records, read = [], [], []
    for path in result_paths:
        if path.endswith(".jsonl"):  # a run's journal: its records, without the run's metadata
            from harness.records.journal import read_records

            records.extend(read_records(path))
            continue
        meta, shard = read_results(path)
        metas.append(meta)
        read.append((path, meta))
        records.extend(shard)
    if not (shard_alone and len(result_paths) == 1):
        check_shards(read)  # (a night with a shard missing is no night)
    run_meta = merge_run_meta(metas)
    if len(result_paths) > 1:
        run_meta["results_files"] = len(result_paths)
    records, repeated = _once_each(records)
    if repeated:
        run_meta["repeated_runs_dropped"] = repeated
    return run_meta, records


def _once_each(records: list[CaseResult]) -> tuple[list[CaseResult], int]:
    """Each run once: overlapping shards, or one file given twice, must not count a run twice, and of two
    records of one run with different statuses the worse stands (`records.worst_of_each`). A run is its case,
    dtype and mode under one run identity (`CaseResult.run_identity`)."""
    import json

    from harness.records import worst_of_each

    return worst_of_each(
        records,
        lambda record: (
            record.run_id,
            record.device,
            record.backend,
            record.emulation,
            json.dumps(record.run_identity, sort_keys=True, default=str),
        ),
    )


def write_report(
    result_paths: list[str], output: str, baseline_path: str | None = None, shard_alone: bool = False
) -> str:
    """Merge results files (shards of one run), render them and write `output`; returns its path. `shard_alone`
    as for `merge_results`."""
    run_meta, records = merge_results(result_paths, shard_alone=shard_alone)
    baseline = baseline_meta = None
    if baseline_path:
        baseline_meta, baseline = read_results(baseline_path)
        run_meta["baseline"] = os.path.basename(baseline_path)
    write_atomically(output, render_html(records, run_meta, baseline, baseline_meta, output))  # never half a page
    return output


def _relative_link(path: str, page: str | None) -> str:
    """A link from the page to a file: relative, so a CI artifact holding both keeps it working; never a URL
    with a scheme (a record's path is data: `javascript:...` must stay a file name)."""
    if page is not None:
        try:
            path = os.path.relpath(path, os.path.dirname(os.path.abspath(page)))
        except ValueError:  # another drive
            pass
    return path if path.startswith(("/", ".")) else "./" + path
