"""The edges of a run a user or a CI workspace meets: options checked before anything runs, output targets,
a full disk, resumes from another run, known-issues files and report inputs that are not what they seem,
text that could forge console lines, and the labels of cases that end in unusual ways."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.frontends.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parent.parent

CASES = '''
import os, signal, time
import torch
from harness import Program, case, contiguous

@case(tags=("edge",))
def adds_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("edge",))
def diverges(dtype):
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])
'''

ODD_ENDINGS = '''
import os, signal
import torch
from harness import Program, case, contiguous

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no message")

def raises(exc):
    def fn(x):
        raise exc
    return fn

@case(tags=("odd",))
def interrupts(dtype):
    return Program(raises(KeyboardInterrupt()), [contiguous((4,))])

@case(tags=("odd",))
def exits(dtype):
    return Program(raises(SystemExit(3)), [contiguous((4,))])

@case(tags=("odd",))
def kills_itself(dtype):
    os.kill(os.getpid(), signal.SIGKILL)

@case(tags=("odd",))
def returns_meta(dtype):
    return Program(lambda x: torch.empty(4, device="meta"), [contiguous((4,))])

@case(tags=("odd",))
def unprintable_error(dtype):
    return Program(raises(Unprintable()), [contiguous((4,))])

@case(tags=("odd",))
def returns_a_generator(dtype):
    return Program(lambda x: (v for v in x), [contiguous((4,))])

@case(tags=("odd",))
def returns_an_object(dtype):
    return Program(lambda x: object(), [contiguous((4,))])

@case(tags=("odd",))
def carriage_return_message(dtype):
    return Program(raises(RuntimeError("\\rthe real message")), [contiguous((4,))])
'''


@pytest.fixture
def cases(tmp_path):
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "edge_cases.py").write_text(textwrap.dedent(CASES))
    return directory


def harness(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def records_of(path):
    return {r["case"]: r for r in json.loads(Path(path).read_text())["records"]}


@pytest.mark.parametrize("target", ["json", "junit", "report-dir"])
def test_an_unusable_output_target_is_a_usage_error_before_any_case(cases, tmp_path, target):
    in_the_way = tmp_path / "in_the_way"
    (in_the_way if target != "report-dir" else tmp_path / "unused").mkdir()
    if target == "report-dir":
        in_the_way.write_text("a file")
    result = harness(
        "run",
        "adds_one",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        f"--{target}",
        str(in_the_way),
        *(["--json", str(tmp_path / "r.json")] if target == "junit" else []),
    )
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [result.stderr.strip()] and str(in_the_way) in result.stderr
    assert "running" not in result.stdout and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["cases", "in_the_way"] + (["unused"] if target == "report-dir" else [])
    )


def test_a_full_disk_under_the_journal_keeps_the_run_going_and_the_results_written(cases, tmp_path):
    """The journal's device fills up (/dev/full gives ENOSPC on every write): the run goes on, the results JSON
    is written, one line says what was lost, and the exit is not 0."""
    code = textwrap.dedent('''
        import sys
        import harness.records.journal as journal
        real_open = open
        journal.open = lambda path, *a, **k: real_open("/dev/full", *a, **k) if path.endswith(".jsonl") \\
            else real_open(path, *a, **k)
        from harness.frontends.cli import main
        sys.exit(main(sys.argv[1:]))
    ''')
    out = tmp_path / "r.json"
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "run",
            "adds_one",
            "diverges",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "cannot write the journal" in result.stderr and "No space left on device" in result.stderr
    assert sorted(records_of(out)) == ["adds_one", "diverges"]


def test_a_journal_of_another_run_is_not_resumed(cases, tmp_path):
    out = tmp_path / "r.json"
    first = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--json", str(out))
    assert first.returncode == EXIT_OK, first.stdout + first.stderr
    other = harness(
        "run",
        "adds_one",
        "diverges",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--inject",
        "fault-offset@0",
        "--json",
        str(tmp_path / "other.json"),
        "--resume",
        str(out.with_suffix(".jsonl")),
    )
    assert other.returncode == EXIT_USAGE, other.stdout + other.stderr
    assert "was made by another run (inject None, not 'fault-offset@0')" in other.stderr
    same = harness(
        "run",
        "adds_one",
        "diverges",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--json",
        str(tmp_path / "same.json"),
        "--resume",
        str(out.with_suffix(".jsonl")),
    )
    assert same.returncode == EXIT_FAILED and "1 run carried from" in same.stdout, same.stdout + same.stderr


@pytest.mark.parametrize(
    "entry, message",
    [
        ('case = 5\nlink = "x"', "must be text (in quotes): case = 5"),
        ('case = "adds_one"\nlink = "x"\nstatus = "bogus"', 'status must be "fail" or "error"'),
    ],
)
def test_a_known_issues_field_of_the_wrong_type_is_a_usage_error_at_load(cases, tmp_path, entry, message):
    known = tmp_path / "known.toml"
    known.write_text(f"[[issue]]\n{entry}\n")
    result = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--known-issues", str(known))
    assert result.returncode == EXIT_USAGE and message in result.stderr, result.stdout + result.stderr
    assert "running" not in result.stdout


def test_line_breaks_in_a_reason_or_a_tag_cannot_forge_console_lines(cases, tmp_path):
    known = tmp_path / "known.toml"
    known.write_text(
        '[[issue]]\ncase = "diverges"\nlink = "x"\nreason = "tracked\\n[2/2] PASS  totally_fine\\n== 2 pass =="\n'
    )
    (cases / "tagged.py").write_text(
        textwrap.dedent('''
        from harness import Program, case, contiguous

        @case(tags=("edge", "a\\n[9/9] PASS  forged"))
        def tagged(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    run = harness("run", "diverges", "--case-path", str(cases), "--backend", "eager", "--known-issues", str(known))
    listing = harness("list", "--tag", "edge", "--case-path", str(cases))
    for output in (run.stdout, listing.stdout):
        assert not any(line.startswith(("[2/2]", "== 2 pass", "[9/9]")) for line in output.splitlines()), output
    assert "tracked\\n[2/2] PASS" in run.stdout and "a\\n[9/9] PASS  forged" in listing.stdout


def test_a_case_module_gets_the_documented_import_deadline_not_the_case_timeout(tmp_path):
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "slow_import.py").write_text(
        textwrap.dedent('''
        import time
        from harness import Program, case, contiguous
        time.sleep(5)

        @case()
        def imported_slowly(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    result = harness("run", "imported_slowly", "--case-path", str(directory), "--backend", "eager", "--timeout", "2")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr


def test_report_takes_journals_counts_each_run_once_and_shows_unmeasured_durations(cases, tmp_path):
    out = tmp_path / "r.json"
    assert (
        harness("run", "--tag", "edge", "--case-path", str(cases), "--backend", "eager", "--json", str(out)).returncode
        == EXIT_FAILED
    )
    payload = json.loads(out.read_text())
    payload["records"][0]["duration_s"] = "inf"
    payload["records"][1]["duration_s"] = "nan"
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(payload))
    result = harness(
        "report",
        str(odd),
        str(odd),
        str(out.with_suffix(".jsonl")),
        "-o",
        str(tmp_path / "r.html"),
        "--check",
        "--json",
        str(tmp_path / "merged.json"),
    )
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr  # `diverges` fails, nothing else
    assert "4 records of runs already read" in result.stderr and "== 1 fail, 1 pass ==" in result.stdout
    assert len(json.loads((tmp_path / "merged.json").read_text())["records"]) == 2


@pytest.mark.parametrize(
    "args, message",
    [
        (["-o", "{tmp}"], "-o {tmp}: a directory is in the way"),
        (["-o", "/proc/version"], "-o /proc/version: cannot write it"),
        (["--json", "{tmp}"], "--json {tmp}: a directory is in the way"),
    ],
)
def test_report_to_an_unusable_target_is_one_line(tmp_path, args, message):
    fixture = REPO / "tests" / "fixtures" / "report_results.json"
    result = harness("report", str(fixture), *[a.format(tmp=tmp_path) for a in args])
    assert result.returncode == EXIT_USAGE
    assert result.stderr.strip() == f"error: {message.format(tmp=tmp_path)}" or result.stderr.strip().startswith(
        f"error: {message.format(tmp=tmp_path)}"
    ), result.stderr
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_a_case_path_that_is_a_file_but_not_python_says_so(tmp_path):
    result = harness("list", "--case-path", "/bin/ls")
    assert "cannot load cases from /bin/ls: not a directory, a .py file or a dotted module name" in result.stderr


def test_cases_that_end_oddly_get_labels_that_say_what_happened(tmp_path):
    directory = tmp_path / "cases"
    directory.mkdir()
    (directory / "odd.py").write_text(textwrap.dedent(ODD_ENDINGS))
    out = tmp_path / "r.json"
    result = harness("run", "--tag", "odd", "--case-path", str(directory), "--backend", "eager", "--json", str(out))
    assert result.returncode == EXIT_FAILED
    found = records_of(out)
    labels = {name: (r["status"], r["stage"], r["symptom"], r["error"]["type"]) for name, r in found.items()}
    assert labels["interrupts"] == ("error", "eager", "crash", "KeyboardInterrupt")
    assert labels["exits"] == ("error", "eager", "crash", "SystemExit")
    assert labels["kills_itself"][2] == "crash"  # the kernel's out-of-memory killer did not act
    assert "not by the out-of-memory killer" in found["kills_itself"]["error"]["message"]
    assert labels["returns_meta"] == ("error", "eager", "not-comparable", "OutputNotComparable")
    assert "meta device" in found["returns_meta"]["error"]["message"]
    assert labels["unprintable_error"] == ("error", "eager", "crash", "Unprintable")
    for name, kind in [("returns_a_generator", "generator"), ("returns_an_object", "object")]:
        assert labels[name] == ("error", "eager", "not-comparable", "OutputNotComparable"), name
        assert f"is a {kind}" in found[name]["error"]["message"]
    assert "harness bug" not in json.dumps(found)
    assert "RuntimeError: the real message" in result.stdout


def test_a_sigterm_in_the_first_moments_still_leaves_a_results_file(cases, tmp_path):
    """Sent while the command line is read (the handler is there from the first line of `main`)."""
    import signal
    import time

    out = tmp_path / "r.json"
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "adds_one",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--json",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Once the interpreter is in `main` (it imports the CLI within a second), before any case could start.
    deadline = time.time() + 60
    while time.time() < deadline and b"harness" not in Path(f"/proc/{run.pid}/cmdline").read_bytes():
        time.sleep(0.05)
    time.sleep(1.0)
    run.send_signal(signal.SIGTERM)
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, stdout + stderr
    payload = json.loads(out.read_text())
    assert payload["run"]["stopped_by"] == "SIGTERM" and payload["records"] == []


def test_against_a_baseline_bisect_localizes_only_the_new_failures(cases, tmp_path):
    """The nightly's kernel answers cost only what is new: a failure the baseline had too is known."""
    (cases / "more.py").write_text(
        textwrap.dedent('''
        import torch
        from harness import Program, case, contiguous

        @case(tags=("edge",))
        def diverges_too(dtype):
            return Program(lambda x: x * 3 if torch.compiler.is_compiling() else x * 2, [contiguous((4,))])
    ''')
    )
    base = tmp_path / "base.json"
    assert (
        harness("run", "diverges", "--case-path", str(cases), "--backend", "eager", "--json", str(base)).returncode
        == EXIT_FAILED
    )
    out = tmp_path / "r.json"
    result = harness(
        "run",
        "diverges",
        "diverges_too",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--bisect",
        "--baseline",
        str(base),
        "--json",
        str(out),
    )
    assert result.returncode == EXIT_FAILED and "1 new failures" in result.stdout, result.stdout + result.stderr
    found = records_of(out)
    assert found["diverges"]["status"] == "fail" and found["diverges"].get("first_divergent_kernel") is None
    assert found["diverges_too"]["status"] == "fail" and found["diverges_too"]["first_divergent_kernel"] is not None


