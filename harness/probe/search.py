"""From a failing run to one answer: a kernel, a stage, a drift, or why none.

Runs after the compiled run was judged, on the same compiled program (no
recompilation; see `execution.Session`):

1. A probe run compares every launch with eager in launch order; a buffer
   that misses the verdict policy is isolated (`isolation.isolate`). The
   first kernel that is wrong on exact inputs, or reads what it writes, is
   the answer if its difference matters: one more run with its outputs made
   eager must change a failing output beyond tolerance (a reordered float32 sum
   is wrong on exact inputs by the letter of the policy, and changes
   nothing). Otherwise the next such kernel is tried.
2. Otherwise the runs are repeated with the outputs of launches 0..m made
   eager, and a search finds the smallest m that makes every output pass
   (the first launch that missed the verdict policy is tried first, so a
   difference that starts where it is first seen costs two runs). Launch m
   is where the difference that matters starts: a kernel wrong on exact
   inputs, or else a drift that grows across kernels.
3. If no m does, the divergence may predate Inductor: the program is
   compiled with CompilerBisector's backends (`eager`: Dynamo alone,
   `aot_eager`, `aot_eager_decomp_partition`), searched as a bisection: two
   compiles name the first stage that already diverges (`STAGE_BACKENDS`).
   Not asked when some m does: its run passed on eager values of the
   post-grad graph, which those stages made.
4. If the stages before Inductor pass, Inductor's FX graph passes are
   searched (`passes.find_pass`): the passes that changed the graphs are
   turned off, half at a time, until one pass alone turned off makes the
   run pass. That pass is the answer, verified by that very run.
5. Otherwise the answer is the graph passes with no single one to blame, or
   `unlocalized`, with what the probe could not see.

A passing run (probed with `--bisect always`) gets answer `none`; the
differences its outputs absorbed are listed as information.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from harness import records as R
from harness.judge.compare import VerdictPolicy
from harness.probe.kernel_rerun import ALIASING, DRIFT, GLUE, NOT_ISOLATED, WRONG
from harness.judge.results import Results
from harness.probe.pass_bisection import find_pass
from harness.probe.probe import Divergence, KernelProbe

# CompilerBisector's backends before Inductor, in pipeline order, with the stage each one's divergence names.
STAGE_BACKENDS = (
    ("eager", "dynamo"),
    ("aot_eager", "aot_eager"),
    ("aot_eager_decomp_partition", "aot_eager_decomp_partition"),
)
COARSE_STAGES = tuple(backend for backend, _ in STAGE_BACKENDS)
# Kernels wrong on exact inputs tried one by one before a drift search, at most.
MAX_CANDIDATES = 4
# An absorbed difference whose kernel's outputs, made eager, move no output.
IMMATERIAL = "immaterial"
# Not a backend: the post-grad graph Inductor lowers, run eagerly in place of every kernel, already diverges.
GRAPH_PASSES = "inductor_graph_passes"
# Not a backend: the post-grad graphs run eagerly pass, and with every kernel output made eager the wrapper still
# diverges: what the wrapper builds around its kernels is wrong.
WRAPPER_GLUE = "wrapper_glue"
# Not a backend: the post-grad graphs run eagerly pass, and Inductor dropped an in-place update of them (no kernel
# or call writes it; the graphs run without it give the compiled results): lowering or scheduling lost it.
LOWERING = "inductor_lowering"
STAGE_MEANING = {
    "dynamo": "Dynamo's bytecode, guards or graph capture (backend=\"eager\" runs Dynamo's graph eagerly), not "
    "AOT autograd or Inductor",
    "aot_eager": "functionalization/AOT autograd (backend=\"eager\" passes), not an Inductor kernel",
    "aot_eager_decomp_partition": "Inductor's decompositions or the joint-graph partition, not an Inductor kernel",
    GRAPH_PASSES: (
        "with every kernel output made eager the outputs still diverge: the post-grad graph Inductor "
        "lowers is already wrong (Inductor's FX graph passes or the wrapper's glue), not a kernel"
    ),
    LOWERING: (
        "the post-grad graphs Inductor lowers, each run eagerly in place of its wrapper, pass, and Inductor "
        "dropped an in-place update of them: no kernel or call of the wrapper writes it, and the graphs run "
        "eagerly without it give the compiled results"
    ),
    WRAPPER_GLUE: (
        "the post-grad graphs Inductor lowers, each run eagerly in place of its wrapper, pass, and with "
        "every kernel output made eager the wrapper still diverges: the wrapper's glue is wrong (the "
        "views, reinterpret_tensor, and the arguments it builds for extern kernels, custom ops and ATen "
        "fallbacks), not a kernel and not a graph pass"
    ),
}
# Said of a GRAPH_PASSES answer whose graphs were run eagerly: they diverge already, so the glue is not to blame.
GRAPHS_DIVERGE_EAGERLY = (
    "the post-grad graphs, each run eagerly in place of its wrapper, diverge already: "
    "Inductor's FX graph passes made them wrong, not the wrapper's glue"
)


@dataclass
class LocalizationHooks:
    """What localization needs from the runner: the compiled program run again, and the stage check."""

    # Runs the compiled program once with `probe` installed; its results.
    rerun: Callable[[KernelProbe], Results]
    # Whether every output of a run passes the verdict against eager.
    passes: Callable[[Results], bool]
    # Whether a run's outputs differ, beyond the verdict policy, from those of the first compiled run (of a
    # failing run, its failing ones).
    moved: Callable[[Results], bool]
    # Whether the program compiled with this backend (one of COARSE_STAGES) diverges.
    diverges_under: Callable[[str], bool]
    # The injection's launch handler for a run (a fresh one each time), or None.
    injection: Callable[[], Callable | None]
    # It diverges on its kernels' first launches only, and every rerun loads it afresh.
    first_launches: bool = False
    # A failing result is laid out with elements sharing memory where eager's is not, or has another dtype than
    # eager's (a layout or type bug: its memory cannot hold eager's values).
    wrong_layout_or_dtype: bool = False
    # The Inductor graph passes that changed the program's graphs (one compile, observed), and whether the
    # program compiled with the passes of these keys turned off passes (`passes.find_pass`).
    graph_passes: Callable[[], list] = lambda: []
    passes_without: Callable[[frozenset], bool] = lambda keys: False
    # Whether the program passes with each compiled graph's post-grad FX graph run eagerly in place of its
    # wrapper (kernels and glue alike); None when that cannot be run (a graph without lowering facts).
    graphs_pass_eagerly: Callable[[], bool | None] = lambda: None
    # The program's results with each compiled graph's post-grad FX graph run eagerly in place of its wrapper,
    # without the named nodes (module path -> node names; in-place updates no node reads); None when it cannot run.
    graphs_without: Callable[[dict[str, list[str]]], Results | None] = lambda dropped: None

    def run(self, probe: KernelProbe) -> bool:
        return self.passes(self.rerun(probe))


class NotReproduced(Exception):
    """A failing run's first probe run passed: the compiled program is not deterministic."""


