"""`decide`: what a run found, and what it is expected to fail, to one verdict. A table of facts to verdicts."""

import pytest

from harness import records as R
from harness.judge.decision import CASE_PROCESS, JUDGED, OVERRULED, RunWords, conclude, decide
from harness.judge.known_failures import Expectation, KnownFailure, KnownIssue
from harness.records.facts import JudgedValues, RunFacts

RUN = RunWords("relu_mlp", "cpu", "inductor", None, "float32", "training", None, "2.13.0+cpu")
NONE = Expectation()


def facts(**found) -> RunFacts:
    return RunFacts(**found)


def compared(**found) -> RunFacts:
    return RunFacts(compared=True, **found)


# (what the run found, the verdict: status, stage, symptom, the rule)
TABLE = [
    (facts(error=["compile", "crash"]), (R.ERROR, "compile", "crash", "error")),
    # An error stands over anything compared before it (a device fault after the results were read).
    (compared(failing=["out"], error=["worker", "crash"]), (R.ERROR, "worker", "crash", "error")),
    (facts(untested=[None, "needs transformers"]), (R.SKIP, None, None, "untested")),
    (facts(error=["setup", "crash"], untested=[None, "why"]), (R.ERROR, "setup", "crash", "error")),
    (compared(), (R.PASS, None, None, "pass")),
    # A memory checker stopped a kernel: a failure with nothing compared, whether or not values reached a judge.
    (facts(out_of_bounds="k: a store to ... past its end"), (R.FAIL, "compile", "out-of-bounds", "out-of-bounds")),
    (
        facts(out_of_bounds="k: a load from ...", unjudged="no values came"),
        (R.FAIL, "compile", "out-of-bounds", "out-of-bounds"),
    ),
    (compared(failing=["out"]), (R.FAIL, "compare", "divergence", "divergence")),
    (
        compared(failing=["out"], nondeterministic=["out"]),
        (R.NONDETERMINISTIC, "eager", "nondeterminism", "nondeterministic"),
    ),
    (compared(failing=["out"], run_to_run=True), (R.FAIL, "compare", "run-to-run", "divergence")),
    (compared(failing=["out"], first_launch=True, run_to_run=True), (R.FAIL, "compare", "first-launch", "divergence")),
    (compared(failing=["out"], casts_elided=True), (R.FAIL, "compare", "precision-cast-elided", "divergence")),
    (compared(recompiled="compiled again"), (R.PASS, None, None, "pass")),
    (compared(recompiled="compiled again", dynamic_strict=True), (R.FAIL, "compile", "recompiled", "recompiled")),
    (compared(recompiled="compiled again", generated=True), (R.SKIP, "compile", None, "recompiled")),
    (compared(failing=["out@size2"], recompiled="compiled again"), (R.FAIL, "compare", "divergence", "divergence")),
]


@pytest.mark.parametrize("found, expected", TABLE, ids=[f"{e[3]}-{i}" for i, (_, e) in enumerate(TABLE)])
def test_what_a_run_found_decides_its_verdict(found, expected):
    verdict = decide(found, NONE, RUN)
    assert (verdict.status, verdict.stage, verdict.symptom, verdict.rule) == expected
    assert verdict.source is None  # no judge in this table: a run without isolation


def test_a_run_that_found_nothing_has_no_verdict():
    with pytest.raises(ValueError, match="no verdict"):
        decide(facts(), NONE, RUN)


# The judge's findings: (facts as the case's process sent them, what the judge found, status, symptom, source)
JUDGE_TABLE = [
    (compared(failing=["out"]), JudgedValues(["out"], [], []), R.FAIL, "divergence", JUDGED),
    (compared(), JudgedValues([], [], []), R.PASS, None, JUDGED),
    # The case's process patched its own comparison: the judge's verdict stands.
    (compared(), JudgedValues(["out"], [], ["out"]), R.FAIL, "divergence", OVERRULED),
    (compared(failing=["out"], run_to_run=True), JudgedValues([], [], ["out"]), R.PASS, None, OVERRULED),
    (compared(), JudgedValues([], ["out"], []), R.NONDETERMINISTIC, "nondeterminism", OVERRULED),
    # A failure no value decided (--dynamic strict) stands where the judge sees the values pass.
    (
        compared(failing=["out"], recompiled="again", dynamic_strict=True),
        JudgedValues([], [], ["out"]),
        R.FAIL,
        "recompiled",
        OVERRULED,
    ),
]


@pytest.mark.parametrize("found, judged, status, symptom, source", JUDGE_TABLE)
def test_the_judges_values_decide_where_they_reached_it(found, judged, status, symptom, source):
    found.judged = judged
    verdict = decide(found, NONE, RUN)
    assert (verdict.status, verdict.symptom, verdict.source) == (status, symptom, source)
    assert bool(verdict.notes) == (source == OVERRULED)


def test_values_that_never_reached_the_judge_leave_a_failure_standing_and_make_a_pass_an_error():
    failing = decide(compared(failing=["out"], unjudged="its process sent no values"), NONE, RUN)
    assert (failing.status, failing.source) == (R.FAIL, CASE_PROCESS)
    assert "not checked apart from the case's code" in failing.notes[0]
    passing = decide(compared(unjudged="its process sent no values"), NONE, RUN)
    assert (passing.status, passing.stage, passing.symptom, passing.source) == (
        R.ERROR,
        "compare",
        "unjudged",
        CASE_PROCESS,
    )
    assert passing.error.type == "Unjudged"


DECLARED = KnownFailure("tracked upstream", device="cpu")
ISSUE = KnownIssue("relu_*", "https://example.org/1", KnownFailure("triaged"))


