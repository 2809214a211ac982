"""Localization without codegen's kernel-to-buffer map.

Inductor records which buffers each kernel computes through
`debug.set_kernel_post_grad_provenance_tracing`, called from each scheduling's `codegen_comment` with the
kernel's name. torch_npu's Triton schedulings call `codegen_comment(node_schedule)` without one, so NPU
kernels have no such record. Here the C++ scheduling's comment is dropped the same way (a fresh compile
cache: nothing is taken from entries made with the record), and the answers must be the same.
"""

import pytest
import torch

from harness import records as R
from harness.inductor_compat import graphs
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

CASES = load_registry().cases


@pytest.fixture
def no_provenance(monkeypatch, tmp_path):
    from torch._inductor.codegen.cpp import CppScheduling

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(CppScheduling, "codegen_comment", lambda self, node_schedule, kernel_name=None: None)
    torch.compiler.reset()
    yield
    torch.compiler.reset()


def _kernels_named(record):
    """The generated kernels the record's graphs have in codegen's map (none, when it was dropped)."""
    found = record.first_divergent_kernel
    info = graphs.graph_info(found.module_path) if found and found.module_path else None
    return [name for name, _ in info.kernels if name.startswith("cpp_")] if info else None


@pytest.mark.parametrize(
    "name, dtype, mode, inject, launch",
    [
        ("seed_index_as_strided_view", torch.int64, "inference", "boundary-downcast", 0),
        ("seed_rmsnorm_weight_grad_small", torch.bfloat16, "inference", "reduction-partial", 0),
        ("relu_mlp", torch.float32, "training", "fault-offset@3", 3),
        ("relu_mlp", torch.float32, "training", "fault-scale@9", 9),
    ],
)
def test_the_kernel_is_named_without_the_kernel_map(no_provenance, name, dtype, mode, inject, launch):
    record = run_case(CASES[name], dtype, mode, RunConfig(inject=inject, bisect=True))
    found = record.first_divergent_kernel
    assert record.status == R.FAIL and found.answer == R.Answer.KERNEL, record.summary()
    # Wrong on eager values of its inputs (under a narrowing launcher: as that launcher calls it).
    assert (
        found.launch_index == launch
        and ("kernel is wrong" in found.isolated or found.isolated.startswith("kernel as the emulated launcher"))
        and "is wrong" in found.isolated
    ), found.line()
    assert _kernels_named(record) == []  # the map was empty: the answer came from the buffers written


def test_a_correct_program_is_not_blamed_without_the_kernel_map(no_provenance):
    for name, dtype in (("relu_mlp", torch.float32), ("layernorm_gelu", torch.bfloat16)):
        record = run_case(CASES[name], dtype, "training", RunConfig(bisect="always"))
        found = record.first_divergent_kernel
        assert record.status == R.PASS and (found.answer, found.diverged) == (R.Answer.NONE, False)
        assert [a for a in found.absorbed if a.kind not in ("drift", "immaterial")] == []
        assert found.compared_buffers > 0
