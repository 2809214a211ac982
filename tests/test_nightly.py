"""The nightly job: nothing lost (journal, resume, signals, pytest workers), nothing left running, only
changes reported (known issues, baselines), text safe everywhere, shards that add up."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from harness.frontends.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from processes import alive, processes_marked, writable_by_cases

REPO = Path(__file__).resolve().parent.parent

CASES = '''
import os, signal, subprocess, sys, time
import torch
from harness import Program, case, contiguous

@case(tags=("nightly",))
def adds_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("nightly",))
def doubles(dtype):
    return Program(lambda x: x * 2, [contiguous((4,))])

@case(tags=("nightly",))
def slow(dtype):
    time.sleep(float(os.environ.get("HARNESS_TEST_SLOW", "0")))
    return Program(lambda x: x - 1, [contiguous((4,))])

@case(tags=("nightly",))
def diverges(dtype):
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])

@case(tags=("crashy",))
def crashes(dtype):
    os.kill(os.getpid(), signal.SIGSEGV)

@case(tags=("crashy",))
def hangs_with_a_child(dtype):
    with open(os.environ["HARNESS_TEST_CHILD_PID"], "w") as handle:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        handle.write(str(child.pid))
    time.sleep(600)

@case(tags=("crashy",))
def faults_the_device(dtype):
    # An asynchronous kernel fault: it surfaces when the case's memory is given back, and the process's
    # device is unusable from then on (as CUDA's misaligned address or illegal access leaves it).
    from harness import devices
    faulted = []
    def release(self):
        faulted.append(True)
        raise RuntimeError("device error: misaligned address (emulated)")
    def synchronize(self):
        if faulted:
            raise RuntimeError("device error: misaligned address (emulated)")
    devices.Cpu.release, devices.Cpu.synchronize = release, synchronize
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("crashy",))
def surrogate_message(dtype):
    raise RuntimeError("bad file " + os.fsdecode(b"caf\\xe9.bin"))
'''


@pytest.fixture
def cases(tmp_path):
    (tmp_path / "nightly_cases.py").write_text(textwrap.dedent(CASES))
    return tmp_path


def harness(*args, env=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=kw.pop("timeout", 300),
        **kw,
    )


def nightly_sh(env, *args, **more):
    """examples/nightly.sh with `env` (and `more` variables on top), as a CI step calls it."""
    return subprocess.run(
        ["bash", str(REPO / "examples" / "nightly.sh"), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, **more},
    )


def records_of(path):
    payload = json.loads(Path(path).read_text(), parse_constant=lambda t: pytest.fail(f"non-standard JSON {t}"))
    return {(r["case"], r["dtype"], r["mode"]): r for r in payload["records"]}


def test_sigkill_mid_run_then_resume_gives_every_run_once(cases, tmp_path):
    out = tmp_path / "out" / "results.json"
    common = ["run", "--tag", "nightly", "--case-path", str(cases), "--backend", "eager", "--json", str(out)]
    run = subprocess.Popen(
        [sys.executable, "-m", "harness", *common],
        cwd=REPO,
        env={**os.environ, "HARNESS_TEST_SLOW": "60"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    journal = out.with_suffix(".jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 2):
        time.sleep(0.2)
    run.kill()
    run.wait()
    assert len(journal.read_text().splitlines()) >= 2 and not out.exists()
    resumed = harness(*common, "--resume", str(journal))
    assert resumed.returncode == EXIT_FAILED, resumed.stderr  # `diverges` fails
    assert "carried from" in resumed.stdout
    found = records_of(out)
    assert sorted(k[0] for k in found) == ["adds_one", "diverges", "doubles", "slow"]
    assert len(json.loads(out.read_text())["records"]) == 4  # no run twice


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_leaves_a_partial_report_and_no_process(cases, tmp_path, signum, code):
    report = tmp_path / "report"
    child_pid = tmp_path / "case_writes" / "child.pid"
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "adds_one",
            "hangs_with_a_child",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--report-dir",
            str(report),
        ],
        cwd=REPO,
        env={**os.environ, "HARNESS_TEST_CHILD_PID": str(child_pid), **writable_by_cases(child_pid.parent)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while time.time() < deadline and not (child_pid.exists() and child_pid.read_text()):
        time.sleep(0.2)
    grandchild = int(child_pid.read_text())
    run.send_signal(signum)
    stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == code, stderr
    assert "stopped by" in stderr
    assert list(records_of(report / "results.json")) == [("adds_one", "float32", "inference")]
    assert "<!DOCTYPE html>" in (report / "index.html").read_text()
    time.sleep(1.5)
    assert not alive(grandchild)


def test_a_hanging_case_and_its_child_are_gone_after_the_timeout(cases, tmp_path):
    child_pid = tmp_path / "case_writes" / "child.pid"
    result = harness(
        "run",
        "hangs_with_a_child",
        "adds_one",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--timeout",
        "5",
        "--json",
        str(tmp_path / "r.json"),
        env={"HARNESS_TEST_CHILD_PID": str(child_pid), **writable_by_cases(child_pid.parent)},
    )
    assert result.returncode == EXIT_FAILED
    found = records_of(tmp_path / "r.json")
    assert found[("hangs_with_a_child", "float32", "inference")]["symptom"] == "timeout"
    assert found[("adds_one", "float32", "inference")]["status"] == "pass"
    assert not alive(int(child_pid.read_text()))


def test_a_device_fault_after_the_run_is_that_runs_error_and_the_next_case_gets_a_fresh_worker(cases, tmp_path):
    result = harness(
        "run",
        "faults_the_device",
        "adds_one",
        "doubles",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    found = records_of(tmp_path / "r.json")
    faulted = found[("faults_the_device", "float32", "inference")]
    assert (faulted["status"], faulted["stage"], faulted["symptom"]) == ("error", "worker", "crash")
    assert "misaligned address (emulated)" in faulted["error"]["message"]
    assert "fault after the run" in faulted["error"]["message"]
    assert found[("adds_one", "float32", "inference")]["status"] == "pass"
    assert found[("doubles", "float32", "inference")]["status"] == "pass"


def test_the_timeout_counts_from_the_case_start_not_the_worker_start(cases, tmp_path):
    result = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager", "--timeout", "3")
    assert result.returncode == EXIT_OK, result.stdout + result.stderr


def test_a_module_that_exits_or_hangs_at_import_is_a_load_error(cases, tmp_path):
    (cases / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (cases / "interrupts.py").write_text("raise KeyboardInterrupt\n")
    result = harness("run", "adds_one", "--case-path", str(cases), "--backend", "eager")
    assert result.returncode == EXIT_USAGE
    assert "exits.py: SystemExit" in result.stderr and "interrupts.py: KeyboardInterrupt" in result.stderr
    assert "PASS  adds_one[float32-inference]" in result.stdout


def test_a_module_that_hangs_at_import_times_out(tmp_path):
    from harness.registry import load_registry

    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(60)\n")
    registry = load_registry([str(tmp_path)], include_default=False, import_timeout_s=1)
    (error,) = registry.errors
    assert "ImportTimeout" in str(error)


def test_undecodable_bytes_in_a_message_make_a_readable_report(cases, tmp_path):
    report = tmp_path / "report"
    result = harness(
        "run",
        "surrogate_message",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--report-dir",
        str(report),
        env={"PYTHONIOENCODING": "ascii:strict"},
    )
    assert result.returncode == EXIT_FAILED
    assert (
        "bad file caf\\udce9.bin" in json.loads((report / "results.json").read_text())["records"][0]["error"]["message"]
    )
    rebuilt = harness("report", str(report / "results.json"), "-o", str(tmp_path / "again.html"))
    assert rebuilt.returncode == EXIT_OK and "caf\\udce9.bin" in (tmp_path / "again.html").read_text()


def test_pytest_workers_keep_every_record_and_a_crash_is_a_record(cases, tmp_path):
    pytest.importorskip("xdist")
    out, elsewhere = tmp_path / "pytest.json", tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The README's form, from outside the checkout: the installed plugin adds --case-path to what is collected.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "-q",
            "--case-path",
            str(cases),
            "-k",
            "adds_one or doubles or slow or diverges or crashes",
            "--backend",
            "eager",
            "--harness-json",
            str(out),
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HARNESS_TEST_SLOW": "0"},
    )
    found = records_of(out)
    assert {k[0] for k in found} == {"adds_one", "doubles", "slow", "diverges", "crashes"}, result.stdout[-2000:]
    assert (
        found[("crashes", "float32", "inference")]["status"],
        found[("crashes", "float32", "inference")]["symptom"],
    ) == ("error", "crash")
    assert f"--case-path {cases}" in found[("diverges", "float32", "inference")]["command"]
    assert not list(tmp_path.glob("pytest.gw*.jsonl"))


@pytest.mark.nightly(
    reason="runs a selection whole and in every shard (40 s); CI's nightly-script test shards and merges"
)
def test_shards_add_up_to_the_whole_run(cases, tmp_path):
    whole = harness(
        "run", "--tag", "nightly", "--case-path", str(cases), "--backend", "eager", "--json", str(tmp_path / "all.json")
    )
    parts = [
        harness(
            "run",
            "--tag",
            "nightly",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--shard",
            f"{i}/2",
            "--json",
            str(tmp_path / f"part{i}.json"),
        )
        for i in (1, 2)
    ]
    assert whole.returncode == EXIT_FAILED and all(p.returncode in (EXIT_OK, EXIT_FAILED) for p in parts)
    one = records_of(tmp_path / "all.json")
    split = {**records_of(tmp_path / "part1.json"), **records_of(tmp_path / "part2.json")}
    assert set(split) == set(one) and {k: r["status"] for k, r in split.items()} == {
        k: r["status"] for k, r in one.items()
    }
    assert not set(records_of(tmp_path / "part1.json")) & set(records_of(tmp_path / "part2.json"))
    assert ", shard 2/2" in parts[1].stdout.splitlines()[0]
    merged = harness(
        "report", str(tmp_path / "part1.json"), str(tmp_path / "part2.json"), "-o", str(tmp_path / "m.html")
    )
    assert merged.returncode == EXIT_OK and "4 case runs" in (tmp_path / "m.html").read_text()


def test_known_issues_and_a_baseline_make_the_exit_code_about_changes(cases, tmp_path):
    issues = tmp_path / "known.toml"
    issues.write_text('[[issue]]\ncase = "diver*"\nlink = "https://example.org/issues/1"\nreason = "tracked"\n')
    base = harness(
        "run",
        "--tag",
        "nightly",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--known-issues",
        str(issues),
        "--json",
        str(tmp_path / "base.json"),
        "--junit",
        str(tmp_path / "junit.xml"),
    )
    assert base.returncode == EXIT_OK, base.stdout
    assert records_of(tmp_path / "base.json")[("diverges", "float32", "inference")]["status"] == "xfail"
    assert (
        '<skipped message="known issue: tracked (https://example.org/issues/1)"/>'
        in (tmp_path / "junit.xml").read_text()
    )
    # A failure that shows in some runs only: a passing run stays a pass, the declaration shows in its reason.
    flaky = tmp_path / "flaky.toml"
    flaky.write_text('[[issue]]\ncase = "doubles"\nlink = "https://example.org/issues/2"\nstrict = false\n')
    kept = harness(
        "run",
        "doubles",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--known-issues",
        str(flaky),
        "--json",
        str(tmp_path / "flaky.json"),
    )
    record = records_of(tmp_path / "flaky.json")[("doubles", "float32", "inference")]
    assert kept.returncode == EXIT_OK and record["status"] == "pass" and "some runs only" in record["reason"]
    # `diverges` was a known failure in the baseline: failing now without the declaration is not new, the job is green.
    unchanged = harness(
        "run",
        "--tag",
        "nightly",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--baseline",
        str(tmp_path / "base.json"),
    )
    assert unchanged.returncode == EXIT_OK and "0 new failures" in unchanged.stdout
    (cases / "nightly_cases.py").write_text(
        textwrap.dedent(CASES).replace("x * 2, [", "x * 2 + (1 if torch.compiler.is_compiling() else 0), [")
    )
    broke = harness(
        "run",
        "--tag",
        "nightly",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--baseline",
        str(tmp_path / "base.json"),
    )
    assert broke.returncode == EXIT_FAILED and "new failure: doubles[float32-inference]" in broke.stdout


def test_a_closed_pipe_does_not_lose_the_results(cases, tmp_path):
    shell = (
        f"{sys.executable} -m harness run --tag nightly --case-path {cases} --backend eager "
        f"--json {tmp_path / 'r.json'} | head -1"
    )
    subprocess.run(shell, shell=True, cwd=REPO, timeout=300, capture_output=True)
    assert len(records_of(tmp_path / "r.json")) == 4


@pytest.mark.parametrize(
    "content, message",
    [
        ("not json", "not a harness results file"),
        ("[1, 2]", "not a harness results file"),
        ('{"schema": "harness.results/1", "records": [{"case": "x"}]}', "a record cannot be read"),
    ],
)
def test_report_on_an_unusable_file_is_a_usage_error_naming_it(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = harness("report", str(bad), "-o", str(tmp_path / "x.html"))
    assert result.returncode == EXIT_USAGE and str(bad) in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_the_example_nightly_script_shards_merges_and_fails_only_on_what_changed(cases, tmp_path):
    out = tmp_path / "night"
    env = {
        **os.environ,
        "OUT": str(out),
        "HARNESS": f"{sys.executable} -m harness",
        "SELECT": f"--tag nightly --case-path {cases} --backend eager",
    }

    def nightly(*args, **more):
        return nightly_sh(env, *args, **more)

    shards = [nightly("run", SHARD=f"{i}/2") for i in (1, 2)]
    assert [s.returncode for s in shards] == [EXIT_OK, EXIT_OK], shards[0].stderr
    # A host that never reported: the merge refuses the night, naming the shard (it went green before).
    (out / "shard-2-of-2.json").rename(tmp_path / "held-back.json")
    lost = nightly("merge")
    assert lost.returncode == EXIT_USAGE, lost.stdout + lost.stderr
    assert "error: shard 2/2 of this selection is missing" in lost.stderr, lost.stderr
    (tmp_path / "held-back.json").rename(out / "shard-2-of-2.json")
    first = nightly("merge")
    assert first.returncode == EXIT_FAILED, first.stdout  # no baseline: `diverges` fails the first night
    assert len(records_of(out / "results.json")) == 4 and (out / "index.html").is_file()
    assert 'failures="1"' in (out / "junit.xml").read_text()
    baseline = tmp_path / "last-night.json"
    (out / "results.json").rename(baseline)
    second = nightly("merge", BASELINE=str(baseline))
    assert second.returncode == EXIT_OK and "0 new failures" in second.stdout, second.stdout
    # JUnit agrees with the exit code: the failure the baseline had is a skip, its message stable.
    junit = (out / "junit.xml").read_text()
    assert 'failures="0"' in junit and 'skipped="1"' in junit, junit
    assert 'message="known in baseline: FAIL diverges[float32-inference]: out0 diverged"' in junit
    assert 'classname="harness.cpu.nightly"' in junit


def test_a_reused_nightly_folder_runs_its_cases_and_resumes_only_when_asked_into_the_same_setup(cases, tmp_path):
    out = tmp_path / "night"
    env = {
        **os.environ,
        "OUT": str(out),
        "HARNESS": f"{sys.executable} -m harness",
        "SELECT": f"--case-path '{cases}' --backend eager",
        "KEYWORD": "adds_one or doubles",
    }

    def nightly(*args, **more):
        return nightly_sh(env, *args, **more)

    first = nightly()
    assert first.returncode == EXIT_OK and "running 2 case runs" in first.stdout, first.stdout + first.stderr
    assert [line for line in first.stdout.splitlines() if line.startswith("== ")] == ["== 2 pass =="]  # said once
    # Last night's folder, another setup: everything runs again (no record carried), under the injection.
    injected = nightly(SELECT=env["SELECT"] + " --inject fault-scale@0")
    assert "running 2 case runs" in injected.stdout and "carried" not in injected.stdout, injected.stdout
    assert {r["emulation"] for r in records_of(out / "results.json").values()} == {"fault-scale@0"}
    # A retried job asks to resume: into another setup the harness refuses, naming the difference.
    resumed = nightly("run", RESUME="1")
    assert resumed.returncode == EXIT_USAGE and "was made by another run (inject" in resumed.stderr, resumed.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["run", "no_such_case"],
        ["run", "adds_one", "--device", "tpu"],
        ["run", "adds_one", "--backend", "eager"],
        ["run", "adds_one", "--backend", "eager", "--workers", "2"],
    ],
    ids=["unknown-case", "bad-option", "ok", "two-workers"],
)
def test_the_worker_started_early_is_gone_when_the_harness_exits(cases, tmp_path, args):
    marker = f"HARNESS_TEST_MARKER_{os.getpid()}_{time.time_ns()}"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = harness(*args, "--case-path", str(cases), env={marker: "1", "TMPDIR": str(temporary)})
    assert result.returncode in (EXIT_OK, EXIT_USAGE)
    deadline = time.time() + 5
    while processes_marked(marker) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_marked(marker) == []
    assert not list(temporary.glob("harness-workers-*"))  # worker logs of a run without --report-dir


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "adds_one", "--timeout", "nan"],
        ["run", "adds_one", "--timeout", "inf"],
        ["run", "adds_one", "--timeout", "1e20"],
        ["run", "adds_one", "--timeout", "1e-300"],
        ["run", "adds_one", "--compile-option", "max_autotune=maybe"],
        ["run", "adds_one", "--device", "tpu"],
    ],
    ids=["nan", "inf", "huge", "tiny", "option-type", "device"],
)
def test_a_usage_error_is_one_line_before_any_worker_starts(cases, argv):
    """Workers start only once the command line is accepted; a bad value is one line and exit 2."""
    code = (
        "import subprocess, sys; from harness.frontends import cli; started = []; real = subprocess.Popen\n"
        "def popen(args, *a, **k):\n"
        "    started.append(' '.join(map(str, args)))\n"
        "    return real(args, *a, **k)\n"
        "subprocess.Popen = popen\n"
        "code = cli.main(sys.argv[1:])\n"
        "print(code, sum('harness.isolation.worker' in s for s in started))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *argv, "--case-path", str(cases)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.stdout.split() == [str(EXIT_USAGE), "0"], result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


def test_an_idle_worker_gets_its_next_task_before_the_caller_handles_a_record(cases):
    """The caller's bookkeeping per record (the journal's fsync, the console) overlaps the next case: where an
    fsync takes milliseconds (a network filesystem), a worker waiting on it would idle that long every case."""
    from harness.isolation.pool import Task, WorkerPool
    from harness.frontends.options import run_config_from
    from harness.registry import load_registry

    registry = load_registry([str(cases)], include_default=False)
    tasks = [Task(registry.lookup(name), torch.float32, "inference") for name in ("adds_one", "doubles")]
    pool = WorkerPool(run_config_from({"device": "cpu", "backend": "eager"}), [str(cases)], 120.0)
    try:
        results = pool.run(tasks)
        first = next(results)
        assert (first.case, first.status) == ("adds_one", "pass")
        assert pool.workers[0].task == tasks[1]  # sent before the first record reached the caller
        assert next(results).case == "doubles"
    finally:
        pool.close()


EXPECTED = """
import os, signal
import torch
from harness import KnownFailure, Program, case, contiguous

