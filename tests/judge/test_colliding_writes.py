"""Writes that collide (harness/judge/colliding_writes.py): an undefined winner is left out of the verdict, and a
float16/bfloat16 atomic sum is judged by the rounding such adds make.

Known answers for the eager modes; runs of programs that differ only when compiled
(`torch.compiler.is_compiling()`): a generated kernel letting another of the colliding writers win, and one
summing atomically in bfloat16 where eager (as on a GPU) sums in float32.
"""

import pytest
import torch

from harness import records as R
from harness.judge.colliding_writes import CollidingWrites, LowPrecisionSums
from harness.judge.compare import VerdictPolicy
from harness.inputs import contiguous
from harness.registry import Case, Program
from harness.run.case import RunConfig, run_case


def written_under(mode):
    index = torch.tensor([1, 1, 3, 3, 3, 0])
    values = torch.tensor([10.0, 11.0, 30.0, 31.0, 32.0, 5.0])
    with mode:
        put = torch.zeros(5).index_put_((index,), values)
        scattered = torch.zeros(2, 5).scatter(1, torch.tensor([[1, 1], [2, 2]]), torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        copied = torch.zeros(3, 2).index_copy(0, torch.tensor([0, 0]), torch.tensor([[1.0, 1.0], [2.0, 2.0]]))
        unpooled = torch.nn.functional.max_unpool2d(torch.tensor([[[[1.0, 2.0]]]]), torch.tensor([[[[3, 3]]]]), 2)
        summed = torch.zeros(5).index_put_((index,), values, accumulate=True)
    return put.tolist(), scattered.tolist(), copied[0].tolist(), unpooled.flatten()[3].item(), summed.tolist()


def test_the_first_or_the_last_writer_wins_each_colliding_element():
    noted = CollidingWrites()
    put, scattered, copied, unpooled, summed = written_under(noted)
    first = written_under(CollidingWrites("first"))
    last = written_under(CollidingWrites("last"))
    assert first[0] == [5.0, 10.0, 0.0, 30.0, 0.0] and last[0] == [5.0, 11.0, 0.0, 32.0, 0.0]
    assert first[1] == [[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0, 0.0]] and last[1] == [
        [0.0, 2.0, 0.0, 0.0, 0.0],
        [0.0, 0.0, 4.0, 0.0, 0.0],
    ]
    assert (first[2], last[2]) == ([1.0, 1.0], [2.0, 2.0])
    assert (first[3], last[3]) == (1.0, 2.0)
    assert first[4] == last[4] == summed == [5.0, 21.0, 0.0, 93.0, 0.0]  # a sum is no collision
    assert [(c.op, c.elements) for c in noted.collisions] == [
        ("index_put_", 2),
        ("scatter", 2),
        ("index_copy", 2),
        ("max_unpool2d", 1),
    ]


def test_low_precision_sums_add_one_value_at_a_time_in_their_dtype():
    ones, zeros = torch.ones(1000, dtype=torch.bfloat16), torch.zeros(1000, dtype=torch.int64)
    assert torch.zeros(1, dtype=torch.bfloat16).scatter_add_(0, zeros, ones).item() == 1000  # eager sums in float32
    sums = LowPrecisionSums()
    with sums:
        stalled = torch.zeros(1, dtype=torch.bfloat16).scatter_add_(0, zeros, ones)  # 256 + 1 rounds to 256
        scaled = torch.zeros(3, dtype=torch.bfloat16).index_add(
            0, torch.tensor([0, 2, 0]), torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16), alpha=2
        )
        wide = torch.zeros(3).index_put((torch.tensor([0, 0]),), torch.tensor([1.0, 2.0]), accumulate=True)
    assert stalled.item() == 256 and scaled.tolist() == [8.0, 0.0, 4.0] and wide.tolist() == [3.0, 0.0, 0.0]
    assert sums.emulated == ["scatter_add_", "index_add"]  # float32 sums are eager's own


def test_compiled_within_the_rounding_of_low_precision_adds_passes_by_that_rule_alone():
    expected, reference = torch.tensor([1000.0]), torch.tensor([1000.0], dtype=torch.float64)
    stalled = torch.tensor([256.0])
    plain = VerdictPolicy().tensors("out0", stalled, expected, reference)
    assert not plain.passed and plain.rule == "rmse_vs_fp64"
    judged = VerdictPolicy(atomic_baseline={"out0": torch.tensor([256.0])}).tensors(
        "out0", stalled, expected, reference
    )
    assert judged.passed and judged.passed_by == R.PASSED_BY_LOW_PRECISION_ATOMICS, judged.summary()
    beyond = VerdictPolicy(atomic_baseline={"out0": torch.tensor([900.0])}).tensors(
        "out0", stalled, expected, reference
    )
    assert not beyond.passed  # 744 off, where the adds' rounding makes 100: three times that is the limit
    strict = VerdictPolicy(strict_eager=True, atomic_baseline={"out0": torch.tensor([256.0])})
    assert not strict.tensors("out0", stalled, expected, reference).passed


