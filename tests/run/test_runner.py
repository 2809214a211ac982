import pytest
import torch

from harness import records as R
from harness.inductor_compat import compile_caches_off
from harness.registry import Case, KnownFailure, Program, load_registry
from harness.inputs import contiguous
from harness.run.case import RunConfig, run_case
from harness.judge.known_failures import Expectations

EAGER = RunConfig(backend="eager")  # the runner's own logic, without paying for Inductor


def simple_case(build=None, **kw):
    return Case(name="simple", build=build or (lambda d: Program(lambda x: x + 1, [contiguous((4,))])), **kw)


def test_a_correct_program_in_another_order_passes_by_the_rmse_rule():
    """bf16 layer norm + GELU, forward and backward, compiled by Inductor on the CPU."""
    case = load_registry().cases["layernorm_gelu"]
    record = run_case(case, torch.bfloat16, "training", RunConfig())
    assert record.status == R.PASS, record.summary()
    by_name = {o.name: o for o in record.outputs}
    assert set(by_name) >= {"out0", "grad_in0", "grad.norm.weight", "grad.proj.weight"}
    reordered = [o for o in record.outputs if o.bad]
    assert reordered, "expected some elements beyond bf16's assert_close tolerance"
    assert all(o.rule == "rmse_vs_fp64" and o.passed for o in reordered)
    assert record.reference == "eager+fp64"


def test_build_error_is_a_record_with_its_stage():
    def broken(dtype):
        raise ValueError("bad shapes")

    record = run_case(simple_case(broken), torch.float32, "inference", EAGER)
    assert (record.status, record.stage, record.symptom) == (R.ERROR, "build", "crash")
    assert record.error.type == "ValueError" and "bad shapes" in record.error.traceback


def test_a_harness_bug_on_one_case_is_an_error_record_not_a_crash(monkeypatch):
    import harness.run.sides as runner

    def broken_comparison(*args, **kwargs):
        raise NotImplementedError('"equal_cpu" not implemented for some dtype')

    monkeypatch.setattr(runner, "compare_results", broken_comparison)
    monkeypatch.setattr(runner, "all_pass", broken_comparison)  # the eager repeat's check, outside any stage
    declared = simple_case(known_failures=(KnownFailure("a real bug of this program"),))
    record = run_case(declared, torch.float32, "inference", EAGER, Expectations().for_case(declared))
    assert (record.status, record.stage, record.symptom) == (R.ERROR, "worker", "crash")  # not the declared xfail
    assert record.error.type == "NotImplementedError"
    assert record.error.message.startswith("the harness failed on this case")
    assert "broken_comparison" in record.error.traceback
    assert any("a harness bug, not the declared failure" in w for w in record.warnings)


def settled(case):
    """A run of the case as the pool hands it over: decided with its declared failure."""
    return run_case(case, torch.float32, "inference", EAGER, Expectations().for_case(case))


def test_run_case_gives_the_verdict_as_it_is_unless_given_the_expectation():
    declared = simple_case(known_failures=(KnownFailure("fixed already?", backend="eager"),))
    record = run_case(declared, torch.float32, "inference", EAGER)
    assert (record.status, record.reason) == (R.PASS, None)
    assert run_case(declared, torch.float32, "inference", EAGER, Expectations().for_case(declared)).status == R.XPASS
    with pytest.raises(RuntimeError, match="decided once"):
        record.conclude(R.FAIL)


def test_known_failure_is_strict():
    failing = Case(
        name="fails",
        build=lambda d: Program(lambda x: x.nonexistent(), [contiguous((4,))]),
        known_failures=(KnownFailure("tracked upstream", device="cpu"),),
    )
    assert settled(failing).status == R.XFAIL
    passing = simple_case(known_failures=(KnownFailure("fixed already?", backend="eager"),))
    record = settled(passing)
    assert record.status == R.XPASS and record.reason == "fixed already?"
    other_device = simple_case(known_failures=(KnownFailure("npu only", device="npu"),))
    assert settled(other_device).status == R.PASS


