"""A run's verdict, decided once: `decide(facts, expectation, run)` turns what the run found (`RunFacts`: the error,
the comparisons, the retry, the judge's findings) and what it is expected to fail (`Expectation`) into its status,
stage, symptom and reason; `conclude` writes that into the record, the one place a record's verdict is set.

The rules, in the order they apply (each `Verdict` names its `rule`):
  out-of-bounds  a compiled kernel's load or store outside its buffers, stopped by the device's memory checker: fail
  error        the run could not finish: error, at the stage it stopped, with its symptom
  untested     the run tested nothing of the compiler: skip, with why
  nondeterministic  eager's two runs differ: no verdict on compiled
  divergence   a result differs: fail, its symptom first-launch, run-to-run, precision-cast-elided or divergence
  recompiled   a dynamic run's second size compiled again: skip (a generated case) or, with --dynamic strict, fail
  pass         otherwise
The values are the judge's where they reached it (`harness.judge.sent_values`: judged apart from the case's code;
`judge-overruled` where the case's process said otherwise), the case's process's own where they did not (a pass
then is an error: `unjudged`), the runner's in a run without isolation. Then the expectation: a case's declared
failure, else a known issue, turns a failing run into xfail and a passing one into xpass (lit's `Test.setResult`
and pytest's xfail handling in its one makereport hook are the models).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from harness import records as R
from harness.judge.known_failures import FILTERS, Expectation, KnownFailure, KnownIssue
from harness.records.facts import RunFacts

# `CaseResult.verdict_source`: who decided the status that stands.
JUDGED = "judge"  # judged again apart from the case's code; the case's process agreed
OVERRULED = "judge-overruled"  # judged again apart from the case's code, where the case's process said otherwise
CASE_PROCESS = "case-process"  # no values reached the judge: a failure the case's process found stands


@dataclass(frozen=True)
class RunWords:
    """What an expected failure's filters match a run by (its identity), and whether its error is a harness bug."""

    case: str
    device: str | None = None
    backend: str | None = None
    npu_backend: str | None = None
    dtype: str | None = None
    mode: str | None = None
    emulation: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    mechanism: str | None = None
    surrogate: bool = False
    harness_failed: bool = False

    @classmethod
    def of(cls, record: R.CaseResult) -> "RunWords":
        torch_version = record.versions.get("torch")
        if torch_version is None:  # (a run that never started: the harness's own torch)
            import torch

            torch_version = torch.__version__
        return cls(
            record.case,
            record.device,
            record.backend,
            record.npu_backend,
            record.dtype,
            record.mode,
            record.emulation,
            torch_version,
            record.versions.get("torch_npu"),
            record.mechanism,
            bool(record.surrogate),
            record.error is not None and record.error.harness_failed,
        )

    def filters(self, symptom: str | None) -> dict[str, Any]:
        """The values a `KnownFailure`'s filters (`FILTERS`) match: this run's, and the verdict's symptom."""
        return {name: symptom if name == "symptom" else getattr(self, name) for name in FILTERS}


@dataclass(frozen=True)
class Verdict:
    status: str
    stage: str | None = None
    symptom: str | None = None
    # Why (a skip's cause, an expected failure's declaration); None leaves the record's as it is.
    reason: str | None = None
    # The rule that decided the status (see the module's docstring), and the expectation's, where one applied.
    rule: str = ""
    expected: str | None = None
    source: str | None = None
    # What the case's process said where the judge overruled it (its status).
    overruled: str | None = None
    # The known issue's link, for a record that names none.
    issue: str | None = None
    # The outputs eager's repeat disagrees on (a nondeterministic run's diagnosis says which).
    nondeterministic: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    # The error a pass that no judge saw becomes.
    error: R.ErrorInfo | None = None


def nondeterminism_said(names: list[str]) -> str:
    return f"two eager runs differ ({', '.join(names[:5])}): no verdict on compiled"


