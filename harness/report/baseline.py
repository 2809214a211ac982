"""What changed against a baseline run: new failures, fixes, metrics that moved."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.records import FAILING_STATUSES, PASS, XFAIL, CaseResult, OutputComparison

# A metric must at least double (or halve) to count as moved: smaller swings are
# run-to-run noise of reductions and would bury the real changes in a nightly diff.
MOVE_FACTOR = 2.0
# Cosine similarity of healthy outputs wobbles in the 7th digit; a drop this size is a change.
COSINE_MOVE = 1e-3
# Errors below this (or the output's own tolerance, when larger) are noise, however they moved.
ERROR_FLOOR = 1e-6


@dataclass
class StatusChange:
    current: CaseResult | None
    baseline: CaseResult | None

    @property
    def record(self) -> CaseResult:
        return self.current if self.current is not None else self.baseline  # type: ignore[return-value]

    @property
    def before(self) -> str:
        return self.baseline.status if self.baseline is not None else "absent"

    @property
    def after(self) -> str:
        return self.current.status if self.current is not None else "absent"


@dataclass
class MetricMove:
    current: CaseResult
    output: str
    metric: str
    before: float
    after: float

    @property
    def worse(self) -> bool:
        # Higher is worse for every metric but cosine.
        return self.after < self.before if self.metric == "cosine" else _bigger(self.after, self.before)

    @property
    def factor(self) -> float | None:
        if self.metric in ("cosine", "bad") or not (self.before and self.after):
            return None
        ratio = abs(self.after / self.before)
        return ratio if math.isfinite(ratio) else None


@dataclass
class SetupDifference:
    """A way the baseline was run differently from this run (emulation, device, backend): a change of
    setup, not of torch.compile, can explain every status change and moved metric below it."""

    what: str
    baseline: list[str]
    current: list[str]

    @property
    def text(self) -> str:
        return f"{self.what}: baseline {_listed(self.baseline, self.what)}, this run {_listed(self.current, self.what)}"


@dataclass
class BaselineDiff:
    new_failures: list[StatusChange] = field(default_factory=list)
    fixes: list[StatusChange] = field(default_factory=list)
    other_changes: list[StatusChange] = field(default_factory=list)
    moved: list[MetricMove] = field(default_factory=list)
    only_in_baseline: list[CaseResult] = field(default_factory=list)
    matched: int = 0
    setup_differences: list[SetupDifference] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.new_failures or self.fixes or self.other_changes or self.moved or self.only_in_baseline)


def run_key(record: CaseResult) -> tuple[str, ...]:
    # Device type, not index: shards of one night land on cuda:0..cuda:7.
    return (record.case, record.dtype, record.mode, record.device.split(":")[0], record.backend)


def diff_against_baseline(
    current: list[CaseResult],
    baseline: list[CaseResult],
    current_meta: dict[str, Any] | None = None,
    baseline_meta: dict[str, Any] | None = None,
) -> BaselineDiff:
    before = {run_key(r): r for r in baseline}
    diff = BaselineDiff(setup_differences=setup_differences(current, baseline, current_meta, baseline_meta))
    seen = set()
    for record in current:
        key = run_key(record)
        seen.add(key)
        old = before.get(key)
        new_failures = len(diff.new_failures)
        _classify_status(diff, record, old)
        if old is not None:
            diff.matched += 1
            # A new failure's metrics moved because it fails: it is listed as one, not once per metric.
            if len(diff.new_failures) == new_failures:
                diff.moved.extend(_moved_metrics(record, old))
    diff.only_in_baseline = [r for key, r in before.items() if key not in seen]
    diff.moved.sort(key=_move_severity)
    return diff


def setup_differences(
    current: list[CaseResult],
    baseline: list[CaseResult],
    current_meta: dict[str, Any] | None = None,
    baseline_meta: dict[str, Any] | None = None,
) -> list[SetupDifference]:
    """Emulation, device type and backend of each side, from its run metadata and its records.

    Records carry their own `emulation`, `device` and `backend`, so a baseline whose run
    metadata is lost (a journal, an older file) is still checked. A baseline taken without
    emulation against an emulated run is the common mistake: every emulated failure then
    reads as a new regression.
    """
    differences = []
    for what, normalize in _SETUP:
        before = _setup_values(what, normalize, baseline, baseline_meta)
        after = _setup_values(what, normalize, current, current_meta)
        if before and after and before != after:  # an unknown side is no evidence of a difference
            differences.append(SetupDifference(what, sorted(before), sorted(after)))
    return differences


def _device_type(device: Any) -> str | None:
    # Shards of one night land on cuda:0..cuda:7: the index is no difference of setup.
    return str(device).split(":")[0] if device else None


# The record field (and run metadata key) of each part of a setup, and how its values compare.
_SETUP = (
    ("emulation", lambda value: str(value) if value else "none"),  # metadata says null for a run without one
    ("device", _device_type),
    ("backend", lambda value: str(value) if value else None),
    # A surrogate device's results (CPU kernels) against the device's own: every difference may be that.
    ("surrogate", lambda value: str(value) if value else "none"),
)


def _setup_values(what: str, normalize, records: list[CaseResult], meta: dict[str, Any] | None) -> set[str]:
    values = [getattr(r, what) for r in records]
    if meta is not None and what in meta:
        values += meta[what] if isinstance(meta[what], (list, tuple)) else [meta[what]]
    return {normalized for normalized in map(normalize, values) if normalized is not None}


def _listed(values: list[str], what: str) -> str:
    if what == "emulation":
        values = ["without emulation" if v == "none" else v for v in values]
    if what == "surrogate":
        values = ["on the device itself" if v == "none" else v for v in values]
    return " and ".join(values)


def _failing_before(old: CaseResult | None) -> bool:
    # A known failure (xfail) diverged then too: failing without its declaration is not new breakage.
    return old is not None and (old.status in FAILING_STATUSES or old.status == XFAIL)


def known_failing(baseline: list[CaseResult]) -> set[tuple[str, ...]]:
    """Run keys whose failure now is no new failure (what JUnit reports as "known in baseline")."""
    return {run_key(r) for r in baseline if _failing_before(r)}


def _classify_status(diff: BaselineDiff, record: CaseResult, old: CaseResult | None) -> None:
    failing_now = record.status in FAILING_STATUSES
    failing_before = _failing_before(old)
    if failing_now and not failing_before:
        # A new case that fails is a new failure too: nobody has triaged it yet.
        diff.new_failures.append(StatusChange(record, old))
    elif failing_before and record.status == PASS:
        diff.fixes.append(StatusChange(record, old))
    elif old is not None and old.status != record.status:
        diff.other_changes.append(StatusChange(record, old))


def _moved_metrics(record: CaseResult, old: CaseResult) -> list[MetricMove]:
    old_outputs = {o.name: o for o in old.outputs}
    moves = []
    for position, output in enumerate(record.outputs):
        previous = old_outputs.get(output.name)
        if previous is None and position < len(old.outputs):
            previous = old.outputs[position]
        if previous is not None:
            moves.extend(_output_moves(record, output, previous))
    return moves


def _output_moves(record: CaseResult, now: OutputComparison, then: OutputComparison) -> list[MetricMove]:
    moves = []
    if now.bad != then.bad:
        moves.append(MetricMove(record, now.name, "bad", then.bad, now.bad))
    floors = {"max_abs": max(ERROR_FLOOR, now.atol, then.atol), "max_rel": max(ERROR_FLOOR, now.rtol, then.rtol)}
    for metric, floor in floors.items():
        after, before = getattr(now, metric), getattr(then, metric)
        if _error_moved(before, after, floor):
            moves.append(MetricMove(record, now.name, metric, before, after))
    if now.cosine is not None and then.cosine is not None and _cosine_moved(then.cosine, now.cosine):
        moves.append(MetricMove(record, now.name, "cosine", then.cosine, now.cosine))
    return moves


def _error_moved(before: float, after: float, floor: float) -> bool:
    if math.isnan(before) or math.isnan(after):
        return math.isnan(before) != math.isnan(after)
    low, high = sorted((abs(before), abs(after)))
    if high <= floor:
        return False
    return low == 0 or high / low >= MOVE_FACTOR


def _cosine_moved(before: float, after: float) -> bool:
    if math.isnan(before) or math.isnan(after):
        return math.isnan(before) != math.isnan(after)
    return abs(after - before) >= COSINE_MOVE


def _bigger(a: float, b: float) -> bool:
    if math.isnan(a) != math.isnan(b):
        return math.isnan(a)
    return a > b


def _move_severity(move: MetricMove) -> tuple[int, float, str]:
    # Regressions first, the largest jumps at the top of each group.
    factor = move.factor
    magnitude = -(factor if factor and factor >= 1 else 1 / factor if factor else math.inf)
    return (0 if move.worse else 1, magnitude, move.current.case)
