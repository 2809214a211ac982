"""Shards of one selection: a merge takes results files as one night only when they make one up (`report.shards`)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.frontends.cli import EXIT_FAILED, EXIT_USAGE
from harness.report.shards import check_shards, selection_fingerprint

REPO = Path(__file__).resolve().parent.parent

CASES = """
import torch
from harness import Program, case, contiguous

@case(tags=("shards",))
def passes_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("shards",))
def passes_two(dtype):
    return Program(lambda x: x * 2, [contiguous((4,))])

@case(tags=("shards",))
def fails_three(dtype):
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])
"""

RUNS = [("a", "float32", "inference"), ("b", "float32", "inference")]
SETUP = {"device": "cpu", "torch": "2.13.0"}


def _meta(index, count, selection=None):
    return {"shard": [index, count], "selection": selection or selection_fingerprint(RUNS, SETUP)}


def test_the_shards_of_one_selection_merge():
    check_shards([("1.json", _meta(1, 2)), ("2.json", _meta(2, 2))])
    check_shards([("whole.json", {"device": "cpu"}), ("gw1.json", {"device": "cpu"})])  # no shard: not checked


@pytest.mark.parametrize(
    "metas, said",
    [
        ([("1.json", _meta(1, 2))], "shard 2/2 of this selection is missing"),
        ([("1.json", _meta(1, 3)), ("3.json", _meta(3, 3))], "shard 2/3 of this selection is missing"),
        ([("1.json", _meta(1, 2)), ("2.json", _meta(2, 3))], "2.json (shard 2/3) is not a shard of the selection"),
        (
            [("1.json", _meta(1, 2)), ("2.json", _meta(2, 2, selection_fingerprint(RUNS[:1], SETUP)))],
            "2.json (shard 2/2) is not a shard of the selection 1.json (shard 1/2) is",
        ),
        (
            [("1.json", _meta(1, 2)), ("2.json", _meta(2, 2, selection_fingerprint(RUNS, {**SETUP, "torch": "2.11"})))],
            "is not a shard of the selection",
        ),
        ([("1.json", _meta(1, 2)), ("again.json", _meta(1, 2))], "shard 1/2 is given twice: 1.json and again.json"),
        ([("1.json", _meta(1, 2)), ("all.json", {"device": "cpu"})], "all.json is a whole run, merged with shards"),
        ([("1.json", {"shard": [1, 1]})], "1.json: a shard without its selection's fingerprint"),
    ],
)
def test_a_merge_refuses_shards_that_do_not_make_up_one_selection(metas, said):
    with pytest.raises(ValueError) as raised:
        check_shards(metas)
    assert said in str(raised.value)


def test_the_fingerprint_is_the_selection_not_its_order():
    assert selection_fingerprint(RUNS, SETUP) == selection_fingerprint(RUNS[::-1], dict(reversed(SETUP.items())))
    assert selection_fingerprint(RUNS, SETUP) != selection_fingerprint(RUNS[:1], SETUP)


def _harness(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_report_check_refuses_shards_of_two_selections_and_a_missing_shard(tmp_path):
    (tmp_path / "shard_cases.py").write_text(textwrap.dedent(CASES))
    common = ["run", "--tag", "shards", "--case-path", str(tmp_path), "--backend", "eager", "-q"]
    # Shard 1/2 of one -k, shard 2/2 of another: the failing case ran in neither.
    one = _harness(*common, "-k", "passes", "--shard", "1/2", "--json", str(tmp_path / "a.json"), cwd=REPO)
    # A shard's run writes its own report, of that shard (not refused as a night with shard 1/2 missing).
    two = _harness(*common, "--shard", "2/2", "--report-dir", str(tmp_path / "b"), cwd=REPO)
    assert (one.returncode, two.returncode) == (0, 0), one.stderr + two.stderr
    assert "Traceback" not in two.stderr and (tmp_path / "b" / "index.html").exists(), two.stderr
    assert "<th>shard</th><td>2, 2" in (tmp_path / "b" / "index.html").read_text()
    (tmp_path / "b" / "results.json").rename(tmp_path / "b.json")
    run = json.loads((tmp_path / "a.json").read_text())["run"]
    assert run["shard"] == [1, 2] and 0 < run["first_record_s"] <= run["duration_s"], run
    mixed = _harness("report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--check", cwd=REPO)
    assert mixed.returncode == EXIT_USAGE and "is not a shard of the selection" in mixed.stderr, mixed.stderr
    alone = _harness("report", str(tmp_path / "a.json"), "--check", cwd=REPO)
    assert alone.returncode == EXIT_USAGE and "shard 2/2 of this selection is missing" in alone.stderr, alone.stderr
    # The shards of one selection together: merged, and the failure fails the check.
    first = _harness(*common, "--shard", "1/2", "--json", str(tmp_path / "c.json"), cwd=REPO)
    assert first.returncode in (0, EXIT_FAILED), first.stderr
    whole = _harness("report", str(tmp_path / "c.json"), str(tmp_path / "b.json"), "--check", cwd=REPO)
    assert whole.returncode == EXIT_FAILED and "3 pass" not in whole.stdout and "1 fail" in whole.stdout, (
        whole.stdout + whole.stderr
    )
