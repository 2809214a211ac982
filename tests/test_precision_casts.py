"""A program that rounds on purpose (an explicit cast to float16/bfloat16) and an Inductor kernel that fuses the
cast and keeps the value unrounded: the run says so, names the kernel and the cast, and the config under which it
matches eager (`emulate_precision_casts`). The programs are `tests/precision_cases/casts.py`."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import records as R
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

CASE_DIR = str(Path(__file__).resolve().parent / "precision_cases")
ROOT = Path(__file__).resolve().parent.parent
# case -> the cast each program writes, as the diagnosis names it.
CASTS = {
    "cast_round_trip": "convert_element_type (float32 -> float16)",
    "cast_before_add": "convert_element_type (float32 -> bfloat16)",
    "cast_matmul_plus_bias": "convert_element_type (float32 -> bfloat16)",
}


@pytest.fixture(scope="module")
def cases():
    return load_registry([CASE_DIR], include_default=False).cases


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _removed_by_a_pass(record: R.CaseResult, cast: str) -> None:
    """The answer for a cast a graph pass removed before any kernel saw it (torch 2.11's `pointless_convert` folds
    a round trip; every torch folds a chain of two narrowing casts)."""
    assert record.diagnosis.startswith(
        f"an explicit cast to lower precision elided: the compiled program keeps in float32 what the program rounds "
        f"(aten._to_copy ({cast}) (no longer in the graphs Inductor lowered: a graph pass removed it)); with "
    ), record.diagnosis
    found = record.first_divergent_kernel
    assert (found.answer, found.stage) == (R.Answer.STAGE, "inductor_graph_passes"), found.line()
    assert found.reason.startswith(f"the program's explicit cast aten._to_copy ({cast}) is not in the graphs")
    assert "pointless_convert" in found.reason and found.reason.endswith("the program matches eager")
    if found.graph_pass:  # (a pass that ignores the switch: torch 2.11's pointless_convert, turned off beside it)
        assert "pointless_convert" in found.graph_pass
        assert f"with {found.graph_pass} turned off and emulate_precision_casts=True it matches" in record.diagnosis


@pytest.mark.parametrize("name", sorted(CASTS))
def test_an_elided_cast_is_said_with_its_kernel_and_the_config_that_keeps_it(cases, name):
    # Before, the fused kernel was named as a drift, "no single kernel wrong on exact inputs" (a stage on CUDA).
    record = run_case(cases[name], torch.float32, "inference", RunConfig(device=_device(), bisect=True))
    assert (record.status, record.symptom) == (R.FAIL, R.Symptom.PRECISION_CAST_ELIDED), record.summary()
    if name == "cast_round_trip" and "a graph pass removed it" in record.diagnosis:
        # torch 2.11 (seen on CUDA) folds x.half().float() into nothing; torch 2.13 keeps a narrowing round trip.
        return _removed_by_a_pass(record, "float32 -> float16")
    assert f"({CASTS[name]} in " in record.diagnosis and record.diagnosis.endswith(
        "emulate_precision_casts=True it matches eager"
    ), record.diagnosis
    found = record.first_divergent_kernel
    assert found.answer in (R.Answer.KERNEL, R.Answer.DRIFT) and found.name in record.diagnosis, found.line()
    assert found.reason.startswith(f"it fuses the explicit cast {CASTS[name]} and keeps the value unrounded")
    assert "compiled with emulate_precision_casts=True the program matches eager" in found.reason


def test_a_cast_a_graph_pass_removed_is_said_removed_the_same_on_a_cold_and_a_warm_cache(cases):
    # x.to(bfloat16).to(float16) becomes one cast to float16: the cast left in the graph is not the one elided.
    for _ in range(2):  # (the second run's graphs come from the caches the first filled)
        record = run_case(
            cases["cast_chain_folded"], torch.float32, "inference", RunConfig(device=_device(), bisect=True)
        )
        assert (record.status, record.symptom) == (R.FAIL, R.Symptom.PRECISION_CAST_ELIDED), record.summary()
        _removed_by_a_pass(record, "float32 -> bfloat16")


def test_a_program_without_an_explicit_cast_is_not_said_to_elide_one(cases):
    fused = load_registry(include_default=True).cases["relu_mlp"]
    record = run_case(fused, torch.float32, "inference", RunConfig(inject="fault-offset@0"))
    assert record.status == R.FAIL and record.symptom == R.Symptom.DIVERGENCE
    assert "cast" not in (record.diagnosis or "")


def test_a_team_declares_the_class_known_in_one_line(tmp_path):
    known = tmp_path / "known.toml"
    known.write_text(
        '[[issue]]\ncase = "cast_*"\nsymptom = "precision-cast-elided"\nlink = "https://example.org/casts"\n'
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--case-path",
            CASE_DIR,
            "--device",
            _device(),
            "--known-issues",
            str(known),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("XFAIL") == 4 and "known issue" in result.stdout, result.stdout


MODULE = __name__.rsplit(".", 1)[-1]  # (a pattern's label names the module that registered its handler)


@pytest.fixture
def round_trip_folded_whatever_the_switch():
    """Two rewrites that fold `x.half().float()` into `x` and ignore `emulate_precision_casts`, as torch 2.11's
    `pointless_convert` does (torch 2.13's honours the switch): one among the joint graph's patterns, one among
    the post-grad ones, which folds what the first leaves when it is off. Registered for one test, removed after."""
    from torch._inductor.fx_passes.joint_graph import patterns as joint_patterns
    from torch._inductor.fx_passes.post_grad import pass_patterns
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, register_graph_pattern

    from harness.inductor_compat import compile_caches_off

    convert = torch.ops.prims.convert_element_type.default
    round_trip = CallFunction(convert, CallFunction(convert, KeywordArg("x"), torch.float16), torch.float32)
    passes = (joint_patterns, pass_patterns[1])
    before = [{key: list(entries) for key, entries in p.patterns.items()} for p in passes]

    def fold(match, x):
        match.output_node().replace_all_uses_with(x)
        match.erase_nodes()

    def fold_in_joint_graph(match, x):
        fold(match, x)

    def fold_after_grad(match, x):
        fold(match, x)

    register_graph_pattern(round_trip, pass_dict=joint_patterns)(fold_in_joint_graph)
    register_graph_pattern(round_trip, pass_dict=pass_patterns[1])(fold_after_grad)
    with compile_caches_off():  # (the patterns are no part of a cache key)
        yield [
            f"joint_graph_passes: pattern round_trip_folded_whatever_the_switch.<locals>.{fold_in_joint_graph.__name__} ({MODULE})",
            f"post_grad_passes: pattern round_trip_folded_whatever_the_switch.<locals>.{fold_after_grad.__name__} ({MODULE})",
        ]
    for graph_pass, saved in zip(passes, before):
        graph_pass.patterns.clear()
        graph_pass.patterns.update(saved)


def test_passes_that_remove_a_cast_whatever_the_switch_are_named_and_turned_off_beside_it(
    cases, round_trip_folded_whatever_the_switch
):
    # Seen on an H100 (torch 2.11): with the switch alone x.half().float() still folded, and the answer was "no
    # single Inductor graph pass is to blame"; with that pass off, a second one folded it (the next in line).
    record = run_case(cases["cast_round_trip"], torch.float32, "inference", RunConfig(device=_device(), bisect=True))
    assert (record.status, record.symptom) == (R.FAIL, R.Symptom.PRECISION_CAST_ELIDED), record.summary()
    found = record.first_divergent_kernel
    joint, post_grad = round_trip_folded_whatever_the_switch
    assert found.answer == R.Answer.STAGE and found.stage == "inductor_graph_passes", found.line()
    # Both named, in the order they fold it (torch 2.11's own pointless_convert comes first there).
    assert joint in found.graph_pass and found.graph_pass.endswith(f" and {post_grad}"), found.line()
    assert "graph passes removed it" in found.reason
    assert f"({found.graph_pass}, which the switch does not stop; each removes it where those before it are off)" in (
        found.reason
    )
    assert record.diagnosis.endswith(
        f"with {found.graph_pass} turned off and emulate_precision_casts=True it matches eager"
    ), record.diagnosis
