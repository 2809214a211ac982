"""The emulations' recognisers on the kernels torch_npu 2.14.0's own `triton_experimental` codegen writes.

`fixtures/npu_kernels_torch_npu_2.14.json` holds that codegen's kernel text for small programs, written on
CPU from the unzipped wheel (`fixtures/regenerate_npu_kernels.py` writes it again). Its shape is not
Inductor's: a group-dispatch loop over the 40 cores (`for i in range(group_size)`), per-node masks
(`x0mask`, `r0_2mask`), `x0 = x0index` of extent `x0numel`, reductions whose `tl.where` guard is elided when
the loads are zero-filled (`_tmp2 = tmp3`), real-block loops over each axis of a multi-axis reduction
(`for r0_2inner ... for r0_1inner ...`, then `tl.reshape`), rsplit partial-plus-combine kernel pairs. Each
rewriter must read that shape. (That each variant computes wrong and the kernel right, run by triton-ascend's
interpreter, is in test_npu_path.py.)
"""

import json
from pathlib import Path

import pytest

from harness.inductor_compat.kernel_variants import rewrite

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "npu_kernels_torch_npu_2.14.json"
PROGRAMS = json.loads(FIXTURE.read_text())["programs"]


def kernel(program: str, index: int = 0) -> str:
    kernels = PROGRAMS[program]["kernels"]
    return kernels[sorted(kernels)[index]]


def changed_lines(before: str, after: str) -> list[str]:
    old = set(before.splitlines())
    return [line.strip() for line in after.splitlines() if line not in old]


def test_the_fixtures_are_torch_npu_2_14s_triton_experimental_kernels():
    payload = json.loads(FIXTURE.read_text())
    assert (payload["torch_npu"], payload["backend"], payload["cores"]) == ("2.14.0", "triton_experimental", 40)
    for name, entry in PROGRAMS.items():
        assert entry["kernels"], name
        for kernel_name, source in entry["kernels"].items():
            assert kernel_name.startswith("triton_unk_") and "@npu_triton_heuristics." in source, kernel_name
            assert "total_thread = 40" in source and "for i in range(group_size):" in source, kernel_name
    assert "workspace_0" in PROGRAMS["column_sums_k4"]["wrapper"]  # the rsplit pair shares a workspace
    assert "for r0_1inner in range(0, 7, r0_1_blk):" in kernel("sum_axes_0_2")


# (rewriter, program, kernel index) -> what the variant's changed lines hold.
REWRITTEN = {
    # Loads masked by per-node range masks get garbage; the guards torch_npu kept are elided.
    ("masked-load-garbage", "row_sums", 0): ["r0_mask & x0mask", "other=float('nan')"],
    ("masked-load-garbage", "layer_norm", 0): ["_tmp10 = tmp11"],
    ("masked-load-garbage", "sum_axes_0_2", 0): ["r0_2mask & r0_1mask & x0mask", "other=float('nan')"],
    ("masked-load-garbage", "column_sums_k4", 1): ["_acc = tmp1"],  # the rsplit combine kernel
    ("masked-load-garbage", "column_maxima_k4_small", 0): ["other=float('nan')"],
    # An outer reduction over a 4-wide contiguous axis: lanes x0 >= 2 never reach the accumulator, guarded
    # (the combine kernel) or not (torch_npu elided the guard).
    ("reduction-small-inner", "column_sums_k4_small", 0): ["_tmp2 = tl.where((x0 < 2), tmp3, _tmp2)"],
    ("reduction-small-inner", "column_maxima_k4_small", 0): ["_tmp2 = tl.where((x0 < 2), tmp3, _tmp2)"],
    ("reduction-small-inner", "column_sums_k4", 0): ["_tmp2 = tl.where((x0 < 2), tmp3, _tmp2)"],
    ("reduction-small-inner", "column_sums_k4", 1): ["_acc = tl.where(r0_mask & x0mask & (x0 < 2), tmp1, _acc)"],
    # Accumulators re-initialised in the innermost reduction loop: the real-block nest's, and each core's
    # range of an rsplit partial kernel.
    ("reduction-partial", "row_sums", 0): ["_tmp2 = tl.full([real_block_x0, R0_BLOCK], 0, tl.float32)"],
    ("reduction-partial", "sum_axes_0_2", 0): ["_tmp2 = tl.full([real_block_x0, r0_2_blk, r0_1_blk], 0, tl.float32)"],
    ("reduction-partial", "column_sums_k4", 0): ["_tmp2 = tl.full([R0_BLOCK, real_block_x0], 0, tl.float32)"],
    ("reduction-partial", "rmsnorm_wgrad_like", 0): ["_tmp4 = tl.full([R0_BLOCK, real_block_x0], 0, tl.float32)"],
    # The real-block axes (r0_2 of 5 outside r0_1 of 7), flattened and decomposed reversed.
    ("reduction-axis-order", "sum_axes_0_2", 0): [
        "r0_flat = r0_1 + 7*r0_2",
        "r0_1 = ((r0_flat % 5) % 7)",
        "r0_2 = ((r0_flat // 5) % 5)",
    ],
}


