"""What the packages of an NPU host do to a run: torch_npu's autoloaded backend, and kernel modules importing
what the installed triton-ascend lacks (measured with torch_npu 2.14.0's wheel and triton-ascend 3.2.0)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def failing_backend(tmp_path):
    """A folder for PYTHONPATH holding a distribution whose `torch.backends` entry point raises, as torch_npu's
    does on a machine without CANN's runtime (its `_autoload` imports all of torch_npu)."""
    info = tmp_path / "fake_npu-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake_npu\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nfake_npu = fake_npu:_autoload\n")
    (tmp_path / "fake_npu.py").write_text(
        "def _autoload():\n    raise ImportError('libascendcl.so: cannot open shared object file')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "Failed to load the backend extension: fake_npu" in plain.stderr  # it is seen
    return env


def harness(env, *args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "harness", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


def test_a_cpu_run_is_untouched_by_a_device_backend_that_fails_to_autoload(failing_backend, tmp_path):
    result = harness(failing_backend, "run", "relu_mlp", "--dtype", "float32", "--mode", "inference", "--device",
                     "cpu", "--json", str(tmp_path / "r.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = json.loads((tmp_path / "r.json").read_text())["records"]
    assert record["status"] == "pass" and record["compile_config"]["torch_npu_patches_active"] is False


def test_a_backend_autoload_the_user_asked_for_fails_in_one_line_that_says_what_to_unset(failing_backend):
    env = dict(failing_backend, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    result = harness(env, "run", "relu_mlp", "--device", "cpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: import torch failed: Failed to load the backend extension: fake_npu "
                           "(ImportError: libascendcl.so"), line
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=1 is set here and loads it: unset it" in line


def test_pytest_collects_cases_past_a_device_backend_that_fails_to_autoload(failing_backend):
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                             "cases", "-k", "relu_mlp", "--device", "cpu"], env=failing_backend, cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "relu_mlp" in result.stdout


def test_patches_are_recorded_active_where_torch_npu_is_imported(tmp_path):
    from harness.registry import load_registry
    from harness.runner import RunConfig, run_case
    import torch

    stand_in = tmp_path / "torch_npu"
    stand_in.mkdir()
    (stand_in / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        import torch_npu  # noqa: F401  (a stand-in: what the record reads is that it is imported)

        record = run_case(load_registry().cases["relu_mlp"], torch.float32, "inference", RunConfig())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("torch_npu", None)
    assert record.status == "pass" and record.compile_config["torch_npu_patches_active"] is True


# Every kernel module torch_npu 2.14.0's triton_experimental codegen writes begins with
# `gen_triton_ext_imports()` (`triton_experimental/codegen/triton.py`): with `select_extract_slice` on, its
# default, `triton.language.extra.cann.extension`, which triton-ascend 3.2.0 lacks (it has `extra/ascend`).
class _NpuKernel:
    @classmethod
    def gen_common_triton_imports(cls):
        return "import json\nfrom importlib import util\n"

    def gen_triton_ext_imports(self):
        return "from harness_absent.language.extra.cann.extension import extract_slice\nimport json\n"


def test_the_modules_every_kernel_module_imports_are_looked_up_and_the_missing_named(monkeypatch):
    import torch._inductor.codegen.common as common
    from harness.inductor_compat import torch_npu_backend

    scheduling = type("NPUTritonScheduling", (), {"kernel_type": _NpuKernel})
    monkeypatch.setitem(common.device_codegens, "npu", SimpleNamespace(scheduling=scheduling))
    missing = torch_npu_backend.missing_codegen_imports("npu")
    assert missing == ["harness_absent.language.extra.cann.extension"]
    line = torch_npu_backend.codegen_import_problem("triton_experimental", missing,
                                                    {"torch_npu": "2.14.0", "triton-ascend": "3.2.0"})
    assert line == ("torch_npu 2.14.0's triton_experimental codegen imports harness_absent.language.extra.cann"
                    ".extension in every kernel module, which cannot be imported with triton-ascend 3.2.0 "
                    "installed: install the triton-ascend release made for this torch_npu, or run another "
                    "--npu-backend")
    monkeypatch.setitem(common.device_codegens, "npu", SimpleNamespace(scheduling=type("CppScheduling", (), {})))
    assert torch_npu_backend.missing_codegen_imports("npu") == []  # C++ kernels: no Triton imports to look up


def test_a_missing_codegen_import_is_one_usage_line_before_any_case(monkeypatch):
    from harness import devices
    from harness.inductor_compat import torch_npu_backend
    from harness.runner import RunConfig

    monkeypatch.setattr(torch_npu_backend, "load", lambda asked: torch_npu_backend.LoadedBackend(asked, asked))
    monkeypatch.setattr(torch_npu_backend, "selects_backends", lambda: True)
    monkeypatch.setattr(torch_npu_backend, "missing_codegen_imports",
                        lambda device="npu": ["triton.language.extra.cann.extension"])
    monkeypatch.setattr(devices.Npu, "versions", lambda self: {"torch_npu": "2.14.0", "triton-ascend": "3.2.0"})
    problem = devices.compiler_problem(devices.Npu(), RunConfig(device="npu"))
    assert problem.startswith("torch_npu 2.14.0's triton_experimental codegen imports "
                              "triton.language.extra.cann.extension in every kernel module"), problem


def test_upstream_triton_beside_triton_ascend_is_named_with_what_to_do(tmp_path, monkeypatch):
    # What `pip install torch-npu==2.14.0 triton-ascend==3.2.0` resolves on x86_64 without a CPU torch installed
    # first (`pip install --dry-run`): torch 2.14.0's CUDA build, which requires triton 3.8.0.
    from harness import devices

    for name, version in (("triton", "3.8.0"), ("triton_ascend", "3.2.0")):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    devices._package_versions.cache_clear()
    try:
        clash = devices._two_tritons()
    finally:
        devices._package_versions.cache_clear()
    assert clash.startswith("triton 3.8.0 and triton-ascend 3.2.0 are both installed and both own the `triton` "
                            "package"), clash


# A wrapper module calling a CATLASS GEMM as torch_npu's catlass scheduling writes it
# (`codegen/catlass/catlass_scheduling.py`: `name = async_compile.catlass(r'''...`), a plain function.
CATLASS_WRAPPER = '''
import torch


class _AsyncCompile:
    def catlass(self, source, *args, **kwargs):
        return lambda a, b, out: torch.mm(a, b, out=out)


async_compile = _AsyncCompile()
catlass_mm_0 = async_compile.catlass(r\'\'\'
// CATLASS template
\'\'\', "so")


def call(args):
    a, b = args
    out = torch.empty(a.shape[0], b.shape[1])
    catlass_mm_0(a, b, out)
    return (out,)
'''


def test_a_catlass_kernel_is_refused_by_name_where_launches_are_watched(tmp_path):
    import importlib.util

    import torch
    from harness.inductor_compat import launches

    path = tmp_path / "catlass_wrapper.py"
    path.write_text(CATLASS_WRAPPER)
    spec = importlib.util.spec_from_file_location("catlass_wrapper", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    launches._wrap_module(module)
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    (out,) = module.call([a, b])  # no handler: a plain run's verdict goes through
    assert torch.equal(out, torch.full((2, 4), 3.0))
    with launches.intercept_launches(lambda launch: launch.run()):
        with pytest.raises(launches.UnseenLaunch, match=r"^CATLASS kernel catlass_mm_0 \(torch_npu's "
                                                        r"async_compile.catlass\) is called as a plain function"):
            module.call([a, b])


def test_torch_npus_fast_launch_is_refused_in_one_line(monkeypatch):
    from harness.inductor_compat import torch_npu_backend

    monkeypatch.delitem(sys.modules, "torch_npu._inductor.config", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_NPU_FAST_LAUNCH", raising=False)
    assert torch_npu_backend.fast_launch() is None
    monkeypatch.setenv("TORCHINDUCTOR_NPU_FAST_LAUNCH", "1")
    assert torch_npu_backend.fast_launch().startswith(
        "TORCHINDUCTOR_NPU_FAST_LAUNCH=1: torch_npu's fast launch calls each kernel's launcher directly")
    # Read at torch_npu's import into its config (`enable_fast_launch`): that value is the one in force.
    monkeypatch.setitem(sys.modules, "torch_npu._inductor.config", SimpleNamespace(enable_fast_launch=False))
    assert torch_npu_backend.fast_launch() is None
