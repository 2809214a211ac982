"""Whole Hugging Face models, trained one step the way torchbench's accuracy check does.

`huggingface.py --accuracy --train --float32 --backend inductor` found the first
seed on AllenaiLongformerBase. These cases run that check: batch size 1,
dropout off, `fallback_random=True`, float32, fixed seeds, one SGD step
compiled as a whole (graph breaks included), then loss, every parameter
gradient and every updated parameter compared, with torchbench's training
tolerance (1e-2) and RMSE rule against a float64 reference; eager runs twice
and a difference there is its own status.

Each model comes in two sizes: `full` (the published model's dimensions and
torchbench's sequence length; GPU/NPU nightly) and `ci` (a tiny config of the
same architecture that two CPU cores compile in about a minute). Models are
built from configs: no weights are downloaded. Needs `transformers`
(`pip install -e '.[models]'`); without it these cases skip.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from harness import Case, Program, Tolerance, contiguous

# torchbench huggingface.py: training accuracy at tolerance 1e-2 (fp32).
HF_TRAINING_TOLERANCE = {torch.float32: Tolerance(rtol=1e-2, atol=1e-2)}
TORCHBENCH_OPTIONS = {"fallback_random": True}
BATCH = 1
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def token_ids(seq: int, vocab: int) -> Any:
    return contiguous((BATCH, seq), dtype=torch.int64, fill="randint", low=0, high=vocab)


def masked_lm_inputs(config: Any, seq: int) -> dict[str, Any]:
    return {"input_ids": token_ids(seq, config.vocab_size), "labels": token_ids(seq, config.vocab_size)}


def classification_inputs(config: Any, seq: int) -> dict[str, Any]:
    labels = contiguous((BATCH,), dtype=torch.int64, fill="randint", low=0, high=config.num_labels)
    return {"input_ids": token_ids(seq, config.vocab_size), "labels": labels}


def seq2seq_inputs(config: Any, seq: int) -> dict[str, Any]:
    return {
        "input_ids": token_ids(seq, config.vocab_size),
        "decoder_input_ids": token_ids(seq, config.vocab_size),
        "labels": token_ids(seq, config.vocab_size),
    }


@dataclass(frozen=True)
class HFModel:
    """One torchbench Hugging Face model: its class, the two configs, the sequence lengths, its inputs."""

    name: str
    model_class: str
    config_class: str
    inputs: Callable[[Any, int], dict[str, Any]]
    full: dict[str, Any]
    full_seq: int  # torchbench's get_sequence_length for this model
    ci: dict[str, Any]
    ci_seq: int
    tags: tuple[str, ...] = field(default=())

    def build(self, size: str) -> Callable[[torch.dtype], Program]:
        def build(dtype: torch.dtype) -> Program:
            import transformers

            config = getattr(transformers, self.config_class)(**(self.full if size == "full" else self.ci))
            torch.manual_seed(0)  # weights come from the global generator
            model = getattr(transformers, self.model_class)(config).to(dtype)
            return Program(model, kwargs=self.inputs(config, self.full_seq if size == "full" else self.ci_seq))

        return build

    def cases(self) -> list[Case]:
        return [
            Case(
                name=f"{self.name}_{size}",
                build=self.build(size),
                tags=("model", "huggingface", *self.tags),
                dtypes=(torch.float32,),
                modes=("train_step",),
                tolerances=HF_TRAINING_TOLERANCE,
                compile_options=TORCHBENCH_OPTIONS,
                size=size,
                requires=("transformers",),
                description=f"{self.model_class} ({size}) one training step, torchbench style",
            )
            for size in ("ci", "full")
        ]


MODELS = [
    HFModel(
        name="longformer",
        model_class="LongformerForMaskedLM",
        config_class="LongformerConfig",
        inputs=masked_lm_inputs,
        tags=("seed", "quick", "longformer"),
        # allenai/longformer-base-4096
        full=dict(
            vocab_size=50265,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            attention_window=512,
            max_position_embeddings=4098,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            layer_norm_eps=1e-5,
            **NO_DROPOUT,
        ),
        full_seq=1024,
        ci=dict(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            attention_window=16,
            max_position_embeddings=130,
            type_vocab_size=1,
            pad_token_id=1,
            bos_token_id=0,
            eos_token_id=2,
            layer_norm_eps=1e-5,
            **NO_DROPOUT,
        ),
        ci_seq=64,
    ),
    HFModel(
        name="bert",
        model_class="BertForMaskedLM",
        config_class="BertConfig",
        inputs=masked_lm_inputs,
        # bert-base-uncased
        full=dict(
            vocab_size=30522,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=512,
            **NO_DROPOUT,
        ),
        full_seq=512,
        ci=dict(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
            **NO_DROPOUT,
        ),
        ci_seq=32,
    ),
    HFModel(
        name="gpt2",
        model_class="GPT2ForSequenceClassification",
        config_class="GPT2Config",
        inputs=classification_inputs,
        # gpt2 (124M)
        full=dict(
            vocab_size=50257,
            n_positions=1024,
            n_embd=768,
            n_layer=12,
            n_head=12,
            num_labels=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            pad_token_id=50256,
        ),
        full_seq=1024,
        ci=dict(
            vocab_size=128,
            n_positions=64,
            n_embd=32,
            n_layer=2,
            n_head=2,
            num_labels=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
        ),
        ci_seq=32,
    ),
    HFModel(
        name="t5_small",
        model_class="T5ForConditionalGeneration",
        config_class="T5Config",
        inputs=seq2seq_inputs,
        # t5-small
        full=dict(
            vocab_size=32128,
            d_model=512,
            d_kv=64,
            d_ff=2048,
            num_layers=6,
            num_heads=8,
            feed_forward_proj="relu",
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
        full_seq=1024,
        ci=dict(
            vocab_size=128,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            feed_forward_proj="relu",
            dropout_rate=0.0,
            decoder_start_token_id=0,
            pad_token_id=0,
        ),
        ci_seq=32,
    ),
]

CASES = [case for model in MODELS for case in model.cases()]
