"""torch_npu's Python, from a released wheel, for the surrogate's torch_npu mode; prints the folder that holds it.

    PYTHONPATH=tests/npu_surrogate:$(python tests/npu_surrogate/install_triton.py):$(python tests/npu_surrogate/install_torch_npu.py) \\
        NPU_SURROGATE_CODEGEN=torch_npu python -m harness run ...

    python tests/npu_surrogate/install_torch_npu.py                    # torch-npu 2.14.0, downloaded from the index
    python tests/npu_surrogate/install_torch_npu.py --version 2.13.0   # another release
    python tests/npu_surrogate/install_torch_npu.py --wheel FILE.whl   # a wheel of your own (a nightly build)
    python tests/npu_surrogate/install_torch_npu.py --wheel CHECKOUT   # a folder holding torch_npu/ (a checkout)

Never installed: the wheel's compiled parts need CANN, and its `torch_npu/__init__.py` imports them. Its Python
(`*.py` of `torch_npu/` and `torchnpugen/`, and the operator lists under `csrc/aten/*.yaml`) is unpacked once into `~/.cache/npu-surrogate/torch-npu-
<version>` (or under `NPU_SURROGATE_TORCH_NPU_DIR`), shared by processes that start together. The surrogate's
`torch_npu` package, first on the path, finds that folder on the path and takes torch_npu's `_inductor`, `utils`
and `npu` submodules from it (`torch_npu/_wheel_backend.py`). A checkout's folder is used where it is, not copied.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

RELEASE = "2.14.0"  # the release the harness's NPU path follows (docs/npu.md)
ROOT_VARIABLE = "NPU_SURROGATE_TORCH_NPU_DIR"
# What the surrogate reads from a wheel: its Python (`torch_npu/`, and `torchnpugen/`, which the default backend's
# lowering imports), and the operator lists it defines `npu::` schemas from.
KEPT_PACKAGES = ("torch_npu/", "torchnpugen/")
KEPT_SUFFIXES = (".py", ".yaml")
BYTECODE_MARK = ".bytecode"


class InstallFailed(RuntimeError):
    pass


def cache_root() -> str:
    return os.environ.get(ROOT_VARIABLE) or os.path.join(os.path.expanduser("~"), ".cache", "npu-surrogate")


def holds_torch_npu(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "torch_npu", "_inductor", "__init__.py"))


def install(version: str = RELEASE, wheel: str | None = None) -> str:
    """The folder holding torch_npu's Python (unpacked first if it is not); InstallFailed says why not."""
    if wheel and os.path.isdir(wheel):
        folder = os.path.abspath(wheel)
        if not holds_torch_npu(folder) and os.path.basename(folder) == "torch_npu":
            folder = os.path.dirname(folder)  # the package folder itself was named
        if not holds_torch_npu(folder):
            raise InstallFailed(f"{wheel} holds no torch_npu/_inductor/__init__.py")
        return folder
    if wheel:
        if not zipfile.is_zipfile(wheel):
            raise InstallFailed(f"{wheel} is not a wheel")
        with open(wheel, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()[:12]
        folder = os.path.join(cache_root(), f"torch-npu-{os.path.basename(wheel).split('-')[1]}-{digest}")
    else:
        folder = os.path.join(cache_root(), f"torch-npu-{version}")
    done = os.path.join(folder, ".installed")
    compiled = os.path.join(folder, BYTECODE_MARK)
    if os.path.exists(done) and os.path.exists(compiled):
        return folder
    os.makedirs(cache_root(), exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be unpacking it: wait, then find it done
        if os.path.exists(done):
            if not os.path.exists(compiled):  # unpacked by a harness that compiled no bytecode
                _compile_bytecode(folder)
            return folder
        staging = tempfile.mkdtemp(dir=cache_root(), prefix=".torch-npu-")
        try:
            _unpack(wheel or _download(version, staging), staging)
            _compile_bytecode(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        open(os.path.join(staging, ".installed"), "w").close()
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    return folder


def _compile_bytecode(folder: str) -> None:
    """Each module's bytecode, written beside it once. Without it every case process compiles from source what
    its first compile imports of torch_npu (0.2 s of each run, measured), since processes that may not write the
    cache (`PYTHONDONTWRITEBYTECODE`, a confined case) never store what they compiled. pyc files name their
    source's size and time, not its path: the staging folder's stay valid once it is renamed."""
    import compileall

    compileall.compile_dir(folder, quiet=2, workers=1)
    open(os.path.join(folder, BYTECODE_MARK), "w").close()


def _download(version: str, scratch: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"torch-npu=={version}", "-d", scratch],
        capture_output=True,
        text=True,
    )
    found = [name for name in os.listdir(scratch) if name.endswith(".whl")]
    if result.returncode != 0 or not found:
        lines = [line for line in (result.stderr or result.stdout).splitlines() if line.startswith("ERROR")]
        raise InstallFailed(f"pip could not download torch-npu=={version}: {lines[0] if lines else '?'}")
    return os.path.join(scratch, found[0])


def _unpack(wheel: str, target: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        members = [
            name for name in archive.namelist() if name.startswith(KEPT_PACKAGES) and name.endswith(KEPT_SUFFIXES)
        ]
        if not any(name == "torch_npu/_inductor/__init__.py" for name in members):
            raise InstallFailed(f"{os.path.basename(wheel)} has no torch_npu/_inductor package")
        archive.extractall(target, members)
    if os.path.dirname(wheel) == target:
        os.remove(wheel)  # the download itself: only its Python is kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", default=RELEASE, help=f"the torch-npu release to download (default {RELEASE})")
    parser.add_argument("--wheel", help="a torch-npu wheel file, or a folder holding torch_npu/ (a checkout)")
    args = parser.parse_args()
    try:
        print(install(args.version, args.wheel))
    except InstallFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