@case(known_failures=(KnownFailure("segfaults on purpose"),))
def declared_crash(dtype):
    os.kill(os.getpid(), signal.SIGSEGV)

@case()
def triaged_divergence(dtype):
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])

@case(known_failures=(KnownFailure("fixed last week?"),))
def declared_but_passes(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


def test_the_pool_applies_every_expected_failure_to_the_records_it_hands_over(tmp_path):
    """One place turns a status into xfail or xpass: the pool's own record of a crash, the worker's judged record
    (a known-issues file's entry) and a declared failure that passes alike; the case's process never does."""
    from harness.frontends.options import run_config_from
    from harness.isolation.pool import Task, WorkerPool, run_in_process
    from harness.registry import KnownFailure, load_registry
    from harness.judge.known_failures import Expectations, KnownIssue

    (tmp_path / "expected_cases.py").write_text(EXPECTED)
    registry = load_registry([str(tmp_path)], include_default=False)
    names = ("declared_crash", "triaged_divergence", "declared_but_passes")
    tasks = [Task(registry.lookup(name), torch.float32, "inference") for name in names]
    triaged = KnownIssue("triaged_*", "https://example.org/1", KnownFailure("tracked"))
    config = run_config_from({"device": "cpu", "backend": "eager"})
    pool = WorkerPool(config, [str(tmp_path)], 120.0, expectations=Expectations((triaged,)))
    try:
        records = {r.case: r for r in pool.run(tasks)}
    finally:
        pool.close()
    crash = records["declared_crash"]
    assert (crash.status, crash.symptom, crash.reason) == ("xfail", "crash", "segfaults on purpose")
    divergence = records["triaged_divergence"]
    assert (divergence.status, divergence.issue) == ("xfail", "https://example.org/1")
    assert divergence.verdict_source == "judge"
    assert (records["declared_but_passes"].status, records["declared_but_passes"].reason) == (
        "xpass",
        "fixed last week?",
    )
    # Without isolation the same expectations apply; without them, the verdicts as they are.
    alone = {r.case: r.status for r in run_in_process(tasks[1:], config, Expectations((triaged,)))}
    assert alone == {"triaged_divergence": "xfail", "declared_but_passes": "xpass"}
    assert [r.status for r in run_in_process(tasks[1:], config, Expectations())] == ["fail", "xpass"]


HARNESS_FAILS = """
import torch
from harness import KnownFailure, Program, case, contiguous, devices

def _no_device_name(self):
    raise RuntimeError("emulated: a device query that cannot run in a forked process")

devices.Cpu.device_name = _no_device_name  # at import: the case process's run_case then fails outside the case

@case(known_failures=(KnownFailure("declared, but the harness fails first"),))
def declared_but_the_harness_fails(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


def test_a_harness_bug_is_never_the_declared_failure(tmp_path):
    """Where the harness fails in a case's process (on CUDA, a forked process that cannot start the device), the
    record says so and stays an error: a declared failure would have turned every such run into a quiet xfail.
    (The module breaks the harness where it is imported: only ever in the run's own processes.)"""
    (tmp_path / "harness_fails.py").write_text(HARNESS_FAILS)
    out = tmp_path / "results.json"
    result = harness("run", "--case-path", str(tmp_path), "--backend", "eager", "--json", str(out))
    assert result.returncode == EXIT_FAILED, result.stdout + result.stderr
    (record,) = json.loads(out.read_text())["records"]
    assert (record["status"], record["stage"], record["symptom"]) == ("error", "worker", "crash")
    message = record["error"]["message"]
    assert message.startswith("the harness failed in the case's process") and "exited with code 70" in message
    assert "emulated: a device query" in record["error"]["traceback"]
    assert any("a harness bug, not the declared failure" in w for w in record["warnings"])


def test_the_nightly_extracts_its_new_failures_and_drops_last_nights_repros(cases, tmp_path):
    out = tmp_path / "night"
    stale = out / "repros" / "all" / "stale_case_float32_inference"
    stale.mkdir(parents=True)
    env = {
        **os.environ,
        "OUT": str(out),
        "HARNESS": f"{sys.executable} -m harness",
        "SELECT": f"--case-path '{cases}' --inject fault-scale@0",
        "KEYWORD": "adds_one",
    }
    night = subprocess.run(
        ["bash", str(REPO / "examples" / "nightly.sh")], cwd=REPO, capture_output=True, text=True, timeout=600, env=env
    )
    assert night.returncode == EXIT_FAILED, night.stdout + night.stderr
    assert not stale.exists()
    (record,) = records_of(out / "results.json").values()
    assert record["extracted"] == "reproduces", record.get("extraction")
    case_file = Path(record["extraction"]["case_file"])
    assert case_file.is_file() and case_file.is_relative_to(out / "repros" / "all")
    assert f'href="./repros/all/{case_file.parent.name}/{case_file.name}"' in (out / "index.html").read_text()


def test_a_nightly_select_that_does_not_split_stops_the_job_in_one_line(cases, tmp_path):
    env = {
        **os.environ,
        "OUT": str(tmp_path / "night"),
        "HARNESS": f"{sys.executable} -m harness",
        "SELECT": f"--case-path '{cases}' --backend eager -k 'adds_one",
    }  # the quote is never closed
    result = nightly_sh(env, "run")
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"SELECT is not a list of shell words (No closing quotation): {env['SELECT']}"
    ], result.stderr
    assert "running" not in result.stdout


def test_a_one_host_night_in_a_folder_with_a_matrix_nights_shards_reports_tonight(cases, tmp_path):
    out = tmp_path / "night"
    env = {
        **os.environ,
        "OUT": str(out),
        "HARNESS": f"{sys.executable} -m harness",
        "SELECT": f"--case-path '{cases}' --backend eager",
    }

    def nightly(*args, **more):
        return nightly_sh(env, *args, **more)

    last_night = nightly("run", SHARD="1/1", KEYWORD="adds_one")  # a matrix night left shard-1-of-1.json
    assert last_night.returncode == EXIT_OK and (out / "shard-1-of-1.json").exists(), last_night.stderr
    tonight = nightly(KEYWORD="diverges")
    assert tonight.returncode == EXIT_FAILED, tonight.stdout + tonight.stderr
    assert [key[0] for key in records_of(out / "results.json")] == ["diverges"]


def test_the_nightly_finds_the_checkouts_python_or_says_in_one_line_how_to_name_one(cases, tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("HARNESS", "HARNESS_PYTHON", "VIRTUAL_ENV")}
    # A Python that cannot import the harness: one line naming it and the variable, before anything runs.
    wrong = nightly_sh(env, OUT=str(tmp_path / "wrong"), HARNESS_PYTHON="/bin/false")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        f"error: /bin/false cannot import the harness: set HARNESS_PYTHON to the Python it is installed in "
        f"(after the README's set-up, {REPO}/.venv/bin/python)"
    ]
    assert "Traceback" not in wrong.stdout + wrong.stderr and not (tmp_path / "wrong").exists()
    # Named, it runs the night (outside an activated environment: PATH has no harness).
    named = nightly_sh(
        env,
        OUT=str(tmp_path / "named"),
        HARNESS_PYTHON=sys.executable,
        PATH="/usr/bin:/bin",
        SELECT=f"adds_one doubles --case-path {cases} --backend eager",
    )
    assert named.returncode == 0, named.stdout[-2000:] + named.stderr[-2000:]
    assert (tmp_path / "named" / "results.json").exists()


