"""What the OpInfo source leaves out, and why: the ideas of PyTorch's own Inductor OpInfo test.

PyTorch's `test/inductor/test_torchinductor_opinfo.py` skips or expects to
fail ops that are random (it detects `torch.Tag.nondeterministic_seeded` ops
under a dispatch mode and then stops comparing values), ops whose outputs are
undefined (`empty`), ops Inductor intentionally does not handle (`resize_`),
flaky ones, and dtypes the device does not support. Here a skip is decided
once per op (from OpInfo's metadata), once per op and dtype, or once per
sample (from a probe of the sample in eager: `opinfo.catalog.probe`), and every
skip has a reason: `harness list --tag opinfo --skipped` prints them. A run
whose inputs eager rejects (a layout the op refuses) is a `skip` record with
eager's exception as its reason.
"""

from __future__ import annotations

from typing import Any

import torch

f32, bf16, f16, i64, i32, b8 = torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.bool
ALL = frozenset({f32, bf16, f16, i64, i32, b8})

UNDEFINED = "output values are undefined (OpInfo has_nondeterministic_output: uninitialized memory or a random kernel)"
INTENTIONAL = "intentionally not handled by Inductor (PyTorch's Inductor OpInfo test: intentionally_not_handled)"
SPARSE = "sparse tensors: not compiled by Inductor"
FLAKY = "flaky under Inductor on CPU (PyTorch's Inductor OpInfo test: inductor_skips['cpu'])"
RANDOM_BY_NAME = "random: draws random numbers, so eager and compiled draw different ones"


def op_key(op: Any) -> str:
    """PyTorch's name for an op variant, `max.reduction_with_dim`: what the skip tables are keyed by."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


# op key ("name" or "name.variant") -> reason, for every dtype.
OP_SKIPS: dict[str, str] = {
    "resize_": INTENTIONAL,
    "resize_as_": INTENTIONAL,
    # Random by construction, whatever the sample (the probe finds the others).
    "nn.functional.rrelu": RANDOM_BY_NAME + " (OpInfo: skip_correctness_check_compile_vs_eager)",
    "svd_lowrank": RANDOM_BY_NAME + " (a random projection)",
    "pca_lowrank": RANDOM_BY_NAME + " (a random projection)",
    # Eigen/singular vectors are defined up to sign and order; LAPACK fallbacks agree, but nothing is compared
    # that a decomposition could change legitimately: the op's own tests check reconstructions instead.
}

# op key -> (dtypes, reason): skipped for those dtypes only.
DTYPE_SKIPS: dict[str, tuple[frozenset, str]] = {
    "linalg.ldl_factor": (frozenset({f32}), FLAKY),
    "nn.functional.cosine_embedding_loss": (frozenset({b8}), FLAKY),
    "index_reduce.prod": (frozenset({f16}), FLAKY),
    "index_reduce.mean": (frozenset({f16}), FLAKY),
}


# Ops whose result jumps where two values of their input are equal: an order, an index, or the element a
# maximum's gradient goes to. Between equal values eager picks one by its own algorithm, and any other pick is as
# right, so their samples get inputs without ties (`tie_free`); where an input cannot have them (bool, a layout
# that repeats elements) the sample is left out with this reason.
DISCONTINUOUS = frozenset(
    {
        "sort",
        "msort",
        "argsort",
        "topk",
        "kthvalue",
        "median",
        "nanmedian",
        "mode",
        "argmax",
        "argmin",
        "max.reduction_with_dim",
        "min.reduction_with_dim",
        "max.reduction_no_dim",
        "min.reduction_no_dim",
        "amax",
        "amin",
        "aminmax",
        "cummax",
        "cummin",
        "masked.argmax",
        "masked.argmin",
        "masked.median",
        "masked.amax",
        "masked.amin",
        "nn.functional.max_pool1d",
        "nn.functional.max_pool2d",
        "nn.functional.max_pool3d",
        "nn.functional.adaptive_max_pool1d",
        "nn.functional.adaptive_max_pool2d",
        "nn.functional.adaptive_max_pool3d",
    }
)
TIES = (
    "ties: the op's result (an order, an index, where a maximum's gradient goes) is decided between equal "
    "input values by eager's own algorithm, and any other choice is as right"
)


def discontinuous(op) -> bool:
    return op_key(op) in DISCONTINUOUS


def op_skip(op) -> str | None:
    """Why a whole op variant is left out, or None."""
    key = op_key(op)
    if key in OP_SKIPS:
        return OP_SKIPS[key]
    if getattr(op, "has_nondeterministic_output", False):
        return UNDEFINED
    if getattr(op, "skip_correctness_check_compile_vs_eager", False):
        return "OpInfo: skip_correctness_check_compile_vs_eager (no meaningful eager reference)"
    if "sparse" in key:
        return SPARSE
    if key.startswith("jiterator"):
        return "a Jiterator kernel (CUDA eager only): not expected to work with Inductor"
    return None


def dtype_skip(op, dtype: torch.dtype) -> str | None:
    dtypes, reason = DTYPE_SKIPS.get(op_key(op), (frozenset(), ""))
    return reason if dtype in dtypes else None