def localize(program: LocalizationHooks, verdict: VerdictPolicy, failing: bool) -> R.Localization:
    """The answer for a run (failing, or passing under `--bisect always`), with what it cost.

    The first probe run changes no value: for a failing run it is also the
    retry that tells a divergence from nondeterminism (NotReproduced when it
    passes), so localizing costs no separate retry.
    """
    cost = {"reruns": 0, "stages_checked": False, "compiles": 0}

    def rerun(probe: KernelProbe) -> Results:
        cost["reruns"] += 1
        return program.rerun(probe)

    def compiling(check: Callable, stage: bool = False) -> Callable:
        def counted(*args: object) -> object:
            cost["compiles"] += 1
            cost["stages_checked"] = cost["stages_checked"] or stage
            return check(*args)

        return counted

    counted = dataclasses.replace(
        program,
        rerun=rerun,
        diverges_under=compiling(program.diverges_under, stage=True),
        graph_passes=compiling(program.graph_passes),
        passes_without=compiling(program.passes_without),
        graphs_pass_eagerly=program.graphs_pass_eagerly,
    )
    found = _localize(counted, verdict, failing)
    found.reruns, found.stages_checked, found.compiles = cost["reruns"], cost["stages_checked"], cost["compiles"]
    return found


def _localize(program: LocalizationHooks, verdict: VerdictPolicy, failing: bool) -> R.Localization:
    probe = _probe(program, verdict, stop_at_wrong=failing, check_layouts=failing and program.wrong_layout_or_dtype)
    outputs_pass = program.run(probe)
    if failing and outputs_pass:
        raise NotReproduced()
    found = _evidence(probe)
    superseded = probe.superseded
    if probe.layouts:  # checked only for a failing run whose result's layout or dtype is wrong
        # The failing result cannot hold eager's values: the first buffer laid out so is where that starts, and
        # no substitution could show it (eager's value does not fit the memory it would be copied into).
        _name(found, probe.layouts[0], R.Answer.KERNEL, stage="inductor")
        found.reason = (
            "a failing result is laid out with elements sharing memory, or typed, unlike eager's; this "
            "kernel wrote the first buffer whose layout or dtype cannot hold its node's value"
        )
        return found
    if not failing:
        found.answer, found.diverged = R.Answer.NONE, False
        found.absorbed = [_absorbed(d) for d in probe.divergences]
        _mark_immaterial(program, verdict, probe.divergences, found.absorbed)
        return found
    if (dropped := _dropped_update(program, found, probe)) is not None:
        return dropped
    first = probe.divergences[0] if probe.divergences else None
    # Where the search starts: the first difference seen, or, once a kernel's difference was shown not to
    # matter, the first one seen after it from another kernel.
    hint = first
    last = found.launches - 1
    immaterial: set[str] = set()
    for _ in range(MAX_CANDIDATES):
        wrong = next((d for d in probe.divergences if d.isolation.kind in (WRONG, ALIASING, GLUE)), None)
        if wrong is None:
            break
        # Does its difference matter? Make its outputs alone eager and see whether the outputs move. (A run
        # that also compared the launches after it would find the next candidate too, but it would step the
        # eager graph to the end even when this one is the answer, the common case.)
        results = program.rerun(_probe(program, verdict, substitute=frozenset({wrong.key})))
        if program.moved(results):
            _name(found, wrong, R.Answer.KERNEL, stage="inductor")
            found.reason = (
                "making its outputs eager makes every output pass"
                if program.passes(results)
                else "making its outputs eager changes a failing output beyond tolerance; later kernels "
                "add more differences"
            )
            return found
        found.problems.append(
            f"{wrong.graph} {_launch_words(wrong)} {wrong.kernel['name']} differs on exact "
            "inputs, but making its outputs eager changes no failing output beyond tolerance "
            "(the outputs absorb its difference, or later kernels spoil the same elements; its "
            "other launches are not tried)"
        )
        # The same kernel launched again (the next layer) differs the same way: not a candidate either.
        immaterial.add(wrong.kernel["name"])
        # (A fallback's index is the next kernel's: compared again from there, itself too, as immaterial.)
        after = wrong.launch_index if wrong.fallback is None else wrong.launch_index - 1
        probe = _probe(program, verdict, stop_at_wrong=True, compare_after=after, immaterial=frozenset(immaterial))
        program.rerun(probe)
        # The search starts at the next difference, preferably from another kernel (the immaterial one's next
        # launches differ the same way). Starting at the immaterial launch instead would cost a whole search
        # where the difference that matters starts at the next one: about ten runs on a model step, not two.
        hint = next(
            (d for d in probe.divergences if d.kernel["name"] not in immaterial),
            probe.divergences[0] if probe.divergences else hint,
        )
    search = _Substitution(program, verdict, last)
    culprit = _first_that_matters(search, hint.launch_index if hint is not None else None)
    if culprit is None:
        return (
            _before_inductor(program, found, first)
            or _in_graph_pass(program, found, first)
            or _after_aot(found, first, superseded, program.graphs_pass_eagerly)
        )
    # No stage check from here on: the outputs passed with launches 0..culprit made eager values of the
    # post-grad graph, so that graph (what AOT autograd and the decompositions made) is right where it
    # matters. A stage answer now would contradict that run.
    described = search.described(culprit)
    if described is not None and described.isolation.kind in (WRONG, ALIASING, GLUE):
        _name(found, described, R.Answer.KERNEL, stage="inductor")
        found.reason = _causal(culprit)
        return found
    return _drift(found, culprit, described, first)