def test_a_run_recorded_twice_counts_once_with_its_worse_status_in_report_and_resume(cases, tmp_path):
    """A journal holding a pass and then a fail of one run (a retried shard, an edited file): the report's
    --check fails on it, and --resume carries the failure once."""
    out = tmp_path / "r.json"
    assert (
        harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--json", str(out)).returncode
        == EXIT_OK
    )
    journal = out.with_suffix(".jsonl")
    (passed,) = journal.read_text().splitlines()
    failed = json.loads(passed)
    failed.update(status="fail", stage="compare", symptom="divergence")
    twice = tmp_path / "twice.jsonl"
    twice.write_text(passed + "\n" + json.dumps(failed) + "\n")
    report = harness("report", str(twice), "-o", str(tmp_path / "r.html"), "--check")
    assert report.returncode == EXIT_FAILED and "== 1 fail ==" in report.stdout, report.stdout + report.stderr
    resumed = harness(
        "run",
        "adds_one",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--json",
        str(tmp_path / "again.json"),
        "--resume",
        str(twice),
    )
    assert resumed.returncode == EXIT_FAILED and "1 run carried from" in resumed.stdout, resumed.stdout
    assert [r["status"] for r in json.loads((tmp_path / "again.json").read_text())["records"]] == ["fail"]


