"""Model cases: torchbench-style training steps of Hugging Face models (ci sizes on CPU)."""

import pytest
import torch

from harness import records as R
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

pytest.importorskip("transformers", reason="model cases need transformers: pip install -e '.[models]'")

CASES = load_registry().cases


def test_every_model_comes_in_ci_and_full_sizes_with_torchbench_settings():
    for model in ("longformer", "bert", "gpt2", "t5_small"):
        ci, full = CASES[f"{model}_ci"], CASES[f"{model}_full"]
        assert (ci.size, full.size) == ("ci", "full")
        assert ci.modes == full.modes == ("train_step",)
        assert ci.compile_options == {"fallback_random": True}
        assert ci.tolerances[torch.float32].rtol == 1e-2


def test_longformer_full_has_the_published_dimensions_and_torchbench_inputs():
    program = CASES["longformer_full"].build(torch.float32)
    config = program.fn.config
    assert type(program.fn).__name__ == "LongformerForMaskedLM"
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (768, 12, 12)
    assert (config.vocab_size, config.max_position_embeddings) == (50265, 4098)
    assert list(config.attention_window) == [512] * 12
    assert config.hidden_dropout_prob == config.attention_probs_dropout_prob == 0.0
    assert program.kwargs["input_ids"].size == (1, 1024) and program.kwargs["labels"].size == (1, 1024)


def test_a_fault_in_one_backward_kernel_of_longformer_is_named():
    clean = run_case(CASES["longformer_ci"], torch.float32, "train_step", RunConfig(bisect="always"))
    assert clean.status == R.PASS and clean.first_divergent_kernel.diverged is False
    assert [a for a in clean.first_divergent_kernel.absorbed if a.kind not in ("drift", "immaterial")] == []
    ranges = clean.first_divergent_kernel.graph_launches
    graph = max((g for g in ranges if g.startswith("backward")), key=lambda g: ranges[g][1])
    # The first generated kernel of the largest backward graph (later ones may compute indices,
    # which a fault turns into out-of-bounds reads, and some write gradients that are all zero).
    target = next(
        k.index
        for k in clean.first_divergent_kernel.kernels
        if k.graph == graph and k.compared and k.name.startswith("cpp_")
    )

    faulted = run_case(
        CASES["longformer_ci"], torch.float32, "train_step", RunConfig(bisect=True, inject=f"fault-offset@{target}")
    )
    kernel = faulted.first_divergent_kernel
    assert faulted.status == R.FAIL
    assert kernel.answer == R.Answer.KERNEL and (kernel.graph, kernel.launch_index) == (graph, target)
    assert kernel.name == faulted.injection_stats.hits[0].split(":", 1)[1]
    assert kernel.isolated.startswith("kernel is wrong")
    assert faulted.graphs["graphs"] >= 2 and faulted.graphs["graph_breaks"] >= 1


@pytest.mark.nightly(reason='localizes Longformer twice, values on host and not (26 s)')
def test_longformer_with_values_kept_ahead_in_host_memory_gets_the_same_answers(monkeypatch):
    # Longformer's forward has launches asking for values late in its graph (an attention-mask term every
    # layer shares): the values the stepper keeps on the way go to host memory, as on a device, and every
    # answer, of a passing run and of a failing one, stays what it was with everything kept in place.
    from harness.probe import node_values as values

    runs = {}
    for ahead in (10**9, 0):
        monkeypatch.setattr(values, "OFFLOAD_ON_CPU", ahead == 0)
        monkeypatch.setattr(values, "AHEAD_KEPT_ON_DEVICE", ahead)
        clean = run_case(CASES["longformer_ci"], torch.float32, "train_step", RunConfig(bisect="always"))
        faulted = run_case(
            CASES["longformer_ci"], torch.float32, "train_step", RunConfig(bisect=True, inject="fault-offset@40")
        )
        runs[ahead] = [
            (r.status, k.answer, k.launch_index, k.name, k.compared_buffers)
            for r in (clean, faulted)
            for k in [r.first_divergent_kernel]
        ]
    assert runs[0] == runs[10**9]
    assert runs[0][0][:2] == (R.PASS, R.Answer.NONE) and runs[0][1][:3] == (R.FAIL, R.Answer.KERNEL, 40)
