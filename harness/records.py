"""Result records: the data contract between the runner, the CLI, pytest and reports.

Field names here are read by other tools (CI dashboards, the HTML renderer,
baseline diffs). Add fields; never rename or remove one.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Iterable

SCHEMA = "harness.results/1"

# Status of one case run. FAILING_STATUSES make the CLI exit 1.
PASS, FAIL, ERROR, SKIP, XFAIL, XPASS = "pass", "fail", "error", "skip", "xfail", "xpass"
# Two eager runs of the case differ (torchbench's eager_two_runs_differ): compiled cannot be judged.
NONDETERMINISTIC = "nondeterministic"
STATUSES = (PASS, FAIL, ERROR, SKIP, XFAIL, XPASS, NONDETERMINISTIC)
FAILING_STATUSES = frozenset({FAIL, ERROR, XPASS, NONDETERMINISTIC})

# Where a run stopped (NNSmith's "stage") and what went wrong there ("symptom").
STAGES = ("setup", "build", "eager", "reference", "compile", "compare")
SYMPTOMS = ("crash", "divergence", "timeout", "oom", "nondeterminism")


@dataclass
class Sample:
    """One mismatching element: where it is, what compiled gave, what eager gave."""

    index: list[int]
    actual: float | int | bool
    expected: float | int | bool


@dataclass
class MismatchMap:
    """Mismatch counts over a 2-D projection of a tensor, pooled into at most 64x64 cells.

    The tensor is viewed as (rows, cols) = (prod(shape[:-1]), shape[-1]); cell
    [i][j] counts the bad elements among the `cell_rows x cell_cols` elements it pools.
    """

    rows: int
    cols: int
    cell_rows: int
    cell_cols: int
    counts: list[list[int]]


@dataclass
class ErrorHistogram:
    """Counts of |actual - expected| over log10-spaced bins; `edges` has len(counts) + 1.

    Exact matches are counted apart in `zero` (log scale has no bin for them).
    """

    edges: list[float]
    counts: list[int]
    zero: int = 0


@dataclass
class OutputComparison:
    """Element-by-element comparison of one compiled tensor with its eager twin."""

    name: str
    dtype: str
    shape: list[int]
    numel: int
    bad: int
    bad_pct: float
    max_abs: float
    max_rel: float
    passed: bool
    # Which rule decided the verdict: "exact" (integers, bool), "tolerance"
    # (dtype table or case override), "rmse_vs_fp64" (torchbench's rule: the
    # compiled error against a float64 reference is within a multiple of
    # eager's own), "cosine" (torchbench's cosine-similarity fallback, for
    # cases that ask for it), or "shape" when the tensors cannot be compared.
    rule: str
    rtol: float = 0.0
    atol: float = 0.0
    max_abs_index: list[int] | None = None
    max_rel_index: list[int] | None = None
    actual_max: float | None = None
    expected_max: float | None = None
    cosine: float | None = None
    nan_mismatch: int = 0
    inf_mismatch: int = 0
    rmse_actual: float | None = None
    rmse_expected: float | None = None
    rmse_multiplier: float | None = None
    stride_actual: list[int] | None = None
    stride_expected: list[int] | None = None
    # Shape, dtype or stride differences, said in words ("stride (1, 4) != (4, 1)").
    layout_notes: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    # Pictures for reports, computed where the tensors are (renderers never see tensors):
    # where mismatches sit over a 2-D projection of the output, and how large errors are.
    mismatch_map: MismatchMap | None = None
    error_histogram: ErrorHistogram | None = None

    def summary(self) -> str:
        """One line in the form people already write in bug reports."""
        head = f"{self.dtype} {self.name}: bad={self.bad}/{self.numel} ({self.bad_pct:.1f}%)"
        parts = [head, f"max_abs={_fmt(self.max_abs)}", f"max_rel={_fmt(self.max_rel)}"]
        if self.actual_max is not None:
            parts.append(f"out_max={_fmt(self.actual_max)}")
        if self.cosine is not None:
            parts.append(f"cos={self.cosine:.6f}")
        parts.append(f"[{self.rule}{'' if self.passed else ' FAILED'}]")
        parts.extend(self.layout_notes)
        return " ".join(parts)


@dataclass
class ErrorInfo:
    type: str
    message: str
    traceback: str = ""


@dataclass
class CaseResult:
    """One run of one case at one dtype and mode on one device."""

    case: str
    device: str
    backend: str
    dtype: str
    mode: str
    status: str
    outputs: list[OutputComparison] = field(default_factory=list)
    duration_s: float = 0.0
    # Seconds per phase: build, eager, compile (compile + first run), reference, compare, stage.
    timings: dict[str, float] = field(default_factory=dict)
    # Dynamo's count of compiled graphs and graph breaks in the compiled run.
    graphs: dict[str, int] | None = None
    versions: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    issue: str | None = None
    size: str = "ci"
    npu_backend: str | None = None
    compile_options: dict[str, Any] = field(default_factory=dict)
    device_name: str | None = None
    # Why a case was skipped, or the declared reason of a known failure.
    reason: str | None = None
    stage: str | None = None
    symptom: str | None = None
    error: ErrorInfo | None = None
    # Set when results come from an emulation of another backend's behaviour
    # (never a run on that hardware).
    emulation: str | None = None
    # A sentence on the cause, when the harness can tell it (e.g. precision
    # narrowing vs misaddressing under a narrowing emulation).
    diagnosis: str | None = None
    # What the emulation or fault saw at the launch boundary (launches, converted
    # arguments, non-dense ones; or the launches a fault hit).
    injection_stats: dict[str, Any] | None = None
    reference: str = "eager"
    # Filled by bisection: see harness/bisect.py for the keys (graph, launch_index,
    # launches, name, source, nodes, aten_ops, args, isolated, metrics).
    first_divergent_kernel: dict[str, Any] | None = None
    command: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return f"{self.case}[{self.dtype}-{self.mode}]"

    def summary(self) -> str:
        head = f"{self.status.upper():5} {self.run_id} {self.duration_s:.1f}s"
        if self.emulation:
            head += f" (emulation: {self.emulation})"
        if self.error is not None:
            return f"{head} {self.stage or ''} {self.error.type}: {_first_line(self.error.message)}"
        if self.reason and self.status in (SKIP, XFAIL, XPASS):
            head += f" ({self.reason})"
        lines = [o.summary() for o in self.outputs if not o.passed][:5]
        kernel = self.first_divergent_kernel
        if kernel is not None:
            lines.append(_kernel_line(kernel))
        if self.diagnosis:
            lines.append(f"diagnosis: {self.diagnosis}")
        return "\n    ".join([head, *lines])

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseResult":
        data = dict(data)
        data["outputs"] = [_output_from_dict(o) for o in data.get("outputs", [])]
        if data.get("error"):
            data["error"] = ErrorInfo(**data["error"])
        known = {f.name for f in dataclasses.fields(cls)}
        extra = {k: v for k, v in data.items() if k not in known}
        data = {k: v for k, v in data.items() if k in known}
        # Fields written by newer versions survive a round trip through older readers.
        data.setdefault("extra", {}).update(extra)
        return cls(**data)


def _output_from_dict(data: dict[str, Any]) -> OutputComparison:
    data = dict(data)
    data["samples"] = [Sample(**s) for s in data.get("samples", [])]
    if data.get("mismatch_map"):
        data["mismatch_map"] = MismatchMap(**data["mismatch_map"])
    if data.get("error_histogram"):
        data["error_histogram"] = ErrorHistogram(**data["error_histogram"])
    known = {f.name for f in dataclasses.fields(OutputComparison)}
    return OutputComparison(**{k: v for k, v in data.items() if k in known})


def _kernel_line(kernel: dict[str, Any]) -> str:
    if not kernel.get("diverged"):
        return f"bisect: no kernel output diverged ({kernel.get('launches', 0)} launches, {kernel.get('compared_buffers', 0)} buffers compared)"
    metrics = kernel.get("metrics") or {}
    return (f"first divergent kernel: {kernel.get('graph')} launch {kernel.get('launch_index')}/{kernel.get('launches')} "
            f"{kernel.get('name')} writing {kernel.get('buffer')} (nodes: {', '.join(kernel.get('nodes') or [])}) "
            f"bad={metrics.get('bad')}/{metrics.get('numel')} stage={kernel.get('stage')}; {kernel.get('isolated')}")


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def write_results(path: str | os.PathLike, records: Iterable[CaseResult], run: dict[str, Any] | None = None) -> None:
    """Write a results file atomically (a crash mid-write never leaves half a file)."""
    payload = {
        "schema": SCHEMA,
        "run": run or {},
        "records": [r.to_dict() for r in records],
    }
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".results-", suffix=".json")
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=1, default=_json_default)
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide CI artifacts from other readers
    os.replace(tmp, path)


def read_results(path: str | os.PathLike) -> tuple[dict[str, Any], list[CaseResult]]:
    with open(path) as handle:
        payload = json.load(handle)
    if payload.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a harness results file (schema {payload.get('schema')!r})")
    return payload.get("run", {}), [CaseResult.from_dict(r) for r in payload["records"]]


def _json_default(value: Any) -> Any:
    # Non-finite floats are valid in Python's JSON dialect; other objects become text.
    return str(value)
