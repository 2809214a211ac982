"""Turns records into what the templates show: ordering, totals, pictures, highlights.

Everything here is plain data; the page layout lives in templates/.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.records import (
    ERROR,
    PASSED_BY_COSINE,
    PASSED_BY_EAGER_NONFINITE,
    PASSED_BY_LOW_PRECISION_ATOMICS,
    PASSED_BY_RMSE,
    PASSED_BY_SUMMATION_NOISE,
    SKIP,
    XFAIL,
    STATUSES,
    Answer,
    CaseResult,
    KernelArgument,
    Localization,
    OutputComparison,
    Status,
    is_failing,
)

from harness.report import svg
from harness.report.baseline import MOVE_FACTOR, BaselineDiff, diff_against_baseline
from harness.report.formatting import cosine as format_cosine
from harness.report.formatting import number as format_number
from harness.report.summary import COLUMNS as OPINFO_COLUMNS, summarize as summarize_ops

# Failures first: what needs a human comes before what only needs a glance (the order `Status` declares).
STATUS_ORDER = tuple(Status)
# Within a status, the runs of these tags come first: the seed cases are the upstream reports the
# harness exists for, and their failure is the headline of an emulation run, not its last line.
HEADLINE_TAGS = ("seed",)
SAMPLES_SHOWN = 8


@dataclass
class SourceLine:
    number: int
    # (text, is_buffer_name) pieces, so the template can mark the names themselves.
    pieces: list[tuple[str, bool]]
    hit: bool


@dataclass
class KernelView:
    """Localization's answer for one run, ready for the kernel panel."""

    data: Localization
    diverged: bool
    buffers: list[str]
    source_lines: list[SourceLine]
    hit_lines: int
    # Kernel parameters (and wrapper buffers) marked in the source and the arguments table, with why.
    marked: dict[str, str] = field(default_factory=dict)

    @property
    def marked_in_source(self) -> list[str]:
        """The marked names the source actually mentions (wrapper buffer names never appear in it)."""
        seen = {text for line in self.source_lines for text, hit in line.pieces if hit}
        return [name for name in self.marked if name in seen]

    @property
    def answer(self) -> str:
        return str(self.data.answer)

    @property
    def names_kernel(self) -> bool:
        return self.data.name is not None and self.data.answer in (Answer.KERNEL, Answer.DRIFT)

    @property
    def label(self) -> str:
        """The answer in a table cell: the kernel, or the stage, or why none."""
        if self.names_kernel:
            name = self.data.name or "kernel"
            launch = f"#{self.data.launch_index}" if self.data.launch_index is not None else None
            where = " ".join(x for x in (self.data.graph, launch) if x)
            return f"{self.answer}: {name} ({where})" if where else f"{self.answer}: {name}"
        if self.data.answer == Answer.STAGE:
            graph_pass = f" ({self.data.graph_pass})" if self.data.graph_pass else ""
            return f"stage: {self.data.stage}{graph_pass}"
        return self.answer


@dataclass
class OutputView:
    output: OutputComparison
    map_svg: str
    histogram_svg: str
    samples: list[dict[str, Any]]


@dataclass
class CaseView:
    record: CaseResult
    anchor: str
    bad: int
    numel: int
    max_abs: float | None
    max_rel: float | None
    cosine: float | None
    kernel: KernelView | None
    # Outputs that failed, or passed with elements beyond tolerance (by a rule other than tolerance).
    outputs: list[OutputView] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        """Whether this run fails the run (CLI exit 1, pytest): `records.Status` decides, nothing here."""
        return is_failing(self.record.status)

    @property
    def errored(self) -> bool:
        return self.record.status == ERROR or self.record.error is not None

    @property
    def diverging(self) -> bool:
        return any(not o.output.passed for o in self.outputs) or (self.kernel is not None and self.kernel.diverged)

    @property
    def detailed(self) -> bool:
        """Shown in the details section: every failing run that is not an error (those have their own
        section), every run that diverged (xfail included), and passes with elements beyond tolerance."""
        return (self.failing and not self.errored) or self.diverging or bool(self.outputs)

    @property
    def passed_by(self) -> list[str]:
        """The rules that passed this run's outputs despite elements beyond tolerance."""
        return list(dict.fromkeys(rule_of(o.output) for o in self.outputs if o.output.passed))

    @property
    def rule_notes(self) -> list[tuple[str, str]]:
        """(rule, what it means) for every rule in the outputs table that passed an output with differences."""
        explained = {}
        for output in self.record.outputs:
            if output.passed and output.bad:
                explained.setdefault(rule_of(output), rule_explanation(output))
        return list(explained.items())

    @property
    def link(self) -> str | None:
        """Where the table row points: the first section that tells more about this record."""
        if self.diverging or (self.detailed and not self.errored):
            return f"#{self.anchor}"
        if self.errored:
            return f"#{self.anchor}-error"
        if self.record.status == SKIP:
            return f"#{self.anchor}-skip"
        return None


