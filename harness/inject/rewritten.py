"""Emulations that launch rewritten kernels: NPU codegen bugs reproduced on CPU and CUDA.

Seed 002 (the torch_npu report on the RMSNorm weight gradient,
`cases/seed_rmsnorm_weight_grad.py`) is a bug in the kernels the NPU backend
generates for reductions over several flattened axes. CPU and CUDA Inductor
generate them correctly, so these emulations write the NPU's flaw into the
source Inductor generated (`inductor_compat.kernel_variants`), compile that
variant next to the original, and launch it instead:

- `reduction-partial`: the accumulator is re-initialised at the top of the
  innermost reduction loop, so every reduction that loops keeps only its last
  chunk (Triton: one `R0_BLOCK` of a `triton_red_*` kernel; C++: one iteration
  of the innermost reduction loop, a vector along the reduced axis or one
  index when the kernel vectorizes along the output). Persistent reductions
  (`triton_per_*`, C++ loops that run once or are unrolled) are untouched: on
  the NPU the bug needed the loop.
- `reduction-axis-order`: in kernels reducing over several axes Inductor could
  not merge, the flattened reduction index is decomposed with the axes in
  reversed order, each axis wrapped to its own size: wrong elements are read
  (axes of equal size only reorder the sum, which is no error).

`@LAUNCH_INDEX` or `@KERNEL_NAME_GLOB` restricts either to the chosen launches.
`.stats` says what the emulation touched: `launches` seen, `hits` (launches
whose variant wrote something other than the kernel as compiled writes, as
"index:kernel") and `rewritten_kernels`. A variant is judged against the
kernel itself, on the same arguments: a rewrite whose lanes never reach an
output (a single chunk, a padding lane masked again later) is no hit, and a
run with no hit is `injection-missed`, never a pass that looks like evidence.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.inductor_compat import Launch
from harness.inject.selectors import selects, unselected
from harness.layout import is_non_overlapping
from harness.records import InjectionStats
from harness.inductor_compat.kernel_variants import RECOGNISED, variant

REWRITE_INJECTIONS = {
    "reduction-partial": "emulates seed 002's accumulator scoped inside the reduction loops: "
    "each looping reduction keeps only its last chunk (persistent ones untouched)",
    "reduction-axis-order": "emulates seed 002's flatten in the wrong axis order: multi-axis reductions "
    "decompose their flattened index with the axes reversed",
}


class RewrittenKernels:
    """Launch the `rewriter` variant of every selected kernel that has one; others run as compiled."""

    def __init__(self, rewriter: str, selector: str | None = None):
        self.rewriter, self.selector = rewriter, selector
        # What the runner activates around the compiled run (kernel_variants.rewriting).
        self.rewriters = (rewriter,)
        self.stats = InjectionStats(hits=[], rewritten_kernels=[])
        self._selected = 0  # launches the selector selected, variant or not
        self._unchanged: list[str] = []  # launches whose variant wrote what the kernel writes

    def selects(self, launch: Launch) -> bool:

        return self.selector is None or selects(self.selector, launch)

    def missed(self) -> str | None:
        """Why no launch ran a variant: the selector selected none, or no selected kernel has the shape the
        rewriter recognises (the NPU's own Triton reductions have others)."""
        if self.stats.hits:
            return None

        if self.selector is not None and not self._selected:
            return unselected(self.selector, self.stats.launches)
        if self._unchanged:
            shown = ", ".join(self._unchanged[:3]) + (", ..." if len(self._unchanged) > 3 else "")
            return (
                f"{self.rewriter} rewrote {len(self._unchanged)} kernel launch"
                f"{'' if len(self._unchanged) == 1 else 'es'} ({shown}), but each variant wrote exactly what "
                "the kernel as compiled writes: the lanes it spoils never reach an output (one chunk, or "
                "lanes masked again before the store)"
            )
        return (
            f"{self.rewriter} rewrote none of the {self.stats.launches} kernel launches: it recognises "
            f"{RECOGNISED[self.rewriter]}"
        )

    def __call__(self, launch: Launch) -> Any:
        self.stats.launches += not launch.replay
        if not self.selects(launch):
            return launch.run()
        self._selected += not launch.replay
        found = variant(launch.kernel, self.rewriter)
        if found is None:
            return launch.run()
        if launch.replay:
            return found.invoke(*launch.args, **launch.kwargs)
        written = [t for _, t in launch.written_args()]
        if not written or not all(t.numel() and is_non_overlapping(t) for t in written):
            changed = True  # nothing to set back and compare: counted as the variant's launch
            result = found.invoke(*launch.args, **launch.kwargs)
        else:
            before = [t.detach().clone() for t in written]
            launch.run()  # the kernel as compiled, on the same arguments: what the variant is judged against
            expected = [t.detach().clone() for t in written]
            for t, old in zip(written, before):
                t.copy_(old)
            result = found.invoke(*launch.args, **launch.kwargs)
            changed = any(not _same_bits(t, e) for t, e in zip(written, expected))
        label = f"{launch.index}:{launch.kernel.name}"
        if not changed:
            self._unchanged.append(label)
            return result
        self.stats.hits.append(label)
        if launch.kernel.name not in self.stats.rewritten_kernels:
            self.stats.rewritten_kernels.append(launch.kernel.name)
        return result


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool((a == b).all())
