import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch  # noqa: F401 - in sys.modules before pytester's in-process runs, which would import it again each

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = ["pytester"]

CASES = '''
import torch
from harness import KnownFailure, Program, case, contiguous

@case(tags=("seed", "layout"), dtypes=(torch.float32, torch.float64))
def seed_alpha(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("model",), modes=("inference", "training"))
def longformer_tiny(dtype):
    return Program(torch.nn.Linear(4, 4), [contiguous((2, 4), requires_grad=True)])

@case(tags=("model",), size="full")
def longformer_full(dtype):
    return Program(lambda x: x * 2, [contiguous((4,))])

@case(tags=("tracked",), known_failures=(KnownFailure("broken on purpose"),))
def known_broken(dtype):
    return Program(lambda x: x.no_such_method(), [contiguous((4,))])
'''


@pytest.fixture
def project(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.pytest_plugin"]')
    pytester.mkdir("mycases")
    (pytester.path / "mycases" / "private.py").write_text(textwrap.dedent(CASES))
    return pytester


def collected(result):
    return [line for line in result.outlines if "::" in line]


def test_k_seed_collects_only_seed_cases(project):
    result = project.runpytest("--case-path", "mycases", "mycases", "--collect-only", "-q", "-k", "seed")
    assert collected(result) == [
        "mycases/private.py::seed_alpha[float32-inference]",
        "mycases/private.py::seed_alpha[float64-inference]",
    ]


def test_k_longformer_selects_by_name_and_ids_carry_mode_and_tags(project):
    result = project.runpytest(
        "--case-path", "mycases", "mycases", "--collect-only", "-q", "-k", "longformer and training"
    )
    assert collected(result) == ["mycases/private.py::longformer_tiny[float32-training]"]


def test_ids_are_the_runs_and_k_still_matches_tags_size_dtype_and_mode(project):
    def ids(*options):
        return collected(project.runpytest("--case-path", "mycases", "mycases", "--collect-only", "-q", *options))

    # A tag no longer sits in the id (a case tagged "training" has no "training" in its inference runs' ids).
    (project.path / "mycases" / "tagged.py").write_text(
        textwrap.dedent('''
        from harness import Program, case, contiguous

        @case(tags=("training",), modes=("inference",))
        def tagged_only(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    assert "mycases/tagged.py::tagged_only[float32-inference]" in ids("-k", "tagged_only")
    assert ids("-k", "layout and float64") == ["mycases/private.py::seed_alpha[float64-inference]"]
    assert ids("-k", "full and longformer") == ["mycases/private.py::longformer_full[float32-inference]"]
    assert ids("-k", "model and ci and training") == ["mycases/private.py::longformer_tiny[float32-training]"]


def test_case_path_alone_collects_those_cases_only(project):
    # A test of the project's own beside the cases: pytest started here would collect it.
    project.makepyfile(test_own="def test_own():\n    pass\n")
    alone = collected(project.runpytest("--case-path", "mycases", "--collect-only", "-q", "-k", "seed"))
    assert alone == [
        "mycases/private.py::seed_alpha[float32-inference]",
        "mycases/private.py::seed_alpha[float64-inference]",
    ]
    assert collected(project.runpytest("--case-path", "mycases", "--collect-only", "-q", "-k", "test_own")) == []
    # Paths given as well are collected too.
    both = collected(
        project.runpytest(
            "--case-path", "mycases", "test_own.py", "--collect-only", "-q", "-k", "test_own or seed_alpha"
        )
    )
    assert "test_own.py::test_own" in both and len(both) == 3


def test_harness_dynamic_makes_every_run_dynamic_and_k_dynamic_selects_them(project):
    result = project.runpytest(
        "--case-path",
        "mycases",
        "mycases",
        "--collect-only",
        "-q",
        "--harness-dynamic",
        "-k",
        "longformer and dynamic and training",
    )
    assert collected(result) == ["mycases/private.py::longformer_tiny[float32-training-dynamic]"]
    plain = project.runpytest("--case-path", "mycases", "mycases", "--collect-only", "-q", "-k", "dynamic")
    assert collected(plain) == []


def test_a_dynamic_run_under_pytest_records_both_sizes(project):
    result = project.runpytest_subprocess(
        "--case-path",
        "mycases",
        "mycases",
        "--harness-dynamic",
        "--harness-json",
        "out.json",
        "-k",
        "longformer_tiny and inference",
    )
    result.assert_outcomes(passed=1)
    (record,) = json.loads((project.path / "out.json").read_text())["records"]
    assert (record["dynamic"], record["dynamic_sizes"], record["recompiled"]) == (True, [[[2, 4]], [[3, 4]]], False)


def test_known_issues_apply_under_pytest_as_in_the_cli(project):
    # One option table: `--known-issues` turns a triaged failure into an expected one in pytest too.
    (project.path / "known.toml").write_text(
        '[[issue]]\ncase = "seed_alpha"\nlink = "https://example.org/1"\nreason = "triaged"\n'
    )
    result = project.runpytest_subprocess(
        "--case-path",
        "mycases",
        "mycases",
        "--inject",
        "fault-scale@0",
        "--known-issues",
        "known.toml",
        "-k",
        "seed_alpha and float32",
    )
    result.assert_outcomes(xfailed=1)
    (project.path / "bad.toml").write_text("[[issue]]\ncase = 3\n")
    bad = project.runpytest_subprocess("--case-path", "mycases", "mycases", "--known-issues", "bad.toml")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in bad.stderr.str()


def test_outcomes_and_merged_results_under_xdist(project):
    pytest.importorskip("xdist")
    result = project.runpytest_subprocess(
        "--case-path",
        "mycases",
        "mycases",
        "--backend",
        "eager",
        "-n",
        "2",
        "--harness-json",
        "out.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=4, skipped=1, xfailed=1)
    records = json.loads((project.path / "out.json").read_text())["records"]
    assert sorted((r["case"], r["dtype"], r["mode"], r["status"]) for r in records) == [
        ("known_broken", "float32", "inference", "xfail"),
        ("longformer_full", "float32", "inference", "skip"),
        ("longformer_tiny", "float32", "inference", "pass"),
        ("longformer_tiny", "float32", "training", "pass"),
        ("seed_alpha", "float32", "inference", "pass"),
        ("seed_alpha", "float64", "inference", "pass"),
    ]


def test_unknown_device_is_a_usage_error(project):
    result = project.runpytest("--case-path", "mycases", "mycases", "--device", "tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown device 'tpu'; choose one of: cpu, cuda, npu*"])


@pytest.mark.parametrize("device", ["cuda", "npu"])
def test_an_absent_device_fails_the_session_instead_of_skipping_every_case(project, device):
    from harness.devices import get_device

    if get_device(device).unavailable_reason() is None:
        pytest.skip(f"{device} is present here")
    result = project.runpytest("--case-path", "mycases", "mycases", "--device", device)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*device {device} is not usable: *"])


def test_a_malformed_case_module_is_one_failure_and_the_rest_run(project):
    (project.path / "mycases" / "broken.py").write_text("def oops(:\n")
    result = project.runpytest("--case-path", "mycases", "mycases", "--backend", "eager", "-k", "seed or load")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*cannot load cases from*broken.py: SyntaxError*"])


NOISY = '''
import torch
from harness import Program, case, contiguous

def breaks_then_diverges(x):
    if (x * 2).sum().item() > -1e9:  # a graph break (Tensor.item)
        x = x + 1
    return x + (1 if torch.compiler.is_compiling() else 0)

@case(tags=("noisy",))
def noisy(dtype):
    return Program(breaks_then_diverges, [contiguous((4,))])
'''


@pytest.mark.parametrize("isolation", [[], ["--harness-no-isolation"]], ids=["worker", "in-process"])
def test_a_failure_shows_no_torch_logging_and_the_record_summarizes_graph_breaks(project, isolation):
    (project.path / "mycases" / "private.py").write_text(textwrap.dedent(NOISY))
    result = project.runpytest_subprocess("--case-path", "mycases", "mycases", "--harness-json", "out.json", *isolation)
    result.assert_outcomes(failed=1)
    text = result.stdout.str() + result.stderr.str()
    assert "torch.__trace" not in text and "Graph break" not in text
    record = json.loads((project.path / "out.json").read_text())["records"][0]
    assert record["graphs"]["graph_breaks"] >= 1 and "item()" in record["graph_break_reasons"][0]


def test_the_plugin_leaves_a_project_that_does_not_use_the_harness_alone(tmp_path):
    """Installed, the plugin loads in every pytest run of the environment: one without a harness option or case
    module must not pay for importing torch (seconds)."""
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\ndef test_no_torch():\n    assert 'torch' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "harness.pytest_plugin", "test_plain.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "1 passed" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]


def test_last_failed_works_in_the_checkout(tmp_path):
    """The checkout's configuration keeps pytest's cache: `--lf` reruns the failures, not everything."""
    (tmp_path / "test_lf.py").write_text("def test_passes():\n    pass\n\ndef test_fails():\n    assert False\n")
    common = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:xdist",
        "-o",
        f"cache_dir={tmp_path / 'cache'}",
        "--rootdir",
        str(REPO),
        "-c",
        str(REPO / "pyproject.toml"),
        str(tmp_path / "test_lf.py"),
    ]
    first = subprocess.run(common, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 passed" in first.stdout, first.stdout[-2000:]
    again = subprocess.run([*common, "--lf"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "1 failed, 1 deselected" in again.stdout, again.stdout[-2000:]
