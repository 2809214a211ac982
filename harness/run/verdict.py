"""What a run found once both sides ran (`record.facts`: the comparisons, eager's repeat, the retry, elided
casts, a dynamic run's recompilation), and the analyses a divergence calls for. The verdict they make is
`harness.judge.decision`'s."""

from __future__ import annotations

import dataclasses

from harness import records as R
from harness.inject.launch import parse_injection
from harness.judge.decision import nondeterminism_said
from harness.judge.sent_values import SizeValues
from harness.registry import Case
from harness.run.config import RunConfig
from harness.run.eager_gaps import gap_explains
from harness.run.launcher_narrowing import divergence_answer
from harness.run.layout_asserts import FALLBACK_LAYOUT, fallback_layout_answer
from harness.run.diagnoses import (
    elided_casts,
    first_launches_fail,
    narrowing_diagnosis,
    narrowing_visible,
    overlapping_compiled_results,
    passes_compiled_afresh,
    reproduces,
    settle_reproduction,
    undefined_results,
)
from harness.run.errors import CaseFailure, NoEagerReference, NothingCompared, NothingCompiled, timed_stage
from harness.run.localize_run import answer_elided_casts, localize_run
from harness.run.sides import CompiledSide, EagerSide, Sizes


def settle_verdict(eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult) -> None:
    """The comparisons and the follow-up analyses a divergence calls for, into the record and its facts."""
    facts = record.facts
    record.outputs = compiled.comparisons
    if not any(not (o.rule == "equal" and o.dtype == "NoneType") for o in record.outputs):
        raise CaseFailure(
            R.Stage.COMPARE,
            NothingCompared(
                "nothing was compared: the program returned no tensor and no value, changed no input or buffer, "
                "and has no gradient"
            ),
            R.Symptom.NOTHING_COMPARED,
        )
    if record.graphs and record.graphs["graphs"] == 0 and eager_side.case.compiles:
        raise CaseFailure(
            R.Stage.COMPILE,
            NothingCompiled(
                "Dynamo produced no graph: the compiled run ran eagerly (every frame fell back, e.g. through "
                "suppress_errors, or the case compiles nothing; declare compiles=False if that is intended)"
            ),
            R.Symptom.NOTHING_COMPILED,
        )
    diverged = not all(o.passed for o in record.outputs)
    if diverged and (undefined := undefined_results(eager_side, compiled)):
        why = NoEagerReference(
            f"{', '.join(undefined[:3])} {'is' if len(undefined) == 1 else 'are'} undefined where eager and compiled "
            "differ: each side has NaN or inf there, and so has a float64 run from the same finite inputs (NaN, "
            "or an inf eager does not match: a gradient at a singular point), so which of NaN, inf or -inf each "
            "side rounds to says nothing of the compiled code"
        )
        if eager_side.case.generated:
            raise CaseFailure(R.Stage.EAGER, why)
        record.warnings.append(str(why))
    if diverged and (gap := gap_explains(eager_side, compiled)):
        raise CaseFailure(R.Stage.COMPARE, gap)
    facts.compared = True
    facts.failing = [o.name for o in record.outputs if not o.passed]
    facts.nondeterministic = list(eager_side.nondeterministic)
    if diverged and (overlapping := overlapping_compiled_results(eager_side, compiled)):
        record.diagnosis = overlapping
    if eager_side.nondeterministic:
        record.diagnosis = nondeterminism_said(eager_side.nondeterministic)
    elif diverged and not config.bisect:
        # A divergence is retried once (no recompilation): one that does not come back is nondeterminism, or
        # a bug of first launches. (With --bisect, localization's first run, which changes no value, is that
        # retry.)
        reproduced, runs_differ = reproduces(eager_side, compiled)
        if reproduced or not first_launches_fail(eager_side, compiled, config, record):
            settle_reproduction(record, reproduced, runs_differ)
    # Reruns of the whole program that answer a steady divergence by a mechanism, before localization: the
    # launcher's narrowing (localization then names the kernel too), else a fallback's layout unlike its meta's
    # (the answer itself: localization does not run, so the run has one answer).
    layout = None
    if facts.steady and eager_side.dynamic is None:
        with timed_stage("localize", record.timings, wrap=False):
            if found := divergence_answer(eager_side, config, record):
                record.mechanism = found.mechanism
                record.diagnosis = f"{record.diagnosis}; {found.said}" if record.diagnosis else found.said
            elif layout := fallback_layout_answer(eager_side, config, record):
                record.mechanism = FALLBACK_LAYOUT
                record.diagnosis = f"{record.diagnosis}; {layout.isolated}" if record.diagnosis else layout.isolated
                record.first_divergent_kernel = layout
    if layout is not None and config.bisect:  # (the retry localization's first run would have been)
        settle_reproduction(record, *reproduces(eager_side, compiled))
    passed = not diverged and not eager_side.nondeterministic
    if layout is None and config.bisect and (facts.diverged or (config.bisect == "always" and passed)):
        with timed_stage("localize", record.timings, wrap=False):
            found = localize_run(eager_side, compiled, config, record)
            if found is None and first_launches_fail(eager_side, compiled, config, record):
                found = localize_run(eager_side, compiled, config, record) or R.Localization(
                    answer=R.Answer.UNLOCALIZED,
                    diverged=True,
                    reason="the probe's runs, each on first launches "
                    "of the kernels loaded afresh, did not diverge again",
                )
        if facts.diverged and not facts.first_launch:
            settle_reproduction(record, found is not None)
        record.first_divergent_kernel = found
    # (A divergence that came back alike: a run-to-run or first-launch one is no question of rounding.)
    if facts.steady and (elided := elided_casts(eager_side, compiled, config, record)):
        # Rounding the program asks for, kept in float32: one story in the symptom, the diagnosis and the answer.
        facts.casts_elided = True
        record.diagnosis = f"{record.diagnosis}; {elided}" if record.diagnosis else elided
        if record.first_divergent_kernel is not None:
            record.first_divergent_kernel = answer_elided_casts(
                record.first_divergent_kernel, compiled.casts, compiled.casts_removed, compiled.casts_removers
            )
    if config.bisect and eager_side.case.culprit and facts.diverged and record.first_divergent_kernel:
        record.culprit_found = record.first_divergent_kernel.names(eager_side.case.culprit)
    # (Not with an injected fault: it fails afresh too, by construction.)
    if (
        config.fresh_compile
        and facts.diverged
        and compiled.cache_hits
        and not config.inject
        and passes_compiled_afresh(eager_side, config, record)
    ):
        hits = f"{compiled.cache_hits} hit{'' if compiled.cache_hits == 1 else 's'}"
        cached = (
            f"compiled again with the compile caches off, it passes: the failing program came from the "
            f"compile caches ({hits}), from an entry made for another program (a cache key that misses "
            "something the generated code depends on)"
        )
        record.diagnosis = f"{record.diagnosis}; {cached}" if record.diagnosis else cached
    record.reference = eager_side.reference
    stats = record.injection_stats or R.InjectionStats()
    narrows = config.inject is not None and parse_injection(config.inject)[0].narrows
    if narrows and stats.converted_args and narrowing_visible(record):
        with timed_stage(R.Stage.REFERENCE, record.timings):
            record.diagnosis = narrowing_diagnosis(eager_side, compiled)


