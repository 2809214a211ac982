"""The summary a sweep's reader reads first: per op and per layout, how many runs passed, failed, erred.

Records only (no torch): it works on any results file. It covers the records
of generated op cases (tag `opinfo`), whose tags are, in this order, `opinfo`,
the op's name, the op variant's name when it has one (`max.reduction_with_dim`),
the layout, and `ci` for the ci sample: the op is the tag before the layout,
the layout the last tag but `ci`.

Failures are grouped by op: 300 failing samples of one op are one line, with
their count, dtypes, layouts and modes, the first failure's symptom and, when
localization ran, the first divergent kernel it named.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from harness.records import CaseResult, is_failing

SOURCE_TAG = "opinfo"
COLUMNS = ("pass", "fail", "error", "xfail", "xpass", "skip", "nondeterministic")
FAILING = ("fail", "error", "xpass", "nondeterministic")


def op_and_layout(record: CaseResult) -> tuple[str, str] | None:
    """(op, layout) of a generated op case's record, or None for any other record."""
    tags = [t for t in record.tags if t != "ci"]
    if not tags or tags[0] != SOURCE_TAG or len(tags) < 3:
        return None
    return tags[-2], tags[-1]


@dataclass
class Counts:
    name: str
    counts: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def failing(self) -> int:
        return sum(self.counts[s] for s in FAILING)

    def cells(self) -> list[int]:
        return [self.counts[s] for s in COLUMNS]


@dataclass
class FailureGroup:
    """The failing runs of one op, as one line."""

    op: str
    runs: list[CaseResult]

    @property
    def count(self) -> int:
        return len(self.runs)

    @property
    def statuses(self) -> list[tuple[str, int]]:
        return sorted(Counter(str(r.status) for r in self.runs).items())

    @property
    def dtypes(self) -> list[str]:
        return _ordered(r.dtype for r in self.runs)

    @property
    def layouts(self) -> list[str]:
        return _ordered(op_and_layout(r)[1] for r in self.runs)  # type: ignore[index]

    @property
    def modes(self) -> list[str]:
        return _ordered(r.mode for r in self.runs)

    @property
    def first(self) -> CaseResult:
        return self.runs[0]

    @property
    def symptom(self) -> str:
        first = self.first
        if first.error is not None:
            message = first.error.message.strip().splitlines()
            return f"{first.stage or ''} {first.error.type}: {message[0] if message else ''}".strip()[:240]
        failing = [o for o in first.outputs if not o.passed]
        if failing:
            more = f" (+{len(failing) - 1} more)" if len(failing) > 1 else ""
            return failing[0].summary()[:240] + more
        return first.reason or str(first.status)

    @property
    def kernel(self) -> str | None:
        """The first divergent kernel named for the first failure that has one."""
        for record in self.runs:
            found = record.first_divergent_kernel
            if found is not None and found.diverged:
                if found.name:
                    return f"{found.answer}: {found.name}" + (
                        f" ({', '.join(found.aten_ops[:3])})" if found.aten_ops else ""
                    )
                return str(found.answer)
        return None

    @property
    def non_dense_64bit(self) -> bool | None:
        """Whether a non-dense int64/float64 argument reached a kernel (emulation runs only; None: not known)."""
        stats = [r.injection_stats for r in self.runs if r.injection_stats is not None]
        if not stats:
            return None
        return any((s.non_dense_args or 0) > 0 for s in stats)


@dataclass
class Summary:
    total: int
    ops: list[Counts]
    layouts: list[Counts]
    failures: list[FailureGroup]
    statuses: Counter

    @property
    def failing_ops(self) -> int:
        return len(self.failures)


def summarize(records: Iterable[CaseResult]) -> Summary | None:
    """The per-op and per-layout summary of the generated op cases among `records`, or None if there are none."""
    by_op: dict[str, Counts] = {}
    by_layout: dict[str, Counts] = {}
    failing: dict[str, list[CaseResult]] = defaultdict(list)
    statuses: Counter = Counter()
    total = 0
    for record in records:
        found = op_and_layout(record)
        if found is None:
            continue
        op, layout = found
        status = str(record.status)
        total += 1
        statuses[status] += 1
        by_op.setdefault(op, Counts(op)).counts[status] += 1
        by_layout.setdefault(layout, Counts(layout)).counts[status] += 1
        if is_failing(status):
            failing[op].append(record)
    if not total:
        return None
    ops = sorted(by_op.values(), key=lambda c: (-c.failing, c.name))
    layouts = sorted(by_layout.values(), key=lambda c: _layout_rank(c.name))
    groups = sorted((FailureGroup(op, runs) for op, runs in failing.items()), key=lambda g: (-g.count, g.op))
    return Summary(total, ops, layouts, groups, statuses)


_LAYOUT_ORDER = ("contiguous", "permuted", "gapped", "broadcast", "storage_offset", "overlapping")


def _layout_rank(name: str) -> tuple[int, str]:
    return (_LAYOUT_ORDER.index(name) if name in _LAYOUT_ORDER else len(_LAYOUT_ORDER), name)


def _ordered(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))


# The console.


def console_lines(records: Sequence[CaseResult], all_ops: bool = False) -> list[str]:
    """The summary as console lines (empty when no generated op case ran).

    Per layout every row; per op the ops with a failing, erring or expected-failing
    run (every op with `all_ops`); then one line per failing op.
    """
    summary = summarize(records)
    if summary is None:
        return []
    lines = [
        f"== OpInfo summary: {summary.total} runs of {len(summary.ops)} ops, "
        + ", ".join(f"{summary.statuses[s]} {s}" for s in COLUMNS if summary.statuses[s])
        + " =="
    ]
    lines += _table("LAYOUT", summary.layouts)
    shown = [c for c in summary.ops if all_ops or c.failing or c.counts["xfail"]]
    if shown:
        lines += _table("OP", shown)
    quiet = len(summary.ops) - len(shown)
    if quiet:
        lines.append(f"({quiet} more ops: no failure, error or known failure)")
    if summary.failures:
        lines.append(f"failures by op ({summary.failing_ops} ops):")
        for group in summary.failures:
            lines.append("  " + failure_line(group))
    return lines


def _table(title: str, rows: Sequence[Counts]) -> list[str]:
    width = max([len(title)] + [len(r.name) for r in rows])
    head = f"{title:{width}}  " + " ".join(f"{c[:5].upper():>5}" for c in COLUMNS)
    return [head] + [f"{r.name:{width}}  " + " ".join(f"{n:>5}" for n in r.cells()) for r in rows]


def failure_line(group: FailureGroup) -> str:
    """One failing op in one line: count, statuses, dtypes, layouts, modes, symptom, kernel."""
    statuses = ", ".join(f"{n} {s}" for s, n in group.statuses)
    parts = [
        f"{group.op}: {statuses}",
        f"dtypes {','.join(group.dtypes)}",
        f"layouts {','.join(group.layouts)}",
        f"modes {','.join(group.modes)}",
    ]
    if group.non_dense_64bit is not None:
        parts.append(
            "non-dense 64-bit arg reached a kernel"
            if group.non_dense_64bit
            else "no non-dense 64-bit arg reached a kernel"
        )
    text = "; ".join(parts) + f" | first: {group.first.run_id}: {group.symptom}"
    if group.kernel:
        text += f" | {group.kernel}"
    return text
