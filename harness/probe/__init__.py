"""Localization: from a failing run to the kernel, stage or drift that explains it.

- `node_values`: eager (and float64) values of a compiled graph's FX nodes for one call;
- `regions`: which of those values each kernel argument holds, at each launch;
- `kernel_rerun`: a diverging kernel run again on eager inputs (wrong, aliasing, or drift);
- `launcher`: what a kernel's own launcher did to the arguments it narrows, each mechanism replayed alone;
- `probe`: the linear probe over launches, in launch order;
- `pass_bisection`: the Inductor graph pass behind a stage answer; `glue`: the wrapper's glue before a fallback;
- `search`: the answer (kernel, stage, drift, unlocalized) for a run.
"""

from harness.probe.search import COARSE_STAGES, STAGE_BACKENDS, LocalizationHooks, NotReproduced, localize
from harness.probe.probe import KernelProbe

__all__ = ["COARSE_STAGES", "STAGE_BACKENDS", "LocalizationHooks", "KernelProbe", "NotReproduced", "localize"]
