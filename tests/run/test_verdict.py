"""The verdict policy: no silent pass (non-finite values, complex, non-tensor results, mutations, leaked
config), and no false alarm from bookkeeping. Programs differ only when compiled, through
`torch.compiler.is_compiling()`, so every expected figure is known exactly."""

import json
import math

import pytest
import torch
from torch import nn

from harness import records as R
from harness.judge.compare import VerdictPolicy, compare_leaves, compare_tensors
from harness.inputs import contiguous
from harness.registry import Case, Program, load_registry
from harness.run.case import RunConfig, run_case

EAGER = RunConfig(backend="eager")  # Dynamo traces, nothing is lowered: the policy alone is under test


def run(fn, inputs, dtype=torch.float32, mode="inference", config=EAGER, **case):
    return run_case(
        Case(name="probe_case", build=lambda d: Program(fn, inputs), dtypes=(dtype,), modes=(mode,), **case),
        dtype,
        mode,
        config,
    )


def compiled_only(compiled, eager):
    def program(x):
        return compiled(x) if torch.compiler.is_compiling() else eager(x)

    return program


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "how, bad",
    [
        ("one", 1),
        ("all", 4096),
        ("sign", 4096),
    ],
)
def test_inf_where_eager_differs_fails_whatever_the_reference(dtype, how, bad):
    def eager(x):
        return x * 2 if how != "sign" else torch.full_like(x, float("inf"))

    def compiled(x):
        y = x * 2
        if how == "one":
            return torch.cat([y.flatten()[:-1], torch.full((1,), float("inf"), dtype=y.dtype)]).view_as(y)
        if how == "all":
            return torch.full_like(y, float("inf"))
        return torch.full_like(y, float("-inf"))

    record = run(compiled_only(compiled, eager), [contiguous((64, 64))], dtype, reference="fp64")
    (out,) = record.outputs
    assert record.status == R.FAIL and not out.passed
    assert (out.bad, out.inf_mismatch) == (bad, bad)
    assert "inf_mismatch=" in record.summary() and out.max_abs == math.inf


def overflows_in_float16(x):
    return x * 100 * 1000 / 1000  # eager rounds 1e5 to inf in float16; Inductor keeps the product in float32


@pytest.mark.parametrize("strict_eager", [False, True])
def test_eager_alone_overflowing_is_decided_by_the_float64_reference(strict_eager):
    case = Case(
        name="overflow",
        build=lambda d: Program(overflows_in_float16, [contiguous((8, 8), fill="ones")]),
        dtypes=(torch.float16,),
        modes=("inference",),
    )
    record = run_case(case, torch.float16, "inference", RunConfig(strict_eager=strict_eager))
    (out,) = record.outputs
    assert (out.inf_mismatch, out.eager_nonfinite, record.reference) == (64, 64, "eager+fp64")
    assert "eager's own float16 arithmetic overflowed" in out.note
    if strict_eager:
        assert record.status == R.FAIL and not out.passed and "strict eager" in out.note
    else:
        assert record.status == R.PASS and out.passed_by == R.PASSED_BY_EAGER_NONFINITE and out.max_abs == math.inf


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    "eager, compiled, reference, passes",
    [
        ([1.0, INF, 3.0], [1.0, 60000.0, 3.0], [1.0, 60000.0, 3.0], True),  # eager overflowed: 60000 fits float16
        ([1.0, NAN, 3.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], True),  # eager made inf - inf, float64 did not
        ([1.0, INF, 3.0], [1.0, 65504.0, 3.0], [1.0, 70000.0, 3.0], False),  # 70000 overflows float16: inf is right
        ([1.0, INF, 3.0], [1.0, 50000.0, 3.0], [1.0, 60000.0, 3.0], False),  # compiled is finite, but wrong
        ([1.0, INF, 3.0], [1.5, 60000.0, 3.0], [1.0, 60000.0, 3.0], False),  # another element misses its tolerance
        (
            [1.0, INF, 3.0],
            [1.0, 60000.0, 3.0078125],
            [1.0, 60000.0, 3.0078125],
            True,
        ),  # ... as eager rounded it (rule 3)
        ([1.0, 2.0, 3.0], [1.0, INF, 3.0], [1.0, 2.0, 3.0], False),  # compiled overflowed: never eager's fault
    ],
)
def test_a_nonfinite_mismatch_passes_only_where_eager_alone_overflowed(eager, compiled, reference, passes):
    as_half = lambda values: torch.tensor(values, dtype=torch.float16)  # noqa: E731
    without = compare_tensors("out", as_half(compiled), as_half(eager))
    assert not without.passed and without.nan_mismatch + without.inf_mismatch == 1
    # The reference is asked for exactly when eager alone is non-finite where they differ.
    assert VerdictPolicy().wants_reference(without) == (without.eager_nonfinite == 1) == (not math.isfinite(eager[1]))
    result = compare_tensors(
        "out", as_half(compiled), as_half(eager), reference=torch.tensor(reference, dtype=torch.float64)
    )
    assert result.passed == passes and (result.passed_by == R.PASSED_BY_EAGER_NONFINITE) == passes