@pytest.mark.parametrize("rewriter, program, index", list(REWRITTEN))
def test_each_rewriter_reads_the_npu_kernels_shape(rewriter, program, index):
    source = kernel(program, index)
    variant = rewrite(rewriter, "triton", source)
    assert variant is not None, f"{rewriter} did not recognise {program}'s kernel {index}"
    compile(variant, "<variant>", "exec")
    changed = "\n".join(changed_lines(source, variant))
    for expected in REWRITTEN[(rewriter, program, index)]:
        assert expected in changed, changed
    assert f"harness emulation ({rewriter})" in variant or rewriter in ("masked-load-garbage", "reduction-small-inner")


def test_the_partial_variant_of_a_real_block_nest_resets_in_its_innermost_loop():
    variant = rewrite("reduction-partial", "triton", kernel("sum_axes_0_2")).splitlines()
    header = next(n for n, line in enumerate(variant) if "for r0_1inner in range(" in line)
    assert "accumulators re-initialised" in variant[header + 1] and "_tmp2 = tl.full(" in variant[header + 2]


def test_the_axis_order_variant_decomposes_after_the_masks_which_keep_their_lanes():
    variant = rewrite("reduction-axis-order", "triton", kernel("sum_axes_0_2")).splitlines()
    masks = max(n for n, line in enumerate(variant) if line.strip().startswith(("r0_1mask =", "r0_2mask =")))
    flat = next(n for n, line in enumerate(variant) if "r0_flat =" in line)
    load = next(n for n, line in enumerate(variant) if "tl.load(" in line)
    assert masks < flat < load


# What each rewriter leaves alone on the NPU's kernels: kernels without the shape it spoils.
UNTOUCHED = {
    "masked-load-garbage": ["pointwise", "int64_add"],
    "reduction-small-inner": ["row_sums", "softmax", "layer_norm", "sum_axes_0_2", "rmsnorm_wgrad_like"],
    "reduction-partial": ["pointwise", "int64_add"],
    # One reduction variable (`r0_1 = r0_index`): Inductor merged the axes, there is no order to get wrong.
    "reduction-axis-order": ["row_sums", "multi_axis", "rmsnorm_wgrad_like", "column_sums_k4_small"],
}


@pytest.mark.parametrize("rewriter, program", [(r, p) for r, programs in UNTOUCHED.items() for p in programs])
def test_each_rewriter_leaves_the_npu_kernels_it_does_not_spoil_alone(rewriter, program):
    assert all(rewrite(rewriter, "triton", source) is None for source in PROGRAMS[program]["kernels"].values())


