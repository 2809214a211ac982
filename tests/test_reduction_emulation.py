"""Seed 002's reduction bugs emulated by rewritten kernels: the rewrites, the family, the seed and RMSNorm cases.

The source transformations are checked on kernels this torch's Inductor
generates (C++ compiled here; Triton generated here without Triton, see
`generated_kernels.py`); the emulations end to end on CPU Inductor.
"""

import ast
import re

import numpy as np
import pytest
import torch

from generated_kernels import generated_cpp_kernels, generated_triton_kernels
from harness import records as R
from harness.inject.launch import INJECTIONS, parse_injection
from harness.inductor_compat import kernel_variants as kv
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

RECOGNISED = kv.RECOGNISED

CASES = load_registry().cases
SEED = "seed_rmsnorm_weight_grad_small"
TRAINING = "rmsnorm_permuted_training"


def seed_inputs(batch=2, seq=64, heads=8, head_dim=128):
    return (
        torch.randn(batch, heads, seq, head_dim),
        torch.randn(batch, seq, heads, head_dim, dtype=torch.bfloat16),
        torch.rand(batch, seq, heads) + 1,
    )


def seed_program(grad_out_base, q, q_square_sum):
    from cases.seed_rmsnorm_weight_grad import rms_norm_weight_grad

    return rms_norm_weight_grad(grad_out_base, q, q_square_sum)


def product_sum(a, b):
    return (a * b).sum(dim=tuple(range(1, a.dim())))


def unequal_axes(*sizes):
    """A contiguous operand times one with its first two reduced axes swapped: the axes stay separate."""
    b = torch.randn(8, sizes[1], sizes[0], *sizes[2:]).transpose(1, 2)
    return torch.randn(8, *sizes), b


def only_kernel(kernels):
    (source,) = kernels.values()
    return source


def inserted(before, after):
    """The lines a rewrite added, and the line each follows in the original."""
    old, new = before.split("\n"), after.split("\n")
    added, position = [], 0
    for line in new:
        if position < len(old) and line == old[position]:
            position += 1
        else:
            added.append((old[position - 1].strip(), line.strip()))
    return added


# ---------------------------------------------------------------- C++ rewrites


@pytest.fixture(scope="module")
def seed_cpp():
    return only_kernel(generated_cpp_kernels(seed_program, *seed_inputs()))


def test_cpp_partial_reinitialises_the_weight_gradient_accumulator_in_the_innermost_loop(seed_cpp):
    rewritten = kv.cpp_reduction_partial(seed_cpp)
    added = inserted(seed_cpp, rewritten)
    note = "// harness emulation (reduction-partial): accumulator re-initialised in the loop"
    assert [line for _, line in added][0] == note
    reinit = [line for _, line in added][1:]
    declared = re.search(r"^\s*\S+ (tmp_acc0_vec) = (.+);$", seed_cpp, re.M)
    assert reinit == [f"{declared.group(1)} = {declared.group(2)};"]
    # The weight gradient sums over (batch, seq, heads): three loops, the re-initialisation tops the innermost.
    body = rewritten.split("// harness emulation")[0].rstrip().split("\n")
    assert body[-1].strip() == "{" and body[-2].strip().startswith("for(int64_t x3=")
    assert kv.cpp_reduction_partial(rewritten.replace("// harness emulation", "//")) is not None


def test_cpp_partial_resets_cascade_helpers_of_long_float_sums():
    source = only_kernel(generated_cpp_kernels(lambda x: x.sum(-1), torch.randn(4, 5000)))
    reinit = [line for _, line in inserted(source, kv.cpp_reduction_partial(source))][1:]
    assert reinit[0].startswith("tmp_acc0_vec = ")
    assert any(line.startswith("cascade_helper0 = CascadeSumHelper<") for line in reinit)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: x.sum(-1), (8, 4)),  # unrolled by Inductor: no loop at all
        (lambda x: x.sum(-1), (8, 16)),  # one vector (AVX-512) or two (AVX2): see the next test
        (lambda x: x * 2 + 1, (8, 64)),  # no reduction
    ],
)
def test_cpp_partial_leaves_single_chunk_and_loopless_kernels_alone(fn, shape):
    source = only_kernel(generated_cpp_kernels(fn, torch.randn(*shape)))
    chunk = kv.cpu_chunk_elements(torch.float32)
    if shape == (8, 16) and chunk < 16:
        assert kv.cpp_reduction_partial(source) is not None
    else:
        assert kv.cpp_reduction_partial(source) is None


