import textwrap

import pytest
import torch

from harness.registry import Case, KnownFailure, load_registry

GOOD = '''
import torch
from harness import Program, case, contiguous

@case(tags=("alpha", "seed"), dtypes=(torch.float32,))
def good_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("beta",), size="full")
def good_full(dtype):
    return Program(lambda x: x * 2, [contiguous((4,))])
'''


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_loads_a_directory_and_reports_a_malformed_module(tmp_path):
    write(tmp_path, "good.py", GOOD)
    write(tmp_path, "broken.py", "def oops(:\n")
    write(tmp_path, "raises.py", "raise RuntimeError('import-time failure')\n")
    registry = load_registry([str(tmp_path)], include_default=False)
    assert sorted(registry.cases) == ["good_full", "good_one"]
    messages = sorted(str(e) for e in registry.errors)
    assert len(messages) == 2
    assert "broken.py: SyntaxError" in messages[0]
    assert "raises.py: RuntimeError: import-time failure" in messages[1]


def test_duplicate_case_names_are_an_error_not_an_override(tmp_path):
    write(tmp_path, "a.py", GOOD)
    write(tmp_path, "b.py", GOOD)
    registry = load_registry([str(tmp_path)], include_default=False)
    assert len(registry.cases) == 2
    assert any("already defined" in str(e) for e in registry.errors)


@pytest.mark.parametrize(
    "name",
    ["\u0430dds_one", "\uff41dds_one", "adds_one\u0301", "\u0456s_finite"],
    ids=["cyrillic", "fullwidth", "accent", "i"],
)
def test_a_case_name_that_could_print_as_another_is_a_load_error(tmp_path, name):
    # Look-alike names were accepted and printed like another case's.
    write(
        tmp_path,
        "looks_alike.py",
        f"from harness import Program, case, contiguous\n\n@case(name={name!r})\n"
        "def built(dtype):\n    return Program(lambda x: x + 1, [contiguous((4,))])\n",
    )
    registry = load_registry([str(tmp_path)], include_default=False)
    assert registry.cases == {} and len(registry.errors) == 1, registry.errors
    message = str(registry.errors[0])
    assert "is not ASCII: it could print as another case's name" in message, message
    assert name.encode("ascii", "backslashreplace").decode() in message


def test_missing_path_is_a_load_error():
    registry = load_registry(["/nonexistent/cases"], include_default=False)
    assert [e.message for e in registry.errors] == ["no such directory"]


def test_selection_by_name_keyword_tag_and_size(tmp_path):
    write(tmp_path, "good.py", GOOD)
    registry = load_registry([str(tmp_path)], include_default=False)
    assert [c.name for c in registry.select()] == ["good_one"]  # full-size cases need include_full
    assert [c.name for c in registry.select(include_full=True, keyword="beta or seed")] == ["good_one", "good_full"]
    assert [c.name for c in registry.select(include_full=True, keyword="not alpha")] == ["good_full"]
    assert [c.name for c in registry.select(tags=["beta"], include_full=True)] == ["good_full"]
    assert [c.name for c in registry.select(["good_full"])] == ["good_full"]
    with pytest.raises(KeyError, match="did you mean good_one"):
        registry.select(["good_on"])


def test_case_metadata_is_validated():
    with pytest.raises(ValueError, match="modes"):
        Case(name="x", build=lambda d: None, modes=("serving",))
    with pytest.raises(ValueError, match="size"):
        Case(name="x", build=lambda d: None, size="huge")


def test_known_failure_matches_only_its_run():
    known = KnownFailure("npu bug", device="npu", dtype="int64")
    assert known.matches(device="npu", dtype="int64", backend="inductor")
    assert not known.matches(device="cpu", dtype="int64", backend="inductor")


def test_a_failure_declared_for_a_device_is_not_its_surrogates():
    npu = KnownFailure("triton_experimental narrows int64", device="npu", dtype="int64")
    anywhere = KnownFailure("fails on every device", dtype="int64")
    assert npu.matches(device="npu", dtype="int64") and not npu.matches(True, device="npu", dtype="int64")
    assert anywhere.matches(True, device="npu", dtype="int64")  # not about the device: it applies to the stand-in too
    case = Case(name="declared", build=lambda d: None, known_failures=(npu, anywhere))
    assert case.known_failure(device="npu", dtype="int64") is npu
    assert case.known_failure(True, device="npu", dtype="int64") is anywhere


def test_project_cases_load_cleanly():
    registry = load_registry()
    assert not registry.errors
    seeds = {c.name for c in registry.select(keyword="seed", include_full=True)}
    assert {"seed_index_as_strided_base", "seed_index_as_strided_view", "seed_rmsnorm_weight_grad"} <= seeds
    assert registry.cases["seed_index_as_strided_view"].dtypes == (torch.int64, torch.int32)


def test_case_issues_name_their_upstream_report_not_a_local_file():
    # Records carry `issue` into every results file and report: a path into shared/ (where the seed
    # reports were kept) means nothing to a reader outside this project.
    registry = load_registry()
    issues = {c.name: c.issue for c in registry.select(include_full=True) if c.issue}
    assert not {name: issue for name, issue in issues.items() if "shared/" in issue or issue.endswith(".txt")}
    assert issues["seed_index_as_strided_view"].startswith("torch_npu Inductor (triton_experimental) report")
    assert "AllenaiLongformerBase" in issues["seed_index_as_strided_view"]
    assert issues["seed_rmsnorm_weight_grad_small"].startswith("torch_npu Inductor (NPU Triton codegen) report")
