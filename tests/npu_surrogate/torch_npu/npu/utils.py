"""`torch.npu.utils` of the surrogate device: what generated wrappers and torch_npu's compiler side call on it.

torch_npu's own (`torch_npu/npu/utils.py`) asks its C extension for each of these; here they are host memory's:
one device, no streams to wait for. CANN's version is "not known" (no CANN is installed), so a feature gated on a
CANN release (`_is_gte_cann_version`) is off, as torch_npu's check would find it without CANN.
"""

from __future__ import annotations

import contextlib

CANN_VERSION = "not known"  # what torch_npu's get_cann_version() reports where no CANN is installed


@contextlib.contextmanager
def device(index):
    """The device guard generated wrappers enter (`torch.npu.utils.device(0)`)."""
    yield


def set_device(device) -> None:
    pass


def current_device() -> int:
    return 0


def synchronize(device=None) -> None:
    pass


def get_cann_version(module: str = "CANN") -> str:
    return CANN_VERSION


def _is_gte_cann_version(version: str, module: str = "CANN") -> bool:
    return False
