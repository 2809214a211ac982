"""One small adapter per device: availability, seeding, sync, memory, names, versions.

The NPU adapter is the only place that knows torch_npu exists; it imports it
lazily, so nothing else in the harness needs Ascend's CANN runtime.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib
import importlib.metadata
import os
import platform
import shlex
import sys
from typing import Any, Callable, Iterator

import torch

# Reduced-precision math a device may pick for float32 on its own (TF32 on NVIDIA, HF32 on Ascend), as
# (module path under torch, attribute, value while a case runs). Off while a case runs: whether a call takes it
# depends on its algorithm, which a verdict must not judge (docs/usage.md says what the H200 showed).
FULL_FLOAT32: dict[str, tuple[tuple[str, str, Any], ...]] = {
    "cuda": (("backends.cudnn", "allow_tf32", False), ("backends.cuda.matmul", "allow_tf32", False)),
    "npu": (("npu.conv", "allow_hf32", False), ("npu.matmul", "allow_hf32", False)),
}


@contextlib.contextmanager
def _attributes_set(settings: tuple[tuple[str, str, Any], ...]) -> Iterator[None]:
    from harness.inductor_compat.torch_state import backend_flags_mutable

    saved = []
    try:
        for path, attribute, value in settings:
            owner: Any = torch
            for part in path.split("."):
                owner = getattr(owner, part, None)
            try:
                before = getattr(owner, attribute)
                with backend_flags_mutable():
                    setattr(owner, attribute, value)
            except (AttributeError, RuntimeError):  # a build without this switch, or one set through a newer API
                continue
            saved.append((owner, attribute, before))
        yield
    finally:
        with backend_flags_mutable():
            for owner, attribute, value in reversed(saved):
                setattr(owner, attribute, value)


class UnknownDeviceError(ValueError):
    pass


class CompilerUnusable(ValueError):
    """The device's compiler cannot compile the run as asked: a usage error."""


class BackendMismatch(CompilerUnusable):
    """The compiler backend the device loaded is not the one the run asked for."""


class CodegenImportMissing(CompilerUnusable):
    """The backend's generated kernels import a module that is not installed: every kernel would fail."""


class LaunchesUnseen(CompilerUnusable):
    """The backend launches its kernels past the hooks the harness watches launches through."""


class Device:
    name = ""
    # The variable that makes one of several devices visible to a process (one worker per device).
    visibility_variable: str | None = None
    # Where float64 runs when this device has no float64 of its own (the reference run, the verdict's
    # metrics): None runs it here.
    float64_device: str | None = None

    def count(self) -> int:
        """Devices of this kind on the machine (for one worker each)."""
        return 0

    def unavailable_reason(self) -> str | None:
        """None when usable; otherwise how to make it usable."""
        return None

    def torch_device(self) -> torch.device:
        return torch.device(self.name)

    def synchronize(self) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def reset_peak_memory(self) -> None:
        pass

    def release(self) -> None:
        """Give device memory back between cases. The CPU needs nothing: Python's collector frees a case's
        reference cycles on its own schedule, and a full collection after every case would scan everything
        the worker keeps (compiled modules, case sources), a cost that grows with the run."""

    def peak_memory_bytes(self) -> int | None:
        return None

    def device_name(self) -> str:
        return platform.processor() or platform.machine()

    def compile_options(self, config: Any) -> dict[str, Any]:
        """torch.compile options this device adds to a run with `config` (a RunConfig)."""
        return {}

    def load_compiler(self, config: Any, options: dict[str, Any]) -> dict[str, Any]:
        """Load the device's compiler backend for a compile with `options`, as its first compile would; the
        record fields saying what loaded. Called before the harness saves the config it restores after a case,
        so the state restored is the backend's own. Raises CompilerUnusable: BackendMismatch when another
        backend loaded, CodegenImportMissing when its kernels would import a module that is not installed,
        LaunchesUnseen when it would launch them past the harness's hooks."""
        return {}

    def surrogate(self) -> str | None:
        """What every record, console line and report says when this device stands in for the one its name
        says (a CPU-backed surrogate); None for the device itself."""
        return None

    def checks_memory(self) -> bool:
        """Whether a kernel's loads and stores outside its buffers are stopped where they happen (a surrogate's memory
        checker), rather than reading or writing memory no buffer owns."""
        return False

    def command_prefix(self) -> str:
        """What a copy-paste reproduction needs before `python -m harness` to find this device's packages."""
        return ""

    def compiles_keep_forks_usable(self) -> bool | None:
        """Whether a process that compiled for this device may still fork processes that use it (the worker warms
        Inductor up before it forks case processes); None where it depends on what the compile starts, which the
        worker then sees in a trial (`harness.isolation.worker._warm_up`)."""
        return True

    def imports_keep_forks_usable(self) -> bool:
        """Whether a process may import torch's test modules (OpInfo's op_db) and still fork processes that use
        this device: not where a GPU is visible, since their import may create a CUDA tensor (a fork after that
        cannot use CUDA)."""
        return not torch.cuda.is_available()

    def eager_gaps(self) -> dict[str, tuple[Callable[..., Any], str]]:
        """Where this device's eager ops are not those of the device it stands in for (a surrogate's CPU kernels):
        op name (`aten::erf`, any overload) -> (the form the real device's eager op takes, called as
        `form(op, args, kwargs)`; why). Empty for a device that is itself."""
        return {}

    def unsupported(self, exc: BaseException) -> str | None:
        """Why a run that raised `exc` cannot run here at all, in one line, when the device says the exception
        comes from its own limits (a stand-in's missing piece); None for everything else, which stays an error."""
        return None

    def numerics(self) -> contextlib.AbstractContextManager:
        """The math settings every run of a case (eager, compiled, references) runs under: full float32."""
        return _attributes_set(FULL_FLOAT32.get(self.name, ()))

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "python": platform.python_version(), **_package_versions()}


