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
        "def _autoload():\n    raise ImportError('libascendcl.so: cannot open shared object file')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    plain = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "Failed to load the backend extension: fake_npu" in plain.stderr  # it is seen
    return env


def harness(env, *args, cwd=ROOT):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_a_cpu_run_is_untouched_by_a_device_backend_that_fails_to_autoload(failing_backend, tmp_path):
    result = harness(
        failing_backend,
        "run",
        "relu_mlp",
        "--dtype",
        "float32",
        "--mode",
        "inference",
        "--device",
        "cpu",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = json.loads((tmp_path / "r.json").read_text())["records"]
    assert record["status"] == "pass" and record["compile_config"]["torch_npu_patches_active"] is False


def test_a_backend_autoload_the_user_asked_for_fails_in_one_line_that_says_what_to_unset(failing_backend):
    env = dict(failing_backend, TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    result = harness(env, "run", "relu_mlp", "--device", "cpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: import torch failed: Failed to load the backend extension: fake_npu (ImportError: libascendcl.so"
    ), line
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=1 is set here and loads it: unset it" in line


def test_pytest_collects_cases_past_a_device_backend_that_fails_to_autoload(failing_backend):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--collect-only",
            "-q",
            "cases",
            "-k",
            "relu_mlp",
            "--device",
            "cpu",
        ],
        env=failing_backend,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "relu_mlp" in result.stdout


def test_patches_are_recorded_active_where_torch_npu_is_imported(tmp_path):
    from harness.registry import load_registry
    from harness.run.case import RunConfig, run_case
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
    line = torch_npu_backend.codegen_import_problem(
        "triton_experimental", missing, {"torch_npu": "2.14.0", "triton-ascend": "3.2.0"}
    )
    assert line == (
        "torch_npu 2.14.0's triton_experimental codegen imports harness_absent.language.extra.cann"
        ".extension in every kernel module, which cannot be imported with triton-ascend 3.2.0 "
        "installed: install the triton-ascend release made for this torch_npu, or run another "
        "--npu-backend"
    )
    monkeypatch.setitem(common.device_codegens, "npu", SimpleNamespace(scheduling=type("CppScheduling", (), {})))
    assert torch_npu_backend.missing_codegen_imports("npu") == []  # C++ kernels: no Triton imports to look up


def test_a_missing_codegen_import_is_one_usage_line_before_any_case(monkeypatch):
    from harness import devices
    from harness.inductor_compat import torch_npu_backend
    from harness.run.case import RunConfig

    monkeypatch.setattr(torch_npu_backend, "load", lambda asked: torch_npu_backend.LoadedBackend(asked, asked))
    monkeypatch.setattr(torch_npu_backend, "selects_backends", lambda: True)
    monkeypatch.setattr(
        torch_npu_backend, "missing_codegen_imports", lambda device="npu": ["triton.language.extra.cann.extension"]
    )
    monkeypatch.setattr(devices.Npu, "versions", lambda self: {"torch_npu": "2.14.0", "triton-ascend": "3.2.0"})
    problem = devices.compiler_problem(devices.Npu(), RunConfig(device="npu"))
    assert problem.startswith(
        "torch_npu 2.14.0's triton_experimental codegen imports "
        "triton.language.extra.cann.extension in every kernel module"
    ), problem


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
    assert clash.startswith(
        "triton 3.8.0 and triton-ascend 3.2.0 are both installed and both own the `triton` package"
    ), clash


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
        with pytest.raises(
            launches.UnseenLaunch,
            match=r"^CATLASS kernel catlass_mm_0 \(torch_npu's "
            r"async_compile.catlass\) is called as a plain function",
        ):
            module.call([a, b])


def test_torch_npus_fast_launch_is_refused_in_one_line(monkeypatch):
    from harness.inductor_compat import torch_npu_backend

    monkeypatch.delitem(sys.modules, "torch_npu._inductor.config", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_NPU_FAST_LAUNCH", raising=False)
    assert torch_npu_backend.fast_launch() is None
    monkeypatch.setenv("TORCHINDUCTOR_NPU_FAST_LAUNCH", "1")
    assert torch_npu_backend.fast_launch().startswith(
        "TORCHINDUCTOR_NPU_FAST_LAUNCH=1: torch_npu's fast launch calls each kernel's launcher directly"
    )
    # Read at torch_npu's import into its config (`enable_fast_launch`): that value is the one in force.
    monkeypatch.setitem(sys.modules, "torch_npu._inductor.config", SimpleNamespace(enable_fast_launch=False))
    assert torch_npu_backend.fast_launch() is None


AUTOTUNED_WRAPPER = '''
from types import SimpleNamespace

import torch
from torch._inductor.runtime.triton_heuristics import CachingAutotuner


class Autotuner(CachingAutotuner):
    """NPUCachingAutotuner.run's control flow (torch_npu 2.14, npu_triton_heuristics.py): several launchers are
    benchmarked on clones of every tensor argument, then the fastest launches on the real ones."""

    def __init__(self, name, configs):
        self.fn = SimpleNamespace(arg_names=["in_ptr0", "out_ptr0", "xnumel"], __name__=name,
                                  src=f"def {name}(in_ptr0, out_ptr0, xnumel):\\n"
                                      "    tl.store(out_ptr0 + x0, tl.load(in_ptr0 + x0) * 2)\\n")
        self.triton_meta = {"signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"}}
        self.inductor_meta, self.mutated_arg_names, self.heuristic_type = {}, [], None
        self.launchers = [self._launcher for _ in range(configs)]
        self.cloned_launches = 0

    def _launcher(self, source, out, xnumel, stream):
        out.copy_(source * 2)

    def benchmark_all_configs(self, *args):
        clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        for launcher in self.launchers:
            launcher(*clones, stream=0)
            self.cloned_launches += 1
        return {launcher: 1.0 for launcher in self.launchers}

    def run(self, *args, stream, benchmark_run=False):
        if len(self.launchers) > 1:
            self.benchmark_all_configs(*args)
            self.launchers = self.launchers[:1]
        return self.launchers[0](*args, stream=stream)


triton_fake_autotuned_0 = Autotuner("triton_fake_autotuned_0", 3)
triton_fake_single_1 = Autotuner("triton_fake_single_1", 1)


def call(args):
    x, = args
    buf0, buf1 = torch.empty_like(x), torch.empty_like(x)
    triton_fake_autotuned_0.run(x, buf0, x.numel(), stream=0)
    triton_fake_single_1.run(x, buf1, x.numel(), stream=0)
    return buf0, buf1
'''


def test_a_launch_after_autotunings_benchmark_on_clones_is_not_the_binarys_first():
    """The autotuner launches each compiled config on cloned arguments inside `run`, past the launch proxy:
    those are the binaries' first launches. The launch is told so, and the first-launch emulation spoils only
    the kernel whose first launch the program's own is."""
    import importlib.util
    import tempfile

    import torch
    from harness.inject.ascend.stores import FirstLaunchDroppedStores
    from harness.inductor_compat import launches

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "autotuned_wrapper.py"
        path.write_text(AUTOTUNED_WRAPPER)
        spec = importlib.util.spec_from_file_location("autotuned_wrapper", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    launches._wrap_module(module)
    emulation, seen = FirstLaunchDroppedStores(), []

    def handler(launch):
        result = emulation(launch)
        seen.append((launch.kernel.name, launch.first, launch.autotunes, launch.kernel.benchmark_rounds))
        return result

    x = torch.arange(8.0)
    with launches.intercept_launches(handler):
        autotuned, single = module.call([x])
    assert seen == [("triton_fake_autotuned_0", True, True, 1), ("triton_fake_single_1", True, False, 0)]
    assert module.triton_fake_autotuned_0.cloned_launches == 3
    assert torch.equal(autotuned, x * 2)  # its binaries launched first on the clones
    assert torch.equal(single[:4], x[:4] * 2) and bool(single[4:].isnan().all())
    assert emulation.stats.autotuned_first == ["0:triton_fake_autotuned_0"]
    assert emulation.stats.hits == ["1:triton_fake_single_1"]
    assert (
        "came after autotuning benchmarked the kernel on cloned arguments: 0:triton_fake_autotuned_0"
        in FirstLaunchDroppedStores.why_missed(SimpleNamespace(stats=emulation.stats))
    )
