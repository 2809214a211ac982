"""Seed 002: the weight gradient of an RMSNorm over a permuted input.

A multi-axis reduction (dims 0, 1, 2) over a permuted fp32 gradient times a
bf16 activation. The NPU codegen flattened the reduction axes into one and
scoped the accumulator inside the loop nest, storing partial sums. CPU and CUDA
Inductor compile it correctly; its value is on the NPU, where it must fail
before that fix and pass after it.
"""

import torch
from torch import nn

from harness import KnownFailure, Program, Tolerance, case, contiguous, permuted

# The upstream report (a torch_npu issue, in Chinese) has no public link we could find; it is named in words.
ISSUE = (
    "torch_npu Inductor (NPU Triton codegen) report: multi-axis reduction scoped wrong after flatten "
    "(RMSNorm weight gradient, sum over dims (0, 1, 2) of a permuted bf16 x fp32 product)"
)
# The report checks with assert_close(rtol=1e-2, atol=1e-2) on the bf16 result.
REPORT_TOLERANCE = {torch.bfloat16: Tolerance(rtol=1e-2, atol=1e-2)}


def rms_norm_weight_grad(grad_out_base, q, q_square_sum):
    grad_out = grad_out_base.permute(0, 2, 1, 3)
    inv_rms = torch.rsqrt(q_square_sum.unsqueeze(-1) / q.shape[-1] + 1e-6)
    grad_weight = (grad_out * q.float() * inv_rms).sum(dim=(0, 1, 2))
    return grad_weight.to(torch.bfloat16)


def _inputs(batch, seq, heads, head_dim):
    return [
        contiguous((batch, heads, seq, head_dim), dtype=torch.float32),
        contiguous((batch, seq, heads, head_dim)),  # the case's dtype: bf16 as reported
        contiguous((batch, seq, heads), dtype=torch.float32, fill="rand", low=1.0, high=2.0),
    ]


@case(
    tags=("seed", "quick", "reduction", "permute"),
    dtypes=(torch.bfloat16,),
    issue=ISSUE,
    tolerances=REPORT_TOLERANCE,
    size="full",
)
def seed_rmsnorm_weight_grad(dtype):
    """The report's shapes: batch 2, seq 4096, heads 64, head_dim 128."""
    return Program(rms_norm_weight_grad, _inputs(2, 4096, 64, 128))


@case(
    tags=("seed", "quick", "reduction", "permute"), dtypes=(torch.bfloat16,), issue=ISSUE, tolerances=REPORT_TOLERANCE
)
def seed_rmsnorm_weight_grad_small(dtype):
    """The same program at shapes two CPU cores afford (head_dim kept at 128)."""
    return Program(rms_norm_weight_grad, _inputs(2, 64, 8, 128))


# Found by this harness in torch_npu's own codegen, on the CPU surrogate (docs/found/, which has the repro).
FOUND_RSPLIT = "docs/found/torch_npu_rsplit_unused_core_range.md (found by this harness, on the CPU surrogate)"
RSPLIT_REASON = (
    "torch_npu's triton_experimental rsplit partial kernel computes each core's share of a multi-axis reduction "
    "(r0__lo, r0__hi) and never uses it: all 40 programs sum the whole reduction "
    "(codegen/triton.py, _npu_rewrite_rsplit_partial_body)"
)


@case(
    tags=("found", "torch_npu", "reduction", "permute"),
    dtypes=(torch.bfloat16,),
    issue=FOUND_RSPLIT,
    tolerances=REPORT_TOLERANCE,
    known_failures=(KnownFailure(RSPLIT_REASON, npu_backend="triton_experimental", torch_npu=">=2.13.0,<=2.14.0"),),
)
def found_torch_npu_rsplit_unused_core_range(dtype):
    """Seed 002's program at the smallest shape torch_npu splits across cores: (2, 128, 8, 16), 2048 summed.

    Its sum over dims 0, 1 and 2 cannot be merged into one axis. torch_npu 2.13.0's and 2.14.0's
    `triton_experimental` codegen (`torch_npu/_inductor/triton_experimental/codegen/triton.py`, 2.14.0's lines)
    flags the kernel as the partial of a cross-core split (`codegen_node_schedule`, 5548-5551) once
    `_npu_rsplit_outer_applicable` holds (5281-5367: one sum, x <= 40 * 256, r >= 2048, r >= x), after
    `_apply_linearize` promoted the unmergeable axes to real-block loops (7054-7080). The prologue computes each
    core's range, `r0__lo` and `r0__hi` (4088-4112), but `_npu_rewrite_rsplit_partial_body` (4502-4560) bounds only
    a flat `for r0_offset in range(0, r0_numel, ...)` loop, which the promoted body does not have: every one of
    the 40 programs sums the whole reduction, and the combine kernel adds 40 copies (compiled = 40 x eager). Upstream
    Inductor, the surrogate's C++ and Triton modes, and torch_npu's default backend compute it right."""
    return Program(rms_norm_weight_grad, _inputs(2, 128, 8, 16))


class PermutedRMSNorm(nn.Module):
    """RMSNorm applied to a (batch, heads, seq, dim) tensor read as (batch, seq, heads, dim)."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        x = x.permute(0, 2, 1, 3)
        inv_rms = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        return (x.float() * inv_rms).to(x.dtype) * self.weight.to(x.dtype)


@case(
    tags=("seed", "quick", "reduction", "permute", "training"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("training",),
    issue=ISSUE,
)
def rmsnorm_permuted_training(dtype):
    """The same weight gradient as autograd derives it: forward + backward of a permuted RMSNorm."""
    return Program(PermutedRMSNorm(128), [contiguous((2, 8, 32, 128), requires_grad=True)])