@functools.lru_cache(maxsize=None)
def _package_versions() -> dict[str, str]:
    """Installed compiler packages (a metadata scan each: once per process, not once per case)."""
    found = {}
    for package in ("triton", "triton-ascend", "torch_npu"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


class Cpu(Device):
    name = "cpu"


class Cuda(Device):
    name = "cuda"
    visibility_variable = "CUDA_VISIBLE_DEVICES"

    def count(self) -> int:
        return torch.cuda.device_count()

    def unavailable_reason(self) -> str | None:
        if not torch.cuda.is_available():
            build = (
                "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
            )
            return f"no CUDA device visible ({build}); install a CUDA build of torch on a machine with an NVIDIA GPU"
        return None

    def synchronize(self) -> None:
        torch.cuda.synchronize()

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        torch.cuda.manual_seed_all(seed)

    def reset_peak_memory(self) -> None:
        torch.cuda.reset_peak_memory_stats()

    def release(self) -> None:
        if torch.cuda.is_available():
            if torch.cuda.memory_allocated():  # held past the case: by reference cycles, which only a collection frees
                gc.collect()
            torch.cuda.empty_cache()

    def peak_memory_bytes(self) -> int | None:
        return torch.cuda.max_memory_allocated()

    def device_name(self) -> str:
        return torch.cuda.get_device_name()

    def versions(self) -> dict[str, str]:
        return {**super().versions(), "cuda": str(torch.version.cuda)}


class Npu(Device):
    """Ascend NPU through torch_npu's public API (device "npu", torch.npu.*)."""

    name = "npu"
    DEFAULT_BACKEND = "triton_experimental"
    visibility_variable = "ASCEND_RT_VISIBLE_DEVICES"
    # Not every NPU operator has a float64 kernel (torch_npu's ascendc/decomposition.py: eager expm1 has no fp64
    # path), and its Triton launcher narrows fp64 arguments (triton_meta["downcast_args"]): the float64
    # reference and the metrics are computed on the host.
    float64_device = "cpu"

    def count(self) -> int:
        return torch.npu.device_count() if self.unavailable_reason() is None else 0  # type: ignore[attr-defined]

    def unavailable_reason(self) -> str | None:
        try:
            importlib.import_module("torch_npu")
        except ImportError as exc:
            if "torch_npu" in str(exc) and "No module" in str(exc):
                return "torch_npu is not installed: pip install -e '.[npu]' on a machine with Ascend's CANN runtime"
            if "shared object" in str(exc) or ".so" in str(exc):  # CANN's runtime libraries not found
                return f"torch_npu failed to import ({exc}); source CANN's set_env.sh so its libraries are found"
            return f"torch_npu failed to import: {exc}"
        except Exception as exc:  # noqa: BLE001 - whatever its import raises is one line, not a traceback
            return f"torch_npu failed to import: {type(exc).__name__}: {exc}"
        if (clash := _two_tritons()) is not None:
            return clash
        if not torch.npu.is_available():  # type: ignore[attr-defined]
            return "torch_npu imported but no NPU is visible (check npu-smi and ASCEND_RT_VISIBLE_DEVICES)"
        return None

    def synchronize(self) -> None:
        torch.npu.synchronize()  # type: ignore[attr-defined]

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)
        torch.npu.manual_seed_all(seed)  # type: ignore[attr-defined]

    def reset_peak_memory(self) -> None:
        torch.npu.reset_peak_memory_stats()  # type: ignore[attr-defined]

    def release(self) -> None:
        if torch.npu.memory_allocated():  # type: ignore[attr-defined]  # held by reference cycles: collect them
            gc.collect()
        torch.npu.empty_cache()  # type: ignore[attr-defined]

    def peak_memory_bytes(self) -> int | None:
        return torch.npu.max_memory_allocated()  # type: ignore[attr-defined]

    def device_name(self) -> str:
        return torch.npu.get_device_name()  # type: ignore[attr-defined]

    def compile_options(self, config: Any) -> dict[str, Any]:
        from harness.inductor_compat import torch_npu_backend

        # A torch_npu with one backend has no `npu_backend` option: Inductor would reject it.
        return {"npu_backend": self.asked_backend(config)} if torch_npu_backend.selects_backends() else {}

    @classmethod
    def asked_backend(cls, config: Any, options: dict[str, Any] | None = None) -> str:
        return (options or {}).get("npu_backend") or getattr(config, "npu_backend", None) or cls.DEFAULT_BACKEND

    def load_compiler(self, config: Any, options: dict[str, Any]) -> dict[str, Any]:
        from harness.inductor_compat import torch_npu_backend

        asked = self.asked_backend(config, options)
        found = torch_npu_backend.load(asked)
        if found.mismatch:
            hint = "" if found.loaded is None else f"; to run the one that loads, pass --npu-backend {found.loaded}"
            raise BackendMismatch(f"{found.mismatch}{hint}")
        problem = torch_npu_backend.codegen_import_problem(
            asked, torch_npu_backend.missing_codegen_imports(), self.versions()
        )
        if problem is not None:
            raise CodegenImportMissing(problem)
        if (unseen := torch_npu_backend.fast_launch()) is not None:
            raise LaunchesUnseen(unseen)
        return {"npu_backend": asked, "npu_backend_loaded": found.loaded}

    def surrogate(self) -> str | None:
        # A stand-in says so itself (`torch_npu.SURROGATE`); torch_npu proper has no such attribute.
        try:
            return getattr(importlib.import_module("torch_npu"), "SURROGATE", None)
        except Exception:  # noqa: BLE001 - not importable here (unavailable_reason says why): not a stand-in
            return None

    def checks_memory(self) -> bool:
        # A stand-in that checks says so (`torch_npu.MEMORY_CHECKED`); torch_npu proper has no such attribute.
        return self.surrogate() is not None and bool(getattr(sys.modules.get("torch_npu"), "MEMORY_CHECKED", False))

    def imports_keep_forks_usable(self) -> bool:
        # torch_npu proper patches torch's device modules as it loads: what op_db's import then starts on an NPU
        # was never seen. The surrogate starts no runtime.
        return self.surrogate() is not None and super().imports_keep_forks_usable()

    def compiles_keep_forks_usable(self) -> bool | None:
        # torch_npu's runtime may start as its backend loads: never on an NPU. On the surrogate, as it says
        # (`FORKS_AFTER_COMPILE`): its own backends start no thread; torch_npu's own Python depends on the backend
        # (the default one starts a pool of compile threads at import, `_inductor/runtime/triton_heuristics.py`
        # `CompileThreadPool`, and a task given to it in a fork waits for ever), so it leaves that to a trial.
        if self.surrogate() is None:
            return False
        return getattr(sys.modules.get("torch_npu"), "FORKS_AFTER_COMPILE", False)

    def eager_gaps(self) -> dict[str, tuple[Callable[..., Any], str]]:
        # The surrogate says where its eager (the CPU's kernels) is not an NPU's (`EAGER_GAPS`); torch_npu proper
        # is the NPU's own.
        if self.surrogate() is None:
            return {}
        return dict(getattr(sys.modules.get("torch_npu"), "EAGER_GAPS", None) or {})

    def unsupported(self, exc: BaseException) -> str | None:
        # A stand-in says what it cannot run (`torch_npu.unsupported`: the surrogate's interpreter, the CANN
        # operators it has no kernel for); torch_npu proper has no such attribute.
        judge = getattr(sys.modules.get("torch_npu"), "unsupported", None)
        if judge is None or self.surrogate() is None:
            return None
        reason = judge(exc)
        return f"not runnable on the surrogate: {reason}" if reason else None

    def versions(self) -> dict[str, str]:
        found = super().versions()
        # A torch_npu on the path but not installed as a distribution (a source checkout) has only __version__.
        version = getattr(sys.modules.get("torch_npu"), "__version__", None)  # imported by unavailable_reason
        if "torch_npu" not in found and version:
            found["torch_npu"] = str(version)
        return found

    def command_prefix(self) -> str:
        # A torch_npu found through PYTHONPATH (a source checkout, a surrogate) is found so by the command too,
        # with a Triton found the same way, the folders a stand-in says it found besides its own (`SEARCH_PATH`:
        # the wheel whose compiler it runs), and the variables it says chose its mode (`ENVIRONMENT`).
        module = sys.modules.get("torch_npu")
        if module is None or "torch_npu" in _package_versions() or not getattr(module, "__file__", None):
            return ""
        paths = [_package_root(module)]
        triton = sys.modules.get("triton")
        if (
            triton is not None
            and getattr(triton, "__file__", None)
            and _package_root(triton) in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        ):
            paths.append(_package_root(triton))
        paths += [str(folder) for folder in getattr(module, "SEARCH_PATH", ()) if str(folder) not in paths]
        settings = [f"PYTHONPATH={shlex.quote(os.pathsep.join(paths))}"]
        settings += [f"{name}={shlex.quote(str(value))}" for name, value in getattr(module, "ENVIRONMENT", {}).items()]
        return " ".join(settings) + " "


