import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.frontends.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

REPO = Path(__file__).resolve().parent.parent

TRIVIAL_CASES = '''
import os, signal, time
import torch
from harness import Program, case, contiguous

@case(tags=("trivial",))
def adds_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

@case(tags=("trivial",))
def crashes(dtype):
    os.kill(os.getpid(), signal.SIGSEGV)

@case(tags=("trivial",))
def hangs(dtype):
    time.sleep(600)
'''


def cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "no_such_case"], "unknown case 'no_such_case'"),
        (["run", "--device", "tpu"], "unknown device 'tpu'; choose one of: cpu, cuda, npu"),
        (["run", "--dtype", "float33"], "unknown dtype float33"),
        (["run", "--inject", "boundary-upcast"], "unknown injection 'boundary-upcast'"),
        (["run", "--compile-option", "not_an_option=1"], "'not_an_option' is not an Inductor config option"),
        (["run", "--mode", "serving"], "invalid choice: 'serving'"),
        (["run", "-k", "seed and ("], "wrong -k expression 'seed and (': at column 11"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, args, message):
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_run_without_compile_options_does_not_import_the_compiler_in_the_harness_process():
    """The harness process never compiles: checking option names (which imports Dynamo) waits for an option."""
    code = textwrap.dedent("""
        import sys
        from harness.frontends.options import run_config_from
        config = run_config_from({"device": "cpu"})
        plain = "torch._inductor" in sys.modules
        config = run_config_from({"device": "cpu", "compile_option": [("max_autotune", True)]})
        print(plain, "torch._inductor" in sys.modules, config.compile_options)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["False", "True", "{'max_autotune':", "True}"], done.stderr[-2000:]


def test_missing_torch_npu_is_a_usage_error_that_says_how_to_fix_it(capsys):
    pytest.importorskip("torch")
    try:
        import torch_npu  # noqa: F401

        pytest.skip("torch_npu is installed here")
    except ImportError:
        pass
    assert main(["run", "--device", "npu"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert "device npu is not usable" in err and "torch_npu" in err and len(err.splitlines()) == 1


def test_list_shows_the_seed_cases(capsys):
    assert main(["list", "-k", "seed"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "seed_index_as_strided_view" in out and "layout_input_gapped_slice" not in out


def test_k_matches_each_runs_dtype_mode_and_size_as_pytest_ids_do(capsys, tmp_path):
    assert main(["list", "-k", "seed and int64"]) == EXIT_OK
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines()[1:]]
    assert rows and all(name.startswith("seed_index_as_strided") for name in rows)
    assert all(line.split()[3] == "int64" for line in out.splitlines()[1:])  # the int32 runs are not listed
    # The README's tour: only the int64 runs of the seeds run.
    result = cli("run", "-k", "seed and int64 and view", "--backend", "eager", "--json", str(tmp_path / "r.json"))
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    runs = [(r["case"], r["dtype"]) for r in json.loads((tmp_path / "r.json").read_text())["records"]]
    assert runs == [("seed_index_as_strided_view", "int64")]
    assert main(["list", "-k", "seed and ci and training"]) == EXIT_OK
    assert all(line.split()[2] == "training" for line in capsys.readouterr().out.splitlines()[1:])


def test_list_that_matches_nothing_is_a_usage_error(capsys):
    assert main(["list", "-k", "no_case_is_called_this"]) == EXIT_USAGE
    assert "no case, dtype and mode matches the selection" in capsys.readouterr().err


def test_run_writes_json_records_and_exits_0(tmp_path):
    result = cli("run", "seed_index_as_strided_view", "--backend", "eager", "--json", str(tmp_path / "r.json"))
    assert result.returncode == EXIT_OK, result.stderr
    assert "[1/2] PASS  seed_index_as_strided_view[int64-inference]" in result.stdout
    payload = json.loads((tmp_path / "r.json").read_text())
    record = payload["records"][0]
    for key in ("case", "device", "backend", "dtype", "mode", "status", "outputs", "duration_s", "versions"):
        assert key in record
    assert (record["case"], record["device"], record["backend"], record["status"]) == (
        "seed_index_as_strided_view",
        "cpu",
        "eager",
        "pass",
    )
    output = record["outputs"][0]
    assert {k: output[k] for k in ("name", "numel", "bad", "max_abs")} == {
        "name": "out0",
        "numel": 2359296,
        "bad": 0,
        "max_abs": 0,
    }
    assert "torch" in record["versions"]


def test_divergence_exits_1_with_the_seed_summary(tmp_path):
    result = cli("run", "seed_index_as_strided_view", "--dtype", "int64", "--inject", "boundary-downcast")
    assert result.returncode == EXIT_FAILED, result.stderr
    assert "int64 out0: bad=2260992/2359296 (95.8%) max_abs=589824" in result.stdout


def test_a_crash_or_hang_takes_down_only_its_case(tmp_path):
    (tmp_path / "trivial.py").write_text(textwrap.dedent(TRIVIAL_CASES))
    results = tmp_path / "r.json"
    result = cli(
        "run",
        "crashes",
        "hangs",
        "adds_one",
        "--case-path",
        str(tmp_path),
        "--backend",
        "eager",
        "--timeout",
        "20",
        "--json",
        str(results),
    )
    assert result.returncode == EXIT_FAILED, result.stderr
    records = {r["case"]: r for r in json.loads(results.read_text())["records"]}
    assert (records["crashes"]["status"], records["crashes"]["symptom"]) == ("error", "crash")
    assert "SIGSEGV" in records["crashes"]["error"]["message"]
    assert (records["hangs"]["status"], records["hangs"]["symptom"]) == ("error", "timeout")
    assert records["adds_one"]["status"] == "pass"


def test_a_malformed_case_module_is_reported_and_the_rest_still_run(tmp_path):
    (tmp_path / "trivial.py").write_text(textwrap.dedent(TRIVIAL_CASES))
    (tmp_path / "broken.py").write_text("import torch\ndef broken(:\n")
    result = cli("run", "adds_one", "--case-path", str(tmp_path), "--backend", "eager")
    assert result.returncode == EXIT_USAGE
    assert "broken.py: SyntaxError" in result.stderr and "Traceback" not in result.stderr
    assert "PASS  adds_one[float32-inference]" in result.stdout


def test_console_diagnoses_only_failing_runs_and_points_at_the_kernel(tmp_path):
    # Under the narrowing emulation float64 contiguous inputs pass with a "precision narrowing" diagnosis;
    # the seed's overlapping int64 view fails, and --bisect names the kernel that read it.
    result = cli(
        "run",
        "layout_input_contiguous",
        "seed_index_as_strided_view",
        "--dtype",
        "float64",
        "--dtype",
        "int64",
        "--inject",
        "boundary-downcast",
        "--bisect",
        "--json",
        str(tmp_path / "r.json"),
    )
    assert result.returncode == EXIT_FAILED, result.stderr
    blocks = {}
    for line in result.stdout.splitlines():
        if line.startswith("["):
            current = blocks.setdefault(line.split()[2], [])
        elif line.startswith("    ") and blocks:
            current.append(line.strip())
    assert blocks["layout_input_contiguous[float64-inference]"] == []
    records = {r["case"] + r["dtype"]: r for r in json.loads((tmp_path / "r.json").read_text())["records"]}
    assert records["layout_input_contiguousfloat64"]["diagnosis"].startswith(
        "precision narrowing"
    )  # kept in the record
    seed = blocks["seed_index_as_strided_view[int64-inference]"]
    module_path = records["seed_index_as_strided_viewint64"]["first_divergent_kernel"]["module_path"]
    assert f"kernel source: {module_path}" in seed and os.path.isfile(module_path)
    assert "arg in_ptr0 = arg0_1 (in) int64 size (12, 4, 768, 64) stride (98304, 16384, 64, 1)" in seed
    assert any(line.startswith("diagnosis: layout:") for line in seed)


def test_baseline_of_another_setup_is_a_console_warning(capsys):
    from harness import records as R
    from harness.frontends.cli_session import against_baseline as _against_baseline

    def run(status, emulation):
        return R.CaseResult(
            case="seed_index_as_strided_view",
            device="cpu",
            backend="inductor",
            dtype="int64",
            mode="inference",
            status=status,
            emulation=emulation,
        )

    assert _against_baseline([run(R.FAIL, "boundary-downcast")], [run(R.PASS, None)]) == EXIT_FAILED
    out = capsys.readouterr().out
    assert (
        "warning: the baseline was run differently (emulation: baseline without emulation, this run boundary-downcast)"
    ) in out
    assert _against_baseline([run(R.PASS, None)], [run(R.PASS, None)]) == EXIT_OK
    assert "warning" not in capsys.readouterr().out


def test_a_case_path_alone_runs_only_its_cases_as_in_pytest(tmp_path):
    (tmp_path / "mine.py").write_text(textwrap.dedent(TRIVIAL_CASES))
    alone = cli("list", "--case-path", str(tmp_path))
    assert alone.returncode == EXIT_OK, alone.stderr
    listed = [line.split()[0] for line in alone.stdout.splitlines()[1:]]
    assert listed == ["adds_one", "crashes", "hangs"]
    both = cli("list", "--case-path", str(tmp_path), "--shipped-cases")
    assert "seed_index_as_strided_view" in both.stdout and "adds_one" in both.stdout


def test_a_failure_says_how_to_localize_it_and_x_stops_at_the_first(tmp_path):
    (tmp_path / "mine.py").write_text(
        textwrap.dedent('''
        import torch
        from harness import Program, case, contiguous

        @case()
        def a_diverges(dtype):
            return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])

        @case()
        def b_adds_one(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    result = cli("run", "--case-path", str(tmp_path), "--backend", "eager", "-x", "-q")
    assert result.returncode == EXIT_FAILED
    lines = result.stdout.splitlines()
    assert any(
        line.strip().startswith("localize: python -m harness run a_diverges") and line.endswith("--bisect")
        for line in lines
    ), result.stdout
    assert "b_adds_one" not in result.stdout and "== 1 fail ==" in result.stdout  # -x: the rest did not run
    again = cli("run", "--case-path", str(tmp_path), "--backend", "eager", "--json", str(tmp_path / "r.json"))
    rerun = cli("run", "--case-path", str(tmp_path), "--backend", "eager", "--last-failed", str(tmp_path / "r.json"))
    assert again.returncode == EXIT_FAILED and "running 1 case run" in rerun.stdout, rerun.stdout + rerun.stderr


def test_report_against_a_baseline_prints_what_changed_and_check_decides_the_exit(tmp_path):
    from harness import records as R

    def results(path, status):
        record = R.CaseResult(
            case="adds_one", device="cpu", backend="eager", dtype="float32", mode="inference", status=status
        )
        R.write_results(str(path), [record], {"device": "cpu", "backend": "eager"})
        return str(path)

    before, after = results(tmp_path / "before.json", R.PASS), results(tmp_path / "after.json", R.FAIL)
    plain = cli("report", after, "--baseline", before, "-o", str(tmp_path / "r.html"))
    assert plain.returncode == EXIT_OK, plain.stderr
    assert "against the baseline: 1 new failures" in plain.stdout
    assert "new failure: adds_one[float32-inference] (pass -> fail)" in plain.stdout
    checked = cli("report", after, "--baseline", before, "-o", str(tmp_path / "r.html"), "--check")
    assert checked.returncode == EXIT_FAILED and "new failure: adds_one" in checked.stdout


def test_run_help_gives_the_legend_of_a_failures_line(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    legend = " ".join(capsys.readouterr().out.split())
    for word in (
        "bad=",
        "max_abs",
        "max_rel",
        "out_max (the largest finite value in the compiled output)",
        "cos (the cosine similarity of compiled and eager)",
    ):
        assert word in legend


def test_a_progress_line_says_done_total_an_eta_and_the_runs_that_run_long(capsys):
    from harness.frontends.cli_session import Progress as _Progress

    progress = _Progress(10)
    progress.started -= 40
    progress.waiting([("slow_case[float32-inference]", 45.0)])
    assert capsys.readouterr().err == ""  # the first line comes 30 s after the start
    progress.last -= 31
    progress.done = 4
    progress.waiting([("slow_case[float32-inference]", 45.0), ("quick_case[float32-inference]", 1.0)])
    assert capsys.readouterr().err.strip() == (
        "progress: 4/10 done in 40s, about 1m00s left; running long: slow_case[float32-inference] 45s"
    )
    progress.waiting([])
    assert capsys.readouterr().err == ""  # not again within 30 s
    quiet = _Progress(10, quiet=True)
    quiet.last -= 31
    quiet.waiting([])
    assert capsys.readouterr().err == ""


def test_a_progress_line_names_the_timeout_when_a_run_takes_ten_times_the_median(capsys):
    # A hang ran to the default 1800 s with the estimate growing, and no word of --timeout.
    from harness.frontends.cli_session import Progress as _Progress

    progress = _Progress(10)
    for seconds in (4.0, 5.0, 6.0):
        progress.finished(seconds)
    # 45 s is long (over 30 s) but under 10x the median, 5 s; 55 s is over it.
    assert "--timeout" not in progress.line(60.0, [("slow[float32-inference]", 45.0)])
    said = progress.line(60.0, [("hangs[float32-inference]", 55.0)])
    assert said.endswith("(over 10x the median run, 5s: if it hangs, --timeout SECONDS stops such a run sooner)")


HANGS_IN_ITS_OWN_CODE = """
import time
from harness import Program, case, contiguous

def wait_for_the_network():
    time.sleep(600)

def program(x):
    wait_for_the_network()
    return x + 1

@case(tags=("hangs",))
def hangs_in_its_own_call(dtype):
    return Program(program, [contiguous((4,))])
"""


def test_a_timed_out_run_says_where_its_case_was_and_carries_every_threads_stack(tmp_path):
    # The record of a timed-out run had "traceback": "" and the worker's log was empty.
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "hangs.py").write_text(HANGS_IN_ITS_OWN_CODE)
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "hangs_in_its_own_call", "--case-path", str(cases), "--backend",
         "eager", "--dtype", "float32", "--mode", "inference", "--timeout", "8", "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == EXIT_FAILED, done.stdout + done.stderr
    record = json.loads(out.read_text())["records"][0]
    module = str(cases / "hangs.py")
    error = record["error"]
    assert (record["status"], record["symptom"], error["type"]) == ("error", "timeout", "Timeout"), record
    assert error["message"] == (
        f"no result after 8s (--timeout); stopped in {module}:6 in wait_for_the_network <- {module}:9 in program"
    ), error["message"]
    assert "Thread 0x" in error["traceback"] and "in wait_for_the_network" in error["traceback"]
    assert f"stopped in {module}:6 in wait_for_the_network" in done.stdout


def test_the_default_timeout_is_minutes_for_a_model_and_less_for_a_small_case():
    from harness.registry import load_registry

    registry = load_registry([str(REPO / "cases")])
    assert registry.lookup("longformer_ci").default_timeout_s == 1800
    assert registry.lookup("relu_mlp").default_timeout_s == 1800
    assert registry.lookup("correct_clone_inplace_chain").default_timeout_s == 300
    help_text = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--help"], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert "default: 300, or 1800 for a case tagged model" in " ".join(help_text.split())


def test_a_worker_started_by_hand_says_so_in_one_line():
    env = {k: v for k, v in os.environ.items() if k not in ("HARNESS_RESULT_FD", "HARNESS_PARENT_PID")}
    done = subprocess.run(
        [sys.executable, "-m", "harness.isolation.worker"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: harness.isolation.worker is started by the harness (its pool), not by hand: no result channel "
        "(HARNESS_RESULT_FD)"
    ]


class _Terminal:
    """A stream that says it is a terminal."""

    def __init__(self):
        self.written, self.encoding = [], "utf-8"

    def write(self, text):
        self.written.append(text)

    def flush(self):
        pass

    def isatty(self):
        return True


@pytest.mark.parametrize(
    "environment, coloured",
    [({}, True), ({"NO_COLOR": "1"}, False), ({"PY_COLORS": "0"}, False), ({"TERM": "dumb"}, False)],
)
def test_statuses_are_coloured_as_pytest_colours_them_on_a_terminal_only(monkeypatch, environment, coloured):
    from harness import records as R
    from harness.frontends import cli, colour

    for name in ("NO_COLOR", "PY_COLORS", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    cli.say("[1/2] FAIL  a[float32-inference] 0.1s", paint=lambda line: colour.status_word(line, R.FAIL))
    cli.say("[2/2] PASS  b[float32-inference] 0.1s", paint=lambda line: colour.status_word(line, R.PASS))
    cli.say("== 1 fail, 1 pass ==", paint=lambda line: colour.totals_line(line, {R.FAIL, R.PASS}))
    cli.say("== 2 xfail ==", paint=lambda line: colour.totals_line(line, {R.XFAIL}))
    text = "".join(terminal.written)
    if coloured:
        assert "[1/2] \x1b[31mFAIL\x1b[0m  a" in text and "[2/2] \x1b[32mPASS\x1b[0m  b" in text
        assert "\x1b[31m== 1 fail, 1 pass ==\x1b[0m" in text and "\x1b[33m== 2 xfail ==\x1b[0m" in text
    else:
        assert "\x1b" not in text
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stdout", piped)
    cli.say("[1/1] PASS  b", paint=lambda line: colour.status_word(line, R.PASS))
    assert "\x1b" not in piped.getvalue()  # not a terminal: never


def test_the_totals_count_case_modules_that_did_not_load(tmp_path):
    # A run with a module that failed to load ended `== 1 pass ==` and exited 2.
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "fine.py").write_text(
        "from harness import Program, case, contiguous\n\n@case()\ndef fine(dtype):\n"
        "    return Program(lambda x: x + 1, [contiguous((4,))])\n"
    )
    (cases / "broken.py").write_text("this is not python\n")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--case-path", str(cases), "--backend", "eager", "--dtype",
         "float32", "--mode", "inference"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == EXIT_USAGE, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "== 1 pass, 1 load error ==", done.stdout


@pytest.mark.parametrize(
    "argv, said",
    [
        (["run", "--case-path", "/nonexistent"], "error: cannot load cases from /nonexistent: no such directory"),
        (["run", "-k", "seed and (int64"], "error: wrong -k expression 'seed and (int64': at column 16: expected "
         "right parenthesis; got end of input"),
        (["list", "-k", "seed and"], "error: wrong -k expression 'seed and': at column 9: expected not OR left "
         "parenthesis OR identifier; got end of input"),
    ],
)  # fmt: skip
def test_a_bad_case_path_or_keyword_is_one_line(argv, said):
    # --case-path /nonexistent printed a second line ("no case, dtype and mode matches"); a malformed -k took 11 s,
    # after every case module loaded, and had no column.
    done = subprocess.run([sys.executable, "-m", "harness", *argv], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == EXIT_USAGE
    assert done.stderr.strip().splitlines() == [said], done.stderr
