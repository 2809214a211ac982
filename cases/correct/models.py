"""Correct programs: small models, forward and backward.

A 2-layer MLP with LayerNorm and GELU, a tiny attention block written with
matmul + softmax, a conv2d + batch norm (training mode: running statistics
updated) + ReLU module, and an embedding + mean pooling + linear classifier.
Each compiles to many kernels per direction, all of them correct.
"""

import math

import torch
from torch import nn

from harness import KnownFailure, Program, case, contiguous


class MLP(nn.Module):
    """Linear -> LayerNorm -> GELU -> Linear -> LayerNorm -> GELU -> Linear."""

    def __init__(self, width_in, hidden, width_out):
        super().__init__()
        self.fc1 = nn.Linear(width_in, hidden)
        self.norm1 = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, width_out)

    def forward(self, x):
        h = nn.functional.gelu(self.norm1(self.fc1(x)))
        h = nn.functional.gelu(self.norm2(self.fc2(h)))
        return self.head(h)


@case(
    tags=("correct", "model", "mlp", "layer_norm", "gelu", "bf16", "quick"),
    dtypes=(torch.bfloat16, torch.float32),
    modes=("inference", "training"),
    # torch_npu 2.13.0rc1 decomposes gelu to its tanh form whatever `approximate` says (`torch_npu/_inductor/
    # decomposition.py` lines 224-234); 2.13.0 and later keep the erf form in compatible mode, which the surrogate
    # declares (its eager ops are the CPU's). A plain gelu compiled by rc1 is 2.4e-7 from eager's tanh form and
    # 4.7e-4 from its erf form; bfloat16's tolerance takes that in.
    known_failures=(
        KnownFailure(
            "torch_npu 2.13.0rc1 decomposes gelu(approximate='none') to the tanh form, in compatible mode too",
            npu_backend="triton_experimental",
            torch_npu=">=2.13.0rc1,<=2.13.0rc1",
            dtype="float32",
        ),
    ),
)
def correct_mlp_layernorm_gelu(dtype):
    """A 2-layer MLP (hidden 512) with LayerNorm and GELU and a linear head."""
    torch.manual_seed(0)
    return Program(MLP(256, 512, 64).to(dtype), [contiguous((128, 256), requires_grad=True)])


class TinyAttention(nn.Module):
    """Single-head-group self-attention: q, k, v projections, softmax(q k^T / sqrt(d)) v, output projection."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads, self.head_dim = heads, width // heads
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def split(self, t):
        batch, length, _ = t.shape
        return t.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        context = torch.matmul(torch.softmax(scores, dim=-1), v)
        batch, _, length, _ = context.shape
        return self.out(context.transpose(1, 2).reshape(batch, length, -1))


@case(
    tags=("correct", "model", "attention", "softmax", "bf16"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("inference", "training"),
)
def correct_tiny_attention(dtype):
    """A tiny attention block (width 128, 4 heads, sequence 256) with matmul + softmax attention."""
    torch.manual_seed(0)
    return Program(TinyAttention(128, 4).to(dtype), [contiguous((2, 256, 128), requires_grad=True)])


class CausalAttention(TinyAttention):
    """TinyAttention with a causal mask applied by masked_fill before the softmax, and a residual."""

    def forward(self, x):
        q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
        length = x.shape[1]
        scores = torch.matmul(q, k.transpose(-2, -1)) * (self.head_dim**-0.5)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        context = torch.matmul(torch.softmax(scores.float(), dim=-1).to(x.dtype), v)
        return x + self.out(context.transpose(1, 2).flatten(2))


@case(
    tags=("correct", "model", "attention", "softmax", "mask", "bf16"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("training",),
)
def correct_causal_attention(dtype):
    """Causal attention (masked_fill -inf, softmax in fp32) with a residual, width 96, 6 heads, sequence 192."""
    torch.manual_seed(0)
    return Program(CausalAttention(96, 6).to(dtype), [contiguous((2, 192, 96), requires_grad=True)])


class ConvBNReLU(nn.Module):
    def __init__(self, channels_in, channels_out):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, padding=1)

    def forward(self, x):
        return self.conv2(torch.relu(self.bn(self.conv(x))))


@case(
    tags=("correct", "model", "conv", "batch_norm", "running-stats"),
    dtypes=(torch.float32,),
    modes=("inference", "training"),
)
def correct_conv_bn_relu(dtype):
    """conv2d + BatchNorm2d in training mode (batch statistics, running stats updated) + ReLU + conv2d."""
    torch.manual_seed(0)
    model = ConvBNReLU(8, 16).to(dtype)
    model.train()  # batch statistics; running_mean/var are buffers the forward updates in place
    return Program(model, [contiguous((8, 8, 24, 24), requires_grad=True)])


@case(
    tags=("correct", "model", "conv", "batch_norm"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("inference", "training"),
)
def correct_conv_bn_relu_eval(dtype):
    """conv2d + BatchNorm2d in eval mode (running statistics, folded into pointwise) + ReLU + conv2d."""
    torch.manual_seed(0)
    model = ConvBNReLU(8, 16)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 2.0)
    model = model.to(dtype).eval()
    return Program(model, [contiguous((8, 8, 24, 24), requires_grad=True)])


class EmbeddingBagClassifier(nn.Module):
    """Embedding -> masked mean pooling over the sequence -> Linear -> log_softmax."""

    def __init__(self, vocabulary, width, classes):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, width, padding_idx=0)
        self.classifier = nn.Linear(width, classes)

    def forward(self, tokens):
        embedded = self.embedding(tokens)  # (batch, length, width)
        keep = (tokens != 0).unsqueeze(-1).to(embedded.dtype)
        pooled = (embedded * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)
        return torch.log_softmax(self.classifier(pooled), dim=-1)


@case(
    tags=("correct", "model", "embedding", "pooling", "bf16"),
    dtypes=(torch.float32, torch.bfloat16),
    modes=("inference", "training"),
)
def correct_embedding_pool_classifier(dtype):
    """Embedding (1000 x 128, padding 0) + masked mean pooling over 512 tokens + linear classifier."""
    torch.manual_seed(0)
    model = EmbeddingBagClassifier(1000, 128, 10).to(dtype)
    return Program(model, [contiguous((16, 512), dtype=torch.int64, fill="randint", low=0, high=1000)])
