"""What one run of a program produced, and what "the same values" means: shared by the run, the judge, the
probe and extraction."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Results:
    """One run's results: what the program returned and computed, and the state it left."""

    # Outputs, gradients, loss and updated parameters, in a stable order.
    values: dict[str, Any] = field(default_factory=dict)
    # Output name -> its path in the output tree (`[0]`, `['logits']`).
    paths: dict[str, str] = field(default_factory=dict)
    # Every tensor input, module buffer and parameter after the run, by result name.
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    # Names in `state` whose values the run changed.
    changed: set[str] = field(default_factory=set)

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor result and changed state by name (what a probe or a diagnosis compares)."""
        found = {k: v for k, v in self.values.items() if isinstance(v, torch.Tensor)}
        found.update({k: self.state[k] for k in self.state if k in self.changed})
        return found


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shape, dtype and values, NaN equal to NaN (what "unchanged" means for a mutation)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        # One kernel for the common answer; NaN is never equal to itself, so NaNs take the second check.
        return bool(torch.equal(a, b)) or bool(((a == b) | (a.isnan() & b.isnan())).all())
    return bool(torch.equal(a, b))