# (what the run found, its expectation, status, reason)
EXPECTED_TABLE = [
    (compared(failing=["out"]), Expectation((DECLARED,)), R.XFAIL, "tracked upstream"),
    (compared(), Expectation((DECLARED,)), R.XPASS, "tracked upstream"),
    (facts(error=["compile", "crash"]), Expectation((DECLARED,)), R.XFAIL, "tracked upstream"),
    (facts(untested=[None, "no GPU"]), Expectation((DECLARED,)), R.SKIP, "no GPU"),
    (compared(), Expectation((KnownFailure("a race", strict=False),)), R.PASS, "known failure that shows in some"),
    (compared(failing=["out"]), Expectation((KnownFailure("npu only", device="npu"),)), R.FAIL, None),
    (compared(failing=["out"]), Expectation(issues=(ISSUE,)), R.XFAIL, "known issue: triaged"),
    (compared(failing=["out"]), Expectation(issues=(KnownIssue("other_*", "x", KnownFailure("no")),)), R.FAIL, None),
    # A symptom filter: only that class of failure is known.
    (
        compared(failing=["out"], casts_elided=True),
        Expectation(issues=(KnownIssue("*", "x", KnownFailure("class", symptom="precision-cast-elided")),)),
        R.XFAIL,
        "known issue: class",
    ),
    (
        compared(failing=["out"]),
        Expectation(issues=(KnownIssue("*", "x", KnownFailure("class", symptom="precision-cast-elided")),)),
        R.FAIL,
        None,
    ),
    # The declaration decides before the file.
    (compared(failing=["out"]), Expectation((DECLARED,), (ISSUE,)), R.XFAIL, "tracked upstream"),
]


@pytest.mark.parametrize("found, expectation, status, reason", EXPECTED_TABLE)
def test_the_expectation_turns_the_verdict_into_xfail_or_xpass(found, expectation, status, reason):
    verdict = decide(found, expectation, RUN)
    assert verdict.status == status
    assert (verdict.reason or None) is None if reason is None else verdict.reason.startswith(reason)


def test_a_harness_bug_is_never_the_declared_failure():
    bug = RunWords("relu_mlp", "cpu", harness_failed=True)
    verdict = decide(facts(error=["worker", "crash"]), Expectation((KnownFailure("declared"),)), bug)
    assert verdict.status == R.ERROR and "a harness bug" in verdict.notes[0]


def test_a_record_is_decided_once():
    record = R.CaseResult(
        case="relu_mlp",
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="training",
        status=None,
        versions={"torch": "2.13.0+cpu"},
    )
    record.facts = compared(failing=["out"], run_to_run=True)
    verdict = conclude(record, record.facts)
    assert (record.status, record.stage, record.symptom, verdict.rule) == (
        R.FAIL,
        "compare",
        "run-to-run",
        "divergence",
    )
    with pytest.raises(RuntimeError, match="decided once"):
        conclude(record, record.facts)
    assert "facts" not in record.to_dict()  # a results file holds the verdict, not what led to it


def test_an_overruled_pass_takes_back_the_case_processs_analyses():
    record = R.CaseResult(
        case="relu_mlp",
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="training",
        status=None,
        versions={"torch": "2.13.0+cpu"},
        diagnosis="run-to-run",
        reproduced=False,
        diverged_runs=[1],
        reason="x",
        first_divergent_kernel=R.Localization(answer=R.Answer.KERNEL, diverged=True, name="k"),
    )
    record.facts = compared(failing=["out"], run_to_run=True, judged=JudgedValues([], [], ["out"]))
    conclude(record, record.facts)
    assert (record.status, record.verdict_source, record.diagnosis, record.reproduced) == (
        R.PASS,
        OVERRULED,
        None,
        None,
    )
    assert record.first_divergent_kernel is None and record.reason is None


def test_an_overruled_failure_the_case_process_saw_too_keeps_its_diagnosis():
    record = R.CaseResult(
        case="relu_mlp",
        device="cpu",
        backend="inductor",
        dtype="float32",
        mode="training",
        status=None,
        versions={"torch": "2.13.0+cpu"},
        diagnosis="run-to-run",
        reproduced=False,
    )
    record.facts = compared(failing=["a"], run_to_run=True, judged=JudgedValues(["a", "b"], [], ["b"]))
    conclude(record, record.facts)
    assert (record.status, record.symptom, record.verdict_source) == (R.FAIL, "run-to-run", OVERRULED)
    assert record.diagnosis == "run-to-run"
    assert "where the case's process said fail (b)" in record.warnings[-1]


def test_a_declaration_by_mechanism_matches_the_runs_that_showed_it_and_no_pass():
    # The class of a failure, as the run's own rerun showed it (a record's `mechanism`): declared once for every
    # op, it turns those failures into xfail, leaves a failure without it failing, and a pass passing (a
    # passing run shows no mechanism: no xpass).
    by_class = Expectation((KnownFailure("seed 000's narrowing", mechanism="launcher-narrowing", strict=False),))
    shown = RunWords("opinfo-add-int64-s3-overlapping", "npu", "inductor", mechanism="launcher-narrowing")
    other = RunWords("opinfo-add-int64-s3-overlapping", "npu", "inductor", mechanism="fallback-layout")
    assert decide(compared(failing=["out0"]), by_class, shown).status == R.XFAIL
    assert decide(compared(failing=["out0"]), by_class, other).status == R.FAIL
    assert decide(compared(failing=["out0"]), by_class, RunWords("x", "npu")).status == R.FAIL
    assert decide(compared(), by_class, RunWords("x", "npu")).status == R.PASS