def test_a_nightly_whose_select_names_no_option_says_one_line_even_in_last_nights_folder(cases, tmp_path):
    # A bad SELECT printed the run's error, then the merge's "no such results file"; in a folder reused from last
    # night, the merge would have published last night's results as tonight's.
    out = tmp_path / "night"
    env = {**os.environ, "OUT": str(out), "HARNESS": f"{sys.executable} -m harness"}
    good = nightly_sh(env, "all", SELECT=f"--tag nightly --case-path {cases} --backend eager -k adds_one")
    assert good.returncode == EXIT_OK and (out / "all.json").is_file(), good.stdout + good.stderr
    bad = nightly_sh(env, "all", SELECT="--no-such-option")
    assert bad.returncode == EXIT_USAGE
    assert bad.stderr.strip().splitlines() == ["error: harness: unrecognized arguments: --no-such-option (see --help)"]
    assert not (out / "all.json").exists()


def test_a_report_dir_that_held_another_selections_report_says_it_replaced_it(cases, tmp_path):
    # The tour's `harness run -k "seed and int64" --report-dir reports` silently replaced the main job's report.
    reports = tmp_path / "reports"
    base = ["run", "--case-path", str(cases), "--backend", "eager", "--report-dir", str(reports)]
    first = harness(*base, "-k", "adds_one")
    assert first.returncode == EXIT_OK and "note:" not in first.stdout, first.stdout + first.stderr
    again = harness(*base, "-k", "adds_one")
    assert "note:" not in again.stdout  # the same selection's report, made again
    other = harness(*base, "-k", "doubles")
    assert other.returncode == EXIT_OK, other.stdout + other.stderr
    assert f"note: {reports} held the report of another selection (harness run " in other.stdout, other.stdout
    assert "-k adds_one" in other.stdout and "): replaced" in other.stdout
