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
that ran a variant, as "index:kernel") and `rewritten_kernels`.
"""

from __future__ import annotations

from typing import Any

from .inductor_compat import Launch
from .records import InjectionStats
from .inductor_compat.kernel_variants import RECOGNISED, variant

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

    def selects(self, launch: Launch) -> bool:
        from .emulation import selects

        return self.selector is None or selects(self.selector, launch)

    def missed(self) -> str | None:
        """Why no launch ran a variant: the selector selected none, or no selected kernel has the shape the
        rewriter recognises (the NPU's own Triton reductions have others)."""
        if self.stats.hits:
            return None
        from .emulation import unselected

        if self.selector is not None and not self._selected:
            return unselected(self.selector, self.stats.launches)
        return (f"{self.rewriter} rewrote none of the {self.stats.launches} kernel launches: it recognises "
                f"{RECOGNISED[self.rewriter]}")

    def __call__(self, launch: Launch) -> Any:
        self.stats.launches += not launch.replay
        if not self.selects(launch):
            return launch.run()
        self._selected += not launch.replay
        found = variant(launch.kernel, self.rewriter)
        if found is None:
            return launch.run()
        if not launch.replay:
            self.stats.hits.append(f"{launch.index}:{launch.kernel.name}")
            if launch.kernel.name not in self.stats.rewritten_kernels:
                self.stats.rewritten_kernels.append(launch.kernel.name)
        return found.invoke(*launch.args, **launch.kwargs)