def zero_over_zero(x):
    return (x * 0) / (x * 0)  # NaN: float64 has no value here either


def minus_one_over_zero(x):
    return -(x * 0 + 1) / (x * 0)  # -inf: another rounding of the same undefined value


@pytest.mark.parametrize("generated", [False, True])
def test_nonfinite_values_of_another_kind_where_float64_has_no_value_are_no_verdict(generated):
    """A gradient at a singular point (qr of a rank-deficient matrix): eager NaN, compiled -inf, float64 NaN."""
    record = run(compiled_only(minus_one_over_zero, zero_over_zero), [contiguous((4, 4))], generated=generated)
    why = "out0 is undefined where eager and compiled differ"
    if generated:  # a sample no arithmetic defines tests nothing
        assert record.status == R.SKIP and why in record.reason
    else:  # a hand-written case is judged, with the warning
        assert record.status == R.FAIL and any(why in w for w in record.warnings)


@pytest.mark.parametrize(
    "compiled, eager, inputs",
    [
        # A NaN input's NaN must come out: compiled's -inf there (a NaN lost) is judged.
        (lambda x: torch.where(x.isnan(), float("-inf"), x), lambda x: x * 1, [torch.full((4, 4), float("nan"))]),
        # float64 and eager agree on -inf; compiled's NaN is judged.
        (zero_over_zero, minus_one_over_zero, [contiguous((4, 4))]),
    ],
)
def test_nonfinite_values_with_a_defined_answer_are_judged(compiled, eager, inputs):
    record = run(compiled_only(compiled, eager), inputs, generated=True)
    assert record.status == R.FAIL and not any("undefined" in w for w in record.warnings)
    assert record.outputs[0].nan_mismatch == 16


def test_nan_and_inf_in_the_same_places_pass():
    def program(x):
        return torch.where(x > 0, x.log(), torch.tensor(float("nan"))) + torch.where(x > 1, float("inf"), 0.0)

    record = run(program, [contiguous((32, 32))])
    assert record.status == R.PASS and record.outputs[0].nan_mismatch == 0 == record.outputs[0].inf_mismatch


def test_complex_results_are_compared_in_both_parts():
    off = run(compiled_only(lambda x: (x * 2) + 1j, lambda x: x * 2), [contiguous((16, 16))], torch.complex64)
    (out,) = off.outputs
    assert off.status == R.FAIL and (out.bad, out.numel) == (256, 256) and out.max_abs == pytest.approx(1.0)
    same = run(lambda x: x * (2 + 1j), [contiguous((16, 16))], torch.complex64)
    assert same.status == R.PASS and same.outputs[0].bad == 0 and same.outputs[0].rtol == 1.3e-6


def test_a_complex_nan_in_one_part_only_is_a_mismatch():
    expected = torch.tensor([1 + 1j, complex(float("nan"), 0.0)])
    actual = torch.tensor([1 + 1j, complex(0.0, float("nan"))])
    result = compare_tensors("z", actual, expected)
    assert (result.bad, result.nan_mismatch) == (1, 1) and not result.passed


def test_python_scalars_and_none_are_compared_by_their_path():
    def eager(x):
        return {"t": x * 2, "n": 7, "e": [None, 1.5, "tag"]}

    def compiled(x):
        return {"t": x * 2, "n": 8, "e": [None, 1.5, "tag"]}

    record = run(compiled_only(compiled, eager), [contiguous((4,))])
    by_name = {o.name: o for o in record.outputs}
    assert record.status == R.FAIL
    assert by_name["out['n']"].rule == "equal" and not by_name["out['n']"].passed
    assert by_name["out['e'][0]"].passed and by_name["out['e'][2]"].passed and by_name["out0"].passed
    assert "int out['n']: compiled 8 != eager 7 [equal FAILED: a non-tensor result equals eager's]" in record.summary()


