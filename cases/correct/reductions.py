"""Correct programs: reductions in bf16, fp16 and fp32 (the localizer must blame none of their kernels).

Inductor reorders and vectorizes these sums (and accumulates half types in
float32, as eager does), so elements differ from eager by rounding but not by
more than eager's own error against a float64 reference. Shapes give real
reduction loops: hundreds to a few thousand elements per reduction.
"""

import torch

from harness import KnownFailure, Program, case, contiguous, permuted


HALF_AND_FLOAT = (torch.bfloat16, torch.float16, torch.float32)
BOTH_MODES = ("inference", "training")


def sum_and_mean_lastdim(x):
    return x.sum(-1), x.mean(-1)


@case(tags=("correct", "reduction", "sum", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_sum_mean_lastdim(dtype):
    """sum and mean over the last dim (1536 elements per row), forward and backward."""
    return Program(sum_and_mean_lastdim, [contiguous((48, 1536), requires_grad=True)])


def sum_mean_several_dims(x):
    return x.sum(dim=(0, 2)), x.mean(dim=(1, 2)), x.sum()


@case(tags=("correct", "reduction", "sum", "multi-dim", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_sum_mean_several_dims(dtype):
    """sum over dims (0, 2), mean over (1, 2) and a full sum of a 3-d tensor (1k-4k elements per reduction)."""
    return Program(sum_mean_several_dims, [contiguous((16, 48, 96), requires_grad=True)])


def reduce_permuted(x):
    # x is (48, 32, 64) viewed from a (32, 64, 48) storage: the reduced dims are not the innermost ones.
    return x.sum(dim=(1, 2)), x.mean(dim=0), x.amax(dim=-1)


@case(tags=("correct", "reduction", "permuted", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_reduce_permuted(dtype):
    """sum, mean and amax over a permuted (dense, non-contiguous) input, over one and two dims."""
    return Program(reduce_permuted, [permuted((32, 64, 48), (2, 0, 1), requires_grad=True)])


def variance(x):
    return x.var(dim=-1), x.var(dim=(0, 1), correction=0), torch.var_mean(x, dim=1)


@case(tags=("correct", "reduction", "var", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_var(dtype):
    """var (unbiased, biased) and var_mean over one and several dims (Welford reductions)."""
    return Program(variance, [contiguous((24, 40, 128), fill="rand", low=-2, high=6, requires_grad=True)])


def variance_permuted(x):
    return x.var(dim=(1, 2)), x.std(dim=0)


@case(
    tags=("correct", "reduction", "var", "permuted", "bf16", "fp16"),
    dtypes=HALF_AND_FLOAT,
    modes=BOTH_MODES,
    # The backward's mean over (dims 1, 2) is split across the cores along a looped static node (r0_1) whose
    # `r0_1numel` the kernel never defines, as found_torch_npu_rsplit_undefined_numel's r0_2numel.
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental splits a static multi-axis reduction across the cores along a looped "
            "axis and bounds each core's share by a <node>numel it never defines "
            "(docs/found/torch_npu_rsplit_undefined_numel.md)",
            npu_backend="triton_experimental",
            torch_npu=">2.13.0rc1,<=2.14.0",
            mode="training",
        ),
    ),
)
def correct_var_permuted(dtype):
    """var over two dims and std over one dim of a permuted input."""
    return Program(variance_permuted, [permuted((40, 24, 64), (1, 2, 0), requires_grad=True)])


def amax_logsumexp(x):
    return x.amax(dim=-1), torch.logsumexp(x, dim=-1), torch.logsumexp(x, dim=(0, 1)), x.amin(dim=0)


@case(tags=("correct", "reduction", "amax", "logsumexp", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_amax_logsumexp(dtype):
    """amax, amin and logsumexp over one and two dims."""
    return Program(amax_logsumexp, [contiguous((16, 32, 512), fill="rand", low=-4, high=4, requires_grad=True)])


def cumulative_sums(x):
    return torch.cumsum(x, dim=-1), torch.cumsum(x, dim=0)


@case(tags=("correct", "reduction", "cumsum", "scan", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_cumsum(dtype):
    """cumsum along the last dim (512) and along the first dim (64), forward and backward."""
    return Program(cumulative_sums, [contiguous((64, 512), fill="rand", low=-1, high=1, requires_grad=True)])


def softmax_lastdim(x):
    return torch.softmax(x, -1)


@case(tags=("correct", "reduction", "softmax", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_softmax_lastdim(dtype):
    """Softmax over the last dim (an odd length, 1031), forward and backward."""
    return Program(softmax_lastdim, [contiguous((32, 1031), fill="rand", low=-6, high=6, requires_grad=True)])


def log_softmax_dims(x):
    return torch.log_softmax(x, dim=1), torch.log_softmax(x.float(), dim=-1).to(x.dtype)


@case(tags=("correct", "reduction", "softmax", "log_softmax", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_log_softmax(dtype):
    """log_softmax over a middle dim (256) and, upcast to fp32, over the last dim (384)."""
    return Program(log_softmax_dims, [contiguous((8, 256, 384), requires_grad=True)])


def softmax_permuted(x):
    return torch.softmax(x * 0.125, dim=-1)


@case(tags=("correct", "reduction", "softmax", "permuted", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_softmax_permuted(dtype):
    """Scaled softmax over the last dim of a transposed (dense, non-contiguous) input."""
    return Program(softmax_permuted, [permuted((4, 768, 96), (0, 2, 1), requires_grad=True)])