def test_a_known_failure_seen_in_some_runs_only_keeps_a_pass():
    flaky = KnownFailure("a race between thread blocks", backend="eager", strict=False)
    record = settled(simple_case(known_failures=(flaky,)))
    assert record.status == R.PASS and "some runs only" in record.reason and "a race" in record.reason
    failing = Case(
        name="fails", build=lambda d: Program(lambda x: x.nonexistent(), [contiguous((4,))]), known_failures=(flaky,)
    )
    assert settled(failing).status == R.XFAIL


@pytest.mark.parametrize("frozen", [False, True])
def test_cuda_runs_in_full_float32_and_gives_the_users_settings_back(monkeypatch, frozen):
    """Also once torch's test utilities (which OpInfo imports) froze the cuDNN flags against assignment."""
    from harness.devices import get_device
    from harness.inductor_compat.torch_state import backend_flags_mutable

    with backend_flags_mutable():
        torch.backends.cudnn.allow_tf32 = True  # torch's default: cuDNN may pick TF32 for a float32 convolution
    if frozen:  # what torch.backends.disable_global_flags() does
        monkeypatch.setitem(torch.backends.flags_frozen.__globals__, "__allow_nonbracketed_mutation_flag", False)
        with pytest.raises(RuntimeError, match="disable_global_flags"):
            torch.backends.cudnn.allow_tf32 = True
    with get_device("cuda").numerics():
        assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False
    assert torch.backends.cudnn.allow_tf32 is True
    with get_device("cpu").numerics():
        assert torch.backends.cudnn.allow_tf32 is True


def test_missing_device_or_package_is_a_skip_that_says_how_to_fix_it():
    if not torch.cuda.is_available():
        record = run_case(simple_case(), torch.float32, "inference", RunConfig(device="cuda"))
        assert record.status == R.SKIP and "CUDA" in record.reason
    record = run_case(simple_case(), torch.float32, "inference", RunConfig(device="npu"))
    assert record.status == R.SKIP and "torch_npu" in record.reason
    needs = simple_case(requires=("a_package_that_is_not_there",))
    record = run_case(needs, torch.float32, "inference", EAGER)
    assert record.status == R.SKIP and "a_package_that_is_not_there" in record.reason


def test_training_compares_input_and_parameter_gradients():
    module = torch.nn.Linear(4, 3)
    case = Case(
        name="lin", build=lambda d: Program(module, [contiguous((2, 4), requires_grad=True)]), modes=("training",)
    )
    record = run_case(case, torch.float32, "training", EAGER)
    assert record.status == R.PASS
    assert [o.name for o in record.outputs] == ["out0", "grad_in0", "grad.weight", "grad.bias"]


def test_input_mutations_are_compared():
    def bump(x):
        x.add_(1)
        return x.sum()

    case = Case(name="mut", build=lambda d: Program(bump, [contiguous((4,))]))
    record = run_case(case, torch.float32, "inference", EAGER)
    assert [o.name for o in record.outputs] == ["out0", "mutated_in0"]


def test_repro_command_names_the_run():
    record = run_case(simple_case(), torch.float32, "inference", RunConfig(backend="eager", inject="fault-scale@0"))
    assert (
        record.command
        == "python -m harness run simple --device cpu --dtype float32 --mode inference --backend eager --inject fault-scale@0"
    )


class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return (self.linear(x) + torch.rand(4)).sum()


def test_train_step_compares_loss_gradients_and_updated_parameters():
    case = Case(
        name="step", build=lambda d: Program(torch.nn.Linear(4, 2), [contiguous((3, 4))]), modes=("train_step",)
    )
    record = run_case(case, torch.float32, "train_step", EAGER)
    assert record.status == R.PASS
    assert [o.name for o in record.outputs] == ["loss", "grad.weight", "param.weight", "grad.bias", "param.bias"]


