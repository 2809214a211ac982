"""triton-ascend for the surrogate's Triton mode, installed in a folder of its own; prints that folder.

    PYTHONPATH=tests/npu_surrogate:$(python tests/npu_surrogate/install_triton.py) NPU_SURROGATE_CODEGEN=triton \\
        python -m harness run ...

Not into the environment: torch's CPU wheel has no Triton, and a `triton` there would change what Inductor
does for the CPU in every other run. triton-ascend 3.2.0 is installed with `--no-deps` (it would pull upstream
`triton`'s requirements) with the two things its Python frontend and interpreter need: `pybind11`, and
`numpy<2.3` (numpy 2.4 raises in the interpreter's `tl.range`). Built once per Python, kept in
`~/.cache/npu-surrogate` (or `NPU_SURROGATE_TRITON_DIR`), shared by processes that start together.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile

REQUIREMENTS = ("triton-ascend==3.2.0", "pybind11", "numpy<2.3")
FOLDER_VARIABLE = "NPU_SURROGATE_TRITON_DIR"


def triton_folder() -> str:
    default = os.path.join(
        os.path.expanduser("~"),
        ".cache",
        "npu-surrogate",
        f"triton-ascend-3.2.0-py{sys.version_info.major}{sys.version_info.minor}",
    )
    return os.environ.get(FOLDER_VARIABLE) or default


def install() -> str:
    """The folder, installed first if it is not (pip's error, one line, as a RuntimeError if that fails)."""
    folder = triton_folder()
    done = os.path.join(folder, ".installed")
    if os.path.exists(done):
        return folder
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    with open(f"{folder}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing it: wait, then find it done
        if os.path.exists(done):
            return folder
        staging = tempfile.mkdtemp(dir=os.path.dirname(folder), prefix=".triton-ascend-")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", staging, *REQUIREMENTS],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            lines = (result.stderr or result.stdout).strip().splitlines()
            raise RuntimeError(f"pip could not install {' '.join(REQUIREMENTS)}: {lines[-1] if lines else '?'}")
        open(os.path.join(staging, ".installed"), "w").close()
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
    return folder


if __name__ == "__main__":
    try:
        print(install())
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
