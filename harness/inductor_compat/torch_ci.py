"""torch's switches for its own CI, which every other CI turns on too: hidden from torch while a case runs.

torch reads the environment variable `CI` as "this is PyTorch's own CI" and then compiles differently
(read in torch 2.13; the same lines in 2.11):

- `_inductor/lowering.py`, `make_fallback`: a fallback registered for an op that has a decomposition raises
  ("a decomposition exists, we should switch to it"). torch_npu 2.14.0's `triton_experimental` backend
  registers such fallbacks as it loads (`triton_experimental/lowering.py`, `_register_npu_inductor_fallbacks`:
  `make_fallback(op)` for every lowering it does not generate itself, `aten.ldexp` among them), so with `CI`
  set that backend cannot load at all;
- `_functorch/config.py`: `error_on_custom_op_aliasing` defaults to `bool(os.getenv("CI"))`, read when torch
  is imported: a custom op whose output aliases an input raises at run time instead of warning;
- `_inductor/template_heuristics/triton.py`: fewer flex-attention backward autotuning configs.

GitHub Actions, GitLab CI and most other CI systems set `CI=true` in every job, so a verdict would differ
between a developer's machine and the nightly. The harness removes the variable before it imports torch
(`torch_import.prepare`; its worker processes inherit that) and, around a case run where torch was imported first (the
pytest plugin, `run_case` called from a script), removes it and puts functorch's default back for the run
(`hidden`). A value the user forces through `TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING` is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Iterator

# (`torch_import.TORCH_CI_VARIABLE` names it too: that module runs before torch is imported, and imports no
# package of the harness.)
VARIABLE = "CI"
# functorch's own variable for the aliasing check (`env_name_force`): the user's choice, never overridden.
ALIASING_VARIABLE = "TORCHINDUCTOR_ERROR_ON_CUSTOM_OP_ALIASING"


@contextlib.contextmanager
def hidden() -> Iterator[None]:
    """Run the block as torch runs outside its own CI: `CI` unset, and functorch's custom-op aliasing check a
    warning as its default says there, unless the user forced it. Both restored after the block."""
    value = os.environ.pop(VARIABLE, None)
    functorch = sys.modules.get("torch._functorch.config")
    forced = ALIASING_VARIABLE in os.environ
    patch = (
        functorch.patch(error_on_custom_op_aliasing=False)
        if functorch is not None and not forced and hasattr(functorch, "error_on_custom_op_aliasing")
        else contextlib.nullcontext()
    )
    try:
        with patch:
            yield
    finally:
        if value is not None:
            os.environ[VARIABLE] = value