def build_context(
    records: list[CaseResult],
    run_meta: dict[str, Any],
    baseline: list[CaseResult] | None,
    baseline_meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    cases = [_case_view(i, r) for i, r in enumerate(records)]
    cases.sort(key=case_order)
    diff: BaselineDiff | None = None
    if baseline is not None:
        diff = diff_against_baseline(records, baseline, run_meta, baseline_meta)
    links = {id(c.record): c.link for c in cases}
    detailed = [c for c in cases if c.detailed]
    return {
        "summary": summarize(records, run_meta),
        "cases": cases,
        "detailed": detailed,
        "failing_detailed": sum(c.failing for c in detailed),
        "errors": [c for c in cases if c.errored],
        "skips": [c for c in cases if c.record.status == SKIP],
        "diff": diff,
        "link_for": lambda record: links.get(id(record)) if record is not None else None,
        "move_factor": MOVE_FACTOR,
        # Generated op cases (OpInfo): per op and per layout, shown first (None when there are none).
        "opinfo": summarize_ops(records),
        "opinfo_columns": OPINFO_COLUMNS,
    }


def case_order(view: CaseView) -> tuple[Any, ...]:
    """Failing runs first, in the order `Status` declares, then the rest; headline (seed) cases first
    within a status."""
    r = view.record
    rank = STATUS_ORDER.index(r.status) if r.status in STATUS_ORDER else len(STATUS_ORDER)
    headline_case = any(tag in HEADLINE_TAGS for tag in r.tags)
    return (not view.failing, rank, not headline_case, r.case, r.dtype, r.mode, r.device, r.backend)


def _case_view(index: int, record: CaseResult) -> CaseView:
    outputs = record.outputs
    kernel = _kernel_view(record.first_divergent_kernel)
    return CaseView(
        record=record,
        anchor=f"case-{index}",
        bad=sum(o.bad for o in outputs),
        numel=sum(o.numel for o in outputs),
        max_abs=_worst(o.max_abs for o in outputs),
        max_rel=_worst(o.max_rel for o in outputs),
        cosine=min((o.cosine for o in outputs if o.cosine is not None), default=None, key=_nan_low),
        kernel=kernel,
        outputs=[_output_view(o) for o in outputs if not o.passed or o.bad],
    )


def rule_of(output: OutputComparison) -> str:
    """The rule that decided an output, as the outputs table shows it: the one that passed it despite
    its differences when there is one (`rule` says "rmse_vs_fp64" for both RMSE and noise passes)."""
    return output.passed_by or output.rule


def rule_explanation(output: OutputComparison) -> str:
    """One line on what the rule that decided `output` means, with this output's own numbers."""
    rule, num = rule_of(output), format_number
    if rule == PASSED_BY_RMSE:
        return (
            f"its RMS error against a float64 run of the program ({num(output.rmse_actual)}) is within "
            f"×{num(output.rmse_multiplier)} of eager's own ({num(output.rmse_expected)}) plus atol/10: compiled "
            "is as close to the true values as eager, and its elements beyond tolerance are rounding, not a "
            "compiled error (torchbench's RMSE rule)"
        )
    if rule == PASSED_BY_SUMMATION_NOISE:
        return (
            f"its RMS error against float64 ({num(output.rmse_actual)}) is within the noise a correct float32 "
            f"sum of many terms has (floor {num(output.rmse_floor)}); eager's own reduction is more accurate "
            f"than a plain float32 sum ({num(output.rmse_expected)}), which is why elements sit beyond "
            "tolerance of eager"
        )
    if rule == PASSED_BY_EAGER_NONFINITE:
        return (
            f"eager is NaN or inf in {output.eager_nonfinite} element(s) where a float64 run of the program, "
            f"rounded to {output.dtype}, is finite and compiled matches it: eager's own arithmetic overflowed "
            "there (compiled code keeps intermediates in float32); every other element met its tolerance"
        )
    if rule == PASSED_BY_LOW_PRECISION_ATOMICS:
        return (
            f"its RMS error against float64 ({num(output.rmse_actual)}) is within ×{num(output.rmse_multiplier)} "
            f"of eager's with each float16/bfloat16 scatter sum made one add at a time in that dtype "
            f"({num(output.rmse_low_precision_sums)}): the rounding the program's atomic adds make, in any order "
            "(the run's diagnosis names those kernels; docs/verdict.md)"
        )
    if rule == PASSED_BY_COSINE:
        return (
            f"its cosine similarity with eager ({format_cosine(output.cosine)}) passed torchbench's last-resort "
            "check, which this case asks for; it missed both its tolerance and the RMSE rule"
        )
    return RULE_MEANINGS.get(rule, "")


# What the other deciding rules mean; their numbers are already in the outputs table.
RULE_MEANINGS = {
    "exact": "integers and bool must match exactly",
    "tolerance": (
        "every element within atol + rtol·|eager| of eager (torch.testing.assert_close's table, or the case's override)"
    ),
    "rmse_vs_fp64": "judged against a float64 run of the program (torchbench's RMSE rule)",
    "equal": "a non-tensor result: must equal eager's",
    "shape": "shapes differ: nothing to compare element by element",
    "missing": "only one side produced this result",
}


def _worst(values) -> float | None:
    values = list(values)
    if not values:
        return None
    # NaN is the worst error there is; max() would silently skip it.
    return max(values, key=lambda v: math.inf if math.isnan(v) else v)


def _nan_low(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _output_view(output: OutputComparison) -> OutputView:
    return OutputView(
        output=output,
        map_svg=svg.mismatch_map_svg(output.mismatch_map, output.name),
        histogram_svg=svg.error_histogram_svg(output.error_histogram, output.atol, output.name),
        samples=[_sample_row(s.index, s.actual, s.expected) for s in output.samples[:SAMPLES_SHOWN]],
    )


def _sample_row(index: list[int], actual: Any, expected: Any) -> dict[str, Any]:
    try:
        diff = abs(float(actual) - float(expected))
    except (TypeError, ValueError):
        diff = None
    return {"index": index, "actual": actual, "expected": expected, "diff": diff}


def _kernel_view(data: Localization | None) -> KernelView | None:
    if data is None:
        return None
    buffers = [str(b) for b in data.buffers]
    marked = marked_arguments(data)
    lines = highlight_source(data.source or "", list(marked))
    return KernelView(
        data=data,
        diverged=data.diverged,
        buffers=buffers,
        source_lines=lines,
        hit_lines=sum(line.hit for line in lines),
        marked=marked,
    )


def marked_arguments(data: Localization) -> dict[str, str]:
    """The kernel parameters whose source lines the panel marks, each with the reason.

    Localization names what the kernel *wrote* wrong (`buffers`: the parameter and the wrapper's
    buffer), never which input it *read* wrong. A kernel shown wrong on exact (eager) inputs reads
    right values at wrong addresses, and the launch-boundary bugs this harness hunts live in the
    loads of one kind of input: one whose layout is not dense (seed 000's overlapping view collapsed
    into a contiguous copy), or one that shares memory with the buffer written wrong (a kernel that
    reads what it writes). The argument records carry size, stride and buffer, so those loads are
    found here without re-running anything; it is a heuristic, and the reasons say which rule fired.
    """
    if data.answer not in (Answer.KERNEL, Answer.DRIFT):
        return {}
    marked = {str(name): "written wrong" for name in data.buffers if name}
    written = {str(name) for name in data.buffers if name}
    for arg in data.args:
        if arg.role not in ("in", "inout") or arg.name in marked:
            continue
        if arg.buffer is not None and arg.buffer in written:
            marked[arg.name] = f"reads {arg.buffer}, the buffer written wrong"
        elif not _dense(arg):
            marked[arg.name] = f"read through a non-dense layout (size {_dims(arg.size)}, stride {_dims(arg.stride)})"
    return marked


def _dense(arg: KernelArgument) -> bool:
    """Whether size and stride describe a non-overlapping, dense layout (any dimension order)."""
    if any(size == 0 for size in arg.size):
        return True
    expected = 1
    for stride, size in sorted((stride, size) for size, stride in zip(arg.size, arg.stride) if size != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _dims(values: list[int]) -> str:
    return "(" + ", ".join(map(str, values)) + ("," if len(values) == 1 else "") + ")"


def highlight_source(source: str, names: list[str]) -> list[SourceLine]:
    """Split kernel source into numbered lines, marking where diverging buffers are named."""
    pattern = _names_pattern(names)
    result = []
    for number, text in enumerate(source.splitlines(), start=1):
        pieces = _split_on(pattern, text) if pattern else [(text, False)]
        result.append(SourceLine(number, pieces, any(hit for _, hit in pieces)))
    return result


def _names_pattern(names: list[str]) -> re.Pattern[str] | None:
    names = sorted({n for n in names if n}, key=len, reverse=True)
    if not names:
        return None
    # Whole identifiers only: "in_ptr1" must not light up lines that use "in_ptr10".
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9_])")


def _split_on(pattern: re.Pattern[str], text: str) -> list[tuple[str, bool]]:
    pieces, last = [], 0
    for match in pattern.finditer(text):
        if match.start() > last:
            pieces.append((text[last : match.start()], False))
        pieces.append((match.group(0), True))
        last = match.end()
    if last < len(text) or not pieces:
        pieces.append((text[last:], False))
    return pieces


def summarize(records: list[CaseResult], run_meta: dict[str, Any]) -> dict[str, Any]:
    counts = Counter(r.status for r in records)
    statuses = [(s, counts.get(s, 0)) for s in STATUS_ORDER] + [
        (s, n) for s, n in sorted(counts.items()) if s not in STATUSES
    ]
    case_time = sum(r.duration_s for r in records)
    return {
        "total": len(records),
        "statuses": statuses,
        "failing": sum(n for s, n in counts.items() if is_failing(s)),
        "known_failing": counts.get(XFAIL, 0),
        "devices": _union(run_meta.get("device"), [_device_label(r) for r in records]),
        "backends": _union(run_meta.get("backend"), [r.backend for r in records]),
        "dtypes": _union(None, [r.dtype for r in records]),
        "versions": _versions(run_meta.get("versions"), records),
        "emulation": _union(run_meta.get("emulation"), [r.emulation for r in records]),
        "surrogate": _union(run_meta.get("surrogate"), [r.surrogate for r in records]),
        "started_at": run_meta.get("started_at"),
        "duration_s": run_meta.get("duration_s"),
        "case_time_s": case_time,
        "commands": [str(c) for c in _as_list(run_meta.get("command"))],
        "baseline": run_meta.get("baseline"),
        "other": _other_meta(run_meta),
        "by_family": svg.status_by_family_svg(_status_by_family(records)),
        "tolerance_ratios": svg.tolerance_ratio_svg(_tolerance_ratios(records), RATIO_LABELS.index("1-10")),
    }


# Families shown one a row in the summary's chart; the rest are pooled.
FAMILY_ROWS = 16
# Decades of (largest difference) / (its tolerance), the summary's second chart; "0" is an exact match.
RATIO_EDGES = (0.01, 0.1, 1.0, 10.0, 100.0)
RATIO_LABELS = ("0", "<0.01", "0.01-0.1", "0.1-1", "1-10", "10-100", ">100")


def _status_by_family(records: list[CaseResult]) -> list[tuple[str, list[tuple[str, int]]]]:
    """(family, [(status, runs)]) with the families that fail first; a family is a record's first tag."""
    counts: dict[str, Counter] = {}
    for record in records:
        counts.setdefault(record.tags[0] if record.tags else "untagged", Counter())[str(record.status)] += 1
    ranked = sorted(
        counts.items(),
        key=lambda item: (-sum(n for s, n in item[1].items() if is_failing(s)), -sum(item[1].values()), item[0]),
    )
    if len(ranked) > FAMILY_ROWS:
        rest = Counter()
        for _, family in ranked[FAMILY_ROWS - 1 :]:
            rest.update(family)
        ranked = ranked[: FAMILY_ROWS - 1] + [(f"{len(ranked) - FAMILY_ROWS + 1} more", rest)]
    return [(name, [(str(s), family.get(str(s), 0)) for s in STATUS_ORDER]) for name, family in ranked]


def _tolerance_ratios(records: list[CaseResult]) -> list[tuple[str, int, int, int]]:
    """(decade, outputs that passed, outputs that failed, outputs that failed as declared) of max |compiled -
    eager| / (atol + rtol * |eager's largest value|) over every float output compared by tolerance (an estimate:
    the verdict's tolerance is per element). The outputs of an expected failure (`xfail`) are counted apart: a
    clean run's chart shows no failure."""
    passed, failed, expected = Counter(), Counter(), Counter()
    for record in records:
        for output in record.outputs:
            if output.rule in ("equal", "missing", "exact", "shape") or not (output.atol or output.rtol):
                continue
            bound = output.atol + output.rtol * abs(output.expected_max or 0.0)
            ratio = output.max_abs / bound if math.isfinite(output.max_abs) else math.inf
            bucket = 0 if ratio == 0 else 1 + sum(ratio >= edge for edge in RATIO_EDGES)
            (passed if output.passed else expected if record.status == XFAIL else failed)[bucket] += 1
    return [(label, passed[i], failed[i], expected[i]) for i, label in enumerate(RATIO_LABELS)]


def _device_label(record: CaseResult) -> str:
    return f"{record.device} ({record.device_name})" if record.device_name else record.device


def _union(meta_value: Any, values: list[Any]) -> list[str]:
    seen: dict[str, None] = {}
    for value in _as_list(meta_value) + values:
        if value not in (None, ""):
            seen.setdefault(str(value), None)
    return list(seen)


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple, set)) else [value]