def run(fn, inputs, dtype=torch.float32, config=RunConfig(backend="eager")):
    case = Case(name="colliding_case", build=lambda d: Program(fn, inputs), dtypes=(dtype,), modes=("inference",))
    return run_case(case, dtype, "inference", config)


def another_winner(extra):
    def program(values, index):
        buffer = torch.zeros(8, device=values.device)
        if torch.compiler.is_compiling():  # a generated kernel that lets the first of the writers win
            buffer = buffer.index_put((index.flip(0),), values.flip(0))
            return (buffer + extra).softmax(0)
        return buffer.index_put((index,), values).softmax(0)

    return program


INDEX = torch.tensor([0, 1, 1, 2, 3, 3, 4, 5])  # elements 1 and 3 written twice; 6 and 7 never


def test_another_winner_of_colliding_writes_is_no_divergence_and_the_record_says_why():
    record = run(another_winner(0.0), [contiguous((8,)), INDEX])
    assert record.status == R.PASS, record.summary()
    (out,) = record.outputs
    assert out.undefined == 8 and "which of several writes" in out.note  # a softmax spreads the winner everywhere
    assert any("index_put wrote several values to one element" in w for w in record.warnings), record.warnings


def test_a_wrong_value_where_every_write_is_unique_still_fails():
    def program(values, index):
        buffer = torch.zeros(8, device=values.device)
        if torch.compiler.is_compiling():
            buffer = buffer.index_put((index.flip(0),), values.flip(0))
            return buffer + (torch.arange(8) == 7)  # element 7 is written by no one: its value is defined
        return buffer.index_put((index,), values)

    record = run(program, [contiguous((8,)), INDEX])
    (out,) = record.outputs
    assert (record.status, out.undefined, out.bad) == (R.FAIL, 2, 1), record.summary()


def sums_atomically(scale):
    def program(values, index):
        buffer = torch.zeros(8, dtype=values.dtype, device=values.device)
        if torch.compiler.is_compiling():  # Inductor's bfloat16 atomic adds (CUDA's from SM90, the CPU's)
            return buffer.index_put_((index,), values * scale if scale != 1 else values, accumulate=True)
        return buffer.scatter_add_(0, index, values)  # sums in float32, as eager's index_put_ does on a GPU

    return program


SUMMED = [contiguous((4096,), fill="rand"), contiguous((4096,), dtype=torch.int64, fill="randint", low=0, high=8)]


def test_bfloat16_atomic_adds_pass_within_their_rounding_on_every_repeat():
    statuses = []
    for _ in range(3):
        record = run(sums_atomically(1.0), SUMMED, torch.bfloat16, RunConfig())
        statuses.append(record.status)
    (out,) = record.outputs
    assert statuses == [R.PASS] * 3 and out.passed_by == R.PASSED_BY_LOW_PRECISION_ATOMICS, record.summary()
    assert "adds atomically in low precision (cpp_fused_index_put_zeros_0 (out_ptr0, bfloat16))" in record.diagnosis
    assert out.rmse_actual <= out.rmse_multiplier * out.rmse_low_precision_sums + out.atol / 10
    from harness.report import render_html

    assert "scatter sum made one add at a time" in render_html([record], {})  # the report says what passed it


@pytest.mark.parametrize("config", [RunConfig(), RunConfig(strict_eager=True)], ids=["beyond-rounding", "strict"])
def test_atomic_adds_beyond_their_rounding_or_under_strict_eager_fail(config):
    record = run(sums_atomically(1.25 if not config.strict_eager else 1.0), SUMMED, torch.bfloat16, config)
    assert record.status == R.FAIL and "adds atomically in low precision" in record.diagnosis, record.summary()


def test_a_dynamic_run_masks_each_size_by_its_own_collisions_and_says_which():
    """65 rows written onto 64 collide at the second size only (the correct corpus's index_put_2d_fresh)."""
    from harness.registry import load_registry

    record = run_case(
        load_registry().cases["correct_index_put_2d_fresh"], torch.float32, "training", RunConfig(dynamic=True)
    )
    assert record.status == R.PASS, record.summary()
    undefined = {o.name: o.undefined for o in record.outputs if o.undefined}
    # At most the one row of 256 written twice (its softmax), and the gradients of its two writers' rows of 160.
    assert undefined.keys() == {"out0@size2", "grad_in0@size2"}, undefined
    assert 0 < undefined["out0@size2"] <= 256 and 0 < undefined["grad_in0@size2"] <= 2 * 160, undefined
    assert [w for w in record.warnings if "wrote several values" in w][0].endswith("(at the second size)")
