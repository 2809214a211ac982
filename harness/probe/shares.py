"""Does each partial of a split reduction hold the share it was given? The check on torch_npu's rsplit pair.

torch_npu's `triton_experimental` codegen splits a long reduction over the cores: a partial kernel
(`npu_rsplit_partial`) writes one row per core of a workspace `[cores, outputs]` (`ws_ptr + rsplit_id * outputs +
x`), and a combine kernel sums the rows into the result. The partials have no eager twin, so the probe recomputes
them on eager inputs and judges the pair together. What that leaves open is which half is wrong; the workspace
answers it, against eager's full reduction (the combine's output):

- the rows add up to it: each partial holds its share (any error is the combine's);
- every row alone equals it: each partial holds the whole reduction, not its share, and the sum is `cores` times
  eager's (the per-core range is not applied);
- neither: the partials do not add up to the reduction.

Judged by the verdict policy at the output's dtype (the partial sums, in float32, cast to it as the combine
casts them).
"""

from __future__ import annotations

import torch

from harness.judge.compare import VerdictPolicy


def share_answer(partials: torch.Tensor, expected: torch.Tensor, verdict: VerdictPolicy) -> str | None:
    """What the workspace `partials` (a row per core) says of the partial kernel, against `expected` (eager's
    whole reduction); None when its size is not a whole number of rows of it."""
    outputs = expected.numel()
    if outputs == 0 or partials.numel() % outputs or partials.numel() // outputs < 2:
        return None
    cores = partials.numel() // outputs
    rows = partials.detach().reshape(cores, outputs).to(torch.float64)
    wanted = expected.detach().reshape(outputs)

    def matches(value: torch.Tensor) -> bool:
        return verdict.tensors("partials", value.to(wanted.dtype), wanted, pictures=False).passed

    total = rows.sum(0)
    if matches(total):
        return f"the {cores} partials of the split reduction add up to eager's reduction: each holds its share"
    if all(matches(row) for row in rows):
        return (
            f"each of the {cores} partials of the split reduction holds the whole reduction, not its share: their "
            f"sum is {cores}x eager's (the per-core range is not applied)"
        )
    scale = wanted.to(torch.float64).abs().sum()
    ratio = f" (their sum is {float(total.abs().sum() / scale):.3g}x eager's in magnitude)" if scale > 0 else ""
    return f"the {cores} partials of the split reduction do not add up to eager's reduction{ratio}"