@dataclass
class _Substitution:
    """Runs with the outputs of launches 0..m made eager; asked to, one also compares and isolates launch
    m+1 on those values (the answer's description, when that run decides the answer is m+1)."""

    program: LocalizationHooks
    verdict: VerdictPolicy
    last: int
    _described: dict[int, Divergence | None] = field(default_factory=dict)

    def passes(self, m: int, describe_next: bool = False) -> bool:
        following = frozenset({m + 1}) if describe_next and m + 1 <= self.last else frozenset()
        probe = _probe(
            self.program,
            self.verdict,
            substitute=frozenset(range(m + 1)),
            substitute_fallbacks_before=m,
            describe=following,
        )
        passed = self.program.run(probe)
        for index in following:
            self._described[index] = probe.described.get(index)
        return passed

    def described(self, index: int) -> Divergence | None:
        """Launch `index` compared and isolated, with every launch before it made eager."""
        if index not in self._described:
            self.passes(index - 1, describe_next=True)
        return self._described[index]


def _first_that_matters(search: _Substitution, hint: int | None) -> int | None:
    """The smallest m such that making the outputs of launches 0..m eager makes every output pass.

    `hint` (the first launch that missed the verdict policy) is tried first:
    a difference that starts there is then confirmed in two runs instead of a whole search, the second of
    which describes it. (Only that run describes: a search run describing its next launch would pay for
    its eager and float64 values up to there, and only the last such run's description would be used.)
    None when no m does (or there are no launches).
    """
    passes, last = search.passes, search.last
    if last < 0:
        return None
    low, high = -1, None  # passes(low) is False (the run failed), passes(high) is True
    if hint is not None:
        if passes(hint):
            if hint == 0 or not passes(hint - 1, describe_next=True):
                return hint
            high = hint - 1
        else:
            low = hint
    if high is None:
        if not passes(last):
            return None
        high = last
    while high - low > 1:
        middle = (low + high) // 2
        if passes(middle):
            high = middle
        else:
            low = middle
    return high