def test_a_resumed_record_whose_device_was_edited_apart_from_its_identity_is_refused(cases, tmp_path):
    out = tmp_path / "r.json"
    assert (
        harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--json", str(out)).returncode
        == EXIT_OK
    )
    forged = json.loads(out.with_suffix(".jsonl").read_text())
    forged["device"] = "cuda"  # its run_identity still says cpu
    journal = tmp_path / "forged.jsonl"
    journal.write_text(json.dumps(forged) + "\n")
    result = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--resume", str(journal))
    assert result.returncode == EXIT_USAGE and "its device 'cuda', not 'cpu'" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["run", "adds_one", "--json", "{tmp}/x", "--junit", "{tmp}/x"],
            "--json {tmp}/x and --junit {tmp}/x are one file",
        ),
        (
            ["run", "adds_one", "--json", "{tmp}/x.jsonl"],
            "--json {tmp}/x.jsonl and the journal {tmp}/x.jsonl are one file",
        ),
        (
            ["run", "adds_one", "--json", "{tmp}/known.toml", "--known-issues", "{tmp}/known.toml"],
            "--json {tmp}/known.toml would overwrite --known-issues {tmp}/known.toml",
        ),
        (
            ["report", "{tmp}/in.json", "-o", "{tmp}/in.json"],
            "-o {tmp}/in.json would overwrite its input {tmp}/in.json",
        ),
        (
            ["report", "{tmp}/in.json", "--json", "{tmp}/out.json", "--junit", "{tmp}/out.json"],
            "--json {tmp}/out.json and --junit {tmp}/out.json are one file",
        ),
    ],
)
def test_two_outputs_or_an_output_and_an_input_that_are_one_file_are_refused(cases, tmp_path, args, message):
    (tmp_path / "known.toml").write_text("")
    (tmp_path / "in.json").write_text((REPO / "tests" / "fixtures" / "report_results.json").read_text())
    before = (tmp_path / "in.json").read_text()
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    extra = ["--case-path", str(cases), "--backend", "eager"] if args[0] == "run" else []
    result = harness(*argv, *extra)
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert message.replace("{tmp}", str(tmp_path)) in result.stderr, result.stderr
    assert (tmp_path / "in.json").read_text() == before and "running" not in result.stdout


@pytest.mark.parametrize("how", ["report", "baseline", "resume", "last-failed"])
def test_json_nested_too_deeply_is_one_usage_line(cases, tmp_path, how):
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema": ' + "[" * 100_000 + "]" * 100_000 + "}")
    if how == "report":
        result = harness("report", str(deep), "-o", str(tmp_path / "r.html"))
    else:
        result = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", f"--{how}", str(deep))
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert "nested too deeply" in result.stderr and "Traceback" not in result.stderr, result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["--npu-backend", "triton_experimental"], "--npu-backend triton_experimental: applies to --device npu only"),
        (["--backend", "bogus"], "--backend bogus: Dynamo has no such backend"),
        (["--compile-mode", "bogus"], "--compile-mode bogus: Unrecognized mode=bogus"),
    ],
)
def test_an_option_the_run_cannot_use_is_a_usage_error_not_a_harness_bug(cases, tmp_path, args, message):
    result = harness("run", "adds_one", "--case-path", str(cases), *args)
    assert result.returncode == EXIT_USAGE and message in result.stderr, result.stdout + result.stderr
    assert "running" not in result.stdout and "harness bug" not in result.stdout
