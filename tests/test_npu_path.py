"""The NPU code path, run on the surrogate NPU (`tests/npu_surrogate`: a CPU-backed device "npu" and torch_npu's
compiler registry as torch_npu 2.14.0 ships it). Nothing here is an NPU result, and every record says so.

Each test runs the harness in a process of its own with the surrogate on PYTHONPATH: once registered, the
device stays for the life of the process. The surrogate's two modes: C++ kernels (the default), and Triton
kernels run by triton-ascend's interpreter (`NPU_SURROGATE_CODEGEN=triton`, the tests at the end), as the NPU
runs Triton.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from harness.inject.ascend import LAUNCH_CLASSES, REWRITE_CLASSES
from harness.registry import load_registry
from harness.run.case import RunConfig, run_case

ROOT = Path(__file__).resolve().parent.parent
SURROGATE_DIR = ROOT / "tests" / "npu_surrogate"
LABEL = "surrogate NPU (CPU-backed), not an NPU result"
TRITON_LABEL = "surrogate NPU (CPU-backed, Triton kernels run by triton-ascend's interpreter), not an NPU result"
SEED_FIGURES = (2260992, 2359296, 589824, 589823)  # bad, numel, max_abs, out_max: the upstream report's


@pytest.fixture(scope="session")
def surrogate(tmp_path_factory):
    """The environment that puts the surrogate on the path; its device extension built (once per torch)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(SURROGATE_DIR), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    env.pop("NPU_SURROGATE_BACKENDS", None)
    env.pop("NPU_SURROGATE_CODEGEN", None)  # the C++ mode (the Triton mode has its own fixture below)
    built = subprocess.run(
        [sys.executable, "-c", "import torch, torch_npu; print(torch.ones(2, device='npu').sum())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return env


def run_harness(env, *args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def run_own_cases(env, tmp_path, name, source, *options):
    """`harness run` on the device "npu" of one case file of the test's own (`source`, written as `mine/<name>`),
    its records to `r.json`: the options given besides."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / name).write_text(source)
    return run_harness(
        env,
        "run",
        "--case-path",
        str(tmp_path / "mine"),
        "--device",
        "npu",
        *options,
        "--json",
        str(tmp_path / "r.json"),
    )


def program_output(env, source):
    """The lines a Python program prints, run in a process of its own with `env` from the project root (it must
    exit 0)."""
    result = subprocess.run(
        [sys.executable, "-c", source], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def records_of(path):
    return {(r["case"], r["dtype"], r["mode"]): r for r in json.loads(Path(path).read_text())["records"]}


def test_an_op_the_surrogate_runs_on_the_cpu_gives_the_cpus_layout(surrogate):
    # A composite that allocates an empty result and calls its out= op (the comparisons, logical_or, heaviside)
    # came back contiguous from the CPU fallback, where the CPU's own kernel keeps a permuted input's layout, as
    # the op's meta does: Inductor's code read such a fallback's result with the meta's strides.
    lines = program_output(
        surrogate,
        "import torch, torch_npu\n"
        "for device in ('cpu', 'npu'):\n"
        "    x = torch.arange(50.0, device=device).reshape(5, 10).t()\n"
        "    print(torch.eq(x, 3).stride(), torch.logical_or(x > 2, x < 9).stride(), torch.heaviside(x, x).stride())",
    )
    assert lines == ["(1, 10) (1, 10) (1, 10)"] * 2


def test_the_seed_fails_on_the_surrogate_as_on_the_cpu_and_the_same_kernel_is_named(surrogate, tmp_path):
    result = run_harness(
        surrogate,
        "run",
        "-k",
        "seed_index",
        "--device",
        "npu",
        "--inject",
        "boundary-downcast",
        "--bisect",
        "--json",
        str(tmp_path / "npu.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    records = records_of(tmp_path / "npu.json")
    npu = records[("seed_index_as_strided_view", "int64", "inference")]
    # The known failure declared for the NPU's triton_experimental does not apply to a surrogate: it fails.
    assert npu["status"] == "fail" and npu["surrogate"] == LABEL
    (out,) = npu["outputs"]
    assert (out["bad"], out["numel"], out["max_abs"], out["actual_max"]) == SEED_FIGURES
    cpu = run_case(
        load_registry().cases["seed_index_as_strided_view"],
        torch.int64,
        "inference",
        RunConfig(inject="boundary-downcast", bisect=True),
    )
    (cpu_out,) = cpu.outputs
    assert (cpu_out.bad, cpu_out.numel, cpu_out.max_abs, cpu_out.actual_max) == SEED_FIGURES
    found = npu["first_divergent_kernel"]
    assert (found["answer"], found["name"], found["launch_index"]) == (
        "kernel",
        cpu.first_divergent_kernel.name,
        cpu.first_divergent_kernel.launch_index,
    )
    assert found["isolated"].startswith("kernel as the emulated launcher (boundary-downcast) calls it")
    for record in records.values():
        assert record["surrogate"] == LABEL and record["device"] == "npu"
        assert (record["npu_backend"], record["npu_backend_loaded"]) == ("triton_experimental",) * 2
        assert record["versions"]["torch_npu"] == "2.14.0+surrogate"
    # Every console line of a run says it, and so does the command that reproduces it.
    heads = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert len(heads) == 6 and all(f"({LABEL})" in line for line in heads), result.stdout
    assert f"on npu ({LABEL})" in result.stdout.splitlines()[0]
    assert npu["command"].startswith(f"PYTHONPATH={SURROGATE_DIR} python -m harness run seed_index_as_strided_view")


def test_pytest_runs_the_seed_cases_on_the_surrogate(surrogate, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "cases",
            "-q",
            "-p",
            "no:xdist",
            "-k",
            "seed_index",
            "--device",
            "npu",
            "--harness-json",
            str(tmp_path / "results.json"),
        ],
        env=surrogate,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    # On the surrogate's CPU kernels the seed is right; the NPU's known failure is not the surrogate's (xfail).
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = records_of(tmp_path / "results.json")
    assert len(records) == 6 and all(r["status"] == "pass" and r["surrogate"] == LABEL for r in records.values())


@pytest.mark.parametrize(
    "asked, kept, said",
    [
        # torch_npu loads its default backend for a name it does not know, and says nothing.
        (
            "nonesuch",
            None,
            "npu_backend 'nonesuch' was asked for, but torch_npu loaded 'default'; "
            "to run the one that loads, pass --npu-backend default",
        ),
        # The release branches v2.7.1 to v2.12.0 have no triton_experimental: the harness's default loads 'default'.
        (
            None,
            "default,mlir",
            "npu_backend 'triton_experimental' was asked for, but torch_npu loaded 'default'; "
            "to run the one that loads, pass --npu-backend default",
        ),
    ],
)
def test_a_backend_that_is_not_the_one_asked_for_is_a_usage_error_naming_both(surrogate, asked, kept, said):
    env = dict(surrogate, **({"NPU_SURROGATE_BACKENDS": kept} if kept else {}))
    args = ["run", "seed_index_as_strided_view", "--device", "npu", *(["--npu-backend", asked] if asked else [])]
    result = run_harness(env, *args)
    assert result.returncode == 2 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"error: device npu is not usable: {said}"]
    if kept:  # (pytest's check is the same function: once is enough)
        return
    tested = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:xdist",
            "cases/seed_index_as_strided.py",
            "--device",
            "npu",
            *(["--npu-backend", asked] if asked else []),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tested.returncode == 4 and said in tested.stderr, tested.stdout + tested.stderr


def test_the_backend_that_loaded_is_recorded(surrogate, tmp_path):
    env = dict(surrogate, NPU_SURROGATE_BACKENDS="default,mlir")
    result = run_harness(
        env,
        "run",
        "seed_index_as_strided_view",
        "--dtype",
        "int32",
        "--device",
        "npu",
        "--npu-backend",
        "default",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    assert (record["npu_backend"], record["npu_backend_loaded"]) == ("default", "default")
    assert record["compile_options"] == {"npu_backend": "default"}


# Every compile of a run, observed where Inductor lowers it: the config torch_npu's backend set must be the one in
# force for the second case as for the first (the harness restores the config after each case).
CONFIG_AT_EACH_COMPILE = textwrap.dedent("""
    import json, sys, torch, torch_npu
    import torch._inductor.config as config
    from torch._inductor.graph import GraphLowering
    from harness.registry import load_registry
    from harness.run.case import RunConfig, run_case

    seen, lower = [], GraphLowering.codegen
    def observed(self, *args, **kwargs):
        seen.append({key: getattr(config, key) for key in ("split_reductions", "size_asserts", "layout_optimization")})
        return lower(self, *args, **kwargs)
    GraphLowering.codegen = observed
    cases = load_registry().cases
    records = [run_case(cases[name], getattr(torch, dtype), "inference", RunConfig(device="npu"))
               for name, dtype in (("seed_index_as_strided_view", "int32"), ("seed_index_as_strided_base", "int32"),
                                   ("seed_index_as_strided_view", "int64"))]
    print(json.dumps({"seen": seen, "records": [(r.status, r.warnings, getattr(r, "compile_config", None))
                                               for r in records]}))
""")


def test_every_case_compiles_under_the_config_the_backend_set_whatever_its_place(surrogate):
    env = dict(surrogate, TORCHINDUCTOR_FX_GRAPH_CACHE="0")  # every graph lowered: every compile seen
    found = json.loads(program_output(env, CONFIG_AT_EACH_COMPILE)[-1])
    activated = {"split_reductions": False, "size_asserts": False, "layout_optimization": False}
    assert len(found["seen"]) == 3 and all(seen == activated for seen in found["seen"]), found["seen"]
    statuses, warnings, configs = zip(*found["records"])
    assert statuses == ("pass",) * 3 and warnings == ([],) * 3  # no case "changed global torch state"
    assert configs[0]["torch._inductor.config.split_reductions"] is False and configs == (configs[0],) * 3


def test_torch_npus_fast_launch_is_a_usage_error_before_any_case(surrogate):
    # Its wrapper calls each launcher directly (`TORCHINDUCTOR_NPU_FAST_LAUNCH=1`): no launch would be seen.
    result = run_harness(dict(surrogate, TORCHINDUCTOR_NPU_FAST_LAUNCH="1"), "run", "relu_mlp", "--device", "npu")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip() == (
        "error: device npu is not usable: TORCHINDUCTOR_NPU_FAST_LAUNCH=1: torch_npu's "
        "fast launch calls each kernel's launcher directly, past the kernel.run(...) the "
        "harness sees launches through; unset it"
    )


# torch_npu's triton_experimental config module (a ConfigModule its codegen reads): a case that sets an entry has
# it recorded and restored, as Inductor's config is, so the next case compiles under the backend's own values.
BACKEND_CONFIG_RESTORED = textwrap.dedent("""
    import json, torch, torch_npu
    from harness.inputs import contiguous
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    def build(dtype):
        from torch_npu._inductor.triton_experimental import config
        config.rsplit_outer = False  # what a case tuning the NPU codegen would write
        return Program(lambda x: x.sum(0), [contiguous((8, 4))])

    plain = Case(name="plain", build=lambda dtype: Program(lambda x: x.sum(0), [contiguous((8, 4))]))
    import torch_npu._inductor.triton_experimental.config as npu_config
    npu_config.elide_reduction_where = False  # the run's own setting, before its first case
    records = [run_case(case, torch.float32, "inference", RunConfig(device="npu"))
               for case in (Case(name="tuning", build=build), plain)]
    from torch_npu._inductor.triton_experimental import config
    print(json.dumps({"after": config.rsplit_outer,
                      "records": [(r.status, r.warnings, r.compile_config) for r in records]}))
""")


def test_the_npu_backends_own_config_is_recorded_and_restored_after_a_case(surrogate):
    found = json.loads(program_output(surrogate, BACKEND_CONFIG_RESTORED)[-1])
    (status, warnings, tuning), (plain_status, plain_warnings, plain) = found["records"]
    assert (status, plain_status, found["after"]) == ("pass", "pass", True)
    assert any("torch_npu._inductor.triton_experimental.config.rsplit_outer" in w for w in warnings), warnings
    assert plain_warnings == [] and "torch_npu._inductor.triton_experimental.config.rsplit_outer" not in plain
    assert plain == tuning and plain["torch_npu_patches_active"] is True
    assert plain["torch_npu._inductor.triton_experimental.config.elide_reduction_where"] is False


@pytest.mark.nightly(reason='three surrogate runs, one and two workers (30 s)')
def test_a_two_worker_run_gives_every_case_the_same_record_whatever_its_place(surrogate, tmp_path):
    names = ["seed_index_as_strided_view", "relu_mlp", "seed_index_as_strided_base"]
    selection = [*names, "--dtype", "int32", "--dtype", "float32", "--mode", "inference", "--device", "npu"]
    together = run_harness(surrogate, "run", *selection, "--workers", "2", "--json", str(tmp_path / "two.json"))
    assert together.returncode == 0, together.stdout + together.stderr
    reversed_order = [*names[::-1], *selection[len(names) :]]
    alone = run_harness(surrogate, "run", *reversed_order, "--json", str(tmp_path / "one.json"))
    assert alone.returncode == 0, alone.stdout + alone.stderr

    def facts(record):
        return (
            record["status"],
            record["warnings"],
            record["compile_config"],
            record["npu_backend_loaded"],
            [(o["name"], o["bad"], o["max_abs"]) for o in record["outputs"]],
        )

    two, one = records_of(tmp_path / "two.json"), records_of(tmp_path / "one.json")
    assert set(two) == set(one) and len(two) == 3
    assert {key: facts(r) for key, r in two.items()} == {key: facts(r) for key, r in one.items()}


@pytest.mark.nightly(
    reason='all three forms extracted and run on the C++ surrogate (80 s); CI extracts on the Triton surrogate'
)
def test_extraction_on_the_surrogate_writes_repros_that_run_there(surrogate, tmp_path):
    out = tmp_path / "repros"
    result = run_harness(
        surrogate,
        "extract",
        "seed_index_as_strided_index_put",
        "--dtype",
        "int64",
        "--device",
        "npu",
        "--inject",
        "boundary-downcast",
        "-o",
        str(out),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    found = record["extraction"]
    assert record["extracted"] == "reproduces" and found["kernel_repro"] == "reproduces", found
    assert "aten.clone.default(arg0_1" in found["code"] and found["graph_lines"] == 2
    assert f"(npu, {LABEL})" in Path(found["case_file"]).read_text()  # the docstring says where it was verified
    repro = subprocess.run(
        [sys.executable, "repro.py"], cwd=found["directory"], env=surrogate, capture_output=True, text=True, timeout=600
    )
    assert repro.returncode == 1 and LABEL in repro.stdout and "DIVERGES" in repro.stdout, repro.stdout + repro.stderr
    rerun = run_harness(
        surrogate,
        "run",
        "--case-path",
        str(out),
        "--device",
        "npu",
        "--inject",
        "boundary-downcast",
        "--json",
        str(tmp_path / "again.json"),
    )
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    (again,) = records_of(tmp_path / "again.json").values()
    (output,) = again["outputs"]
    assert (output["bad"], output["numel"], output["max_abs"], output["actual_max"]) == SEED_FIGURES
    assert again["surrogate"] == LABEL


# The Triton mode: Inductor's Triton kernels for "npu", run by triton-ascend 3.2.0's interpreter.


@pytest.fixture(scope="session")
def triton_surrogate(surrogate):
    """The surrogate's environment in its Triton mode, triton-ascend installed in a folder of its own (once)."""
    installed = subprocess.run(
        [sys.executable, str(SURROGATE_DIR / "install_triton.py")], capture_output=True, text=True, timeout=900
    )
    if installed.returncode != 0:
        pytest.skip(f"triton-ascend could not be installed: {installed.stderr.strip()}")
    folder = installed.stdout.strip().splitlines()[-1]
    paths = [str(SURROGATE_DIR), folder, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(surrogate, PYTHONPATH=os.pathsep.join(paths), NPU_SURROGATE_CODEGEN="triton")


def test_the_seed_is_named_in_a_triton_kernel_on_the_triton_surrogate(triton_surrogate, tmp_path):
    result = run_harness(
        triton_surrogate,
        "run",
        "seed_index_as_strided_view",
        "--dtype",
        "int64",
        "--device",
        "npu",
        "--inject",
        "boundary-downcast",
        "--bisect",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    (out,) = record["outputs"]
    assert (out["bad"], out["numel"], out["max_abs"], out["actual_max"]) == SEED_FIGURES
    found = record["first_divergent_kernel"]
    assert (found["answer"], found["launch_index"]) == ("kernel", 0) and found["name"].startswith("triton_poi_"), found
    assert found["isolated"].startswith("kernel as the emulated launcher (boundary-downcast) calls it")
    assert "@triton.jit" in Path(found["module_path"]).read_text() and found["source"].startswith("def triton_poi_")
    assert record["surrogate"] == TRITON_LABEL and f"({TRITON_LABEL})" in result.stdout.splitlines()[1]
    # The command that reproduces it finds triton-ascend and chooses the mode again.
    folder = triton_surrogate["PYTHONPATH"].split(os.pathsep)[1]
    assert record["command"].startswith(
        f"PYTHONPATH={SURROGATE_DIR}{os.pathsep}{folder} NPU_SURROGATE_CODEGEN=triton "
        "python -m harness run seed_index_as_strided_view"
    ), record["command"]


@pytest.mark.parametrize("injection", [*LAUNCH_CLASSES, *REWRITE_CLASSES])
def test_each_triton_ascend_class_fails_its_hit_cases_in_the_triton_kernel_it_hit(
    triton_surrogate, tmp_path, injection
):
    result = run_harness(
        triton_surrogate,
        "run",
        "-k",
        f"{injection} and hit",
        "--device",
        "npu",
        "--inject",
        injection,
        "--bisect",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    assert len(records) >= 2
    for record in records.values():
        found = record["first_divergent_kernel"]
        assert record["status"] == "fail" and found["answer"] == "kernel", (record["case"], record["diagnosis"], found)
        assert found["name"].startswith("triton_") and found["isolated"].startswith("kernel is wrong")
        assert f"{found['launch_index']}:{found['name']}" in record["injection_stats"]["hits"]
        assert record["emulation"] == injection and record["surrogate"] == TRITON_LABEL
        if injection == "first-launch-dropped-stores":  # the kernels loaded afresh launch for the first time again
            assert record["symptom"] == "first-launch" and record["diverged_runs"] == [1, 3], record["diagnosis"]


def test_seed_002_fails_under_reduction_partial_in_its_triton_reduction(triton_surrogate, tmp_path):
    result = run_harness(
        triton_surrogate,
        "run",
        "seed_rmsnorm_weight_grad_small",
        "--device",
        "npu",
        "--inject",
        "reduction-partial",
        "--bisect",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    (out,) = record["outputs"]
    assert record["status"] == "fail" and (out["bad"], out["numel"]) == (128, 128)
    found = record["first_divergent_kernel"]
    assert found["answer"] == "kernel" and found["name"].startswith("triton_red_fused_") and "sum" in found["name"]
    assert found["isolated"].startswith("kernel is wrong")
    assert record["injection_stats"]["hits"] == [f"0:{found['name']}"]


def test_correct_programs_blame_nothing_on_the_triton_surrogate(triton_surrogate, tmp_path):
    # In-place chains, reused buffers and a bf16 reduction, in both modes (small: the interpreter is slow).
    result = run_harness(
        triton_surrogate,
        "run",
        *CORRECT_SAMPLE,
        "--dtype",
        "bfloat16",
        "--device",
        "npu",
        "--bisect",
        "always",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    assert len(records) == 2 * len(CORRECT_SAMPLE)
    for record in records.values():
        found = record["first_divergent_kernel"]
        assert record["status"] == "pass" and found["answer"] == "none", (record["case"], found)
        assert found["launches"] > 0 and record["surrogate"] == TRITON_LABEL


CORRECT_SAMPLE = ["correct_clone_inplace_chain", "correct_temporary_overwritten", "correct_rmsnorm"]


def test_extraction_on_the_triton_surrogate_writes_a_kernel_repro_that_reproduces(triton_surrogate, tmp_path):
    result = run_harness(
        triton_surrogate,
        "extract",
        "seed_index_as_strided_view",
        "--dtype",
        "int64",
        "--device",
        "npu",
        "--inject",
        "boundary-downcast",
        "-o",
        str(tmp_path / "repros"),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    found = record["extraction"]
    assert record["extracted"] == "reproduces" and found["kernel_repro"] == "reproduces", found
    assert "@triton.jit" in (Path(found["directory"]) / "_compiled_module.py").read_text()  # the kernel it replays
    repro = subprocess.run(
        [sys.executable, "repro.py"],
        cwd=found["directory"],
        env=triton_surrogate,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert repro.returncode == 1 and TRITON_LABEL in repro.stdout and "DIVERGES" in repro.stdout, (
        repro.stdout + repro.stderr
    )


def test_torch_npus_own_kernels_run_right_and_each_variant_of_them_wrong(triton_surrogate):
    # torch_npu 2.14's kernel text (fixtures/), launched on its 40-core grid by triton-ascend's interpreter.
    result = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "npu_kernel_runs.py")],
        env=triton_surrogate,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = json.loads(result.stdout.splitlines()[-1])
    kernels = {program: error for program, rewriter, error in runs if rewriter is None}
    variants = {(program, rewriter): error for program, rewriter, error in runs if rewriter is not None}
    assert len(kernels) == 7 and all(error < 1e-4 for error in kernels.values()), kernels
    assert {rewriter for _, rewriter in variants} == {
        "masked-load-garbage",
        "reduction-small-inner",
        "reduction-partial",
        "reduction-axis-order",
    }
    assert all(error > 1.0 for error in variants.values()), variants


@pytest.mark.nightly(reason='compiles the seed in both surrogate modes, twice each (55 s)')
def test_a_program_compiled_in_one_mode_is_never_loaded_from_the_cache_in_the_other(
    triton_surrogate, surrogate, tmp_path
):
    # Inductor keys its caches on the device's codegen config: without that, the C++ mode loads the Triton
    # program cached a moment ago and fails with "No module named 'triton'".
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    selection = ["relu_mlp", "--dtype", "float32", "--mode", "inference", "--device", "npu"]
    for env in (dict(triton_surrogate, **cache), dict(surrogate, **cache)):
        result = run_harness(env, "run", *selection, "--json", str(tmp_path / "r.json"))
        assert result.returncode == 0, result.stdout + result.stderr
        (record,) = records_of(tmp_path / "r.json").values()
        label = TRITON_LABEL if "NPU_SURROGATE_CODEGEN" in env else LABEL
        assert record["status"] == "pass" and record["surrogate"] == label, record["error"]


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_the_float64_reference_runs_on_the_cpu_from_copies_of_the_inputs(surrogate, tmp_path, mode):
    """Float64 is not to be relied on on the NPU (operators without an fp64 kernel; torch_npu's launcher narrows
    fp64): the surrogate allocates no float64 tensor under NPU_SURROGATE_NO_FLOAT64=1, and the reference and the
    verdict's metrics are computed on the host."""
    env = dict(surrogate, NPU_SURROGATE_NO_FLOAT64="1")
    refused = subprocess.run(
        [sys.executable, "-c", "import torch, torch_npu; torch.zeros(2, device='npu').double()"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert refused.returncode != 0 and "float64 is not supported on this device" in refused.stderr
    result = run_harness(
        env,
        "run",
        "relu_mlp",
        "correct_mlp_layernorm_gelu",
        "--dtype",
        "float32",
        "--mode",
        mode,
        "--device",
        "npu",
        "--reference",
        "fp64",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for record in records_of(tmp_path / "r.json").values():
        assert record["status"] == "pass", record
        assert (record["reference"], record["reference_device"]) == ("eager+fp64", "cpu")
        assert not [w for w in record["warnings"] if "float64" in w], record["warnings"]
        # Not bit-identical: the verdict widened both sides to float64, which the device would have refused.
        assert any(o["max_abs"] > 0 for o in record["outputs"]), record["outputs"]


# The torch_npu mode: torch_npu's own Inductor backend, from a released wheel, for the surrogate device; its
# kernels run by triton-ascend's interpreter, launched through torch_npu's own launchers. No emulation: whatever
# fails here fails in torch_npu's code (or in a stand-in the surrogate supplies, which tests/npu_surrogate names).

TORCH_NPU_RELEASE = "2.14.0"
TORCH_NPU_LABEL = (
    f"surrogate NPU (CPU-backed; torch_npu {TORCH_NPU_RELEASE}'s own Inductor backend, Triton kernels run by "
    "triton-ascend's interpreter), not an NPU result"
)


@pytest.fixture(scope="session")
def torch_npu_surrogate(triton_surrogate):
    """The Triton mode's environment with torch_npu's Python (downloaded once) on the path, in the torch_npu mode."""
    installed = subprocess.run(
        [sys.executable, str(SURROGATE_DIR / "install_torch_npu.py")], capture_output=True, text=True, timeout=900
    )
    if installed.returncode != 0:
        pytest.skip(f"torch-npu's wheel could not be fetched: {installed.stderr.strip()}")
    folder = installed.stdout.strip().splitlines()[-1]
    triton = triton_surrogate["PYTHONPATH"].split(os.pathsep)[1]
    paths = [str(SURROGATE_DIR), triton, folder, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(triton_surrogate, PYTHONPATH=os.pathsep.join(paths), NPU_SURROGATE_CODEGEN="torch_npu")


def test_an_unpacked_wheels_python_is_compiled_once_so_no_case_process_compiles_it(tmp_path, monkeypatch):
    # Processes that cannot write bytecode (PYTHONDONTWRITEBYTECODE, a confined case) compiled torch_npu's modules
    # from source at every import: the installer writes each module's bytecode, for a new folder and an old one.
    import importlib.util
    import zipfile

    sys.path.insert(0, str(SURROGATE_DIR))
    try:
        import install_torch_npu
    finally:
        sys.path.remove(str(SURROGATE_DIR))
    monkeypatch.setenv(install_torch_npu.ROOT_VARIABLE, str(tmp_path / "cache"))
    wheel = tmp_path / "torch_npu-9.9.0-cp311-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("torch_npu/_inductor/__init__.py", "VALUE = 1\n")
    folder = install_torch_npu.install(wheel=str(wheel))
    source = os.path.join(folder, "torch_npu", "_inductor", "__init__.py")
    compiled = importlib.util.cache_from_source(source)
    assert os.path.isfile(compiled)
    os.remove(compiled)
    os.remove(os.path.join(folder, install_torch_npu.BYTECODE_MARK))  # as a harness that compiled none left it
    assert install_torch_npu.install(wheel=str(wheel)) == folder and os.path.isfile(compiled)


def as_a_developer_runs_it(env: dict[str, str]) -> dict[str, str]:
    """A standalone script's environment without `CI` (which a CI job sets): under it torch refuses the fallbacks
    torch_npu 2.14.0's triton_experimental backend registers, and the backend cannot load
    (`harness/inductor_compat/torch_ci.py`). The harness hides it from torch itself; a plain script does not."""
    return {key: value for key, value in env.items() if key != "CI"}


def test_torch_npus_own_launcher_reproduces_the_seed_with_no_emulation(torch_npu_surrogate, tmp_path):
    result = run_harness(
        dict(torch_npu_surrogate, CI="true"),  # as in a CI job: the backend loads all the same
        "run",
        "seed_index_as_strided_view",
        "--device",
        "npu",
        "--bisect",
        "--json",
        str(tmp_path / "r.json"),
    )
    # The seed's known failure, declared for the torch_npu releases it was measured in: xfail, exit 0.
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    wide, narrow = (records[("seed_index_as_strided_view", dtype, "inference")] for dtype in ("int64", "int32"))
    (out,) = wide["outputs"]
    assert wide["status"] == "xfail" and (out["bad"], out["numel"], out["max_abs"], out["actual_max"]) == SEED_FIGURES
    assert wide["reason"].startswith("torch_npu's launcher narrows int64 args with Tensor.to()"), wide["reason"]
    assert narrow["status"] == "pass" and narrow["outputs"][0]["bad"] == 0 and narrow["outputs"][0]["max_abs"] == 0
    found = wide["first_divergent_kernel"]
    assert found["answer"] == "kernel" and found["name"].startswith("triton_unk_fused_"), found  # torch_npu's naming
    assert found["isolated"].startswith(
        "launcher narrowing is wrong, not the kernel's code: the kernel's own launcher narrows in_ptr0 (int64, "
        "size (12, 4, 768, 64) stride (98304, 16384, 64, 1), not dense) with Tensor.to(), which gives a non-dense "
        "tensor a dense copy the kernel still addresses with its compile-time strides (replayed so, the launch "
        "gives what it gave)"
    ), found["isolated"]
    for record in (wide, narrow):
        assert record["surrogate"] == TORCH_NPU_LABEL and record["device_name"] == TORCH_NPU_LABEL
        assert record["emulation"] is None and record["injection_stats"] is None
        assert record["versions"]["torch_npu"] == TORCH_NPU_RELEASE
        assert (record["npu_backend"], record["npu_backend_loaded"]) == ("triton_experimental",) * 2
    # The command it prints finds the surrogate, triton-ascend and the wheel again, in this mode, and reproduces.
    command = wide["command"]
    assert command.startswith(
        f"PYTHONPATH={torch_npu_surrogate['PYTHONPATH'].rsplit(os.pathsep + str(ROOT), 1)[0]} "
        "NPU_SURROGATE_CODEGEN=torch_npu python -m harness run seed_index_as_strided_view "
    )
    env = {k: v for k, v in torch_npu_surrogate.items() if k not in ("PYTHONPATH", "NPU_SURROGATE_CODEGEN")}
    again = subprocess.run(
        command.replace("python -m harness", f"{sys.executable} -m harness", 1) + f" --json {tmp_path / 'again.json'}",
        shell=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    (repeated,) = records_of(tmp_path / "again.json").values()
    assert repeated["outputs"][0]["bad"] == out["bad"] and repeated["surrogate"] == TORCH_NPU_LABEL


LAUNCHER_FAULT_CASES = """
import importlib
import inspect
import textwrap

import torch

from harness import Program, case, contiguous, gapped


def launcher_with(line, instead):
    \"\"\"torch_npu's own `_wrap_launcher_with_downcast` with one line changed, in this case's process alone.\"\"\"
    heuristics = importlib.import_module("torch_npu._inductor.triton_experimental.npu_triton_heuristics")
    source = inspect.getsource(heuristics._wrap_launcher_with_downcast)
    assert source.count(line) == 1, f"torch_npu's launcher has no line {line!r}"
    exec(compile(source.replace(line, instead), heuristics.__file__, "exec"), heuristics.__dict__)


def mm_then_scale(a, b):
    return torch.mm(a, b) * 3 + 1


@case(dtypes=(torch.int64,))
def in_out_unfilled(dtype):
    \"\"\"The pointwise kernel updates the mm's result in place (in_out_ptr0); its narrowed copy is left unfilled.\"\"\"
    launcher_with("preserve_input = is_in_out or is_mutated", "preserve_input = False")
    spec = dict(dtype=dtype, fill="randint", low=-5, high=5)
    return Program(mm_then_scale, [contiguous((4, 4), **spec), contiguous((4, 4), **spec)])


def add_into(x, y):
    x.add_(y)
    return x * 2


def launcher_made_with(line, instead):
    \"\"\"torch_npu's own `NPUTritonCompileResult.make_launcher` (which writes each launcher's source, its grid
    among it) with one line changed, in this case's process alone.\"\"\"
    heuristics = importlib.import_module("torch_npu._inductor.triton_experimental.npu_triton_heuristics")
    source = textwrap.dedent(inspect.getsource(heuristics.NPUTritonCompileResult.make_launcher))
    assert source.count(line) == 1, f"torch_npu's make_launcher has no line {line!r}"
    scope = {}
    exec(compile(source.replace(line, instead), heuristics.__file__, "exec"), heuristics.__dict__, scope)
    heuristics.NPUTritonCompileResult.make_launcher = scope["make_launcher"]


def bump(x):
    x.add_(1)
    return x * 2


@case(dtypes=(torch.float32,))
def over_wide_grid(dtype):
    \"\"\"An update in place of 65,536 elements: 54 tiles of the kernel's block, which its body divides among 40
    programs. The launcher no longer clamps its grid to those 40, and the 14 programs past them update tiles of
    others in place again.\"\"\"
    launcher_made_with(
        "min((xnumel + {xblock_val} - 1) // {xblock_val}, {NPU_CU_COUNT})", "(xnumel + {xblock_val} - 1) // {xblock_val}"
    )
    return Program(bump, [contiguous((65536,), dtype=dtype)])


@case(dtypes=(torch.int64,))
def narrowed_gapped_dot(dtype):
    \"\"\"torch_npu's launcher as it ships: a gapped int64 input narrowed with Tensor.to() (seed 000's narrowing), its
    dense 80-byte copy read with the input's stride 2, where the memory checker stops the kernel.\"\"\"
    spec = dict(dtype=dtype, fill="randint", low=-5, high=5)
    return Program(torch.dot, [gapped((20,), step=2, **spec), contiguous((20,), **spec)])


@case(dtypes=(torch.int64,))
def mutated_not_written_back(dtype):
    \"\"\"The kernel stores the input it mutates (out_ptr2); the narrowed copies of mutated arguments are not
    written back.\"\"\"
    launcher_with("writebacks.append((a, tmp, src_dtype))", "preserve_input or writebacks.append((a, tmp, src_dtype))")
    spec = dict(dtype=dtype, fill="randint", low=-5, high=5)
    return Program(add_into, [contiguous((8,), **spec), contiguous((8,), **spec)])
"""


def test_the_launchers_answer_names_the_argument_and_what_a_replay_showed_it_did(torch_npu_surrogate, tmp_path):
    # Programs torch_npu 2.14.0's launcher narrows right, each with one line of that launcher changed. The answer
    # came from the first replay that matched: both were given seed 000's sentence (a non-dense tensor's dense
    # copy) for dense tensors, or "kernel is wrong". Each mechanism is now replayed alone, and the one that gives
    # what the launch gave is named.
    result = run_own_cases(torch_npu_surrogate, tmp_path, "launcher_faults.py", LAUNCHER_FAULT_CASES, "--bisect")
    assert result.returncode == 1, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    said = {
        name: records[(name, "int64", "inference")]["first_divergent_kernel"]
        for name in ("in_out_unfilled", "mutated_not_written_back")
    }
    for found in said.values():
        assert found["answer"] == "kernel" and found["isolated"].startswith(
            "launcher narrowing is wrong, not the kernel's code: the kernel's own launcher "
        ), found
        assert "dense" not in found["isolated"] and "(each of these" not in found["isolated"], found["isolated"]
    assert said["in_out_unfilled"]["isolated"].startswith(
        "launcher narrowing is wrong, not the kernel's code: the kernel's own launcher hands in_out_ptr0 (int64, "
        "size (4, 4) stride (4, 1)) to the kernel as a narrowed copy it does not fill from the argument, and the "
        "kernel reads that copy's state (replayed so, the launch gives what it gave)"
    ), said["in_out_unfilled"]["isolated"]
    grid = records[("over_wide_grid", "float32", "inference")]["first_divergent_kernel"]
    assert grid["answer"] == "kernel" and grid["isolated"].startswith(
        "launcher grid is wrong, not the kernel's code: the kernel's own launcher launches it on 54 programs; "
        "launched on 40 programs (torch_npu's vector core count, which its body divides the work among), the "
        "kernel matches eager, its outputs zeroed first or not; on eager values of its inputs the launch diverges (arg0_1 bad=17248/65536"
    ), grid["isolated"]
    # A stop by the memory checker in a copy the launcher narrowed: told by rerunning the program narrowed right
    # (it was "kernel is wrong" at that access).
    stopped = records[("narrowed_gapped_dot", "int64", "inference")]
    assert stopped["symptom"] == "out-of-bounds" and stopped["first_divergent_kernel"]["isolated"].startswith(
        "launcher narrowing is wrong, not the kernel's code: the kernel's own launcher narrows in_ptr0 with "
        "Tensor.to(), a copy of 80 bytes the kernel still addresses with the argument's strides (replayed so, the "
        "memory checker stops it at the same access); narrowed by the harness instead"
    ), stopped["first_divergent_kernel"]["isolated"]
    assert said["mutated_not_written_back"]["isolated"].startswith(
        "launcher narrowing is wrong, not the kernel's code: the kernel's own launcher does not write the narrowed "
        "copy of out_ptr2 (int64, size (8,) stride (1,)) back after the launch, so what the kernel wrote there is lost"
    ), said["mutated_not_written_back"]["isolated"]


MECHANISM_CASES = """
import torch

from harness import Program, case, contiguous, permuted, strided


@case(dtypes=(torch.int64,))
def overlapping_int64_add(dtype):
    \"\"\"torch_npu's launcher as it ships: an overlapping int64 input narrowed with Tensor.to(), its dense copy read
    with the input's strides (every load inside the copy: the run diverges, no memory checker's stop).\"\"\"
    spec = dict(dtype=dtype, fill="randint", low=-5, high=5)
    return Program(lambda x: x + 1, [strided((6, 4), (2, 1), storage_numel=14, **spec)])


@case(dtypes=(torch.float32,), modes=("training",))
def permuted_copysign(dtype):
    \"\"\"copysign, a fallback in triton_experimental, of a permuted input: the surrogate's kernel keeps the
    input's layout, its meta gives a contiguous one, and torch_npu turns Inductor's size asserts off.\"\"\"
    return Program(torch.copysign, [permuted((5, 10), (1, 0), requires_grad=True), contiguous((10, 5))])
"""


def test_a_mechanism_the_runs_own_rerun_shows_is_its_answer_without_bisect(torch_npu_surrogate, tmp_path):
    # Two classes the full OpInfo sweep found in over a hundred ops, each now told in the run itself (no
    # --bisect), by a rerun of the whole program: narrowed keeping every layout, the overlapping input's program
    # matches eager, and narrowed with Tensor.to() as the launcher does it diverges again; compiled with
    # Inductor's size asserts on, copysign's result fails its meta's strides. The record's `mechanism` names
    # each, which a declaration can match (`KnownFailure.mechanism`).
    result = run_own_cases(torch_npu_surrogate, tmp_path, "mechanisms.py", MECHANISM_CASES)
    assert result.returncode == 1, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    narrowed = records[("overlapping_int64_add", "int64", "inference")]
    assert (narrowed["status"], narrowed["symptom"], narrowed["mechanism"]) == (
        "fail",
        "divergence",
        "launcher-narrowing",
    )
    assert (
        "launcher narrowing is wrong, not the kernel's code: the kernels' own launchers narrow in_ptr0 of "
        "triton_unk_fused_add_0 (int64, size (6, 4) stride (2, 1)), not dense, with Tensor.to()"
    ) in narrowed["diagnosis"], narrowed["diagnosis"]
    layout = records[("permuted_copysign", "float32", "training")]
    assert (layout["status"], layout["mechanism"]) == ("fail", "fallback-layout")
    found = layout["first_divergent_kernel"]
    assert (found["kind"], found["name"]) == ("fallback", "torch.ops.aten.copysign.Tensor"), found
    assert found["isolated"].startswith(
        "fallback layout is wrong, not a kernel's code: compiled again with Inductor's size_asserts on (this "
        "compile had them off), the wrapper's assert_size_stride stops after torch.ops.aten.copysign.Tensor: "
        "expected size 10==10, stride 1==5 at dim=0"
    ), found["isolated"]
    # Its answer is given: nothing left to localize (the launcher's rerun left the kernel to --bisect).
    localize = [line for line in result.stdout.splitlines() if "localize:" in line]
    assert len(localize) == 1 and "overlapping_int64_add" in localize[0], localize


def test_correct_programs_blame_nothing_under_torch_npus_backend(torch_npu_surrogate, tmp_path):
    result = run_harness(
        torch_npu_surrogate,
        "run",
        *CORRECT_SAMPLE,
        "correct_mlp_layernorm_gelu",
        "--dtype",
        "float32",
        "--mode",
        "inference",
        "--device",
        "npu",
        "--bisect",
        "always",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    assert len(records) == len(CORRECT_SAMPLE) + 1
    for record in records.values():
        found = record["first_divergent_kernel"]
        assert record["status"] == "pass" and found["answer"] == "none", (record["case"], found)
        assert found["launches"] > 0 and record["surrogate"] == TORCH_NPU_LABEL


def test_a_difference_the_surrogates_eager_gap_alone_explains_is_a_skip_that_names_it(surrogate, tmp_path):
    # The surrogate's eager batch norm is the CPU's kernel: a bfloat16 input's batch statistics come back in
    # bfloat16, where Inductor's decomposition gives a device other than the CPU float32 (values equal). Every such
    # run failed (the full sweep's _batch_norm_with_update and _native_batch_norm_legit, every layout and mode).
    # Rerun with the statistics in float32, eager gives what the compiled run gave: a skip naming the gap.
    result = run_harness(
        surrogate,
        "run",
        "opinfo-_native_batch_norm_legit-bfloat16-s0-contiguous",
        "--device",
        "npu",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    records = records_of(tmp_path / "r.json")
    for mode in ("inference", "training"):
        gap = records[("opinfo-_native_batch_norm_legit-bfloat16-s0-contiguous", "bfloat16", mode)]
        assert gap["status"] == "skip", (mode, gap["status"], gap["outputs"])
        assert (
            gap["reason"].startswith(
                "a gap of the surrogate's eager, not a compiler's fault: run with aten::_native_batch_norm_legit"
            )
            and "gives the batch statistics (save_mean, save_invstd) of a float16 or bfloat16 input in that dtype"
            in (gap["reason"])
        ), gap["reason"]


def test_what_the_interpreter_cannot_run_is_a_skip_that_names_it(triton_surrogate, tmp_path):
    # Inductor's cumsum is a `tl.associative_scan`, which triton-ascend 3.2.0's interpreter fails inside: the run
    # says so and the harness exits 0, where it was an error labelled a compile error.
    result = run_harness(
        triton_surrogate,
        "run",
        "correct_scatter_fresh",
        "--dtype",
        "float32",
        "--device",
        "npu",
        "--bisect",
        "always",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    assert record["status"] == "skip" and record["error"] is None, record
    assert record["reason"].startswith(
        "not runnable on the surrogate: triton-ascend 3.2.0's interpreter cannot run associative_scan"
    ), record["reason"]


LIBDEVICE_PROGRAMS = textwrap.dedent("""
    import json, torch, torch_npu
    programs = {
        "round": lambda x: torch.round(x * 3),  # libdevice.nearbyint
        "trunc": lambda x: torch.trunc(x * 3),
        "tanh": torch.tanh,
        "pow": lambda x: torch.pow(x.abs() + 0.5, x),
        "atan2": lambda x: torch.atan2(x, x.flip(0) + 0.1),
        "log1p": lambda x: torch.log1p(x.abs()),
        "isnan": lambda x: torch.isnan(x.log()).float(),  # predicates: libdevice types them int1
        "isinf": lambda x: torch.isinf(1 / x.round()).float(),
    }
    errors = {}
    torch.manual_seed(0)
    for name, program in programs.items():
        x = torch.randn(37, 64, device="npu")
        expected = program(x)
        # Relative where a value passes 1 (pow's reach 40: a float32 ulp there is 4e-6).
        errors[name] = ((torch.compile(program)(x) - expected).abs() / expected.abs().clamp_min(1)).max().item()
        torch._dynamo.reset()
    print(json.dumps(errors))
""")


def test_libdevice_functions_the_interpreter_lacks_run_in_numpy(triton_surrogate):
    # Each called a stub of triton-ascend's libdevice, which returns None in the interpreter: the kernel then
    # failed further on (`'NoneType' object has no attribute 'to'`), an error labelled a compile error.
    errors = json.loads(program_output(triton_surrogate, LIBDEVICE_PROGRAMS)[-1])
    assert set(errors) == {"round", "trunc", "tanh", "pow", "atan2", "log1p", "isnan", "isinf"}
    assert all(error < 1e-5 for error in errors.values()), errors


SCALAR_COMPARISON_KERNEL = """
import torch
import triton
import triton.language as tl

import torch_npu  # noqa: F401


@triton.jit
def finite_everywhere(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    # nan_to_num's backward as Inductor writes it for a stride-0 input: a scalar load compared, then combined with
    # a block
    x0 = tl.arange(0, XBLOCK)
    tmp0 = tl.load(in_ptr0 + (0)).to(tl.float32)
    tmp2 = tmp0 == tmp0
    tmp5 = tl.abs(tmp0) != tl.full([1], float("inf"), tl.float32)
    tl.store(out_ptr0 + (x0), tmp2 & tmp5, x0 < xnumel)


for value in (6.78, float("nan"), float("inf")):
    out = torch.empty(8, dtype=torch.bool, device="npu")
    finite_everywhere[(1,)](torch.tensor([value], dtype=torch.bfloat16, device="npu"), out, 8, XBLOCK=8)
    print(value, out.tolist())
"""


def test_a_comparison_of_a_scalar_load_combines_with_a_block_as_compiled(triton_surrogate):
    # The interpreter typed a comparison as its operands: the scalar's `==` splat into a float32 block, and `&`
    # stopped in numpy ("ufunc 'bitwise_and' not supported for the input types"), which made nan_to_num's backward
    # an error of the sweep.
    printed = program_output(triton_surrogate, SCALAR_COMPARISON_KERNEL)
    assert printed[-3:] == [f"6.78 {[True] * 8}", f"nan {[False] * 8}", f"inf {[False] * 8}"], printed


def test_the_bugs_found_in_torch_npu_fail_through_its_backend(torch_npu_surrogate, tmp_path):
    result = run_harness(
        torch_npu_surrogate, "run", "--tag", "found", "--device", "npu", "--bisect", "--json", str(tmp_path / "r.json")
    )
    assert result.returncode == 0, result.stdout + result.stderr  # each fails as declared for 2.13.0 to 2.14.0
    records = {key[0]: record for key, record in records_of(tmp_path / "r.json").items()}
    assert set(records) == {
        "found_torch_npu_rsplit_unused_core_range",
        "found_torch_npu_as_strided_update_dropped",
        "found_torch_npu_foreach_inplace_fallback",
        "found_torch_npu_rsplit_undefined_numel",
        "found_torch_npu_diagonal_update_dropped",
        "found_torch_npu_select_lane_overread",
        "found_torch_npu_index_clamp_rewritten",
        "found_torch_npu_reduction_tile_overread",
        "found_torch_npu_int64_reduction_identity_narrowed",
        "found_torch_npu_bool_minimum",
        "found_torch_npu_launcher_write_back_overlapping",
    }
    write_back = records["found_torch_npu_launcher_write_back_overlapping"]
    assert write_back["status"] == "xfail" and "refers to a single memory location" in write_back["error"]["message"]
    bool_minimum = records["found_torch_npu_bool_minimum"]
    assert bool_minimum["status"] == "xfail" and "Unexpected dtype int1" in bool_minimum["error"]["message"]
    identity = records["found_torch_npu_int64_reduction_identity_narrowed"]
    assert identity["status"] == "xfail" and (
        "Python integer 9223372036854775807 out of bounds for int32" in identity["error"]["message"]
    ), identity
    undefined = records["found_torch_npu_rsplit_undefined_numel"]
    assert undefined["status"] == "xfail" and "name 'r0_2numel' is not defined" in undefined["error"]["message"]
    diagonal = records["found_torch_npu_diagonal_update_dropped"]
    assert diagonal["status"] == "xfail" and diagonal["outputs"][0]["bad"] == 4  # the 4 diagonal elements
    # The memory checker's stops: failures (declared) that name the kernel and the load, not errors.
    for name, kernel, load in (
        ("found_torch_npu_select_lane_overread", "triton_unk_fused_mv_0", "_es_sfull1 = tl.load(in_ptr0 + (1 + "),
        ("found_torch_npu_reduction_tile_overread", "triton_unk_fused_mul_sum_unsqueeze_0", "tmp0 = tl.load(in_ptr0 "),
    ):
        record = records[name]
        assert (record["status"], record["symptom"], record["error"]) == ("xfail", "out-of-bounds", None), record
        answer = record["first_divergent_kernel"]
        assert (answer["answer"], answer["name"]) == ("kernel", kernel) and answer["source"].startswith(load), answer
        assert "a load from a 4-byte element at byte offset" in answer["isolated"]
    # The clamp rewritten to tl.maximum(index, 1): element [1, 0] reads src[0, 1], in the kernel that writes it.
    clamp = records["found_torch_npu_index_clamp_rewritten"]
    assert clamp["status"] == "xfail" and (clamp["outputs"][0]["bad"], clamp["outputs"][0]["numel"]) == (1, 128)
    assert clamp["first_divergent_kernel"]["answer"] == "kernel", clamp["first_divergent_kernel"]
    assert clamp["first_divergent_kernel"]["isolated"].startswith("kernel is wrong")
    rsplit, dropped = (
        records["found_torch_npu_rsplit_unused_core_range"],
        records["found_torch_npu_as_strided_update_dropped"],
    )
    foreach = records["found_torch_npu_foreach_inplace_fallback"]
    assert rsplit["status"] == dropped["status"] == foreach["status"] == "xfail"  # as declared for 2.13.0 to 2.14.0
    assert "getitem> is not an OpOverload" in foreach["error"]["message"]
    (out,) = rsplit["outputs"]
    assert (out["bad"], out["numel"]) == (16, 16) and 38 < out["max_rel"] < 40  # 40 cores' copies of the sum
    found = rsplit["first_divergent_kernel"]
    assert found["answer"] == "kernel" and found["name"].startswith("triton_unk_fused_")
    assert (
        "each of the 40 partials of the split reduction holds the whole reduction, not its share: their sum is 40x "
        "eager's (the per-core range is not applied)" in found["isolated"]
    ), found["isolated"]
    assert found["text_findings"] == [
        "unused-core-range: r0__lo, r0__hi are computed from the program's id (its share of the work) and never "
        "used: every program does the whole range"
    ]
    # The update Inductor dropped: no kernel is named, nor the reinplacing pass whose graph runs right eagerly.
    answer = dropped["first_divergent_kernel"]
    assert (answer["answer"], answer["stage"], answer["graph_pass"], answer["name"]) == (
        "stage",
        "inductor_lowering",
        None,
        None,
    ), answer
    assert answer["reason"].endswith(
        "(inference 0: copy__default (an in-place update of clone_1 through as_strided_default; its buffer buf5 was "
        "removed)); no kernel is wrong"
    ), answer["reason"]


@pytest.mark.nightly(reason="the found cases in the surrogate's two other modes (90 s)")
def test_the_bugs_found_in_torch_npu_are_no_bugs_of_upstream_inductors_kernels(triton_surrogate, surrogate, tmp_path):
    # The surrogate's two other modes run upstream Inductor's kernels: every found program is right there.
    for env in (triton_surrogate, surrogate):
        elsewhere = run_harness(env, "run", "--tag", "found", "--device", "npu", "--json", str(tmp_path / "e.json"))
        assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
        assert {r["status"] for r in records_of(tmp_path / "e.json").values()} == {"pass"}


def test_the_extracted_repro_of_a_found_bug_runs_standalone_and_reproduces(torch_npu_surrogate, tmp_path):
    result = run_harness(
        torch_npu_surrogate,
        "extract",
        "found_torch_npu_rsplit_unused_core_range",
        "--device",
        "npu",
        "-o",
        str(tmp_path / "repros"),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    found = record["extraction"]
    assert record["extracted"] == "reproduces" and found["plain_script"] == "reproduces", found
    script = Path(found["directory"]) / "plain_repro.py"
    text = script.read_text()
    # As an NPU host would run it: torch_npu imported for device "npu", the backend asked for by its option.
    assert "import torch_npu" in text and "options={'npu_backend': 'triton_experimental'}" in text
    assert f"Verified on the {TORCH_NPU_LABEL}" in text
    run = subprocess.run(
        [sys.executable, "plain_repro.py"],
        cwd=script.parent,
        env=as_a_developer_runs_it(torch_npu_surrogate),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0 and "Mismatched elements: 16 / 16 (100.0%)" in run.stderr, run.stdout + run.stderr


# One report's script in the test job (the newest), every report's in the nightly: each is a process that imports
# torch_npu and compiles (15 s), and the registry's found cases show the same bugs in the test job.
IN_THE_TEST_JOB = "torch_npu_int64_reduction_identity_narrowed.md"


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(
            p.name,
            marks=()
            if p.name == IN_THE_TEST_JOB
            else pytest.mark.nightly(reason="a found report's script through torch_npu (15 s)"),
        )
        for p in sorted((ROOT / "docs" / "found").glob("*.md"))
    ],
)
def test_each_found_bugs_report_holds_a_repro_that_reproduces_through_torch_npu(torch_npu_surrogate, tmp_path, report):
    # The script an upstream report carries (its last Python block) runs as written, on the torch_npu surrogate.
    import re

    text = (ROOT / "docs" / "found" / report).read_text()
    assert "not on an NPU" in text and "torch-npu 2.14.0" in text
    script = tmp_path / "repro.py"
    script.write_text(re.findall(r"```python\n(.*?)```", text, re.S)[-1])
    run = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=as_a_developer_runs_it(torch_npu_surrogate),
        capture_output=True,
        text=True,
        timeout=600,
    )
    # A wrong result: assert_close's "Mismatched elements"; a failed compile: the script's own AssertionError. The
    # backend loaded (torch's make_fallback check, on under `CI`, raises an AssertionError of its own).
    said = run.stdout + run.stderr[-3000:]
    failed = ("Mismatched elements", "the compile failed:", "the compiled program failed:")
    assert run.returncode != 0 and any(text in run.stderr for text in failed), said
    assert "make_fallback" not in run.stderr, said


HOST_SIDE_CASE = '''
import torch

from harness import Program, case, contiguous


def scaled_on_the_host(x):
    return (x.cpu() * 2).sum(dim=0)


@case(tags=("mine",), dtypes=(torch.float32,))
def host_side_scaling(dtype):
    """A device input scaled on the host: Inductor's C++ kernel, whatever the device's own codegen."""
    return Program(scaled_on_the_host, [contiguous((8, 4))])
'''


def test_a_torch_npu_run_after_a_cpu_run_builds_its_own_precompiled_header(torch_npu_surrogate, tmp_path):
    # A CPU run leaves its workers' precompiled headers in the store; a torch_npu-mode worker compiles nothing
    # before it forks, so its confined case process could not take the header's lock in the worker's folder
    # (PermissionError: '.../precompiled_headers/locks', the OpInfo sweep's zeros, to and hann runs).
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "host_side.py").write_text(HOST_SIDE_CASE)
    cache = str(tmp_path / "inductor-cache")
    plain = {k: v for k, v in torch_npu_surrogate.items() if k not in ("PYTHONPATH", "NPU_SURROGATE_CODEGEN")}
    for env, device in ((dict(plain, PYTHONPATH=str(ROOT)), "cpu"), (torch_npu_surrogate, "npu")):
        result = run_harness(
            dict(env, TORCHINDUCTOR_CACHE_DIR=cache),
            "run",
            "host_side_scaling",
            "--case-path",
            str(tmp_path / "mine"),
            "--device",
            device,
            "--json",
            str(tmp_path / f"{device}.json"),
        )
        assert result.returncode == 0, result.stdout + result.stderr
        (record,) = records_of(tmp_path / f"{device}.json").values()
        assert record["status"] == "pass", record.get("error")
        if device == "cpu":
            assert os.listdir(os.path.join(cache, "harness-precompiled-headers")), "the CPU run stored no header"


WARM_UP_THEN_FORK = """
import os, signal, sys
import torch, torch_npu
from harness.isolation import worker
from harness.records.run_config import RunConfig

backend = sys.argv[1]
print("warmed", worker._warm_up(RunConfig(device="npu", npu_backend=backend)), flush=True)
pid = os.fork()
if pid == 0:  # a case process: compiles another program and runs it, or is stopped where it hangs
    signal.alarm(120)
    compiled = torch.compile(lambda x: (x * 2).sum(0), options={"npu_backend": backend})
    print("fork", torch.equal(compiled(torch.ones(4, 8, device="npu")).cpu(), torch.full((8,), 8.0)), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.parametrize(
    "backend, warmed",
    [
        ("triton_experimental", True),
        pytest.param(
            "default", False, marks=pytest.mark.nightly(reason="torch_npu's default backend compiled twice (25 s)")
        ),
    ],
)
def test_a_worker_warms_torch_npus_compiler_up_only_where_a_fork_after_it_still_compiles(
    torch_npu_surrogate, backend, warmed
):
    # A worker in the torch_npu mode compiled nothing before forking: each case process paid its first compile's
    # set-up (0.4 s of a 0.9 s OpInfo run). It warms up where a trial shows the compile leaves only threads a fork
    # does without; torch_npu's default backend leaves a thread pool, which would hang a fork's compile.
    result = subprocess.run(
        [sys.executable, "-c", WARM_UP_THEN_FORK, backend],
        env=as_a_developer_runs_it(torch_npu_surrogate),  # (the worker's own environment has no `CI` either)
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [f"warmed {warmed}", "fork True"], result.stderr[-3000:]
    refused = "the compiler is not warmed up before forking (it leaves threads running that a fork would lack: "
    assert (refused in result.stderr) == (not warmed), result.stderr[-3000:]
    if not warmed:
        assert "ThreadPoolExecutor" in result.stderr.split(refused)[1].splitlines()[0]


# Registry cases whose kernels reduce with combine functions outside Triton's own (torch_npu's `min2`, Inductor's
# `minimum`, Welford): the paths the surrogate's interpreter speed-ups change (every kernel takes the other two).
# The test job runs the Welford one through torch_npu; the stock interpreter takes two minutes more on the other.
SPED_UP_CASES = ("correct_amax_logsumexp", "correct_var")


@pytest.mark.parametrize(
    ("mode", "cases"),
    [
        ("torch_npu", ("correct_var",)),
        pytest.param(
            "torch_npu",
            ("correct_amax_logsumexp",),
            marks=pytest.mark.nightly(reason="torch_npu's min2 kernels, as the interpreter ships (2 min)"),
        ),
        pytest.param(
            "triton",
            SPED_UP_CASES,
            marks=pytest.mark.nightly(reason="upstream Inductor's Welford kernels, as the interpreter ships (12 min)"),
        ),
    ],
)
def test_the_interpreter_speed_ups_compute_what_the_interpreter_as_it_ships_computes(
    mode, cases, torch_npu_surrogate, triton_surrogate, tmp_path
):
    # A plain script: without `CI`, under which torch refuses torch_npu's fallbacks (as_a_developer_runs_it).
    env = as_a_developer_runs_it(torch_npu_surrogate if mode == "torch_npu" else triton_surrogate)
    outputs = {}
    for interpreter in ("sped-up", "stock"):
        run_env = dict(env, NPU_SURROGATE_INTERPRETER="stock") if interpreter == "stock" else env
        path = tmp_path / f"{interpreter}.pt"
        done = subprocess.run(
            [sys.executable, str(ROOT / "tests" / "npu_interpreter_outputs.py"), str(path), *cases],
            env=run_env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        outputs[interpreter] = torch.load(path)
    for case_name in cases:
        fast, stock = outputs["sped-up"][case_name], outputs["stock"][case_name]
        assert len(fast) == len(stock) > 0
        for a, b in zip(fast, stock):
            # Bit for bit (a min or max of a -0.0 and a 0.0 tie may keep either zero: compared as values there).
            assert a.dtype == b.dtype and a.shape == b.shape, case_name
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=case_name)


def test_an_op_the_wrapper_hands_to_a_higher_order_op_is_the_op_itself(torch_npu_surrogate, tmp_path):
    # torch_npu's wrapper calls `torch.ops.higher_order.with_effects(token, torch.ops.aten._linalg_check_errors.
    # default, ...)`; the harness's launch proxy handed it its own wrapper of the op, and `with_effects` refused it:
    # "op must be HigherOrderOperator or OpOverload, got <class '..._OpProxy'>" (the OpInfo sweep's linalg_solve).
    result = run_harness(
        torch_npu_surrogate,
        "run",
        "opinfo-linalg_solve-float32-s0-overlapping",
        "--device",
        "npu",
        "--json",
        str(tmp_path / "r.json"),
    )
    records = records_of(tmp_path / "r.json")
    assert {record["status"] for record in records.values()} == {"pass"}, result.stdout + result.stderr


def test_kernels_that_slice_a_lane_out_of_a_tile_run_on_the_surrogate(torch_npu_surrogate, tmp_path):
    # torch_npu's codegen writes triton-ascend's CANN `extract_slice` (MLIR's tensor.extract_slice) into a tenth of
    # the OpInfo ci sample's kernels; the surrogate had none, and the runs were skips. Its numpy form: norm's plain
    # lane slices, and isin's slice of a tile loaded broadcast along a dim.
    result = run_harness(
        torch_npu_surrogate,
        "run",
        "opinfo-norm-fro-float32-s0-gapped",
        "opinfo-isin-float32-s0-gapped",
        "--device",
        "npu",
        "--json",
        str(tmp_path / "r.json"),
    )
    records = records_of(tmp_path / "r.json")
    # (skips on the surrogate without the extension's numpy form: "a kernel calls a CANN extension the surrogate lacks")
    assert len(records) == 3 and {r["status"] for r in records.values()} == {"pass"}, result.stdout + result.stderr


def test_a_torch_npu_the_surrogate_cannot_load_is_one_line_naming_where_it_stopped(triton_surrogate, tmp_path):
    # A release whose Python stops in the surrogate's load (2.13.0rc1 did, before its stand-in) is a usage line,
    # exit 2, naming the release and the wheel's file and line: never a traceback.
    checkout = tmp_path / "checkout"
    (checkout / "torch_npu" / "_inductor").mkdir(parents=True)
    (checkout / "torch_npu" / "utils").mkdir()
    (checkout / "torch_npu" / "_inductor" / "__init__.py").write_text("")
    (checkout / "torch_npu" / "version.py").write_text('__version__ = "9.9.0"\n')
    (checkout / "torch_npu" / "utils" / "_dynamo.py").write_text("import torch\n\ntorch.utils._not_there.patch = 1\n")
    triton = triton_surrogate["PYTHONPATH"].split(os.pathsep)[1]
    env = dict(
        triton_surrogate,
        PYTHONPATH=os.pathsep.join([str(SURROGATE_DIR), triton, str(checkout), str(ROOT)]),
        NPU_SURROGATE_CODEGEN="torch_npu",
    )
    result = run_harness(env, "run", "relu_mlp", "--device", "npu")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    (line,) = [text for text in result.stderr.splitlines() if text.startswith("error:")]
    assert "torch_npu 9.9.0's Python" in line and "at torch_npu/utils/_dynamo.py:3: AttributeError" in line, line


ONE_KERNEL_CASE = """
import torch

from harness import Program, case, contiguous


def scale_and_shift(x):
    return x * 2 + 1


@case(tags=("mine",), dtypes=(torch.float32,))
def one_pointwise_kernel(dtype):
    \"\"\"One pointwise kernel writing a fresh (8, 16) output.\"\"\"
    return Program(scale_and_shift, [contiguous((8, 16))])
"""


@pytest.mark.parametrize("mode", ["triton_surrogate", "torch_npu_surrogate"])
def test_a_kernel_that_stores_past_its_buffer_fails_naming_the_kernel_and_the_buffer(request, mode, tmp_path):
    # The kernel's written arguments handed one element into buffers of their size: its last store lands past the
    # end. The interpreter wrote the host heap there, and the case's process died later (SIGSEGV, SIGABRT) with no
    # kernel named; the memory checker stops the store, and the run fails with its answer.
    env = request.getfixturevalue(mode)
    result = run_own_cases(env, tmp_path, "one_kernel.py", ONE_KERNEL_CASE, "--inject", "fault-store-past-end@0")
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records_of(tmp_path / "r.json").values()
    assert (record["status"], record["stage"], record["symptom"]) == ("fail", "compile", "out-of-bounds"), record
    found = record["first_divergent_kernel"]
    assert found["answer"] == "kernel" and record["injection_stats"]["hits"] == [f"0:{found['name']}"], found
    said = found["isolated"]
    # (8 x 16 float32: the store of element 128 lands 4 bytes past the output's 512.)
    assert said.startswith(
        "kernel is wrong: the device's memory checker stopped it at a store to a 4-byte element at byte offset 512 "
    ), said
    assert "a buffer of 512 bytes: 4 bytes past its end (`tl.store(" in said and found["source"].startswith("tl.store(")
    assert record["diagnosis"].startswith(found["name"]) and record["error"] is None
    assert "localize:" not in result.stdout  # the answer is the checker's: nothing is left to localize
