"""Correct programs: normalizations (layer norm, RMSNorm, group norm), forward and backward.

Each is a mean/variance reduction feeding pointwise work and, in training, the
two-pass backward reductions over the batch for the weight gradients. Inductor
fuses and reorders them; the results are as accurate as eager's.
"""

import torch
from torch import nn

from harness import KnownFailure, Program, case, contiguous, permuted


HALF_AND_FLOAT = (torch.bfloat16, torch.float16, torch.float32)
BOTH_MODES = ("inference", "training")


@case(tags=("correct", "norm", "layer_norm", "bf16", "fp16", "quick"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_layer_norm(dtype):
    """nn.LayerNorm over the last dim (768) with affine weight and bias."""
    torch.manual_seed(0)
    norm = nn.LayerNorm(768)
    with torch.no_grad():  # non-trivial affine parameters, so their gradients and effect are visible
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return Program(norm.to(dtype), [contiguous((4, 128, 768), requires_grad=True)])


def layer_norm_two_dims(x, weight, bias):
    return nn.functional.layer_norm(x, (32, 48), weight, bias, eps=1e-6)


@case(
    tags=("correct", "norm", "layer_norm", "permuted", "bf16", "fp16"),
    dtypes=HALF_AND_FLOAT,
    modes=BOTH_MODES,
    # torch_npu's own backend (found_torch_npu_reduction_tile_overread): the float32 backward's reduction over
    # (32, 48) loads the saved input by r0_2 + 48*x0 + 768*r0_3 with x0mask alone, past its end.
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental masks a load of a tiled multi-axis reduction by no reduction mask: "
            "the last tile reads past the input's end (docs/found/torch_npu_reduction_tile_overread.md)",
            npu_backend="triton_experimental",
            torch_npu=">2.13.0rc1,<=2.14.0",
            mode="training",
            dtype="float32",
        ),
        # torch_npu 2.13.0rc1, every dtype: the backward's reduction over (32, 48) indexes by r0_1, a range node it
        # never registered, and upstream Inductor's shape check asserts (torch 2.13 `codegen/triton.py` line 305).
        KnownFailure(
            "torch_npu 2.13.0rc1's codegen indexes the backward's two-dim reduction by r0_1, a range node it never "
            "registered: Inductor asserts 'Unregistered range symbol: r0_1' and the kernel is not written",
            npu_backend="triton_experimental",
            torch_npu=">=2.13.0rc1,<=2.13.0rc1",
            mode="training",
        ),
    ),
)
def correct_layer_norm_two_dims_permuted(dtype):
    """Functional layer norm over the last two dims (1536 elements) of a permuted input; weight and bias are inputs."""
    return Program(
        layer_norm_two_dims,
        [
            permuted((32, 16, 48), (1, 0, 2), requires_grad=True),
            contiguous((32, 48), fill="rand", low=0.5, high=1.5, requires_grad=True),
            contiguous((32, 48), requires_grad=True),
        ],
    )


class RMSNorm(nn.Module):
    """Manual RMSNorm: x * rsqrt(mean(x^2) + eps) * w."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


@case(tags=("correct", "norm", "rmsnorm", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_rmsnorm(dtype):
    """Manual RMSNorm in the input's dtype over 1024 features, forward and backward (weight gradient too)."""
    torch.manual_seed(0)
    return Program(RMSNorm(1024).to(dtype), [contiguous((4, 96, 1024), requires_grad=True)])


class RMSNormUpcast(nn.Module):
    """RMSNorm as Llama writes it: statistics in float32, result cast back, then the weight."""

    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)
        self.eps = eps

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


@case(tags=("correct", "norm", "rmsnorm", "bf16", "fp16"), dtypes=HALF_AND_FLOAT, modes=BOTH_MODES)
def correct_rmsnorm_upcast(dtype):
    """RMSNorm with float32 statistics (Llama style) over 2048 features."""
    torch.manual_seed(0)
    return Program(RMSNormUpcast(2048).to(dtype), [contiguous((2, 64, 2048), requires_grad=True)])


@case(
    tags=("correct", "norm", "group_norm", "bf16", "fp16"),
    dtypes=HALF_AND_FLOAT,
    modes=BOTH_MODES,
    # torch_npu's own backend (found_torch_npu_select_lane_overread): the backward loads the weight's columns
    # 1-3 of each group as widened tiles whose mask leaves the column out, one to three elements past its end.
    known_failures=(
        KnownFailure(
            "torch_npu's triton_experimental select-lane rewrite masks a widened load without the column's offset: "
            "the last block reads past the weight's end (docs/found/torch_npu_select_lane_overread.md)",
            npu_backend="triton_experimental",
            torch_npu=">=2.13.0,<=2.14.0",
            mode="training",
        ),
    ),
)
def correct_group_norm(dtype):
    """nn.GroupNorm, 8 groups of 4 channels x 16x16 (1024 elements per group), affine."""
    torch.manual_seed(0)
    norm = nn.GroupNorm(8, 32)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return Program(norm.to(dtype), [contiguous((4, 32, 16, 16), requires_grad=True)])


class LayerNormLinearGelu(nn.Module):
    """LayerNorm -> Linear -> GELU (tanh approximation) -> Linear, with a residual."""

    def __init__(self, width, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x)), approximate="tanh"))


@case(tags=("correct", "norm", "layer_norm", "gelu", "bf16"), dtypes=(torch.bfloat16, torch.float32), modes=BOTH_MODES)
def correct_layernorm_linear_gelu_residual(dtype):
    """bf16 layer norm + linear + tanh-GELU + linear + residual (a transformer MLP block)."""
    torch.manual_seed(0)
    return Program(LayerNormLinearGelu(384, 1024).to(dtype), [contiguous((4, 64, 384), requires_grad=True)])


class GeluLinearLayerNorm(nn.Module):
    """Linear (no bias) -> exact GELU -> LayerNorm without affine parameters (post-norm order)."""

    def __init__(self, width_in, width):
        super().__init__()
        self.proj = nn.Linear(width_in, width, bias=False)
        self.norm = nn.LayerNorm(width, elementwise_affine=False)

    def forward(self, x):
        return self.norm(nn.functional.gelu(self.proj(x)))


@case(tags=("correct", "norm", "layer_norm", "gelu", "bf16"), dtypes=(torch.bfloat16,), modes=BOTH_MODES)
def correct_linear_gelu_layernorm_bf16(dtype):
    """bf16 linear (no bias) + exact GELU + layer norm without affine, over 1024 features."""
    torch.manual_seed(0)
    return Program(GeluLinearLayerNorm(512, 1024).to(dtype), [contiguous((256, 512), requires_grad=True)])