def first_diverging_stage(diverges_under: Callable[[str], bool]) -> str:
    """The first of STAGE_BACKENDS' stages whose backend diverges, or "inductor", in two compiles: `aot_eager`
    splits the pipeline in half, then `eager` or `aot_eager_decomp_partition` decides (each stage's backend
    runs every stage before it, so a divergence there persists in the later ones)."""
    (dynamo_backend, dynamo), (aot_backend, aot), (decomp_backend, decomp) = STAGE_BACKENDS
    if diverges_under(aot_backend):
        return dynamo if diverges_under(dynamo_backend) else aot
    return decomp if diverges_under(decomp_backend) else "inductor"


def _before_inductor(
    program: LocalizationHooks, found: R.Localization, first: Divergence | None
) -> R.Localization | None:
    stage = first_diverging_stage(program.diverges_under)
    if stage == "inductor":
        return None
    found.answer, found.diverged, found.stage = R.Answer.STAGE, True, stage
    backend = dict((name, backend) for backend, name in STAGE_BACKENDS)[stage]
    found.reason = f"diverges already under backend={backend!r}: {STAGE_MEANING[stage]}"
    found.visible_at = _seen_at(first)
    return found


def _dropped_update(program: LocalizationHooks, found: R.Localization, probe: KernelProbe) -> R.Localization | None:
    """An in-place update Inductor removed (`dropped.py`), confirmed: the post-grad graphs run eagerly pass, and run
    eagerly without those updates they give the compiled program's results. No kernel is then to blame."""
    if not probe.dropped or not program.graphs_pass_eagerly():
        return None
    by_module: dict[str, list[str]] = {}
    for _, module_path, update in probe.dropped:
        by_module.setdefault(module_path, []).append(update.node)
    results = program.graphs_without(by_module)
    if results is None or program.moved(results):
        return None
    found.answer, found.diverged, found.stage = R.Answer.STAGE, True, LOWERING
    updates = "; ".join(f"{label}: {update.text()}" for label, _, update in probe.dropped)
    found.reason = f"diverges in {LOWERING}: {STAGE_MEANING[LOWERING]} ({updates}); no kernel is wrong"
    return found


def _in_graph_pass(
    program: LocalizationHooks, found: R.Localization, first: Divergence | None
) -> R.Localization | None:
    """The Inductor graph pass that, turned off alone, makes the run pass (the stages before Inductor pass)."""
    diverging = frozenset(first.kernel.get("nodes") or ()) if first is not None else frozenset()
    finding = find_pass(program.graph_passes, program.passes_without, diverging)
    found.graph_passes_changed = [p.label for p in finding.changed]
    if finding.named is None:
        found.problems.append(finding.text)
        return None
    if program.graphs_pass_eagerly():
        # The graphs the passes made are right, run eagerly in place of their wrappers: the pass only made a
        # graph that what comes after it (lowering, the wrapper) gets wrong. It is not what is wrong.
        found.problems.append(
            f"turning off {finding.named.label} alone makes the run pass, but the post-grad graphs it made pass "
            "run eagerly: the pass is right, and what Inductor makes of its graph is not"
        )
        return None
    found.answer, found.diverged, found.stage = R.Answer.STAGE, True, GRAPH_PASSES
    found.graph_pass = finding.named.label
    found.graph_passes_enabling = [p.label for p in finding.enabling]
    found.reason = f"diverges in {GRAPH_PASSES}, in the pass {finding.named.label}: {finding.text}"
    found.visible_at = _seen_at(first)
    return found