def conclude_sizes(sizes: Sizes, record: R.CaseResult, case: Case, strict: bool) -> None:
    """Both sizes in the record: the second's results named `<name>@size2`, which sizes failed, and a
    recompilation with the guard that failed. Where the values pass, a recompilation is a pass with a warning
    (`strict`: a failure of its own, the second size ran no dynamic kernel); for a generated sample, a skip (no
    test of dynamic kernels, as a sample Dynamo compiles nothing of)."""
    record.outputs = sizes.first + [dataclasses.replace(c, name=f"{c.name}@size2") for c in sizes.second]
    record.facts.failing = [o.name for o in record.outputs if not o.passed]
    record.facts.generated, record.facts.dynamic_strict = case.generated, strict
    record.failed_sizes = [
        n for n, comparisons in ((1, sizes.first), (2, sizes.second)) if not all(c.passed for c in comparisons)
    ]
    record.recompiled = sizes.recompiled
    if not sizes.recompiled:
        return
    record.recompile_reasons = sizes.recompile_reasons
    guards = "; ".join(sizes.recompile_reasons[:2]) or "Dynamo reported none"
    said = (
        f"the second size compiled again (guard failed: {guards}): its results come from a graph of that "
        "size, not from the dynamic one"
    )
    record.facts.recompiled = said
    passed = not record.facts.failing and not record.facts.nondeterministic
    if passed and case.generated:
        return
    if passed and not strict:
        record.warnings.append(f"{said}; its values pass (--dynamic strict fails a recompilation)")
    else:
        record.diagnosis = f"{record.diagnosis}; {said}" if record.diagnosis else said


def values_of(eager_side: EagerSide, compiled: CompiledSide) -> SizeValues:
    """What one size's verdict was computed from, as the run ends (the float64 reference made on need)."""
    verdict = eager_side.verdict
    return SizeValues(
        compiled.results,
        eager_side.expected,
        eager_side.references,
        eager_side.again,
        undefined=dict(verdict.undefined),
        atomic_baseline=dict(verdict.atomic_baseline),
        accumulated=verdict.accumulated,
    )