def outcome(facts: RunFacts, failing: list[str] | None = None, nondeterministic: list[str] | None = None) -> Verdict:
    """The verdict the facts make before the judge and the expectation have their say (the case's process steers
    its follow-up analyses by it): from the case's process's own comparisons unless `failing` and
    `nondeterministic` (the judge's) are given."""
    if facts.out_of_bounds is not None:  # (the checker stopped the compiled run: there is nothing to compare)
        return Verdict(R.FAIL, R.Stage.COMPILE, R.Symptom.OUT_OF_BOUNDS, rule="out-of-bounds")
    if facts.error is not None:
        stage, symptom = facts.error
        return Verdict(R.ERROR, stage, symptom, rule="error")
    if facts.untested is not None:
        stage, why = facts.untested
        return Verdict(R.SKIP, stage, reason=why, rule="untested")
    if not facts.compared:
        raise ValueError("no verdict: the run neither compared its results, nor stopped, nor was skipped")
    failing = facts.failing if failing is None else failing
    nondeterministic = facts.nondeterministic if nondeterministic is None else nondeterministic
    if nondeterministic:
        return Verdict(
            R.NONDETERMINISTIC,
            R.Stage.EAGER,
            R.Symptom.NONDETERMINISM,
            rule="nondeterministic",
            nondeterministic=tuple(nondeterministic),
        )
    if failing:
        if facts.first_launch:
            symptom = R.Symptom.FIRST_LAUNCH
        elif facts.run_to_run:
            symptom = R.Symptom.RUN_TO_RUN
        elif facts.casts_elided:
            symptom = R.Symptom.PRECISION_CAST_ELIDED
        else:
            symptom = R.Symptom.DIVERGENCE
        return Verdict(R.FAIL, R.Stage.COMPARE, symptom, rule="divergence")
    if facts.recompiled is not None and facts.generated:
        return Verdict(R.SKIP, R.Stage.COMPILE, reason=f"dynamic: {facts.recompiled}", rule="recompiled")
    if facts.recompiled is not None and facts.dynamic_strict:
        return Verdict(R.FAIL, R.Stage.COMPILE, R.Symptom.RECOMPILED, rule="recompiled")
    return Verdict(R.PASS, rule="pass")


def _judged(facts: RunFacts) -> Verdict:
    """The verdict from the values: the judge's where they reached it, else the case's process's (a pass it alone
    vouches for is an error)."""
    own = outcome(facts)
    if own.rule in ("out-of-bounds", "error", "untested"):
        return own
    judged = facts.judged
    if judged is None and facts.unjudged is None:
        return own  # a run without isolation: the runner judged in the harness's own process
    if judged is None:
        if own.status == R.PASS:  # (a case that removes or spoils its values must not pass on its own word)
            return Verdict(
                R.ERROR,
                R.Stage.COMPARE,
                R.Symptom.UNJUDGED,
                rule="unjudged",
                source=CASE_PROCESS,
                error=R.ErrorInfo(
                    "Unjudged",
                    "the case's process said pass, and no values of it could be judged apart from its code: "
                    f"{facts.unjudged}",
                ),
            )
        note = f"the verdict is the case's own process's, not checked apart from the case's code: {facts.unjudged}"
        return dataclasses.replace(own, source=CASE_PROCESS, notes=(note,))
    if not judged.differing and bool(judged.nondeterministic) == bool(facts.nondeterministic):
        return dataclasses.replace(own, source=JUDGED)
    theirs = outcome(facts, judged.failing, judged.nondeterministic)
    shown = ", ".join(judged.differing[:5]) or "eager's repeat"
    note = (
        f"the verdict was computed again apart from the case's code, from the values its process sent: "
        f"{theirs.status}, where the case's process said {own.status} ({shown}); its own judging was changed (a "
        "patched comparison, tolerance or builtin), so the judge's verdict stands"
    )
    return dataclasses.replace(theirs, source=OVERRULED, overruled=str(own.status), notes=(note,))


