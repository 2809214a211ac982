"""`torch.npu` of the surrogate device: what the harness and Inductor call on torch_npu's `torch.npu`."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    pass


def is_initialized() -> bool:
    return True


def _lazy_init() -> None:
    pass


def _is_in_bad_fork() -> bool:
    return False


def synchronize(device=None) -> None:
    pass  # host memory: every kernel has finished when it returns


def get_device_capability(device=None):
    """torch_npu's: None unless `TORCH_NPU_DEVICE_CAPABILITY` says "major.minor" (a value kept for compatibility with
    PyTorch, not the NPU's; `torch_npu/npu/__init__.py`)."""
    import os

    configured = os.environ.get("TORCH_NPU_DEVICE_CAPABILITY")
    return tuple(int(part) for part in configured.split(".")[:2]) if configured else None


def get_device_name(device=None) -> str:
    import torch_npu

    return torch_npu.SURROGATE


# Random numbers: ops on the device run as CPU kernels, which draw from torch's CPU generator. (Seeded through
# the generator itself: `torch.manual_seed` calls these, for the device's own generators.)
def manual_seed(seed: int) -> None:
    torch.default_generator.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(seed)


def seed() -> None:
    torch.default_generator.seed()


def initial_seed() -> int:
    return torch.initial_seed()


def get_rng_state(device=None) -> torch.Tensor:
    return torch.get_rng_state()


def set_rng_state(state: torch.Tensor, device=None) -> None:
    torch.set_rng_state(state)


# Memory statistics, counted by the extension's allocator.
def memory_allocated(device=None) -> int:
    return torch.ops.npu_surrogate.memory_allocated()


def max_memory_allocated(device=None) -> int:
    return torch.ops.npu_surrogate.max_memory_allocated()


def reset_peak_memory_stats(device=None) -> None:
    torch.ops.npu_surrogate.reset_peak_memory_stats()


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def empty_cache() -> None:
    pass  # nothing cached: freed memory goes straight back to the host


@contextlib.contextmanager
def device(index):
    yield


# torch_npu's switches for HF32 (its TF32) in convolutions and matmuls. The host kernels compute in full
# float32 whatever they say; they are kept so the harness's full-float32 setting has something to set.
conv = SimpleNamespace(allow_hf32=True)
matmul = SimpleNamespace(allow_hf32=False)