def _two_tritons() -> str | None:
    """Upstream `triton` installed beside `triton-ascend`: both own the `triton/` package, and the one pip
    installed last holds it (a CUDA build of torch requires upstream triton: `pip install torch-npu triton-ascend`
    without a CPU torch installed first resolves both)."""
    found = _package_versions()
    if "triton" in found and "triton-ascend" in found:
        return (
            f"triton {found['triton']} and triton-ascend {found['triton-ascend']} are both installed and both own "
            f"the `triton` package: install torch's CPU build, then pip uninstall -y triton triton-ascend && "
            f"pip install triton-ascend=={found['triton-ascend']} (docs/npu.md)"
        )
    return None


def _package_root(module: Any) -> str:
    """The folder a package was imported from (what PYTHONPATH named)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(module.__file__)))


DEVICES: dict[str, type[Device]] = {"cpu": Cpu, "cuda": Cuda, "npu": Npu}


def compiler_problem(device: Device, config: Any) -> str | None:
    """Why the run `config` cannot compile on `device` (its backend does not load, or another one loads), in one
    line; None when it can. The CLI and pytest ask before any case runs: a usage error, not a record per case."""
    try:
        device.load_compiler(config, {**device.compile_options(config), **config.compile_options})
    except CompilerUnusable as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the device's own loader failed
        return f"loading its compiler backend failed ({type(exc).__name__}: {exc})"
    return None


def _catalog():
    from harness.extensions import DEVICE_GROUP, Catalog

    return Catalog("device", DEVICE_GROUP, DEVICES, lambda found: isinstance(found, type) and issubclass(found, Device))


def device_names() -> list[str]:
    """The built-in devices, then those other packages declare (entry points "harness.devices")."""
    return _catalog().names()


def float64_home(device: torch.device) -> torch.device:
    """Where float64 arithmetic on tensors of `device` runs: the device itself, or its adapter's
    `float64_device` (the NPU's is the CPU)."""
    home = _float64_device_of(device.type)
    return torch.device(home) if home else device


@functools.lru_cache(maxsize=None)
def _float64_device_of(device_type: str) -> str | None:
    try:  # once per device type: the comparisons that ask are many
        return _catalog().get(device_type).float64_device
    except (ValueError, AttributeError):  # a torch device no adapter is named after (meta, xpu)
        return None


def get_device(name: str) -> Device:
    try:
        return _catalog().get(name)()
    except ValueError as exc:
        raise UnknownDeviceError(str(exc)) from None
