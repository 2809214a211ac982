"""Importing torch on a machine where torch_npu is installed, for a run on another device.

torch_npu registers a `torch.backends` entry point (torch-npu 2.14.0's dist-info, `entry_points.txt`:
`torch_npu = torch_npu:_autoload`), and `import torch` loads every such entry point
(`torch._import_device_backends`, torch 2.5 on) unless `TORCH_DEVICE_BACKEND_AUTOLOAD=0`. Loading it imports
all of torch_npu (its `__init__.py`), which on a machine

- without CANN's runtime fails, and `import torch` with it: "Failed to load the backend extension: torch_npu";
- with a CUDA build of torch raises "Two accelerators cannot be used at the same time"
  (`_check_device_conflict`);
- with CANN, patches torch and Inductor (`_apply_all_patches`): a CPU run would compile under them.

So a run on cpu or cuda imports torch with device backends left out, unless the user set the variable
(then `compile_config` says whether torch_npu's patches were active). A run on npu leaves the variable as
it is: the harness imports torch_npu itself there (`devices.Npu`), and torch_npu hands the variable's value
on to the processes it starts.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

AUTOLOAD_VARIABLE = "TORCH_DEVICE_BACKEND_AUTOLOAD"
# Read by torch as "this is PyTorch's own CI", set by nearly every other CI too: hidden from torch
# (`inductor_compat.torch_ci` says what it changes).
TORCH_CI_VARIABLE = "CI"
# The `compile_config` entry that says whether torch_npu's patches were active while the case compiled.
NPU_PATCHES = "torch_npu_patches_active"


def prepare(device: str | None) -> str | None:
    """Import torch for a run on `device` (None: the default, cpu). Why it cannot be imported, in one line, when
    a device backend that `import torch` loads fails; None when torch imported."""
    if (device or "cpu") != "npu":
        os.environ.setdefault(AUTOLOAD_VARIABLE, "0")  # inherited by the run's worker processes
    os.environ.pop(TORCH_CI_VARIABLE, None)  # before torch reads it (functorch's config, at import)
    if "torch" in sys.modules:
        return None
    try:
        import torch  # noqa: F401
    except RuntimeError as exc:
        if "backend extension" not in str(exc):
            raise
        cause = f" ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ is not None else ""
        said = f"import torch failed: {str(exc).split('. ')[0]}{cause}"
        if (device or "cpu") == "npu":
            return f"{said}; torch_npu must import for a run on npu: source CANN's set_env.sh"
        return (
            f"{said}; {AUTOLOAD_VARIABLE}={os.environ[AUTOLOAD_VARIABLE]} is set here and loads it: unset it "
            f"(a run on {device or 'cpu'} then leaves device backends out)"
        )
    return None


def device_in(argv: Sequence[str]) -> str | None:
    """The `--device` a command line asks for (its last), read before the parser runs: parsing a device imports
    torch."""
    found = None
    for number, word in enumerate(argv):
        if word == "--device" and number + 1 < len(argv):
            found = argv[number + 1]
        elif word.startswith("--device="):
            found = word.partition("=")[2]
    return found


def npu_patches_active() -> bool:
    """Whether torch_npu is imported in this process: its import patches torch and Inductor, every device's
    compiles included."""
    return "torch_npu" in sys.modules