@pytest.mark.parametrize("bisect", [None, "on-failure"])
def test_a_compiled_divergence_that_does_not_come_back_is_a_run_to_run_failure(monkeypatch, bisect):
    """The compiled run diverges, its retry passes; with --bisect, localization's first run is that retry.
    Eager ran twice alike, so a compiled result that changes between runs is the compiler's bug: a failure."""
    import harness.run.sides as runner

    made = []

    def faulty_first_run_only(name):
        made.append(name)
        return runner_make_handler(name) if len(made) == 1 else (lambda launch: launch.run())

    runner_make_handler = runner.make_handler
    monkeypatch.setattr(runner, "make_handler", faulty_first_run_only)
    # Lowered in this process, its facts are known: a cache entry without them (another process's) would cost
    # one more run, lowered again for the probe.
    with compile_caches_off():
        record = run_case(
            load_registry().cases["relu_mlp"],
            torch.float32,
            "inference",
            RunConfig(inject="fault-offset@0", bisect=bisect),
        )
    assert (record.status, record.symptom, record.reproduced) == (R.FAIL, "run-to-run", False)
    assert record.diverged_runs == [1]
    assert "run 1 diverged, run 2 (no recompilation) passed" in record.diagnosis
    assert record.first_divergent_kernel is None
    # The compiled run and one more (no separate retry before localizing), then the program loaded afresh and run
    # twice: a divergence of first launches would come back on the first of those.
    assert len(made) == 4


def test_a_divergence_localized_is_retried_by_the_probe_run_itself(monkeypatch):
    import harness.run.sides as runner

    made = []
    runner_make_handler = runner.make_handler
    monkeypatch.setattr(runner, "make_handler", lambda name: made.append(name) or runner_make_handler(name))
    # Caches off: a cache entry another version of the harness wrote (its lowering facts not this version's) is
    # lowered again, one run more.
    with compile_caches_off():
        record = run_case(
            load_registry().cases["relu_mlp"],
            torch.float32,
            "inference",
            RunConfig(inject="fault-offset@0", bisect="on-failure"),
        )
    assert (record.status, record.reproduced, record.diverged_runs) == (R.FAIL, True, [1, 2])
    assert record.first_divergent_kernel.answer == R.Answer.KERNEL
    # The compiled run, the probe run (also the retry), and the run that makes the kernel's outputs eager.
    assert len(made) == 3


def test_two_eager_runs_that_differ_are_their_own_status():
    case = Case(name="noisy", build=lambda d: Program(Noisy(), [contiguous((3, 4))]), modes=("train_step",))
    record = run_case(case, torch.float32, "train_step", EAGER)
    assert (record.status, record.symptom) == (R.NONDETERMINISTIC, "nondeterminism")
    assert "two eager runs differ" in record.diagnosis and "loss" in record.diagnosis


def test_two_eager_runs_that_differ_by_summation_noise_keep_their_verdict():
    """As eager's atomic adds do (attention backward on a GPU): its second run differs from its first by the
    rounding of a sum in another order, here in 10 of 1000 elements; the verdict stands, with a warning."""
    calls = [0]

    def varying_order(x):
        calls[0] += 1
        return x * 1.0 + (1e-4 * (torch.arange(1000) < 10) if calls[0] == 2 else 0.0)

    case = Case(name="atomics", build=lambda d: Program(varying_order, [contiguous((1000,))]), modes=("inference",))
    record = run_case(case, torch.float32, "inference", EAGER)
    assert record.status == R.PASS, record.diagnosis
    assert any("two eager runs differ within float summation noise (out0)" in w for w in record.warnings)


def test_torch_structured_tracing_is_off_unless_asked(monkeypatch):
    """Without TORCH_TRACE, torch's lazy trace handler must not stay behind the harness's quieter level:
    while a handler is attached, every compile event is serialized to JSON that nobody reads."""
    import logging

    from harness.inductor_compat import quiet_torch_logging

    monkeypatch.delenv("TORCH_TRACE", raising=False)
    trace = logging.getLogger("torch.__trace")
    lazy = type("LazyTraceHandler", (logging.Handler,), {"emit": lambda self, record: None})()
    monkeypatch.setattr(trace, "handlers", [lazy])
    quiet_torch_logging()
    assert lazy not in trace.handlers and trace.level == logging.WARNING


def _scatter_into_overlapping(x, src):
    return torch.select_scatter(x, src, 0, 0)


def _overlapping_case(generated):
    from harness.inputs import contiguous, strided
    from harness.registry import Case, Program

    # Eager's select_scatter allocates its result with the input's strides, elements shared, and writes it.
    return Case(
        name="scatter_into_overlapping",
        generated=generated,
        dtypes=(torch.int64,),
        build=lambda d: Program(
            _scatter_into_overlapping, [strided((5, 5, 5), (2, 1, 3)), contiguous((5, 5), fill="ones")]
        ),
    )