def test_a_run_that_compares_nothing_is_not_a_pass():
    record = run(lambda x: None, [contiguous((4,))])
    assert (record.status, record.symptom) == (R.ERROR, R.Symptom.NOTHING_COMPARED)


def test_nested_results_empty_and_zero_dim_tensors_pass():
    def program(x):
        return {"empty": x[:0] * 2, "scalar": x.sum(), "deep": {"a": (x + 1, 3)}}

    record = run(program, [contiguous((5, 3))])
    assert record.status == R.PASS
    assert [o.name for o in record.outputs] == ["out0", "out1", "out2", "out['deep']['a'][1]"]
    assert record.outputs[0].numel == 0 and record.outputs[1].shape == []


def test_leaf_comparison_figures():
    assert compare_leaves("x", 1.0, 1.0 + 1e-9).passed
    assert not compare_leaves("x", 1, 1.0).passed  # an int where eager gives a float
    assert compare_leaves("x", float("nan"), float("nan")).passed
    assert not compare_leaves("x", "a", "b").passed


def test_a_dropped_in_place_update_fails_naming_the_input():
    def program(x):
        if not torch.compiler.is_compiling():
            x.add_(1.0)
        return x.sum() * 0

    record = run(program, [contiguous((8,), fill="ones")])
    assert record.status == R.FAIL
    (mutated,) = [o for o in record.outputs if not o.passed]
    assert mutated.name == "mutated_in0" and mutated.samples[0].actual == 1.0 and mutated.samples[0].expected == 2.0


class ConvBatchNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


def test_batch_norm_running_stats_are_judged_by_value_not_version_counters():
    torch.manual_seed(0)
    record = run_case(
        Case(
            name="convbn",
            build=lambda d: Program(ConvBatchNorm().to(d), [contiguous((4, 3, 16, 16), requires_grad=True)]),
            dtypes=(torch.bfloat16,),
            modes=("training",),
        ),
        torch.bfloat16,
        "training",
        RunConfig(),
    )
    assert record.status == R.PASS, record.summary()
    names = [o.name for o in record.outputs]
    assert "buffer.norm.running_mean" in names and "buffer.norm.running_var" in names


def sets_suppress_errors(dtype):
    torch._dynamo.config.suppress_errors = True
    return Program(lambda x: x + 1, [contiguous((4,))])


def test_global_config_a_case_changes_is_restored_and_said():
    before = torch._dynamo.config.suppress_errors
    leaking = run_case(Case(name="leaky", build=sets_suppress_errors), torch.float32, "inference", EAGER)
    assert torch._dynamo.config.suppress_errors == before
    assert any("torch._dynamo.config.suppress_errors" in w for w in leaking.warnings)
    assert "warning: the case changed global torch state" in leaking.summary()


def leaks_process_wide_state(dtype):
    import os
    import signal

    torch.set_default_device("meta")
    torch.set_anomaly_enabled(True)
    torch.set_autocast_enabled("cpu", True)
    os.environ["HARNESS_TEST_LEAKED"] = "1"
    os.umask(0o077)
    os.chdir("/")
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    return Program(lambda x: x + 1, [contiguous((4,))])


def test_process_wide_state_a_case_leaves_is_restored_before_the_next_case_and_said():
    import os
    import signal

    cwd, umask = os.getcwd(), os.umask(0o022)
    os.umask(umask)
    leaking = run_case(Case(name="leaky", build=leaks_process_wide_state), torch.float32, "inference", EAGER)
    said = " ".join(leaking.warnings)
    for name in (
        "torch.get_default_device()",
        "torch.is_anomaly_enabled()",
        "torch.is_autocast_enabled('cpu')",
        "environment variable HARNESS_TEST_LEAKED",
        "umask",
        "cwd",
        "signal SIGUSR2",
    ):
        assert name in said, said
    assert (torch.get_default_device(), torch.is_anomaly_enabled(), torch.is_autocast_enabled("cpu")) == (
        torch.device("cpu"),
        False,
        False,
    )
    assert "HARNESS_TEST_LEAKED" not in os.environ and os.getcwd() == cwd and os.umask(umask) == umask
    assert signal.getsignal(signal.SIGUSR2) != signal.SIG_IGN
    after = run_case(
        Case(name="next", build=lambda d: Program(lambda x: x * 3, [contiguous((4,))])),
        torch.float32,
        "inference",
        EAGER,
    )
    assert after.status == R.PASS and after.warnings == [], after.summary()


