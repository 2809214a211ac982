"""Case modules written as a hostile case author would, met through the CLI as a user meets them: the harness
runs no case code itself, keeps its channel to the workers, judges every case as if it ran alone, leaves no
process behind, and never exits 0 when a case did not run."""

import io
import functools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.frontends.cli import EXIT_USAGE
from processes import processes_marked, writable_by_cases

REPO = Path(__file__).resolve().parent.parent

AT_IMPORT = {
    "exits_at_import.py": "import os\nos._exit(0)\n",
    "segfaults_at_import.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
}

HOSTILE = '''
import os, subprocess, sys, threading, time
import torch
from harness import Program, case, contiguous

def diverging():
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h01_closes_stdin(dtype):
    os.close(0)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h02_writes_to_every_descriptor(dtype):
    for fd in os.listdir("/proc/self/fd"):
        try:
            os.write(int(fd), b'{"record": {"case": "forged", "status": "pass"}}\\n')
        except OSError:
            pass
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h03_writes_to_the_variable_it_was_told(dtype):
    os.write(int(os.environ.get("HARNESS_RESULT_FD", "1")), b'{"record": {"case": "forged"}}\\n')
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h04_patches_allclose(dtype):
    torch.allclose = lambda *a, **k: True
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h05_diverges(dtype):
    return diverging()

@case(tags=("hostile",))
def h06_patches_isclose(dtype):
    torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h07_diverges(dtype):
    return diverging()

@case(tags=("hostile",))
def h08_patches_equal(dtype):
    torch.equal = lambda *a, **k: True
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h09_diverges(dtype):
    return diverging()

@case(tags=("hostile",))
def h10_leaves_a_thread_that_exits(dtype):
    threading.Thread(target=lambda: (time.sleep(1.5), os._exit(7)), daemon=True).start()
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h11_innocent_and_slow(dtype):
    time.sleep(3)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h12_starts_a_daemon(dtype):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("hostile",))
def h13_adds_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
'''

HANGS = '''
import os, subprocess, sys, time
from harness import Program, case, contiguous

@case(tags=("hangs",))
def hangs_with_children(dtype):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open(os.environ["HARNESS_TEST_STARTED"], "w").close()
    time.sleep(600)
'''


