"""The record types: statuses, stages, symptoms, answers, and the dataclasses a run's results are made of,
with how each reads itself back from JSON (`from_dict`) and says itself on the console (`summary`, `line`)."""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.records.facts import JudgedValues, RunFacts  # noqa: F401 - re-exported
from harness.records.text import _dims, _first_line, _fmt, injection_label, one_line, safe_text


SCHEMA = "harness.results/1"


# Results files are strict JSON: a non-finite float is written as the string
# "nan", "inf" or "-inf" (in number fields only), and read back as a float.
FLOAT_ENCODING = "nonfinite-as-string"


class _Named(str, enum.Enum):
    """A str-valued enum: compares equal to its value and serializes as it (the JSON stays the same)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Named):
    """Status of one case run, in the order reports list them (failures first)."""

    FAIL = "fail"
    ERROR = "error"
    XPASS = "xpass"
    # Two eager runs of the case differ (torchbench's eager_two_runs_differ): compiled cannot be judged.
    NONDETERMINISTIC = "nondeterministic"
    XFAIL = "xfail"
    SKIP = "skip"
    PASS = "pass"

    @property
    def failing(self) -> bool:
        """Whether this status makes a run (CLI, pytest, nightly) fail."""
        return self in (Status.FAIL, Status.ERROR, Status.XPASS, Status.NONDETERMINISTIC)

    @property
    def rank(self) -> int:
        return list(Status).index(self)


# The statuses an expected failure makes (only `harness.judge.decision` gives them).
EXPECTED_STATUSES = (Status.XFAIL, Status.XPASS)


class Stage(_Named):
    """Where a run stopped (NNSmith's "stage")."""

    SETUP = "setup"
    BUILD = "build"
    EAGER = "eager"
    REFERENCE = "reference"
    COMPILE = "compile"
    COMPARE = "compare"
    WORKER = "worker"


class Symptom(_Named):
    """What went wrong where the run stopped."""

    CRASH = "crash"
    DIVERGENCE = "divergence"
    TIMEOUT = "timeout"
    OOM = "oom"
    NONDETERMINISM = "nondeterminism"
    # The run ended without judging anything: no tensor, no leaf, no mutation to compare.
    NOTHING_COMPARED = "nothing-compared"
    # Dynamo produced no graph for a case that expects compilation: the "compiled" run was eager.
    NOTHING_COMPILED = "nothing-compiled"
    # The program returned something the harness cannot compare (a generator, an arbitrary object, a tensor
    # with no values: on the meta device).
    NOT_COMPARABLE = "not-comparable"
    # The compiled program diverges on its kernels' first launches only (loaded afresh it fails again, run
    # again it passes): a compiler bug, not nondeterminism.
    FIRST_LAUNCH = "first-launch"
    # The compiled result changes from run to run while eager's does not (a race, a read of memory never
    # written, stores that land at random): a compiler bug, not nondeterminism of the program.
    RUN_TO_RUN = "run-to-run"
    # A dynamic run compiled again at its second size: the dynamic kernels did not run there.
    RECOMPILED = "recompiled"
    # An injection (emulation or fault) was asked for and changed no kernel launch: the run says nothing of it.
    INJECTION_MISSED = "injection-missed"
    # The device loaded another compiler backend than the run asked for (torch_npu's fallback for an unknown
    # name): what would run is not what was asked.
    BACKEND_MISMATCH = "backend-mismatch"
    # The compiled program keeps in float32 a value the program rounds to float16/bfloat16 on purpose (an explicit
    # cast a kernel fuses), and compiled again with `emulate_precision_casts` it matches eager.
    PRECISION_CAST_ELIDED = "precision-cast-elided"
    # The case's process said pass, and no values it sent could be judged apart from its code (none came, or
    # none the judge could read): a pass is never taken on the case's own word.
    UNJUDGED = "unjudged"
    # A compiled kernel loaded or stored outside the buffers its launch was given, and the device's memory checker
    # (the CPU surrogate's) stopped it: on an NPU or a GPU the access reads or corrupts other memory unseen.
    OUT_OF_BOUNDS = "out-of-bounds"


class Reproduction(_Named):
    """Whether an extracted form reproduces the failure it was written from (`Extraction` and `extracted`)."""

    REPRODUCES = "reproduces"
    DOES_NOT_REPRODUCE = "does-not-reproduce"
    NOT_WRITTEN = "not-written"
    NOT_EXTRACTED = "not-extracted"


# The console line naming a kernel's generated source file (a path in the compile cache).
KERNEL_SOURCE_LINE = "kernel source: "


class Answer(_Named):
    """What localization concluded for a run (`Localization.answer`)."""

    NONE = "none"  # the run passed: nothing to localize
    KERNEL = "kernel"  # one kernel is wrong on exact inputs
    DRIFT = "drift"  # no kernel is wrong beyond tolerance; the named one starts the error that grows
    STAGE = "stage"  # the divergence exists before Inductor's kernels (dynamo, aot_eager, decompositions, a graph pass)
    UNLOCALIZED = "unlocalized"  # no answer, and the reason why


# The names older code and other tools import.
PASS, FAIL, ERROR, SKIP, XFAIL, XPASS, NONDETERMINISTIC = (
    Status.PASS,
    Status.FAIL,
    Status.ERROR,
    Status.SKIP,
    Status.XFAIL,
    Status.XPASS,
    Status.NONDETERMINISTIC,
)


STATUSES = tuple(Status)


FAILING_STATUSES = frozenset(s for s in Status if s.failing)


STAGES = tuple(Stage)


SYMPTOMS = tuple(Symptom)


def status_of(value: str) -> Status | str:
    """A status read from a file; an unknown one (a newer writer) stays a string."""
    try:
        return Status(value)
    except ValueError:
        return value


def worst_of_each(records: list["CaseResult"], key: Callable[["CaseResult"], Any]) -> tuple[list["CaseResult"], int]:
    """One record per key, in first-seen order: of records of one run (overlapping shards, a journal that holds a
    run twice), the one with the worst status (`Status` order: failures first), never just the first; and how
    many were dropped. A pass and a fail of one run are a failure."""
    chosen: dict[Any, CaseResult] = {}
    for record in records:
        k = key(record)
        kept = chosen.get(k)
        if kept is None or _rank(record.status) < _rank(kept.status):
            chosen[k] = record
    return list(chosen.values()), len(records) - len(chosen)


def _rank(status: Any) -> int:
    known = status_of(status)
    return known.rank if isinstance(known, Status) else -1  # a status the harness does not know: worst


def is_failing(status: str) -> bool:
    return isinstance(status_of(status), Status) and status_of(status).failing  # type: ignore[union-attr]


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


# The rules that pass a floating output which misses its tolerance (`OutputComparison.passed_by`):
# closer to float64 than eager is (torchbench's RMSE rule), within float32 summation noise of
# float64 (programs that sum), cosine similarity >= 0.99 (torchbench's fallback, cases that ask), or
# eager alone NaN or inf where float64 is finite and compiled matches float64 (eager's own overflow).
PASSED_BY_RMSE, PASSED_BY_SUMMATION_NOISE, PASSED_BY_COSINE = "rmse_vs_fp64", "summation_noise", "cosine"


PASSED_BY_EAGER_NONFINITE = "eager_nonfinite"


# Within the rounding of the program's float16/bfloat16 atomic adds (colliding_writes.LowPrecisionSums).
PASSED_BY_LOW_PRECISION_ATOMICS = "low_precision_atomics"


PASSED_BY = (
    PASSED_BY_RMSE,
    PASSED_BY_SUMMATION_NOISE,
    PASSED_BY_COSINE,
    PASSED_BY_EAGER_NONFINITE,
    PASSED_BY_LOW_PRECISION_ATOMICS,
)


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
    # cases that ask for it), "shape" when the tensors cannot be compared,
    # "equal" for a non-tensor result (int, float, str, None), "missing" for
    # a result only one side produced.
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
    # What a reader should know about a verdict that the numbers alone hide, e.g. a
    # pass by the RMSE rule: "differs from eager beyond tolerance ...; closer to float64".
    note: str | None = None
    # Where the result sits in the program's output tree (`out[1]['e']`), for outputs.
    path: str | None = None
    # Which rule let an output with bad elements pass (`bad` counts misses of the tolerance): one of
    # PASSED_BY; None when it met its tolerance, or failed. `rule` alone cannot say: "rmse_vs_fp64"
    # is the rule that decided both a pass closer to float64 and one within summation noise.
    passed_by: str | None = None
    # The summation-noise floor in force (RMS error against float64 a correct float32 sum may have),
    # when the RMSE rule was tried on a program that sums; None otherwise.
    rmse_floor: float | None = None
    # Of the NaN and inf mismatches, those where eager alone is non-finite (compiled is finite there): eager's
    # own arithmetic may have overflowed, and a float64 reference decides them (PASSED_BY_EAGER_NONFINITE).
    eager_nonfinite: int = 0
    # Elements left out of the comparison: their value depends on which of several writes to one element wins
    # (an index_put_ or scatter_ whose indices repeat), which PyTorch leaves undefined (colliding_writes).
    undefined: int = 0
    # The RMS error against float64 of eager with its float16/bfloat16 scatter sums made one add at a time, when
    # a program that adds atomically in low precision was judged against it (PASSED_BY_LOW_PRECISION_ATOMICS).
    rmse_low_precision_sums: float | None = None

    def summary(self) -> str:
        """One line in the form people already write in bug reports."""
        if self.rule == "equal":
            sample = self.samples[0] if self.samples else None
            told = f"compiled {sample.actual} != eager {sample.expected}" if sample else "equal"
            return " ".join([f"{self.dtype} {self.name}: {told}", self._rule_tag(), *self.layout_notes])
        head = f"{self.dtype} {self.name}: bad={self.bad}/{self.numel} ({self.bad_pct:.1f}%)"
        parts = [head]
        if self.nan_mismatch:
            parts.append(f"nan_mismatch={self.nan_mismatch}")
        if self.inf_mismatch:
            parts.append(f"inf_mismatch={self.inf_mismatch}")
        parts += [f"max_abs={_fmt(self.max_abs)}", f"max_rel={_fmt(self.max_rel)}"]
        if self.actual_max is not None:
            parts.append(f"out_max={_fmt(self.actual_max)}")
        if self.cosine is not None:
            parts.append(f"cos={self.cosine:.6f}")
        parts.append(self._rule_tag())
        parts.extend(self.layout_notes)
        return " ".join(parts)

    def _rule_tag(self) -> str:
        """`[rule]`, or for a failure `[rule FAILED: what it asks]` (docs/verdict.md has the whole policy)."""
        if self.passed:
            return f"[{self.rule}]"
        gloss = RULE_GLOSS.get(self.rule)
        return f"[{self.rule} FAILED{': ' + gloss if gloss else ''}]"


@dataclass
class KernelArgument:
    """One tensor argument of a kernel launch, as the kernel received it."""

    name: str
    buffer: str | None
    role: str
    dtype: str
    size: list[int]
    stride: list[int]
    storage_offset: int


@dataclass
class LaunchEntry:
    """One launch of the probe's log: which kernel, and what of its output was compared."""

    index: int
    graph: str
    name: str
    compared: int = 0
    unmapped: int = 0
    # A fallback call (`torch.ops.*` in the wrapper): its number, `aten:N`; `index` is then the next kernel's.
    fallback: int | None = None


@dataclass
class BufferDivergence:
    """A buffer that missed the verdict policy at one launch (where a drift became visible,
    or a difference a passing run absorbed)."""

    graph: str
    launch_index: int
    name: str
    buffer: str | None
    nodes: list[str]
    bad: int
    numel: int
    max_abs: float
    isolated: str | None = None
    # The isolation verdict's kind: "wrong", "aliasing", "glue", "drift" or "not-isolated".
    kind: str | None = None
    # Where the launch is a fallback call: its number (`aten:N`).
    fallback_index: int | None = None


@dataclass
class Localization:
    """What localization concluded for one run: one answer, and the evidence for it.

    Invariants (checked by `check`): a passing run has answer `none` and
    `diverged` false; a failing run has exactly one of `kernel`, `drift`,
    `stage`, `unlocalized`. Field names are the JSON record's
    `first_divergent_kernel` keys.
    """

    answer: str
    diverged: bool
    # The kernel the answer names (answers `kernel` and `drift`).
    graph: str | None = None
    launch_index: int | None = None
    launches: int = 0
    # The answer names a fallback call (an ATen fallback or custom op the wrapper calls): its number among the run's
    # fallback calls, `aten:N` (launch_index, which counts kernel launches, is then None).
    fallback_index: int | None = None
    name: str | None = None
    kind: str | None = None  # "cpp", "triton", "extern", "fallback"
    source: str = ""
    buffers: list[str] = field(default_factory=list)
    buffer: str | None = None
    nodes: list[str] = field(default_factory=list)
    aten_ops: list[str] = field(default_factory=list)
    args: list[KernelArgument] = field(default_factory=list)
    metrics: OutputComparison | None = None
    # The kernel run again on eager values of its inputs: "kernel is wrong: ...",
    # "reads what it writes (aliasing inside the kernel): ...", "upstream drift amplified here: ...".
    isolated: str | None = None
    # What the checks on the named kernel's text found ("unused-core-range: ..."; inductor_compat/kernel_checks.py):
    # evidence read off its code, quoted at the end of `isolated` too.
    text_findings: list[str] = field(default_factory=list)
    # The pipeline stage where the divergence first appears: dynamo (backend "eager"), aot_eager,
    # aot_eager_decomp_partition, inductor_graph_passes, wrapper_glue, or inductor (None when not determined).
    stage: str | None = None
    module_path: str | None = None
    # Why this answer, in a sentence (what a drift means, why nothing could be named).
    reason: str | None = None
    # Drift: where the error first exceeded the verdict policy.
    visible_at: BufferDivergence | None = None
    # Differences inside a passing run that its outputs absorb: information, not failures.
    absorbed: list[BufferDivergence] = field(default_factory=list)
    graphs: list[str] = field(default_factory=list)
    graph_launches: dict[str, list[int]] = field(default_factory=dict)
    compared_buffers: int = 0
    unmapped_buffers: int = 0
    # Why buffers could not be compared: reason -> the buffers ("forward 0:buf3"; at most 20 named per reason).
    unmapped: dict[str, list[str]] = field(default_factory=dict)
    kernels: list[LaunchEntry] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Runs of the compiled program localization made (the first probe run included), and whether it
    # compiled the program again under the stages before Inductor: what the answer cost.
    reruns: int = 0
    stages_checked: bool = False
    # Compiles of the program localization made: the stages' backends, and Inductor with graph passes observed
    # or turned off.
    compiles: int = 0
    # The Inductor graph pass the answer names ("post_grad_passes: reinplace_inplaceable_ops", "joint_graph_passes:
    # pattern ..."): the run passed with it alone turned off. And every pass that changed the graphs.
    graph_pass: str | None = None
    graph_passes_changed: list[str] = field(default_factory=list)
    # Other passes whose absence alone made the run pass too, and whose change touched none of the diverging
    # nodes: they enabled the named one (a cleanup that let a wrong rewrite match).
    graph_passes_enabling: list[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Localization":
        return _decode(cls, data)

    def check(self, status: str) -> None:
        """Enforce the invariants between a run's status and its answer."""
        failing = status_of(status) == Status.FAIL
        if not failing and (self.diverged or self.answer != Answer.NONE):
            raise AssertionError(
                f"a {status} run cannot have localization answer {self.answer!r} (diverged={self.diverged})"
            )
        if failing and self.answer == Answer.NONE:
            raise AssertionError("a failing run needs a localization answer")
        # One run, one story: a stage answer names no kernel, a kernel answer's stage is Inductor's.
        wrong_kernel_seen = self.visible_at is not None and self.visible_at.kind in ("wrong", "aliasing", "glue")
        if self.answer == Answer.STAGE and (
            self.name is not None or self.stage in (None, "inductor") or wrong_kernel_seen
        ):
            raise AssertionError(
                f"a stage answer names a kernel ({self.name}) or no stage before the kernels ({self.stage})"
            )
        if self.answer in (Answer.KERNEL, Answer.DRIFT) and (self.stage != "inductor" or self.graph_pass):
            raise AssertionError(f"a {self.answer} answer with stage {self.stage!r} or graph pass {self.graph_pass!r}")

    def names(self, culprit: str) -> bool:
        """Whether this answer names a declared culprit: "stage:<stage>", "pass:<graph pass name>", or an ATen op
        pattern of the kernel."""
        if culprit.startswith("pass:"):
            return self.answer == Answer.STAGE and culprit.removeprefix("pass:") in (self.graph_pass or "")
        if culprit.startswith("stage:"):
            return self.answer == Answer.STAGE and self.stage == culprit.removeprefix("stage:")
        if self.answer not in (Answer.KERNEL, Answer.DRIFT):
            return False
        ops = " ".join(self.aten_ops + self.nodes)
        return any(pattern.strip() and pattern.strip() in ops for pattern in culprit.split("|"))

    def kernel_lines(self, most: int = 8) -> list[str]:
        """Where to read the named kernel, and the layout of each argument it was launched with.

        A wrong kernel is usually read next to its arguments' strides (seed 000's overlapping
        view vs a contiguous copy); both are in the record, so the console says them too.
        """
        if self.answer not in (Answer.KERNEL, Answer.DRIFT):
            return []
        lines = [f"{KERNEL_SOURCE_LINE}{self.module_path}"] if self.module_path else []
        for arg in self.args[:most]:
            buffer = f" = {arg.buffer}" if arg.buffer and arg.buffer != arg.name else ""
            offset = f" offset {arg.storage_offset}" if arg.storage_offset else ""
            lines.append(
                f"arg {arg.name}{buffer} ({arg.role}) {arg.dtype} size {_dims(arg.size)} "
                f"stride {_dims(arg.stride)}{offset}"
            )
        if len(self.args) > most:
            lines.append(f"... {len(self.args) - most} more args")
        return lines

    def line(self) -> str:
        """The answer in one console line."""
        where = (
            f"{self.graph} launch {self.launch_index}/{self.launches} {self.name}"
            if self.launch_index is not None
            else ""
        )
        if self.fallback_index is not None:
            where = f"{self.graph} fallback aten:{self.fallback_index} {self.name}"
        elif not where and self.name:  # named without its launch (a custom op found by its contract)
            where = self.name
        nodes = f" (nodes: {', '.join(self.nodes)})" if self.nodes else ""
        if self.answer == Answer.KERNEL:
            bad = f" bad={self.metrics.bad}/{self.metrics.numel}" if self.metrics else ""
            writing = f" writing {self.buffer}" if self.buffer else ""
            stage = f" stage={self.stage or 'inductor'}"
            return f"first divergent kernel: {where}{writing}{nodes}{bad}{stage}; {self.isolated}"
        if self.answer == Answer.DRIFT:
            seen = ""
            if self.visible_at is not None:
                v = self.visible_at
                at = f"fallback aten:{v.fallback_index}" if v.fallback_index is not None else f"launch {v.launch_index}"
                seen = f"; visible from {v.graph} {at} {v.name} (bad={v.bad}/{v.numel})"
            return f"drift: {where} writing {self.buffer}{nodes}: {self.reason}{seen}"
        if self.answer == Answer.STAGE:
            return f"stage: {self.reason} [{self.compiles} compile{'' if self.compiles == 1 else 's'}]"
        if self.answer == Answer.UNLOCALIZED:
            return f"unlocalized: {self.reason}"
        unmapped = f", {self.unmapped_buffers} unmapped" if self.unmapped_buffers else ""
        text = (
            f"bisect: no kernel output diverged ({self.launches} launches, "
            f"{self.compared_buffers} buffers compared{unmapped})"
        )
        if self.absorbed:
            text += (
                f"; absorbed: {len(self.absorbed)} buffer(s) differ beyond tolerance inside the run, the outputs pass"
            )
        return text


@dataclass
class Extraction:
    """What `--extract` wrote for a localized run, each form verified before it was kept.

    `extracted` is the graph-level case's verdict: "reproduces" (the kernel's
    own subgraph diverges compiled from scratch), "widened(N)" (it does after
    N rings of neighbouring kernels were added), or "does-not-reproduce" (no
    case was written). `kernel_repro` and `plain_script` say the same of the
    other two forms ("not-written" with the reason in `notes`).
    """

    extracted: str
    directory: str
    kernel: str = ""
    graph: str = ""
    case_file: str | None = None
    case_name: str | None = None
    graph_lines: int | None = None
    # The graph-level case's graph code (the function the case compiles), for reports.
    code: str | None = None
    widened: int = 0
    # How the case's inputs are made: "regenerated" (from a seed, within each input's observed range) or
    # "saved" (inputs.pt: values a seed does not reproduce).
    values: str | None = None
    kernel_repro: str = "not-written"
    plain_script: str = "not-written"
    # The injection each form was verified under (the run's, its selector narrowed to the kernel), if any.
    case_injection: str | None = None
    kernel_injection: str | None = None
    # The injection the plain script carries inline (it imports no harness), and why none was written under one.
    plain_script_injection: str | None = None
    plain_script_reason: str | None = None
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # Seconds per step: "kernel" (the kernel-level repro written and run), "graph" (subgraphs compiled from
    # scratch and run until one reproduces), "plain" (the plain script run).
    timings: dict[str, float] = field(default_factory=dict)

    def line(self) -> str:
        """The console line: the verdict, and where each kept form is."""
        head = f"extracted: {self.extracted}"
        if self.case_file:
            head += f" -> {self.case_file} ({self.graph_lines} lines of graph code, {self.values} inputs)"
        plain = f"plain script {self.plain_script}" + (
            f" ({self.plain_script_reason})"
            if self.plain_script_reason
            else " (emulation inline)"
            if self.plain_script_injection
            else ""
        )
        forms = f"kernel-level repro {self.kernel_repro}, {plain}"
        return f"{head}; {forms}; in {self.directory}"


@dataclass
class InjectionStats:
    """What an emulation or fault saw at the launch boundary. A count an injection does not keep stays
    None, and out of the JSON."""

    launches: int = 0  # kernel launches of the compiled run (replays by the probe not counted)
    # boundary-downcast*: 64-bit tensor arguments converted; of those, the non-dense ones, and the ones that
    # share a storage with another argument of their launch.
    converted_args: int | None = None
    non_dense_args: int | None = None
    aliased_args: int | None = None
    # boundary-downcast*: the arguments the kernel's own launcher narrows (torch_npu's `downcast_args`),
    # "index:kernel:argument", which the emulation leaves to it (absent when there are none).
    launcher_narrowed: list[str] | None = None
    # Faults and rewritten kernels: the launches they selected, "index:kernel".
    hits: list[str] | None = None
    # first-launch-dropped-stores: launches, "index:kernel", that were the kernel's first in the program but
    # came after autotuning benchmarked its configs on cloned arguments: the binaries' first launches were
    # the benchmark's, which no result reads, so these lost no store.
    autotuned_first: list[str] | None = None
    rewritten_kernels: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


# What each deciding rule asks, in a few words: the console's gloss of a failed rule's tag.
RULE_GLOSS = {
    "exact": "integers and bool match exactly",
    "tolerance": "each element within atol + rtol*|eager|",
    "rmse_vs_fp64": "error vs a float64 run within a multiple of eager's",
    "cosine": "cosine similarity to eager >= 0.99",
    "equal": "a non-tensor result equals eager's",
    "shape": "the same shape as eager's",
    "missing": "a result on both sides",
}


# How an error's message begins when the harness itself failed on the run (a harness bug, not the case's failure).
HARNESS_FAILED = "the harness failed"


@dataclass
class ErrorInfo:
    type: str
    message: str
    traceback: str = ""

    @property
    def harness_failed(self) -> bool:
        return self.message.startswith(HARNESS_FAILED)


@dataclass
class CaseResult:
    """One run of one case at one dtype and mode on one device."""

    case: str
    device: str
    backend: str
    dtype: str
    mode: str
    # None until the run is decided (`harness.judge.decision`).
    status: Status | None
    outputs: list[OutputComparison] = field(default_factory=list)
    duration_s: float = 0.0
    # Seconds per phase: build, eager, compile (compile + first run), reference, compare; when they ran,
    # second_size, first_launch, fresh_compile, localize, extract.
    timings: dict[str, float] = field(default_factory=dict)
    # Dynamo's count of compiled graphs and graph breaks in the compiled run.
    graphs: dict[str, int] | None = None
    # The most frequent graph-break reasons with their counts ("3x Tensor.item() call ..."): Dynamo's
    # warnings, summarized here instead of printed.
    graph_break_reasons: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    issue: str | None = None
    size: str = "ci"
    npu_backend: str | None = None
    # The NPU backend torch_npu loaded for the run (it falls back to its default for a name it does not know):
    # a run whose loaded backend is not `npu_backend` never runs (a usage error).
    npu_backend_loaded: str | None = None
    # Set when the device stands in for the one its name says (a CPU-backed surrogate NPU): no result of the run
    # is a result of that device.
    surrogate: str | None = None
    compile_options: dict[str, Any] = field(default_factory=dict)
    # Dynamo's, Inductor's and functorch's config entries set away from their defaults while the case ran, besides
    # its compile options (by the device's compiler backend as it loaded: torch_npu's `split_reductions=False`;
    # its triton_experimental config), and `torch_npu_patches_active`: whether torch_npu was imported (its patches
    # to torch and Inductor apply to every device's compiles).
    compile_config: dict[str, Any] = field(default_factory=dict)
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
    # What the emulation or fault saw at the launch boundary.
    injection_stats: InjectionStats | None = None
    reference: str = "eager"
    # The device the float64 reference ran on, when it ran somewhere other than the case's device (the NPU
    # has no float64: "cpu", from copies of the inputs); None when it ran on the case's device or not at all.
    reference_device: str | None = None
    # Who decided the status that stands (`harness.judge.decision`): "judge" (the values judged again in a process
    # where no case code ran, agreeing with the case's process), "judge-overruled" (the judge's verdict replaced the
    # case's process's), "case-process" (no values reached the judge; why is a warning), None (no value verdict:
    # an error, a skip, or a run in the harness's own process).
    verdict_source: str | None = None
    # Filled by localization (`--bisect`): the answer and its evidence.
    first_divergent_kernel: Localization | None = None
    # What went wrong, as a class a declaration can name (`KnownFailure.mechanism`), where the run itself showed
    # it: "launcher-narrowing" (a rerun: the launcher's Tensor.to() copy of a non-dense 64-bit argument,
    # `harness.run.launcher_narrowing`), "select-lane-load" or "extract-slice-load" (the memory checker stopped a
    # load that rewrite of torch_npu's codegen made, `inductor_compat.torch_npu_backend.REWRITTEN_LOADS`),
    # "fallback-layout" (compiled again with Inductor's size asserts on, a fallback's result fails its meta's
    # layout, `harness.run.layout_asserts`); None otherwise.
    mechanism: str | None = None
    # `--extract`: whether the repro written from the first divergent kernel reproduces ("reproduces",
    # "widened(N)", "does-not-reproduce"), and what was written.
    extracted: str | None = None
    extraction: Extraction | None = None
    command: str | None = None
    # A divergence was run again (no recompilation): True when it came back, False when the second
    # run passed (the run then fails with symptom run-to-run, or first-launch); None when nothing diverged.
    reproduced: bool | None = None
    # A dynamic run (`--dynamic`): True; the shapes of the tensor inputs at each size (the declared one, then
    # the second); the sizes, counted from 1, whose results failed; whether Dynamo compiled again at the second
    # size (a dynamic dim specialised: the second size did not run the dynamic kernels).
    dynamic: bool | None = None
    dynamic_sizes: list[list[list[int]]] | None = None
    failed_sizes: list[int] | None = None
    recompiled: bool | None = None
    # Why Dynamo compiled again at the second size: the guards that failed, as its recompile reasons say.
    recompile_reasons: list[str] | None = None
    # The runs of the compiled program, counted from 1, whose result diverged: run 1 gives the verdict, run 2
    # retries it (no recompilation; with --bisect, localization's first run), and a first-launch check adds
    # runs 3 and 4 (loaded afresh, then run again). None when nothing diverged.
    diverged_runs: list[int] | None = None
    # The case's declared culprit, and whether localization named it (None: not localized).
    culprit: str | None = None
    culprit_found: bool | None = None
    # Things the run did that a reader should know, e.g. global config a case changed (restored after it).
    warnings: list[str] = field(default_factory=list)
    # What makes runs of one case comparable (`RunConfig.identity`: device, backends, options, injection,
    # torch): `--resume` carries a record over only into a run of the same identity.
    run_identity: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    # What the run found, for the verdict (`harness.judge.decision`); never written to a results file.
    facts: RunFacts = field(default_factory=RunFacts, repr=False, compare=False)

    def conclude(
        self, status: str, stage: str | None = None, symptom: str | None = None, reason: str | None = None
    ) -> None:
        """Set what the run ended as, whole and once: its status, the stage it stopped at and what went wrong there
        (None for a run that did not stop), and, when given, the reason. Only `harness.judge.decision.conclude`
        calls it, with the verdict it decided; a second verdict is an error (lit's `Test.setResult`)."""
        if self.status is not None:
            raise RuntimeError(f"{self.run_id}: its verdict is {self.status} already; a run is decided once")
        self.status, self.stage, self.symptom = status, stage, symptom
        if reason is not None:
            self.reason = reason

    def localize_command(self, bisect: bool) -> str | None:
        """The command that localizes this run, for a failing run printed without `--bisect`; None where there is
        nothing left to localize (a memory checker's stop names its kernel already)."""
        if self.status != Status.FAIL or bisect or not self.command or self.first_divergent_kernel is not None:
            return None
        return f"{self.command} --bisect"

    @property
    def run_id(self) -> str:
        return f"{self.case}[{self.dtype}-{self.mode}{'-dynamic' if self.dynamic else ''}]"

    def passed_by_rules(self) -> list[str]:
        """Each output that passed by a rule other than its plain tolerance, in words: which rule, and over how many
        elements beyond the tolerance ("grad.w by rmse_vs_fp64 (97417 beyond tolerance)"), or the elements left out
        as undefined (repeated writes to one element)."""
        found = []
        for output in self.outputs:
            if not output.passed:
                continue
            if output.passed_by:
                found.append(f"{output.name} by {output.passed_by} ({output.bad} beyond tolerance)")
            elif output.undefined:
                found.append(f"{output.name} with {output.undefined} undefined elements left out")
        return found

    def summary(self, verbose: bool = False, stable: bool = False) -> str:
        """The console block: one head line, then what a reader must see (failures, the answer, notes). The notes
        on a passing run's outputs (a pass by the float64 rule) are for `verbose` and the report only. `stable`:
        the same text every night for the same failure (JUnit's), without the duration and the kernel's path in
        the compile cache."""
        head = f"{self.status.upper():5} {self.run_id}" + ("" if stable else f" {self.duration_s:.1f}s")
        if self.surrogate:
            head += f" ({self.surrogate})"
        if self.emulation:
            head += f" ({injection_label(self.emulation)})"
        if self.error is not None:
            head = f"{head} {self.stage or ''} {one_line(self.error.type)}: {_first_line(self.error.message)}"
            return "\n    ".join([head, *(f"warning: {one_line(w)}" for w in self.warnings)])
        if self.reason and self.status in (SKIP, XFAIL, XPASS):
            head += f" ({one_line(self.reason)})"
        lines = [o.summary() for o in self.outputs if not o.passed][:5]
        failing = is_failing(self.status)
        if failing or verbose:
            lines += [f"note: {o.name}: {o.note}" for o in self.outputs if o.passed and o.note][:3]
        if verbose and not failing and (rules := self.passed_by_rules()):
            shown = "; ".join(rules[:4]) + (f"; and {len(rules) - 4} more" if len(rules) > 4 else "")
            lines.append(f"passed by a rule: {shown}")
        if self.dynamic_sizes and (failing or self.recompiled):
            lines.append(self.sizes_line())
        if self.first_divergent_kernel is not None:
            lines.append(self.first_divergent_kernel.line())
            if failing:
                lines += [
                    line
                    for line in self.first_divergent_kernel.kernel_lines()
                    if not (stable and line.startswith(KERNEL_SOURCE_LINE))
                ]
        if self.extraction is not None:
            lines.append(self.extraction.line())
        if self.diagnosis and failing:
            # Only a failing run's block carries one: under a PASS line "precision narrowing ..." reads
            # like a problem that is not there (the record keeps the field for reports and tools).
            lines.append(f"diagnosis: {self.diagnosis}")
        lines += [f"warning: {one_line(w)}" for w in self.warnings]
        return "\n    ".join([head, *lines])

    def sizes_line(self) -> str:
        """A dynamic run's sizes, which failed, and a recompilation:
        "dynamic sizes: 1 (16, 64) -> 2 (17, 64) FAILED"."""
        parts = []
        for number, shapes in enumerate(self.dynamic_sizes or (), start=1):
            failed = " FAILED" if number in (self.failed_sizes or ()) else ""
            parts.append(f"{number} {', '.join(str(tuple(s)) for s in shapes)}{failed}")
        recompiled = " (recompiled at size 2)" if self.recompiled else ""
        return f"dynamic sizes: {' -> '.join(parts)}{recompiled}"

    def to_dict(self, with_facts: bool = False) -> dict[str, Any]:
        """The record as JSON; `with_facts`: with what the run found, for the process that decides it."""
        data = dataclasses.asdict(self)
        if not with_facts:
            del data["facts"]
        if self.injection_stats is not None:
            data["injection_stats"] = self.injection_stats.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CaseResult":
        known = {f.name for f in dataclasses.fields(cls)} - {"facts"}
        extra = {k: v for k, v in data.items() if k not in known and k != "facts"}
        record = _decode(cls, {k: v for k, v in data.items() if k in known})
        if "facts" in data:
            record.facts = RunFacts.from_dict(data["facts"])
        # Fields written by newer versions survive a round trip through older readers.
        record.extra.update(extra)
        return record


# Nested record types by field, for reading results back into dataclasses.
_NESTED: dict[type, dict[str, type]] = {
    OutputComparison: {"samples": Sample, "mismatch_map": MismatchMap, "error_histogram": ErrorHistogram},
    Localization: {
        "args": KernelArgument,
        "metrics": OutputComparison,
        "visible_at": BufferDivergence,
        "absorbed": BufferDivergence,
        "kernels": LaunchEntry,
    },
    CaseResult: {
        "outputs": OutputComparison,
        "error": ErrorInfo,
        "first_divergent_kernel": Localization,
        "injection_stats": InjectionStats,
        "extraction": Extraction,
    },
}


_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _decode(cls: type, data: dict[str, Any]) -> Any:
    """A record dataclass from its JSON dict: nested records typed, non-finite strings back to floats.

    Keys the dataclass does not know (written by a newer version) are dropped
    below the top level.
    """
    if cls is Localization and "answer" not in data:  # written before answers existed
        diverged = data.get("diverged", True)
        data = {**data, "diverged": diverged, "answer": Answer.KERNEL if diverged else Answer.NONE}
    nested = _NESTED.get(cls, {})
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if f.name in nested and value is not None:
            inner = nested[f.name]
            value = [_decode(inner, v) for v in value] if isinstance(value, list) else _decode(inner, value)
        elif "float" in str(f.type) and isinstance(value, str) and value in _NONFINITE:
            value = _NONFINITE[value]
        elif f.name == "status":
            value = None if value is None else status_of(value)
        elif isinstance(value, str):
            value = safe_text(value)
        values[f.name] = value
    return cls(**values)