def _after_aot(
    found: R.Localization,
    first: Divergence | None,
    superseded: int = 0,
    graphs_pass_eagerly: Callable[[], bool | None] = lambda: None,
) -> R.Localization:
    """Every compared kernel output made eager still fails, and the stages before Inductor pass.

    Then the difference lies outside the kernels, unless an unmapped buffer carries it. Those that held only
    a state inside one node's lowering, written over whole by that node's compared value (`superseded`),
    cannot: with that value made eager nothing of the state is left. The post-grad graphs run eagerly, in
    place of their wrappers, tell the two places left apart: they pass (the wrapper's glue is wrong) or not
    (a graph pass made them wrong).
    """
    live_unmapped = found.unmapped_buffers - superseded
    if found.launches and not live_unmapped and not any("failed" in p for p in found.problems):
        graphs_pass = graphs_pass_eagerly()
        stage = WRAPPER_GLUE if graphs_pass else GRAPH_PASSES
        found.answer, found.diverged, found.stage = R.Answer.STAGE, True, stage
        found.reason = f"diverges in {stage}: {STAGE_MEANING[stage]}"
        if graphs_pass is False:
            found.reason += f"; {GRAPHS_DIVERGE_EAGERLY}"
        if no_single := next((p for p in found.problems if p.startswith("no ")), None):
            found.reason += f"; {no_single}"
        if superseded:
            found.reason += (
                f" (its {superseded} unmapped buffers held only states inside one node's lowering, "
                "each written over whole by that node's compared value)"
            )
        found.visible_at = _seen_at(first)
        return found
    found.answer, found.diverged, found.stage = R.Answer.UNLOCALIZED, True, "inductor"
    reasons = "; ".join(f"{len(names)}x {reason}" for reason, names in list(found.unmapped.items())[:3])
    found.reason = (
        "the outputs still diverge with every compared kernel output made eager: the difference "
        f"comes from work the probe does not compare ({found.unmapped_buffers} unmapped buffers"
        f"{': ' + reasons if reasons else ''}: buffers no FX node's value maps to, which neither the kernels' "
        "outputs, nor the fallback calls, nor the views the glue builds for them compare)"
    )
    return found


def _seen_at(first: Divergence | None) -> R.BufferDivergence | None:
    """Where a stage answer's difference first shows among the kernels, said as what it is: the kernel computes
    what the graph gave it (one run, one story: a stage answer names no kernel as wrong)."""
    if first is None:
        return None
    seen = first.as_buffer_divergence()
    seen.kind = DRIFT
    seen.isolated = (
        "first differs from eager here; the graph the kernels compute already differs from the "
        "program, so this kernel is not what is wrong"
    )
    return seen


def _drift(
    found: R.Localization, culprit: int, described: Divergence | None, first: Divergence | None
) -> R.Localization:
    found.answer, found.diverged, found.stage = R.Answer.DRIFT, True, "inductor"
    found.visible_at = first.as_buffer_divergence() if first is not None else None
    why = "no single kernel is wrong beyond tolerance on exact inputs"
    if described is not None:
        _name(found, described, R.Answer.DRIFT, stage="inductor")
        metrics = described.kernel["metrics"]
        if described.isolation.kind == NOT_ISOLATED:
            found.isolated = described.isolation.text
            why = "it reads inputs the probe cannot compare, which may carry the difference"
        else:
            found.isolated = (
                "on eager values of its inputs its output stays within the verdict policy "
                f"(bad={metrics.bad}/{metrics.numel}, max_abs={metrics.max_abs:.3g})"
            )
    else:  # its outputs could not be compared (unmapped): named from the launch log
        entry = next((e for e in found.kernels if e.index == culprit and e.fallback is None), None)
        found.launch_index, found.name = culprit, entry.name if entry else None
        found.graph = entry.graph if entry else None
        found.isolated = "not isolated: none of its outputs has an eager twin"
        why = "its outputs cannot be compared with eager"
    found.reason = f"the first kernel whose difference from eager the outputs do not absorb ({_causal(culprit)}); {why}"
    return found


