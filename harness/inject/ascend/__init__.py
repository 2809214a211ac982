"""triton-ascend's silent wrong-result classes, emulated on CPU (C++ kernels) and CUDA (Triton kernels).

Each class below gives wrong values on Ascend hardware without an error. The
emulations reproduce them at the launch boundary or in the generated kernel's
source, so the harness can be shown to catch and localize each one where no NPU
exists. Results under any of them are labelled as emulations (`emulation` in
every record), never as NPU results.

| injection | what the NPU does wrong | source |
| --- | --- | --- |
| `first-launch-dropped-stores` | a kernel's first launch after loading drops the stores of the programs past a group boundary | triton-ascend #2292 (cited in #2291) |
| `reduction-small-inner` | a reduction over a 2-D tile whose inner (contiguous) extent is below 8 drops lanes | triton-ascend #2247 |
| `masked-load-garbage` | masked lanes of a load keep garbage (no `other`, or torch_npu's `inject_care_padding`), and a reduction reads them (torch_npu's `elide_reduction_where`) | triton-ascend PR #714, #953; torch_npu `triton_experimental/config.py` |
| `masked-store-lost` | random 2-element float32 groups of a masked store never land | FlagTree #1245 (910B) |
| `half-scalar-arg` | a float16/bfloat16 scalar argument arrives as the low 16 bits of its float32 encoding | triton-ascend #2364, fix PR #2285 |

Where each lives: the two store classes and the scalar class act on launches
(`stores.py`, `scalars.py`); the two reduction classes are written into the
kernel's source (`inductor_compat/padding_variants.py`) and run as rewritten
kernels (`../rewritten.py`).
"""

from __future__ import annotations

from harness.inductor_compat.padding_variants import MASKED_LOAD_GARBAGE, REDUCTION_SMALL_INNER
from harness.inject.ascend.scalars import HalfScalarArg
from harness.inject.ascend.stores import FirstLaunchDroppedStores, MaskedStoreLost

# name -> (what it does, the thread it comes from); launch.py makes them Injections.
LAUNCH_CLASSES = {
    "first-launch-dropped-stores": (
        FirstLaunchDroppedStores,
        "emulates a kernel's first launch losing the stores of the programs past a group boundary (the second "
        "half of each written tensor, in memory order, is never written); later launches are right",
        "triton-ascend #2292",
    ),
    "masked-store-lost": (
        MaskedStoreLost,
        "emulates masked stores losing random 2-element float32 groups (never written), differently at every launch",
        "FlagTree #1245",
    ),
    "half-scalar-arg": (
        HalfScalarArg,
        "emulates a float16/bfloat16 scalar kernel argument packed as float32: the kernel reads the low 16 bits "
        "of its float32 encoding",
        "triton-ascend #2364",
    ),
}

REWRITE_CLASSES = {
    REDUCTION_SMALL_INNER: (
        "emulates a reduction over a tile whose inner (contiguous) extent is below 8 dropping lanes: the upper "
        "half of those lanes never reach the accumulator",
        "triton-ascend #2247",
    ),
    MASKED_LOAD_GARBAGE: (
        "emulates masked-off lanes of a reduction's loads holding garbage (NaN; integers 1234) that the reduction "
        "reads, its `where` guard elided as torch_npu's elide_reduction_where does",
        "triton-ascend PR #714",
    ),
}
