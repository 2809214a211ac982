"""The plain values that cross processes: a run's configuration and what a run found, as JSON both ways."""

import json

import pytest

from harness import records as R
from harness.records.facts import JudgedValues, RunFacts
from harness.records.run_config import RunConfig


def test_a_run_configuration_crosses_as_json_a_reader_can_read():
    config = RunConfig(
        device="npu",
        npu_backend="triton_experimental",
        compile_options={"max_autotune_gemm": False, "split_reductions": 1, "shape": (1, 2), "name": "x"},
        inject="boundary-downcast",
        bisect="always",
        case_paths=("a", "b"),
        dynamic_strict=True,
    )
    text = config.to_json()
    data = json.loads(text)
    assert data["device"] == "npu" and data["bisect"] == "always" and data["case_paths"] == ["a", "b"]
    assert data["compile_options"]["shape"] == {"python": "(1, 2)"}  # JSON would make the tuple a list
    assert RunConfig.from_json(text) == config


def test_a_configuration_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a run configuration"):
        RunConfig.from_json(json.dumps({"device": "cpu", "evil": 1}))
    with pytest.raises(ValueError):
        RunConfig.from_json(json.dumps({"bisect": "sometimes"}))


def test_what_a_run_found_crosses_beside_its_record_and_never_into_a_results_file():
    record = R.CaseResult(case="c", device="cpu", backend="inductor", dtype="float32", mode="inference", status=None)
    record.facts.compared, record.facts.failing = True, ["out"]
    record.facts.judged = JudgedValues(["out"], [], [])
    sent = json.loads(json.dumps(record.to_dict(with_facts=True)))
    assert R.CaseResult.from_dict(sent).facts == record.facts
    assert "facts" not in record.to_dict()
    assert R.CaseResult.from_dict(record.to_dict()).facts == RunFacts()


@pytest.mark.parametrize(
    "facts",
    [["not", "a", "mapping"], {"verdict": "pass"}, {"error": "crash"}, {"untested": [None, "a", "b"]}],
)
def test_facts_a_case_forged_are_refused(facts):
    data = R.CaseResult(case="c", device="cpu", backend="i", dtype="float32", mode="inference", status=None).to_dict()
    with pytest.raises((ValueError, TypeError)):
        R.CaseResult.from_dict({**data, "facts": facts})