def test_the_partial_variant_of_an_rsplit_kernel_loops_at_least_twice_in_each_cores_share():
    from types import SimpleNamespace

    from harness.inductor_compat.kernel_variants import _loop_at_least_twice

    # 4096 reduced elements over 40 cores: 103 per core. R0_BLOCK 128 would be one chunk in every core.
    configs = [SimpleNamespace(kwargs={"XBLOCK": 4, "R0_BLOCK": block}) for block in (32, 64, 128, 1024)]
    autotuner = SimpleNamespace(configs=list(configs), launchers=[SimpleNamespace(config=c) for c in configs])
    _loop_at_least_twice(autotuner, kernel("column_sums_k4", 0))
    assert [c.kwargs["R0_BLOCK"] for c in autotuner.configs] == [32, 64]
    assert [launcher.config.kwargs["R0_BLOCK"] for launcher in autotuner.launchers] == [32, 64]
    # Without rsplit the range is the whole static r0_numel (60 here).
    autotuner = SimpleNamespace(configs=list(configs), launchers=[])
    _loop_at_least_twice(autotuner, kernel("row_sums"))
    assert [c.kwargs["R0_BLOCK"] for c in autotuner.configs] == [32]


def _roles(source: str, kernel_name: str, signature: dict[str, str]) -> dict[str, str]:
    """Each pointer argument's role, read as the launch proxies read a Triton kernel's."""
    from harness.inductor_compat.kernel_pointers import pointer_use
    from harness.inductor_compat.launches import KernelInfo

    names = [n for n in signature if signature[n] != "constexpr"]
    pointers = frozenset(n for n in names if signature[n].startswith("*"))
    info = KernelInfo(
        kernel_name, "triton", names, pointers=pointers, uses=pointer_use(source, kernel_name, sorted(pointers))
    )
    return {name: info.role(position) for position, name in enumerate(names)}


def test_an_rsplit_partial_kernel_writes_its_workspace_and_not_the_result_its_signature_names():
    import re

    def signature(source: str) -> dict[str, str]:
        return eval(re.search(r"'signature': (\{.*?\})", source).group(1))  # noqa: S307 - the fixture's text

    partial, combine = kernel("column_sums_k4", 0), kernel("column_sums_k4", 1)
    assert "npu_rsplit_partial': True" in partial
    assert _roles(partial, "triton_unk_fused_sum_0", signature(partial)) == {
        "in_ptr0": "in",
        "out_ptr0": "scalar",
        "ws_ptr": "out",
        "xnumel": "scalar",
        "r0_numel": "scalar",
    }
    assert _roles(combine, "triton_unk_fused_sum_1", signature(combine)) == {
        "in_ptr0": "in",
        "out_ptr0": "out",
        "xnumel": "scalar",
        "r0_numel": "scalar",
    }


# Stores the names alone misread, and what the body says instead.
STORES = {
    "an indirect index is data, not a pointer written": (
        "def k(in_ptr0, in_ptr1, out_ptr0, ks0):\n"
        "    tmp0 = tl.load(in_ptr1 + x0)\n"
        "    tl.store(out_ptr0 + (tmp0 + ks0 * x0), tl.load(in_ptr0 + x0))\n",
        {"in_ptr0": "in", "in_ptr1": "in", "out_ptr0": "out", "ks0": "scalar"},
    ),
    "a block pointer made from an argument, advanced, then stored to": (
        "def k(src, dst):\n"
        "    block = tl.make_block_ptr(base=dst, shape=[8], strides=[1], offsets=[0], block_shape=[8], order=[0])\n"
        "    block = tl.advance(block, [0])\n"
        "    tl.store(block, tl.load(src + tl.arange(0, 8)))\n",
        {"src": "in", "dst": "out"},
    ),
    "a tensor descriptor's store method": (
        "def k(a_ptr, c_ptr):\n"
        "    desc = tl.make_tensor_descriptor(c_ptr, shape=[8], strides=[1], block_shape=[8])\n"
        "    desc.store([0], tl.load(a_ptr + tl.arange(0, 8)))\n",
        {"a_ptr": "in", "c_ptr": "out"},
    ),
    "an atomic add into a buffer it also reads": (
        "def k(in_ptr0, acc):\n    tl.atomic_add(acc + x0, tl.load(in_ptr0 + x0) + tl.load(acc + x0))\n",
        {"in_ptr0": "in", "acc": "inout"},
    ),
    "a pointer handed to another function keeps its name's role": (
        "def k(in_ptr0, out_ptr0):\n    helper(out_ptr0, tl.load(in_ptr0 + x0))\n",
        {"in_ptr0": "in", "out_ptr0": "out"},
    ),
}