@pytest.mark.parametrize("generated", [True, False])
def test_an_eager_result_whose_elements_overlap_is_no_reference(generated):
    from harness import records as R
    from harness.run.case import RunConfig, run_case

    record = run_case(_overlapping_case(generated), torch.int64, "inference", RunConfig())
    said = "into fresh memory whose elements overlap"
    if generated:  # a generated sample gets a skip with the reason
        assert record.status == R.SKIP and record.reason.startswith("eager wrote its result") and said in record.reason
    else:  # a hand-written case is still judged, with the warning in its record
        assert any(said in w for w in record.warnings)


@pytest.mark.parametrize("generated", [True, False])
def test_a_broadcast_gradient_is_a_reference_without_a_warning(generated):
    """The gradient of a sum is an expanded view (stride 0): its elements share memory, and every one of them has
    one well-defined value. Nothing was written through that overlap."""
    from harness import records as R
    from harness.inputs import contiguous
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    case = Case(
        name="plain_sum",
        generated=generated,
        modes=("training",),
        build=lambda d: Program(lambda x: x.sum(dim=1), [contiguous((8, 16), requires_grad=True)]),
    )
    record = run_case(case, torch.float32, "training", RunConfig(backend="eager"))
    assert record.status == R.PASS and not record.warnings, (record.status, record.reason, record.warnings)


def test_a_view_of_an_overlapping_input_is_a_reference():
    from harness import records as R
    from harness.inputs import strided
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    case = Case(
        name="transposed_overlapping",
        generated=True,
        build=lambda d: Program(lambda x: x.t() * 1, [strided((4, 4), (1, 1))]),
    )
    assert run_case(case, torch.float32, "inference", RunConfig()).status == R.PASS


def _as_strided_copy_from_storage(x):
    return torch.as_strided_copy(x, (2, 2), (1, 2), 1)  # an offset into x's storage, not into x


def test_a_failure_that_only_a_cached_compile_shows_is_diagnosed_when_asked(monkeypatch, tmp_path):
    """Two programs that differ only in the input's storage offset share one compile-cache entry in the torch
    versions whose key misses the offset (torch 2.13, seen); the second then fails, and compiled afresh it passes."""
    from harness.inputs import strided

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "plain"))
    base = torch.arange(20.0)
    torch.compiler.reset()
    torch.compile(_as_strided_copy_from_storage)(base[0:9])
    torch.compiler.reset()
    if torch.equal(torch.compile(_as_strided_copy_from_storage)(base[5:14]), _as_strided_copy_from_storage(base[5:14])):
        pytest.skip("this torch's compile cache keeps the two programs apart: no collision to diagnose")
    cases = [
        Case(
            name=f"offset_{offset}",
            build=lambda d, offset=offset: Program(
                _as_strided_copy_from_storage,
                [strided((9,), (1,), storage_offset=offset, storage_numel=20, fill="arange")],
            ),
        )
        for offset in (0, 5)
    ]
    said = "compiled again with the compile caches off, it passes"
    for asked in (False, True):
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / f"harness-{asked}"))
        config = RunConfig(fresh_compile=asked)
        first, second = (run_case(case, torch.float32, "inference", config) for case in cases)
        assert first.status == R.PASS and second.status == R.FAIL
        assert (said in (second.diagnosis or "")) == asked
        assert ("--fresh-compile" in second.command) == asked


def test_a_compiled_result_whose_elements_share_memory_is_diagnosed_as_a_layout_bug():
    # Inductor gives a scatter of an expanded input that input's stride-0 layout: the result's rows alias and
    # its writes collide. The verdict says which values differ; the diagnosis says why, from the strides.
    case = load_registry().cases["upstream_new_as_strided_scatter_broadcast_input"]
    record = run_case(case, torch.int64, "inference", RunConfig())
    assert record.status == R.FAIL  # (declared upstream; the run gives the verdict as it is)
    assert "elements sharing memory (out0 (0, 1) where eager's is (3, 1))" in record.diagnosis, record.diagnosis
    # A failure of values alone has no such diagnosis.
    diverges = Case(
        name="diverges",
        build=lambda d: Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4, 4))]),
    )
    plain = run_case(diverges, torch.float32, "inference", RunConfig())
    assert plain.status == R.FAIL and not plain.diagnosis, plain.diagnosis
