"""Correct programs that Inductor computes in another order than eager.

Fusion reorders floating-point sums: in bf16 a layer norm + GELU, forward and
backward, can put several percent of gradient elements beyond assert_close's
bf16 tolerance while being no less accurate than eager against a float64
reference. These must pass (by the RMSE rule), or the harness cries wolf.
"""

import torch
from torch import nn

from harness import Program, case, contiguous


class LayerNormGelu(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        return nn.functional.gelu(self.proj(self.norm(x)))


@case(tags=("reordering", "norm", "training", "quick"), dtypes=(torch.bfloat16, torch.float32), modes=("training",))
def layernorm_gelu(dtype):
    """bf16/fp32 layer norm + linear + GELU, forward and backward."""
    torch.manual_seed(0)  # parameters: nn.Module initialisation draws from the global generator
    return Program(LayerNormGelu(256).to(dtype), [contiguous((8, 64, 256), requires_grad=True)])