def _versions(meta_versions: Any, records: list[CaseResult]) -> list[tuple[str, str]]:
    # Records of one run normally agree; when shards disagree every value is shown.
    merged: dict[str, dict[str, None]] = {}
    sources = [meta_versions] if isinstance(meta_versions, dict) else []
    sources += [r.versions for r in records]
    for versions in sources:
        for name, version in (versions or {}).items():
            merged.setdefault(str(name), {}).setdefault(str(version), None)
    return [(name, " | ".join(values)) for name, values in sorted(merged.items())]


SHOWN_META = {
    "started_at",
    "duration_s",
    "device",
    "backend",
    "command",
    "versions",
    "emulation",
    "surrogate",
    "baseline",
}


def _other_meta(run_meta: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (str(k), _meta_text(v))
        for k, v in sorted(run_meta.items())
        if k not in SHOWN_META and v not in (None, "", [], {})
    ]


def _meta_text(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def headline(record: CaseResult) -> str:
    """One line on what a run looks like now, for lists that link to the details."""
    if record.error is not None:
        lines = [line.strip() for line in record.error.message.strip().splitlines() if line.strip()]
        # "backend='inductor' raised:" says nothing alone; the cause is on the next line.
        message = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
        return f"{record.error.type}: {message}".strip()
    failing = [o for o in record.outputs if not o.passed]
    if failing:
        more = f" (+{len(failing) - 1} more outputs)" if len(failing) > 1 else ""
        return failing[0].summary() + more
    # A failing run with nothing wrong in its outputs (nondeterministic, xpass) says why in its diagnosis.
    return record.reason or (record.diagnosis if is_failing(record.status) else None) or ""


def status_class(status: str) -> str:
    return status if status in STATUSES else "unknown"