def decide(facts: RunFacts, expectation: Expectation, run: RunWords) -> Verdict:
    """The run's verdict: the values' (`_judged`), then its expected failure. A skip stays a skip; a harness bug is
    never the failure a case or a team declared."""
    verdict = _judged(facts)
    if verdict.status == R.SKIP:
        return verdict
    if verdict.status == R.ERROR and run.harness_failed:
        note = "a harness bug, not the declared failure: no expected failure applies to it"
        return dataclasses.replace(verdict, notes=(*verdict.notes, note))
    filters = run.filters(verdict.symptom)
    declared = next((k for k in expectation.declared if k.matches(run.surrogate, **filters)), None)
    if declared is not None:
        verdict = _declared(verdict, declared)
        if verdict.status in R.EXPECTED_STATUSES:
            return verdict
    for issue in expectation.issues:  # also over a declaration not strict that this run passes
        if issue.names(run.case) and issue.failure.matches(run.surrogate, **filters):
            return _known_issue(verdict, issue)
    return verdict


def _declared(verdict: Verdict, known: KnownFailure) -> Verdict:
    """A case's declared failure turns fail, error or nondeterministic into xfail, and pass into xpass unless it
    is declared not strict."""
    if verdict.status == R.PASS and not known.strict:
        said = f"known failure that shows in some runs only, not in this one: {known.reason}"
        return dataclasses.replace(verdict, reason=said)
    status = R.XPASS if verdict.status == R.PASS else R.XFAIL
    return dataclasses.replace(verdict, status=status, reason=known.reason, expected="declared")


def _known_issue(verdict: Verdict, issue: KnownIssue) -> Verdict:
    failure = issue.failure
    if verdict.status == R.PASS and not failure.strict:
        said = f"known issue that shows in some runs only, not in this one: {failure.reason} ({issue.link})"
        return dataclasses.replace(verdict, reason=said)
    if verdict.status == R.PASS:
        status = R.XPASS
    elif R.is_failing(verdict.status) and verdict.status != R.XPASS and issue.status in (None, str(verdict.status)):
        status = R.XFAIL
    else:
        return verdict
    said = f"known issue: {failure.reason} ({issue.link})"
    return dataclasses.replace(verdict, status=status, reason=said, expected="known-issue", issue=issue.link)


def conclude(record: R.CaseResult, facts: RunFacts, expectation: Expectation | None = None) -> Verdict:
    """Decide the run and write the verdict into its record (once: `CaseResult.conclude` refuses a second), with
    what an overruled verdict takes back of the case's process's analyses."""
    verdict = decide(facts, expectation or Expectation(), RunWords.of(record))
    if verdict.source == OVERRULED:
        _overruled(record, verdict)
    if verdict.error is not None:
        record.error = verdict.error
    record.verdict_source = verdict.source
    record.warnings.extend(verdict.notes)
    record.conclude(verdict.status, verdict.stage, verdict.symptom, verdict.reason)
    if verdict.issue:
        record.issue = record.issue or verdict.issue
    return verdict


def _overruled(record: R.CaseResult, verdict: Verdict) -> None:
    """The judge's status replaces the case's process's: what the case's process made of its own (a diagnosis, a
    retry, a localization of a failure the judge does not see, or of none where the judge sees one) goes."""
    record.reason = None
    if verdict.rule == "nondeterministic":
        record.diagnosis = nondeterminism_said(list(verdict.nondeterministic))
    elif verdict.rule == "divergence" and verdict.overruled != R.FAIL:
        record.diagnosis = None
    elif verdict.rule == "pass":
        record.diagnosis = None
        record.reproduced = record.diverged_runs = None
    if record.failed_sizes is not None:
        record.failed_sizes = [
            n
            for n in (1, 2)
            if any(
                not o.passed
                for o in record.outputs
                if (o.name.endswith(f"@size{n}") if n > 1 else "@size" not in o.name)
            )
        ]
    found = record.first_divergent_kernel
    if verdict.rule != "divergence":
        record.first_divergent_kernel, record.culprit_found = None, None
    elif found is not None and found.answer == R.Answer.NONE:
        record.first_divergent_kernel = R.Localization(
            answer=R.Answer.UNLOCALIZED,
            diverged=True,
            reason="not localized: the case's own process judged this run passing",
        )
        record.culprit_found = False if record.culprit else None
