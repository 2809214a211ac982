"""Device "npu": the C++ extension (built once per torch version, then loaded), PrivateUse1 renamed, torch.npu."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile

import torch

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "surrogate_device.cpp")
# Where builds are kept (one folder per torch version and source), so each process after the first only loads.
BUILD_ROOT_VARIABLE = "NPU_SURROGATE_BUILD_DIR"


def build_directory() -> str:
    root = os.environ.get(BUILD_ROOT_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "npu-surrogate")
    with open(SOURCE, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:12]
    version = re.sub(r"[^A-Za-z0-9_.]", "_", torch.__version__)
    return os.path.join(root, f"torch-{version}-{digest}")


def _load_extension() -> None:
    directory = build_directory()
    built = os.path.join(directory, "built")  # the library's path, written once a build finished
    try:
        with open(built) as handle:
            library = handle.read().strip()
        if os.path.isfile(library):
            torch.ops.load_library(library)
            return
    except OSError:
        pass
    os.makedirs(directory, exist_ok=True)
    from torch.utils import cpp_extension

    # cpp_extension locks the directory: processes starting together build once and the others wait.
    cpp_extension.load(
        name="npu_surrogate_device",
        sources=[SOURCE],
        build_directory=directory,
        extra_cflags=["-O1"],
        is_python_module=False,
        verbose=False,
    )
    library = os.path.join(directory, "npu_surrogate_device.so")
    fd, temporary = tempfile.mkstemp(dir=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write(library)
    os.replace(temporary, built)


def register() -> None:
    if getattr(torch, "npu", None) is not None:
        return
    _load_extension()
    torch.utils.rename_privateuse1_backend("npu")
    from . import npu

    torch._register_device_module("npu", npu)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)