def test_cpp_axis_order_decomposes_the_seed_reduction_with_the_axes_reversed(seed_cpp):
    rewritten = kv.cpp_reduction_axis_order(seed_cpp)
    added = [line for _, line in inserted(seed_cpp, rewritten) if line.startswith("const int64_t")]
    # Loops over batch (2), seq (64), heads (8): flattened f = (x1*64 + x2)*8 + x3, decomposed as (8, 64, 2).
    assert added == [
        "const int64_t flat_wrong_order = (x1 * 64 + x2) * 8 + x3;",
        "const int64_t x1_wrong_order = ((flat_wrong_order / 128) % 2);",
        "const int64_t x2_wrong_order = (((flat_wrong_order / 2) % 64) % 64);",
        "const int64_t x3_wrong_order = ((flat_wrong_order % 2) % 8);",
    ]
    loads = [line for line in rewritten.split("\n") if "loadu(in_ptr" in line or "in_ptr2[" in line]
    assert loads and all("_wrong_order" in line and not re.search(r"\bx[123]\b", line) for line in loads)


def test_cpp_axis_order_counts_a_vectorized_axis_in_vectors():
    source = only_kernel(generated_cpp_kernels(product_sum, *unequal_axes(5, 41, 20)))
    rewritten = kv.cpp_reduction_axis_order(source)
    added = [line for _, line in inserted(source, rewritten) if line.startswith("const int64_t")]
    chunk = kv.cpu_chunk_elements(torch.float32)
    vectors = -(-20 // chunk)
    assert added[0] == f"const int64_t flat_wrong_order = (x1 * 41 + x2) * {vectors} + x3 / {chunk};"
    assert added[-1] == f"const int64_t x3_wrong_order = {chunk} * ((flat_wrong_order % 5) % {vectors});"


@pytest.mark.parametrize(
    "fn, args",
    [
        (lambda x: x.sum(-1), (torch.randn(8, 300),)),  # one axis
        (lambda x: x.sum((1, 2)), (torch.randn(8, 41, 100),)),  # contiguous axes: merged into one loop
        (lambda x: x.transpose(1, 2).sum((1, 2)), (torch.randn(8, 41, 100),)),  # a permuted operand alone: merged too
    ],
)
def test_cpp_axis_order_leaves_single_axis_reductions_alone(fn, args):
    assert kv.cpp_reduction_axis_order(only_kernel(generated_cpp_kernels(fn, *args))) is None


def test_cpp_rewrites_refuse_text_of_another_shape():
    with pytest.raises(kv.UnrecognisedKernel):
        kv.cpp_reduction_partial('extern "C" void kernel(float* out_ptr0) {\n    out_ptr0[0] = 0;\n}')


# ---------------------------------------------------------------- Triton rewrites


@pytest.fixture(scope="module")
def family_triton():
    """Kernel sources (Triton, as torch 2.13 writes them) of every family case and the seed."""
    from harness.devices import get_device
    from harness.run.program import materialize_inputs

    found = {}
    for name in [n for n in CASES if n.startswith("reduction_axes")] + [SEED]:
        case = CASES[name]
        program = case.build(case.dtypes[0])
        inputs = materialize_inputs(program.inputs, program.kwargs, case.dtypes[0], get_device("cpu"), 0)
        found[name] = generated_triton_kernels(program.fn, *inputs.args)
    return found


def test_triton_partial_hits_looping_kernels_only(family_triton):
    for name, kernels in family_triton.items():
        for kernel, source in kernels.items():
            rewritten = kv.triton_reduction_partial(source)
            assert (rewritten is not None) == kernel.startswith("triton_red_"), (name, kernel)
            if rewritten is not None:
                ast.parse(rewritten)  # still Python
    # `above` loops on Triton, `below` and `at` are persistent (one chunk), as on CPU.
    for name, kernels in family_triton.items():
        if name.startswith("reduction_axes"):
            assert any(k.startswith("triton_red_") for k in kernels) == name.endswith("_above"), name


def test_triton_partial_reinitialises_right_after_the_loop_header(family_triton):
    (source,) = family_triton[SEED].values()
    rewritten = kv.triton_reduction_partial(source)
    added = inserted(source, rewritten)
    init = re.search(r"^    (_tmp\d+ = tl\.full\(\[XBLOCK, R0_BLOCK\], 0, tl\.float32\))$", source, re.M).group(1)
    assert added[0][0] == "for r0_offset in tl.range(0, r0_numel, R0_BLOCK):"
    note = "# harness emulation (reduction-partial): accumulators re-initialised in the loop"
    assert [line for _, line in added] == [note, init]
    assert re.search(r"^        " + re.escape(init) + "$", rewritten, re.M)


@pytest.mark.parametrize(
    "fn, accumulators",
    [
        (lambda x: x.argmax(-1), ["_tmp2", "_tmp2_index"]),
        (lambda x: torch.var_mean(x, -1), ["tmp2_mean", "tmp2_m2", "tmp2_weight"]),
        (lambda x: torch.softmax(x, -1), ["_tmp2", "_tmp8"]),  # two accumulating loops; the third only stores
    ],
)
def test_triton_partial_reinitialises_every_kind_of_accumulator(fn, accumulators):
    source = only_kernel(generated_triton_kernels(fn, torch.randn(8, 5000)))
    added = [line for _, line in inserted(source, kv.triton_reduction_partial(source)) if not line.startswith("#")]
    assert [line.split(" = ")[0] for line in added] == accumulators


def test_triton_partial_reads_older_loop_headers(family_triton):
    (source,) = family_triton[SEED].values()
    older = source.replace("tl.range(0, r0_numel, R0_BLOCK)", "range(0, r0_numel, R0_BLOCK)")
    assert older != source and kv.triton_reduction_partial(older) is not None


def test_triton_axis_order_hits_decomposed_multi_axis_indices_only(family_triton):
    for name, kernels in family_triton.items():
        hit = any(kv.triton_reduction_axis_order(source) is not None for source in kernels.values())
        multi_axis = name == SEED or ("_permuted_" in name and not name.startswith("reduction_axes1"))
        assert hit == multi_axis, name


def _decomposition(source, index_name="r0_index"):
    return {
        m.group(1): m.group(2)
        for m in re.finditer(rf"^\s*(r0_\d+) = (.*\b{index_name}\b.*)$", source, re.M)
        if m.group(2) != index_name
    }


def test_triton_axis_order_reads_inside_every_axis_but_not_every_element(family_triton):
    (source,) = family_triton["reduction_axes3_permuted_above"].values()
    original, wrong = _decomposition(source), _decomposition(kv.triton_reduction_axis_order(source))
    assert original == {"r0_1": "(r0_index % 20)", "r0_2": "((r0_index // 20) % 41)", "r0_3": "r0_index // 820"}
    assert wrong == {
        "r0_1": "((r0_index % 5) % 20)",
        "r0_2": "(((r0_index // 5) % 41) % 41)",
        "r0_3": "((r0_index // 205) % 5)",
    }
    index = np.arange(4100)
    read = {var: eval(expr, {"r0_index": index}) for var, expr in wrong.items()}
    assert all(values.min() >= 0 for values in read.values())
    assert (read["r0_1"].max(), read["r0_2"].max(), read["r0_3"].max()) <= (19, 40, 4)
    elements = set(zip(read["r0_1"], read["r0_2"], read["r0_3"]))
    assert len(elements) < 4100  # some elements read twice, others never: the sum is wrong, not reordered


def test_triton_axis_order_with_dynamic_sizes():
    a, b = unequal_axes(5, 41, 20)
    source = only_kernel(generated_triton_kernels(product_sum, a, b, dynamic=True))
    original, wrong = _decomposition(source), _decomposition(kv.triton_reduction_axis_order(source))
    assert set(wrong) == set(original) and len(original) == 3
    sizes = {"ks0": 20, "ks1": 41, "ks3": 20 * 41, "r0_numel": 4100}  # Inductor passes ks0*ks1 as its own size
    assert all(symbol in sizes for expr in original.values() for symbol in re.findall(r"\b(ks\d+)\b", expr))
    index = np.arange(4100)
    static = _decomposition(kv.triton_reduction_axis_order(only_kernel(generated_triton_kernels(product_sum, a, b))))
    for var in wrong:
        assert (eval(wrong[var], {"r0_index": index, **sizes}) == eval(static[var], {"r0_index": index})).all(), var


# ---------------------------------------------------------------- the injections end to end on CPU


def test_both_injections_are_listed_as_seed_002_emulations_and_take_selectors():
    for name in ("reduction-partial", "reduction-axis-order"):
        assert "seed 002" in INJECTIONS[name].summary
        assert parse_injection(f"{name}@3")[1] == "3" and parse_injection(f"{name}@*sum*")[1] == "*sum*"
        assert parse_injection(name)[1] is None


FAMILY_EXPECTED = {  # case -> (fails under reduction-partial, fails under reduction-axis-order)
    "reduction_axes1_contiguous_below": (False, False),
    "reduction_axes1_contiguous_at": (False, False),
    "reduction_axes1_contiguous_above": (True, False),
    "reduction_axes1_permuted_above": (True, False),
    "reduction_axes2_contiguous_below": (False, False),
    "reduction_axes2_contiguous_above": (True, False),
    "reduction_axes2_permuted_above": (True, True),
    "reduction_axes3_contiguous_at": (False, False),
    "reduction_axes3_permuted_above": (True, True),
}


def test_the_family_is_registered_whole():
    family = {n for n, c in CASES.items() if "emulation-target" in c.tags}
    assert family == set(FAMILY_EXPECTED)
    assert {t for n in family for t in CASES[n].tags if t.startswith("axes")} == {"axes1", "axes2", "axes3"}
    sizes = {t for n in family for t in CASES[n].tags if t.endswith("-chunk")}
    assert sizes == {"below-chunk", "at-chunk", "above-chunk"}


@pytest.mark.parametrize("injection", ["reduction-partial", "reduction-axis-order"])
@pytest.mark.parametrize("name", sorted(FAMILY_EXPECTED))
def test_family_hits_and_misses(name, injection):
    should_fail = FAMILY_EXPECTED[name][injection == "reduction-axis-order"]
    record = run_case(CASES[name], torch.float32, "inference", RunConfig(inject=injection))
    assert record.emulation == injection
    # A miss is the kernel left alone, not a rewrite that happened to compute right; and a run in which the
    # emulation rewrote nothing is an error saying what it recognises, not a pass.
    assert bool(record.injection_stats.hits) == should_fail
    if should_fail:  # small integers: a correct kernel is exact, so every failure is large
        assert record.status == R.FAIL, record.summary()
        assert record.outputs[0].bad >= 7 and record.outputs[0].max_abs >= 100
    else:
        assert (record.status, record.symptom) == (R.ERROR, R.Symptom.INJECTION_MISSED), record.summary()
        assert record.error.message.startswith(f"{injection}: {injection} rewrote none of the ")
        assert f"it recognises {RECOGNISED[injection]}" in record.error.message


def test_variants_reach_modules_loaded_earlier_and_cache_hits():
    """A wrapper module first loaded without the injection, then reloaded (FX graph cache hit), gets its variant."""
    case = CASES["reduction_axes2_contiguous_above"]
    assert run_case(case, torch.float32, "inference", RunConfig()).status == R.PASS
    for _ in range(2):
        record = run_case(case, torch.float32, "inference", RunConfig(inject="reduction-partial"))
        assert record.status == R.FAIL and len(record.injection_stats.hits) == 1
    assert run_case(case, torch.float32, "inference", RunConfig()).status == R.PASS


def test_seed_passes_clean_and_fails_under_partial_in_the_weight_gradient_kernel():
    clean = run_case(CASES[SEED], torch.bfloat16, "inference", RunConfig())
    assert clean.status == R.PASS
    record = run_case(CASES[SEED], torch.bfloat16, "inference", RunConfig(inject="reduction-partial", bisect=True))
    (out,) = record.outputs
    assert record.status == R.FAIL and (out.bad, out.numel) == (128, 128)
    assert "(emulation: reduction-partial)" in record.summary()
    kernel = record.first_divergent_kernel
    assert kernel.answer == R.Answer.KERNEL and kernel.name.startswith("cpp_fused_") and "sum" in kernel.name
    assert "sum_1" in kernel.nodes and "aten.sum.dim_IntList" in kernel.aten_ops
    assert kernel.buffer == "buf0" and kernel.metrics.bad == 128  # the float32 sum, before its bf16 cast
    assert kernel.isolated.startswith("kernel is wrong")
    assert kernel.stage == "inductor"
    assert record.injection_stats.hits == [f"0:{kernel.name}"]


def test_seed_fails_under_axis_order_in_the_same_kernel():
    record = run_case(CASES[SEED], torch.bfloat16, "inference", RunConfig(inject="reduction-axis-order", bisect=True))
    kernel = record.first_divergent_kernel
    assert record.status == R.FAIL and record.outputs[0].bad == 128
    assert "sum_1" in kernel.nodes and kernel.isolated.startswith("kernel is wrong")


def test_a_selector_that_matches_no_launch_is_an_error_naming_the_selector():
    record = run_case(CASES[SEED], torch.bfloat16, "inference", RunConfig(inject="reduction-partial@5"))
    assert (record.status, record.symptom) == (R.ERROR, R.Symptom.INJECTION_MISSED)
    assert record.injection_stats.hits == []
    assert record.error.message.startswith("reduction-partial@5: @5 selected none of the ")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_training_fails_forward_and_backward(dtype):
    clean = run_case(CASES[TRAINING], dtype, "training", RunConfig())
    assert clean.status == R.PASS
    # Every looping reduction: the forward's mean of squares is the first kernel to go wrong.
    record = run_case(CASES[TRAINING], dtype, "training", RunConfig(inject="reduction-partial", bisect=True))
    kernel = record.first_divergent_kernel
    assert record.status == R.FAIL
    assert kernel.graph == "forward 0" and "mean" in kernel.nodes
    assert kernel.isolated.startswith("kernel is wrong")
    # Only the backward kernel: the weight gradient's reduction is named.
    record = run_case(CASES[TRAINING], dtype, "training", RunConfig(inject="reduction-partial@*sum*", bisect=True))
    kernel = record.first_divergent_kernel
    failed = {o.name for o in record.outputs if not o.passed}
    assert record.status == R.FAIL and "grad.weight" in failed and "out0" not in failed
    assert kernel.graph == "backward 0" and "sum_1" in kernel.nodes
    assert kernel.isolated.startswith("kernel is wrong")


def test_rmsnorm_training_under_axis_order_breaks_only_the_weight_gradient():
    record = run_case(CASES[TRAINING], torch.float32, "training", RunConfig(inject="reduction-axis-order", bisect=True))
    failed = {o.name for o in record.outputs if not o.passed}
    kernel = record.first_divergent_kernel
    assert failed == {"grad.weight"}
    assert kernel.graph == "backward 0" and "sum_1" in kernel.nodes
    assert kernel.isolated.startswith("kernel is wrong")


# A reduction laid out as a reading of torch_npu's triton_experimental codegen (`codegen/triton.py`) suggests:
# the group-dispatch prologue and `for i in range(group_size)` loop, and a per-node loop nest whose outer
# reduction axis is a scalar loop of its own. (The kernels that codegen writes are in test_npu_kernels.py.)
NPU_REDUCTION = """\
@triton.jit
def triton_unk_fused_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    group_id = tl.program_id(0)
    total_thread = tl.num_programs(0)
    x0_blocks = (xnumel + XBLOCK - 1) // XBLOCK
    group_size = x0_blocks // total_thread
    group_tail = x0_blocks % total_thread
    if group_id < group_tail:
        group_size = group_size + 1
        group_base = group_id * group_size
    else:
        group_base = group_id * group_size + group_tail
    for i in range(group_size):
        x0 = (group_base + i) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
        xmask = x0 < xnumel
        r0_base = tl.arange(0, R0_BLOCK)[None, :]
        _tmp2 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
        for r0_2 in range(6):
            for r0_offset in range(0, 5, R0_BLOCK):
                r0_index = r0_offset + r0_base
                r0_mask = r0_index < 5
                r0_1 = r0_index
                tmp0 = tl.load(in_ptr0 + (r0_1 + 5 * r0_2 + 30 * x0), r0_mask & xmask, other=0.0)
                tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
                _tmp2 = _tmp2 + tl.where(r0_mask & xmask, tmp1, 0)
        tmp2 = tl.sum(_tmp2, 1)[:, None]
        tl.store(out_ptr0 + (x0), tmp2, xmask)
"""


def test_a_scalar_loop_over_an_outer_axis_is_a_reduction_loop_of_its_nest():
    variant = kv.rewrite("reduction-partial", "triton", NPU_REDUCTION).splitlines()
    inner = next(n for n, line in enumerate(variant) if "for r0_offset in range(0, 5, R0_BLOCK):" in line)
    assert "re-initialised" in variant[inner + 1] and variant[inner + 2].strip().startswith("_tmp2 = tl.full(")
    garbage = kv.rewrite("masked-load-garbage", "triton", NPU_REDUCTION)
    assert "other=1234" in garbage and "_tmp2 = _tmp2 + tmp1" in garbage  # (no signature here: no pointee type)
    # One reduction variable per axis, no flattened index and no real-block loops: no axis order to reverse.
    assert kv.rewrite("reduction-axis-order", "triton", NPU_REDUCTION) is None
    assert kv.rewrite("reduction-small-inner", "triton", NPU_REDUCTION) is None  # x0 is not an x0index of K < 8


def _launch_writing(out, value):
    """A stand-in launch of a kernel that writes `value` into `out`."""
    from types import SimpleNamespace

    return SimpleNamespace(
        replay=False,
        index=0,
        kernel=SimpleNamespace(name="triton_red_fused_sum_0"),
        args=[out],
        kwargs={},
        written_args=lambda: [(0, out)],
        run=lambda: out.fill_(value),
    )


@pytest.mark.parametrize("variant_writes, hit", [(1.0, False), (2.0, True)])
def test_a_variant_is_a_hit_only_where_it_writes_other_than_the_kernel(monkeypatch, variant_writes, hit):
    import harness.inject.rewritten as rewritten

    monkeypatch.setattr(
        rewritten, "variant", lambda info, name: kv.KernelVariant(name, "", lambda out: out.fill_(variant_writes))
    )
    handler = rewritten.RewrittenKernels("reduction-partial")
    out = torch.full((4,), 7.0)
    handler(_launch_writing(out, 1.0))  # the kernel writes 1.0
    assert torch.equal(out, torch.full((4,), variant_writes))  # what the run sees is the variant's
    assert handler.stats.hits == (["0:triton_red_fused_sum_0"] if hit else [])
    if hit:
        assert handler.missed() is None
    else:  # a rewrite whose lanes never reach an output: injection-missed, with the reason
        assert handler.missed().startswith(
            "reduction-partial rewrote 1 kernel launch (0:triton_red_fused_sum_0), "
            "but each variant wrote exactly what the kernel as compiled writes"
        )