def _launch_words(divergence: Divergence) -> str:
    if divergence.fallback is not None:
        return f"fallback aten:{divergence.fallback}"
    return f"launch {divergence.launch_index}"


def _causal(culprit: int) -> str:
    if culprit == 0:
        return "making its outputs eager makes every output pass"
    return f"making the outputs of launches 0..{culprit} eager makes every output pass, 0..{culprit - 1} does not"


def _mark_immaterial(
    program: LocalizationHooks,
    verdict: VerdictPolicy,
    divergences: list[Divergence],
    absorbed: list[R.BufferDivergence],
) -> None:
    """A kernel that differs on exact inputs yet moves no output when made eager: say so (one run per kernel)."""
    judged: dict[str, bool] = {}
    for divergence, entry in zip(divergences, absorbed):
        if entry.kind not in (WRONG, ALIASING, GLUE):
            continue
        name = divergence.kernel["name"]
        if name not in judged and len(judged) < MAX_CANDIDATES:
            results = program.rerun(_probe(program, verdict, substitute=frozenset({divergence.key})))
            judged[name] = not program.moved(results)
        if judged.get(name):
            entry.kind = IMMATERIAL
            entry.isolated = (
                "differs from eager on exact inputs, but making its outputs eager moves no output "
                "beyond tolerance: a difference the outputs do not depend on"
            )


def _absorbed(divergence: Divergence) -> R.BufferDivergence:
    """A passing run's difference, worded as information: the outputs absorb it."""
    entry = divergence.as_buffer_divergence()
    if divergence.isolation.kind in (WRONG, ALIASING, GLUE):
        entry.isolated = "differs from eager beyond the verdict policy even on exact inputs; the outputs absorb it"
    else:
        entry.isolated = "matches eager on exact inputs: a drift from upstream, absorbed by the outputs"
    return entry


def _probe(program: LocalizationHooks, verdict: VerdictPolicy, **mode) -> KernelProbe:
    return KernelProbe(verdict, inner=program.injection(), first_launches=program.first_launches, **mode)


def _evidence(probe: KernelProbe) -> R.Localization:
    return R.Localization(
        answer=R.Answer.UNLOCALIZED,
        diverged=True,
        launches=probe.launches,
        graphs=probe.graphs,
        graph_launches=probe.graph_launches,
        compared_buffers=probe.compared,
        unmapped_buffers=probe.unmapped_count,
        unmapped=probe.unmapped,
        kernels=probe.log,
        problems=probe.problems,
    )


def _name(found: R.Localization, divergence: Divergence, answer: R.Answer, stage: str) -> None:
    kernel = divergence.kernel
    found.answer, found.diverged, found.stage = answer, True, stage
    found.graph, found.launch_index = divergence.graph, divergence.launch_index
    if divergence.fallback is not None:  # kernel launches are counted apart from fallback calls
        found.launch_index, found.fallback_index = None, divergence.fallback
    found.name, found.kind, found.source = kernel["name"], kernel["kind"], kernel["source"]
    found.buffers, found.buffer, found.nodes = kernel["buffers"], kernel["buffer"], kernel["nodes"]
    found.aten_ops, found.args, found.metrics = kernel["aten_ops"], kernel["args"], kernel["metrics"]
    found.module_path, found.isolated = kernel["module_path"], divergence.isolation.text
    if divergence.producers:
        # Judged together with the kernels whose outputs it read without an eager twin (a split reduction's
        # first half): the answer starts where the computation starts.
        first = min(divergence.producers)
        producer = divergence.producers[first]
        found.launch_index, found.name, found.kind = first, producer["name"], producer["kind"]
        found.fallback_index = None
        found.source, found.args, found.module_path = producer["source"], producer["args"], producer["module_path"]
        found.nodes = list(dict.fromkeys(producer["nodes"] + kernel["nodes"]))
        found.aten_ops = sorted(set(producer["aten_ops"]) | set(kernel["aten_ops"]))
        found.isolated = (
            f"{divergence.isolation.text}; judged together with launch {divergence.launch_index} "
            f"{kernel['name']}, which reads its output"
        )
    # What the checks on the named kernels' text found: evidence read off the code, beside the measured one.
    named = [divergence.producers[min(divergence.producers)]] if divergence.producers else []
    found.text_findings = list(dict.fromkeys(f for k in [*named, kernel] for f in k.get("text_findings", ())))
    if found.text_findings:
        found.isolated += "; read in its code: " + "; ".join(f.partition(": ")[2] for f in found.text_findings)