@torch._dynamo.register_backend
def harness_test_broken_backend(gm, example_inputs):
    raise RuntimeError("this backend always fails")


BROKEN = RunConfig(backend="harness_test_broken_backend")


def test_a_leaked_suppress_errors_cannot_turn_the_next_compile_failure_into_a_pass():
    run_case(Case(name="leaky", build=sets_suppress_errors), torch.float32, "inference", EAGER)
    record = run_case(
        Case(name="next", build=lambda d: Program(lambda x: x * 3, [contiguous((4,))])),
        torch.float32,
        "inference",
        BROKEN,
    )
    assert (record.status, record.stage) == (R.ERROR, "compile") and "always fails" in record.error.message


def test_a_compiled_run_that_compiled_nothing_is_an_error():
    # The case itself asks Dynamo to fall back to eager when the backend fails: nothing was compiled.
    record = run_case(Case(name="nothing", build=sets_suppress_errors), torch.float32, "inference", BROKEN)
    assert (record.status, record.stage, record.symptom) == (R.ERROR, "compile", R.Symptom.NOTHING_COMPILED)
    declared = run_case(
        Case(name="nothing", build=sets_suppress_errors, compiles=False), torch.float32, "inference", BROKEN
    )
    assert declared.status == R.PASS


def test_a_scalar_rounded_differently_is_visible_and_strict_eager_fails_it():
    # Eager rounds 0.1 to bf16 before subtracting; the compiled program keeps it in float32.
    def program(x):
        if torch.compiler.is_compiling():
            return (x.float() - 0.1).to(x.dtype)
        return x - torch.tensor(0.1, dtype=x.dtype)

    inputs = [contiguous((4096,), fill="rand", low=0.0, high=0.2)]
    lenient = run(program, inputs, torch.bfloat16)
    strict = run(program, inputs, torch.bfloat16, config=RunConfig(backend="eager", strict_eager=True))
    assert lenient.status == R.PASS and "closer to float64" in lenient.outputs[0].note
    # A passing run's notes are for -v and the report, not the default console.
    assert "note: out0: differs from eager beyond tolerance" in lenient.summary(verbose=True)
    assert "note:" not in lenient.summary()
    assert strict.status == R.FAIL and strict.outputs[0].rule == "rmse_vs_fp64"


def test_the_float64_reference_runs_programs_that_make_their_own_float_tensors():
    def program(x, index):
        out = torch.zeros(16, 8, device=x.device)
        out.index_add_(0, index, x)
        return out if not torch.compiler.is_compiling() else out + 1

    record = run(program, [contiguous((64, 8)), contiguous((64,), dtype=torch.int64, fill="randint", low=0, high=16)])
    assert record.status == R.FAIL and record.reference == "eager+fp64" and not record.warnings


def test_results_json_is_strict(tmp_path):
    record = run(compiled_only(lambda x: torch.full_like(x, float("inf")), lambda x: x), [contiguous((4,))])
    path = tmp_path / "r.json"
    R.write_results(path, [record])
    text = path.read_text()
    json.loads(text, parse_constant=lambda token: pytest.fail(f"non-standard JSON token {token}"))
    _, (back,) = R.read_results(path)
    assert back.outputs[0].max_abs == math.inf and back.status == R.FAIL


def test_reordering_controls_still_pass_by_the_rmse_rule():
    case = load_registry().cases["layernorm_gelu"]
    record = run_case(case, torch.bfloat16, "training", RunConfig())
    assert record.status == R.PASS and any(o.rule == "rmse_vs_fp64" and o.note for o in record.outputs)


def _refuses_strided_float64(x, w):
    # As cuDNN's batch norm in float64: a non-contiguous weight is refused ("Expected contiguous tensor").
    if w.dtype == torch.float64 and not w.is_contiguous():
        raise RuntimeError("Expected contiguous tensor, but got non-contiguous tensor for argument 'weight'")
    return x * w


def test_a_reference_refused_on_a_layout_is_made_again_on_contiguous_copies():
    from harness.inputs import contiguous, permuted
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    case = Case(
        name="strided_weight",
        reference="fp64",
        build=lambda d: Program(_refuses_strided_float64, [contiguous((6, 4)), permuted((4, 6), (1, 0))]),
    )
    record = run_case(case, torch.float16, "inference", RunConfig())
    assert record.status == R.PASS and record.reference == "eager+fp64"
    assert any("made on contiguous copies of the same values" in w for w in record.warnings), record.warnings
    assert not any("judged by tolerance alone" in w for w in record.warnings)