@pytest.mark.parametrize("body", list(STORES))
def test_a_triton_kernels_roles_come_from_what_its_body_stores_to(body):
    source, expected = STORES[body]
    signature = {name: ("i32" if name == "ks0" else "*fp32") for name in expected}
    assert _roles(source, "k", signature) == expected


def test_a_kernel_whose_source_cannot_be_read_keeps_the_roles_its_names_say():
    signature = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "ws_ptr": "*fp32"}
    assert _roles("def k(:\n", "k", signature) == {"in_ptr0": "in", "out_ptr0": "out", "ws_ptr": "in"}


def test_the_unused_core_range_check_names_only_the_rsplit_partial_that_ignores_its_range():
    # torch_npu 2.14.0's partial kernel over seed 002's real-block loops computes r0__lo, r0__hi and never uses
    # them; the rsplit pair over a flat reduction (column_sums_k4) bounds its loop by them; no other kernel has one.
    from harness.inductor_compat.kernel_checks import text_findings

    flagged = {
        (program, name): text_findings(source)
        for program, entry in PROGRAMS.items()
        for name, source in entry["kernels"].items()
        if text_findings(source)
    }
    assert flagged == {
        ("rsplit_multi_axis", "triton_unk_fused_mul_permute_sum_0"): [
            "unused-core-range: r0__lo, r0__hi are computed from the program's id (its share of the work) and never "
            "used: every program does the whole range"
        ]
    }
    assert "r0__lo" in kernel("column_sums_k4") and "range(r0__lo, r0__hi" in kernel("column_sums_k4")


def test_the_check_reads_the_range_through_aliases_and_ignores_dead_lane_masks():
    from harness.inductor_compat.kernel_checks import unused_core_range

    used = (
        "def k(in_ptr0, ws_ptr, XBLOCK: tl.constexpr):\n"
        "    pid = tl.program_id(0)\n"
        "    lo = pid * 64\n"
        "    hi = tl.minimum(lo + 64, 1000)\n"
        "    xmask = pid * 4 + tl.arange(0, XBLOCK) < 9\n"  # a dead mask of lanes: not a range
        "    acc = 0.0\n"
        "    for r in range(lo, hi, 8):\n"
        "        acc += tl.load(in_ptr0 + r)\n"
        "    tl.store(ws_ptr + pid, acc)\n"
    )
    assert unused_core_range(used) is None
    unused = used.replace("range(lo, hi, 8)", "range(0, 1000, 8)")
    assert unused_core_range(unused) == (
        "lo, hi are computed from the program's id (its share of the work) and never used: every program does the "
        "whole range"
    )


@pytest.mark.parametrize(
    "rows, said",
    [
        ("shares", "the 4 partials of the split reduction add up to eager's reduction: each holds its share"),
        (
            "whole",
            "each of the 4 partials of the split reduction holds the whole reduction, not its share: their sum is "
            "4x eager's (the per-core range is not applied)",
        ),
        (
            "half",
            "the 4 partials of the split reduction do not add up to eager's reduction (their sum is 0.5x "
            "eager's in magnitude)",
        ),
    ],
)
def test_the_share_check_tells_a_partial_holding_its_share_from_one_holding_everything(rows, said):
    import torch

    from harness.judge.compare import VerdictPolicy
    from harness.probe.shares import share_answer

    values = torch.arange(64, dtype=torch.float32).reshape(16, 4)  # 16 summed, 4 outputs
    expected = values.sum(0)
    workspace = {
        "shares": values.reshape(4, 4, 4).sum(1),  # each of 4 cores sums its 4 rows
        "whole": expected.repeat(4, 1),  # each core sums all 16
        "half": values.reshape(4, 4, 4).sum(1) / 2,
    }[rows]
    assert share_answer(workspace.reshape(-1), expected, VerdictPolicy()) == said
    assert share_answer(torch.zeros(5), expected, VerdictPolicy()) is None  # not a whole number of rows