def harness(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def write_modules(directory: Path, modules: dict[str, str]) -> Path:
    directory.mkdir(exist_ok=True)
    for name, text in modules.items():
        (directory / name).write_text(textwrap.dedent(text))
    return directory


def run_module(tmp_path: Path, name: str, text: str, tag: str, *more: str, env=None):
    """`harness run --tag TAG` over one case module written as given: the finished process and its records by
    case name."""
    cases = write_modules(tmp_path / "cases", {name: text})
    out = tmp_path / "results.json"
    result = harness(
        "run", "--tag", tag, "--case-path", str(cases), "--backend", "eager", *more, "--json", str(out), env=env
    )
    found = {r["case"]: r for r in json.loads(out.read_text())["records"]} if out.exists() else {}
    return result, found


def no_process_left(marker: str, grace_s: float = 5.0) -> list[int]:
    deadline = time.time() + grace_s
    while processes_marked(marker) and time.time() < deadline:
        time.sleep(0.2)
    return processes_marked(marker)


@pytest.fixture
def marker():
    return f"HARNESS_HOSTILE_MARKER_{os.getpid()}_{time.time_ns()}"


def test_a_hostile_module_set_costs_no_other_record_no_process_and_no_green_exit(tmp_path, marker):
    cases = write_modules(tmp_path / "cases", {**AT_IMPORT, "hostile.py": HOSTILE})
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    out = tmp_path / "out" / "results.json"
    result = harness(
        "run",
        "--tag",
        "hostile",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--json",
        str(out),
        env={marker: "1", "TMPDIR": str(temporary)},
    )
    # The modules that exit (with 0) and segfault at import are load errors naming them: never a silent pass.
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert "exits_at_import.py: the process importing it exited with code 0" in result.stderr
    assert "segfaults_at_import.py: the process importing it was killed by SIGSEGV" in result.stderr
    payload = json.loads(out.read_text())
    assert len(payload["run"]["load_errors"]) == 2
    found = {r["case"]: r for r in payload["records"]}
    assert sorted(found) == [
        f"h{n:02d}_{rest}"
        for n, rest in enumerate(
            [
                "closes_stdin",
                "writes_to_every_descriptor",
                "writes_to_the_variable_it_was_told",
                "patches_allclose",
                "diverges",
                "patches_isclose",
                "diverges",
                "patches_equal",
                "diverges",
                "leaves_a_thread_that_exits",
                "innocent_and_slow",
                "starts_a_daemon",
                "adds_one",
            ],
            1,
        )
    ]
    assert found["h01_closes_stdin"]["status"] == "pass"
    forged = found["h02_writes_to_every_descriptor"]
    assert (forged["status"], forged["error"]["type"]) == ("error", "ChannelCorrupted")
    assert "forged" not in found and found["h03_writes_to_the_variable_it_was_told"]["status"] == "pass"  # not told
    # A patch of torch's comparisons cannot pass a later divergent case; the patching case is told.
    for patching, later in [
        ("h04_patches_allclose", "h05_diverges"),
        ("h06_patches_isclose", "h07_diverges"),
        ("h08_patches_equal", "h09_diverges"),
    ]:
        assert found[later]["status"] == "fail", (later, found[later]["status"])
        assert any("replaced torch functions" in w for w in found[patching]["warnings"]), patching
    # The thread left behind retired its worker: the next case does not meet its os._exit.
    assert any("thread(s) running" in w for w in found["h10_leaves_a_thread_that_exits"]["warnings"])
    assert found["h11_innocent_and_slow"]["status"] == "pass"
    assert any("process(es) running" in w for w in found["h12_starts_a_daemon"]["warnings"])
    assert found["h13_adds_one"]["status"] == "pass"
    assert no_process_left(marker) == []  # the daemon in a session of its own included
    assert not list(temporary.glob("harness-workers-*")) and not list(temporary.glob("harness-loader-*"))


def test_a_sigkilled_harness_leaves_no_process_of_a_hanging_case(tmp_path, marker):
    cases = write_modules(tmp_path / "cases", {"hangs.py": HANGS})
    started = tmp_path / "case_writes" / "started"
    run = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--tag", "hangs", "--case-path", str(cases), "--backend", "eager"],
        cwd=REPO,
        env={**os.environ, marker: "1", "HARNESS_TEST_STARTED": str(started), **writable_by_cases(started.parent)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 180
    while not started.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert started.exists()
    time.sleep(0.5)
    assert len(processes_marked(marker)) >= 4  # the harness, its worker, the case's two children
    run.kill()
    run.wait()
    assert no_process_left(marker) == []


def test_a_second_run_into_the_same_report_dir_refuses_and_the_first_keeps_its_records(tmp_path):
    cases = write_modules(
        tmp_path / "cases",
        {
            "slow.py": '''
        import os, time
        from harness import Program, case, contiguous

        @case()
        def slow_one(dtype):
            time.sleep(float(os.environ.get("HARNESS_TEST_SLOW", "0")))
            return Program(lambda x: x + 1, [contiguous((4,))])

        @case()
        def quick_one(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    '''
        },
    )
    report = tmp_path / "report"
    common = [
        "run",
        "slow_one",
        "quick_one",
        "--case-path",
        str(cases),
        "--backend",
        "eager",
        "--report-dir",
        str(report),
    ]
    first = subprocess.Popen(
        [sys.executable, "-m", "harness", *common],
        cwd=REPO,
        text=True,
        env={**os.environ, "HARNESS_TEST_SLOW": "8"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lock = report / "results.jsonl.lock"
    deadline = time.time() + 120
    while not (lock.exists() and lock.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    second = harness(*common)
    assert second.returncode == EXIT_USAGE, second.stdout + second.stderr
    assert f"is in use by another run (pid {first.pid}" in second.stderr
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    records = json.loads((report / "results.json").read_text())["records"]
    assert sorted(r["case"] for r in records) == ["quick_one", "slow_one"]
    assert len((report / "results.jsonl").read_text().splitlines()) == 2


def test_report_check_rejects_a_record_with_an_unknown_status(tmp_path):
    fixture = json.loads((REPO / "tests" / "fixtures" / "report_results.json").read_text())
    fixture["records"].append({**fixture["records"][0], "case": "unknown_verdict", "status": "bogus"})
    path = tmp_path / "r.json"
    path.write_text(json.dumps(fixture))
    result = harness("report", str(path), "--check")
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    number, record = len(fixture["records"]), fixture["records"][-1]
    assert (
        f"{path}: record {number} (unknown_verdict[{record['dtype']}-{record['mode']}]) has an unknown status "
        "'bogus'" in result.stderr
    )
    assert "==  ==" not in result.stdout


def test_pytest_runs_no_case_code_itself_a_module_that_exits_at_import_fails_its_item(tmp_path, marker):
    cases = write_modules(
        tmp_path / "cases",
        {
            **AT_IMPORT,
            "fine.py": '''
        from harness import Program, case, contiguous

        @case()
        def fine_case(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''',
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The plugin named, and the checkout on the path: the same whether or not the package is installed here.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "harness.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, marker: "1", "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "2 failed, 1 passed" in result.stdout, result.stdout[-3000:]
    assert "exits_at_import.py: the process importing it exited with code 0" in result.stdout
    assert "segfaults_at_import.py: the process importing it was killed by SIGSEGV" in result.stdout
    assert no_process_left(marker) == []


@pytest.mark.parametrize("tags", ["None", "(1, 2)", '"abc"'])
def test_case_metadata_of_the_wrong_type_is_its_modules_load_error_alone(tmp_path, tags):
    cases = write_modules(
        tmp_path / "cases",
        {
            "bad_tags.py": f'''
            from harness import Program, case, contiguous

            @case(tags={tags})
            def badly_tagged(dtype):
                return Program(lambda x: x + 1, [contiguous((4,))])
        ''',
            "fine.py": '''
            from harness import Program, case, contiguous

            @case(tags=["listed"])
            def listed_tags(dtype):
                return Program(lambda x: x + 1, [contiguous((4,))])
        ''',
        },
    )
    result = harness("list", "--case-path", str(cases))
    assert result.returncode == EXIT_USAGE and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert "bad_tags.py: ValueError: case 'badly_tagged': tags must be a tuple of text" in result.stderr
    assert "listed_tags" in result.stdout and "malformed" not in result.stderr


@pytest.mark.parametrize("field, value", [("tags", None), ("tags", [1]), ("warnings", "text"), ("outputs", None)])
def test_report_on_a_record_whose_list_field_is_not_a_list_is_one_usage_line(tmp_path, field, value):
    fixture = json.loads((REPO / "tests" / "fixtures" / "report_results.json").read_text())
    fixture["records"][0][field] = value
    path = tmp_path / "r.json"
    path.write_text(json.dumps(fixture))
    result = harness("report", str(path), "-o", str(tmp_path / "r.html"), "--check")
    assert result.returncode == EXIT_USAGE and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert f"its {field} is {value!r}, not a list" in result.stderr, result.stderr


@pytest.mark.parametrize(
    "option, kind",
    [
        ("--known-issues", "fifo"),
        ("--resume", "fifo"),
        ("--baseline", "fifo"),
        ("--baseline", "/dev/zero"),
        ("--json", "fifo"),
        ("report", "fifo"),
    ],
)
def test_an_input_or_output_that_is_no_regular_file_is_one_usage_line_not_a_hang(tmp_path, option, kind):
    # A FIFO blocked the open (no signal ended it); /dev/zero as a baseline was a MemoryError traceback.
    if kind == "fifo":
        path = tmp_path / ("given.jsonl" if option == "--resume" else "given.json")
        os.mkfifo(path)
    else:
        path = Path(kind)
    command = (
        ["report", str(path), "--check"]
        if option == "report"
        else ["run", "correct_clone_inplace_chain", "--backend", "eager", "--dtype", "float32", option, str(path)]
    )
    if option != "--json":
        command += ["--json", str(tmp_path / "r.json")]
    result = subprocess.run(
        [sys.executable, "-m", "harness", *command], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in result.stderr, result.stderr


SPOILS_ITS_VALUES = """
import torch
from harness import Program, case, contiguous

def _passes():
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("spoils",))
def writes_values_the_judge_cannot_read(dtype):
    def save(obj, f, *args, **kwargs):
        f.write(b"not a tensor file")
    torch.save = save
    return _passes()

@case(tags=("spoils",))
def writes_no_values(dtype):
    torch.save = lambda *args, **kwargs: None
    return _passes()

@case(tags=("spoils",))
def keeps_its_values(dtype):
    return _passes()
"""


def test_a_pass_whose_values_the_judge_cannot_read_or_never_got_is_an_error(tmp_path):
    # Both passed before, with a warning: a case could pass on its own word by spoiling its values.
    result, found = run_module(tmp_path, "spoils.py", SPOILS_ITS_VALUES, "spoils")
    assert result.returncode == 1, result.stdout + result.stderr
    for name, said in [
        ("writes_values_the_judge_cannot_read", "its values could not be read"),
        ("writes_no_values", "its values could not be read"),
    ]:
        record = found[name]
        assert (record["status"], record["symptom"], record["verdict_source"]) == ("error", "unjudged", "case-process")
        assert record["error"]["type"] == "Unjudged" and said in record["error"]["message"], record["error"]
    assert (found["keeps_its_values"]["status"], found["keeps_its_values"]["verdict_source"]) == ("pass", "judge")


SHADOWS_SECRETS = """
import os, sys
with open(os.environ["HARNESS_TEST_SHADOW_MARKER"], "a") as handle:
    handle.write(" ".join(sys.argv) + "\\n")

def token_hex(n=32):
    return "0" * (2 * n)
"""


def test_a_module_in_the_working_directory_shadows_nothing_the_harness_imports(tmp_path):
    # `python -m harness` run from a folder holding a `secrets.py`: the harness, its loader and its workers imported
    # it in place of the standard library's (whose tokens sign the channel's messages).
    here = write_modules(tmp_path / "here", {"secrets.py": SHADOWS_SECRETS})
    cases = write_modules(
        tmp_path / "cases",
        {
            "plain.py": "from harness import Program, case, contiguous\n\n"
            "@case(tags=('plain',))\ndef adds_one(dtype):\n"
            "    return Program(lambda x: x + 1, [contiguous((4,))])\n"
        },
    )
    marker = tmp_path / "imported"
    result = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--case-path", str(cases), "--backend", "eager", "--dtype", "float32"],
        cwd=here,
        capture_output=True,
        text=True,
        env={**os.environ, "HARNESS_TEST_SHADOW_MARKER": str(marker)},
        timeout=300,
    )
    assert result.returncode == 0 and "1 pass" in result.stdout, result.stdout + result.stderr
    assert not marker.exists(), marker.read_text()


def test_an_inductor_cache_dir_that_cannot_be_made_is_one_usage_line(tmp_path):
    # Under a regular file, every worker died at its first compile: "worker process exited with code 1", no cause.
    (tmp_path / "a-file").write_text("")
    result = harness(
        "run",
        "correct_clone_inplace_chain",
        "--dtype",
        "float32",
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "a-file" / "cache")},
    )
    assert result.returncode == EXIT_USAGE, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: TORCHINDUCTOR_CACHE_DIR {tmp_path / 'a-file' / 'cache'}: cannot create it (Not a directory)"
    ]


def test_each_file_a_run_writes_is_named_for_what_it_is_whatever_its_name(tmp_path):
    # A JUnit file named `.json` was announced as "results:".
    result = harness(
        "run",
        "correct_clone_inplace_chain",
        "--dtype",
        "float32",
        "--mode",
        "inference",
        "--backend",
        "eager",
        "--json",
        str(tmp_path / "r.json"),
        "--junit",
        str(tmp_path / "junit.json"),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"results: {tmp_path / 'r.json'}" in result.stdout and f"junit: {tmp_path / 'junit.json'}" in result.stdout


def test_a_log_is_quoted_from_its_end_without_reading_it_whole(tmp_path):
    from harness.isolation.child import LOG_TAIL_CHARS, read_tail

    log = tmp_path / "worker.log"
    with open(log, "wb") as handle:
        handle.write(b"x" * (64 << 20))  # 64 MiB a case printed
        handle.write("the last words \u00e9\n".encode())
    read = []

    class Counted(io.FileIO):
        def read(self, size=-1):
            data = super().read(size)
            read.append(len(data))
            return data

    with Counted(log, "rb") as handle:
        quoted = read_tail(handle)
    assert sum(read) <= 4 * LOG_TAIL_CHARS and len(quoted) == LOG_TAIL_CHARS
    assert quoted.endswith("the last words \u00e9\n")


def test_totals_of_a_run_that_finished_nothing_say_so():
    from harness.frontends.cli import totals

    assert totals([]) == "== no run finished =="


REACHES_FOR_OTHERS_VALUES = """
import glob, os, shutil, time
import torch
from harness import Program, case, contiguous

@case(tags=("reach",))
def a_removes_every_values_file_it_finds(dtype):
    # Beside the victim, on the other worker: whatever values it can find by path, gone.
    deadline = time.time() + float(os.environ["HARNESS_TEST_REACH_S"])
    while time.time() < deadline:
        for path in glob.glob(os.path.join(os.environ["TMPDIR"], "**", "*.pt"), recursive=True):
            try:
                os.remove(path)
            except OSError:
                pass
        time.sleep(0.001)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("reach",))
def b_diverges(dtype):
    time.sleep(1.0)
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])
"""


def test_no_case_reaches_the_values_another_case_sent_to_be_judged(tmp_path):
    # The values were files under a folder every case could reach: removed, replaced or rewritten by another case,
    # a divergent victim passed or errored. They now travel as an anonymous file over the case's own socket.
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result, found = run_module(
        tmp_path,
        "reach.py",
        REACHES_FOR_OTHERS_VALUES,
        "reach",
        "--workers",
        "2",
        env={"TMPDIR": str(temporary), "HARNESS_TEST_REACH_S": "8"},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    victim = found["b_diverges"]
    assert (victim["status"], victim["verdict_source"]) == ("fail", "judge"), victim
    assert not list(temporary.glob("harness-values-*"))


SLOW = """
import os, time
from harness import Program, case, contiguous

@case()
def slow_one(dtype):
    time.sleep(float(os.environ.get("HARNESS_TEST_SLOW", "0")))
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


@pytest.mark.parametrize("first_writes, second_writes", [("--json", "--junit"), ("--junit", "--json")])
def test_two_runs_at_once_never_write_one_file_as_different_outputs(tmp_path, first_writes, second_writes):
    # One run's `--json s/a.json` and another's `--junit s/a.json`: the second replaced the first's results.
    cases = write_modules(tmp_path / "cases", {"slow.py": SLOW})
    shared = tmp_path / "s" / "a.json"
    common = ["run", "slow_one", "--case-path", str(cases), "--backend", "eager", "--dtype", "float32"]
    first = subprocess.Popen(
        [sys.executable, "-m", "harness", *common, first_writes, str(shared)],
        cwd=REPO,
        text=True,
        env={**os.environ, "HARNESS_TEST_SLOW": "8"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    from harness.records.journal import output_lock_path

    lock = Path(output_lock_path(str(shared)))
    deadline = time.time() + 120
    while not (lock.exists() and f"pid {first.pid}" in lock.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    second = harness(*common, second_writes, str(shared))
    assert second.returncode == EXIT_USAGE, second.stdout + second.stderr
    assert f"{shared} is in use by another run (pid {first.pid}" in second.stderr, second.stderr
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, out + err
    written = shared.read_text()
    assert written.lstrip().startswith("{" if first_writes == "--json" else "<"), written[:200]


TAKES_DESCRIPTORS = """
import os
from harness import Program, case, contiguous

KEEP = []

@case(tags=("descriptors",))
def opens_every_descriptor(dtype):
    try:
        while True:
            KEEP.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("descriptors",))
def closes_every_descriptor(dtype):
    os.closerange(3, 65536)
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("descriptors",))
def keeps_to_itself(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


def test_a_case_that_takes_its_descriptors_is_its_own_error_not_a_harness_bug(tmp_path):
    result, found = run_module(tmp_path, "descriptors.py", TAKES_DESCRIPTORS, "descriptors")
    assert result.returncode == 1, result.stdout + result.stderr
    for name in ("opens_every_descriptor", "closes_every_descriptor"):
        record = found[name]
        assert record["status"] == "error" and "harness bug" not in record["error"]["message"], record["error"]
    assert "ran out of file descriptors" in found["opens_every_descriptor"]["error"]["message"]
    assert found["keeps_to_itself"]["status"] == "pass"


POISONS_THE_COMPILE_CACHE = {
    "a_poisoner.py": """
import pathlib
import torch
from harness import Program, case, contiguous

def program(x):
    return x * 3 + 1

@case(tags=("poison",))
def a_poisons_the_compile_cache(dtype):
    # The program the victim runs, compiled here; then every output module Inductor cached made to zero its outputs.
    torch.compile(program)(torch.ones(4, dtype=dtype))
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    for path in pathlib.Path(cache_dir()).rglob("*.py"):
        text = path.read_text()
        if "def call(" in text:
            path.write_text(
                text + "\\n_call = call\\ndef call(args):\\n    out = _call(args)\\n"
                "    for o in out:\\n        o.zero_()\\n    return out\\n"
            )
    return Program(lambda x: x - 1, [contiguous((4,))])
""",
    "b_victim.py": """
from harness import Program, case, contiguous

def program(x):
    return x * 3 + 1

@case(tags=("poison",))
def b_compiles_the_same_program(dtype):
    return Program(program, [contiguous((4,))])
""",
}


def test_what_a_case_leaves_in_inductors_caches_is_never_loaded_by_another(tmp_path):
    # The victim, a correct program, came out FAIL: its compile loaded the output module the attacker had edited
    # in the cache every case shared. Each case process now compiles into caches of its own.
    cases = write_modules(tmp_path / "cases", POISONS_THE_COMPILE_CACHE)
    out = tmp_path / "results.json"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = harness(
        "run", "--tag", "poison", "--case-path", str(cases), "--dtype", "float32", "--mode", "inference",
        "--workers", "1", "--json", str(out),
        env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TMPDIR": str(temporary)},
    )  # fmt: skip
    found = {r["case"]: r for r in json.loads(out.read_text())["records"]}
    assert found["b_compiles_the_same_program"]["status"] == "pass", result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr
    assert not list(temporary.glob("harness-compile-*"))  # the run's compile caches go with it


def test_a_case_process_compiles_into_caches_of_its_own_and_a_changed_header_is_not_used(tmp_path, monkeypatch):
    from torch._inductor import codecache

    from harness.inductor_compat import cache_dir, compile_caches

    monkeypatch.setattr(codecache, "_HEADER_DIR", codecache._HEADER_DIR)
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", codecache._HEADER_LOCK_DIR)
    monkeypatch.setattr(cache_dir, "_shared", [])
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "shared"))
    worker = compile_caches.new_root(str(tmp_path), prefix="worker-")
    compile_caches.use_worker_caches(worker, stored=True)  # (the store is empty yet)
    header = Path(codecache._HEADER_DIR) / "prefix.h.gch"
    header.write_bytes(b"built by the worker")
    # A header this process's compiles never used is no case's to use (its lock is not taken in a case):
    # Inductor remembers the headers it used per process (`_precompile_header`, a functools.cache).
    remembered = functools.cache(lambda *args, **kwargs: str(header))
    monkeypatch.setattr(codecache, "_precompile_header", remembered)
    assert compile_caches.header_stamps() == {}
    remembered()
    stamps = compile_caches.header_stamps()
    assert list(stamps) == [str(header)]
    compile_caches.store_headers()  # a later worker copies it in, and does not build it again
    later = compile_caches.new_root(str(tmp_path), prefix="worker-")
    compile_caches.use_worker_caches(later, stored=True)
    assert (Path(codecache._HEADER_DIR) / "prefix.h.gch").read_bytes() == b"built by the worker"
    assert compile_caches.header_stamps() != stamps  # its own copy
    unstored = compile_caches.new_root(str(tmp_path), prefix="worker-")
    compile_caches.use_worker_caches(unstored, stored=False)  # unconfined cases could have written the store
    assert os.listdir(codecache._HEADER_DIR) == []
    compile_caches.use_worker_caches(worker, stored=False)

    first = compile_caches.new_case_dir(worker)
    assert compile_caches.use_private_caches(first, stamps)  # unchanged: the worker's header serves
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == first
    assert os.environ["TRITON_CACHE_DIR"] == os.path.join(first, "triton")
    assert cache_dir.shared_cache_dir() == str(tmp_path / "shared")  # the harness's own files stay shared

    header.write_bytes(b"rewritten by a case")
    second = compile_caches.new_case_dir(worker)
    assert not compile_caches.use_private_caches(second, stamps)
    assert codecache._HEADER_DIR == os.path.join(second, "precompiled_headers")


WRITES_OUTSIDE = """
import os, tempfile
from harness import Program, case, contiguous

@case(tags=("writes",))
def writes_where_it_may_not(dtype):
    for path in os.environ["HARNESS_TEST_TARGETS"].split(os.pathsep):
        try:
            with open(path, "a") as out:
                out.write('{"case": "forged", "status": "pass"}\\n')
        except OSError:
            pass
    with tempfile.NamedTemporaryFile() as own:  # its own temporary files it may write
        own.write(b"fine")
        own.flush()
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("writes",))
def z_runs_after(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


def _landlock_abi() -> int:
    from harness.isolation import confine

    return confine.landlock_abi() if confine.unconfined_reason() is None else 0


def _confined() -> bool:
    return _landlock_abi() >= 1


@pytest.mark.skipif(not _confined(), reason="this kernel has no Landlock: case processes run unconfined")
def test_a_case_changes_no_file_outside_its_own_folders(tmp_path):
    # A case rewrote a victim's journal line and `--resume` carried the forgery; it could write any file the
    # harness can. Its process now keeps the right to write beneath its own folders only.
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    journal = tmp_path / "results.jsonl"
    targets = os.pathsep.join([str(outside), str(journal), str(REPO / "cases" / "forged_by_a_case.py")])
    result, found = run_module(tmp_path, "writes.py", WRITES_OUTSIDE, "writes", env={"HARNESS_TEST_TARGETS": targets})
    assert result.returncode == 0, result.stdout + result.stderr
    assert {r["status"] for r in found.values()} == {"pass"} and len(found) == 2
    assert outside.read_text() == "kept\n"
    assert not journal.exists() or "forged" not in journal.read_text()
    assert not (REPO / "cases" / "forged_by_a_case.py").exists()
    assert "unconfined" not in result.stdout


STOPS_THE_HARNESS = """
import os, signal
from harness import Program, case, contiguous

def _parent_of(pid):
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])

@case(tags=("stops",))
def stops_the_harness(dtype):
    worker = os.getppid()
    for pid in (_parent_of(worker), worker):
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    return Program(lambda x: x + 1, [contiguous((4,))])
"""


@pytest.mark.skipif(_landlock_abi() < 6, reason="no Landlock signal scoping here (ABI 6, Linux 6.12)")
def test_a_case_cannot_stop_the_harness_or_its_worker(tmp_path):
    # The harness stopped until an outside timeout, then printed an empty totals line.
    result, found = run_module(tmp_path, "stops.py", STOPS_THE_HARNESS, "stops")
    assert result.returncode == 0 and found["stops_the_harness"]["status"] == "pass", result.stdout + result.stderr


ODD_OUTPUTS = """
import torch
from harness import Program, case, contiguous

def _off_when_compiled():
    return 4.0 if torch.compiler.is_compiling() else 3.0

@case(tags=("odd",), dtypes=(torch.float32,))
def float8_output(dtype):
    return Program(lambda x: (x * 3 + 1).to(torch.float8_e4m3fn), [contiguous((16,))])

@case(tags=("odd",), dtypes=(torch.float32,))
def float8_output_diverges(dtype):
    return Program(lambda x: (x * _off_when_compiled()).to(torch.float8_e5m2), [contiguous((16,))])

@case(tags=("odd",), dtypes=(torch.float32,))
def sparse_coo_output(dtype):
    return Program(lambda x: (x * 2).relu().to_sparse(), [contiguous((4, 4))])

@case(tags=("odd",), dtypes=(torch.float32,))
def sparse_csr_output_diverges(dtype):
    return Program(lambda x: (x * _off_when_compiled()).relu().to_sparse_csr(), [contiguous((4, 4))])

@case(tags=("odd",), dtypes=(torch.float32,))
def nested_output(dtype):
    return Program(lambda x: torch.nested.nested_tensor([x * 2, x[:2] + 1]), [contiguous((4,))])
"""


def test_float8_and_sparse_outputs_are_compared_and_a_nested_one_is_the_cases_error(tmp_path):
    # All five were errors labelled "a harness bug" (float8: KeyError torch.float8_e4m3fn): a divergent float8
    # output was never a FAIL.
    result, found = run_module(tmp_path, "odd.py", ODD_OUTPUTS, "odd", "--mode", "inference")
    assert result.returncode == 1, result.stdout + result.stderr
    statuses = {name: record["status"] for name, record in found.items()}
    assert statuses == {
        "float8_output": "pass",
        "float8_output_diverges": "fail",
        "sparse_coo_output": "pass",
        "sparse_csr_output_diverges": "fail",
        "nested_output": "error",
    }, statuses
    diverged = found["float8_output_diverges"]["outputs"][0]
    assert diverged["dtype"] == "float8_e5m2" and diverged["rtol"] == 0.25, diverged
    nested = found["nested_output"]["error"]
    assert nested["type"] == "OutputNotComparable" and "harness bug" not in nested["message"], nested
    assert "harness bug" not in result.stdout


def test_the_compile_caches_of_a_killed_run_are_removed_by_the_next(tmp_path, monkeypatch):
    # A SIGKILLed harness cannot remove its run's caches (a precompiled header of 155 MB per worker).
    import tempfile

    from harness.isolation import pool

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    orphaned = tmp_path / f"{pool.COMPILE_ROOT_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{pool.COMPILE_ROOT_PREFIX}{os.getpid()}-def"
    for folder in (orphaned, live):
        (folder / "worker-1").mkdir(parents=True)
    pool._remove_orphaned_compile_roots()
    assert not orphaned.exists() and live.exists()
