"""One case, one clean process, and a verdict no case computes: case modules that attack the harness's judging
as a hostile case author would, met through the CLI and pytest. Every attacker is followed by a victim that
diverges (it must fail) and a correct one (it must pass); no attacker passes itself."""

import json
import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from processes import processes_marked, writable_by_cases

REPO = Path(__file__).resolve().parents[2]

HEADER = '''
import builtins, gc, os, sys, time, types, zlib
from pathlib import Path
import torch
from harness import Program, case, contiguous

_kept = []  # what an attack must keep alive (a torch.library registration)


def diverging():
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])


def correct():
    return Program(lambda x: x * 2 + 1, [contiguous((4,))])
'''

# Each attack runs in the attacker's build, then the attacker diverges: on a shared process the attack would
# pass the victims that follow, and the attacker itself.
ATTACKS = {
    "tolerance_table": '''
    from harness.judge import tolerances
    from harness.judge.tolerances import Tolerance
    for dtype in list(tolerances.DEFAULT_TOLERANCES):
        tolerances.DEFAULT_TOLERANCES[dtype] = Tolerance(1e9, 1e9)
''',
    "verdict_methods": '''
    from harness.judge import compare
    compare.VerdictPolicy.values = lambda self, name, a, e, reference=None: compare.compare_leaves(name, 0, 0)
    compare.VerdictPolicy.quick_match = lambda self, a, e: True
''',
    "builtins_all": '''
    builtins.all = lambda iterable: True
''',
    "aten_kernel": '''
    library = torch.library.Library("aten", "IMPL")
    library.impl("sub.Tensor", lambda a, b, alpha=1: torch.zeros_like(a), "CPU")
    _kept.append(library)
''',
    "compile_fx": '''
    import torch._inductor.compile_fx as compile_fx_module
    def off_by_one(gm, example_inputs, **kwargs):
        return lambda *args: tuple(t + 1 for t in gm(*args))
    compile_fx_module.compile_fx = off_by_one
''',
    "torch_function_mode": '''
    from torch.overrides import TorchFunctionMode
    class Agreeable(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in (torch.Tensor.sub, torch.Tensor.__sub__, torch.sub):
                return torch.zeros_like(args[0])
            return func(*args, **(kwargs or {}))
    Agreeable().__enter__()
''',
    "residue_check": '''
    import harness.isolation.residue as case_residue
    case_residue.left_behind = lambda *args, **kwargs: []
    torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)
    torch.isclose = lambda a, b, **kwargs: torch.ones_like(a, dtype=torch.bool)
''',
    "planted_module": '''
    victims = Path(os.environ["HARNESS_TEST_VICTIMS"]).resolve()
    name = f"harness_case_module.{victims.stem}_{zlib.crc32(str(victims).encode()):08x}"
    fake = types.ModuleType(name)
    fake.diverges = case(name="planted_module_1_victim_diverges", tags=("attack",))(lambda dtype: correct())
    fake.correct = case(name="planted_module_2_victim_correct", tags=("attack",))(lambda dtype: diverging())
    sys.modules[name] = fake
''',
    "fork_in_build": '''
    os.fork()  # both processes go on to run the case
''',
}


def attack_modules(directory: Path) -> tuple[Path, Path]:
    directory.mkdir()
    attacks, victims = [HEADER], [HEADER]
    for name, body in ATTACKS.items():
        attacks.append(
            f"\n@case(tags=('attack',))\ndef {name}_0_attacker(dtype):\n"
            + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
            + "\n    return diverging()\n"
        )
        # The planted module's victims live in a module of their own (the attack names it); the others' follow
        # their attacker in its module.
        where = victims if name == "planted_module" else attacks
        where.append(
            f"\n@case(tags=('attack',))\ndef {name}_1_victim_diverges(dtype):\n    return diverging()\n"
            f"\n@case(tags=('attack',))\ndef {name}_2_victim_correct(dtype):\n    return correct()\n"
        )
    (directory / "a_attacks.py").write_text("".join(attacks))
    (directory / "b_victims.py").write_text("".join(victims))
    return directory / "a_attacks.py", directory / "b_victims.py"


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    """One run of every attack, in the order written (one worker): the records by case name."""
    root = tmp_path_factory.mktemp("attacks")
    attacks, victims = attack_modules(root / "cases")
    out = root / "results.json"
    marker = f"HARNESS_ATTACK_MARKER_{os.getpid()}"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--tag",
            "attack",
            "--case-path",
            str(attacks),
            "--case-path",
            str(victims),
            "--mode",
            "inference",
            "--json",
            str(out),
            "--workers",
            "1",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, marker: "1", "HARNESS_TEST_VICTIMS": str(victims)},
    )
    assert out.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    records = json.loads(out.read_text())["records"]
    return result, records, marker


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_on_the_judging_reaches_no_other_case_and_does_not_pass_the_attacker(attacked, attack):
    result, records, _ = attacked
    found: dict[str, list[dict]] = {}
    for record in records:
        found.setdefault(record["case"], []).append(record)
    attacker, diverges, correct = (
        found.get(f"{attack}_{n}") for n in ("0_attacker", "1_victim_diverges", "2_victim_correct")
    )
    assert attacker and diverges and correct, sorted(found)
    # One record each: a case that forks is recorded once, and costs no other case its record.
    assert (len(attacker), len(diverges), len(correct)) == (1, 1, 1)
    assert diverges[0]["status"] == "fail", diverges[0]
    assert diverges[0]["verdict_source"] == "judge"
    assert correct[0]["status"] == "pass", correct[0]
    # The attacker diverges: its own patched judging does not pass it (or its patch broke its own run).
    assert attacker[0]["status"] in ("fail", "error"), attacker[0]["status"]
    assert result.returncode == 1


def test_an_attacker_that_forges_its_own_verdict_is_overruled_by_the_judge(attacked):
    _, records, _ = attacked
    by_case = {r["case"]: r for r in records}
    for attack in ("tolerance_table", "verdict_methods", "torch_function_mode"):
        record = by_case[f"{attack}_0_attacker"]
        assert record["status"] == "fail", (attack, record["status"])
        assert record["verdict_source"] == "judge-overruled", attack
        assert any("the judge's verdict stands" in w for w in record["warnings"]), attack
        assert [o["passed"] for o in record["outputs"]] == [False], attack


def test_the_attacks_leave_no_process_behind(attacked):
    *_, marker = attacked
    assert processes_marked(marker) == []


def test_under_pytest_an_attack_reaches_no_other_case(tmp_path):
    attacks, victims = attack_modules(tmp_path / "cases")
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
            "-rA",
            "--case-path",
            str(attacks),
            "--backend",
            "eager",
            "-k",
            "(tolerance_table or verdict_methods or builtins_all) and inference",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    lines = {
        line.split(" ", 1)[1].split(" ", 1)[0]: line.split(" ", 1)[0]
        for line in result.stdout.splitlines()
        if line.startswith(("PASSED ", "FAILED "))
    }
    for attack in ("tolerance_table", "verdict_methods", "builtins_all"):
        outcome = {key.split("::")[-1].split("[")[0]: value for key, value in lines.items() if attack in key}
        assert outcome == {
            f"{attack}_0_attacker": "FAILED",
            f"{attack}_1_victim_diverges": "FAILED",
            f"{attack}_2_victim_correct": "PASSED",
        }, result.stdout[-3000:]


FORGERIES = '''
import gc, sys, time
import torch
from harness import Program, case, contiguous


def channel():
    """The case process's own sender and the run id of its task, as a hostile case finds them."""
    from harness.isolation.channel import Sender
    frame = sys._getframe()
    while frame is not None and not isinstance(frame.f_locals.get("run"), str):
        frame = frame.f_back
    sender = next(v for v in frame.f_locals.values() if isinstance(v, Sender))
    return sender, frame.f_locals["run"]


@case(tags=("forge",))
def f1_empty_record(dtype):
    sender, run = channel()
    sender.send({"record": {}, "run": run})
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f2_bogus_message(dtype):
    sender, run = channel()
    sender.send({"bogus": 1, "run": run})
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f3_verdict_not_a_record(dtype):
    sender, run = channel()
    sender.send({"verdict": 5, "run": run})
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f4_record_for_another_case(dtype):
    sender, run = channel()
    sender.send({"record": {"case": "f6_adds_one", "device": "cpu", "backend": "eager", "dtype": "float32",
                            "mode": "inference", "status": "pass"}, "run": run})
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f5_keeps_saying_started(dtype):
    sender, run = channel()
    for _ in range(60):
        sender.send({"started": "f5_keeps_saying_started", "run": run})
        time.sleep(0.25)
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f7_declares_itself_a_known_failure(dtype):
    sender, run = channel()
    sender.send({"record": {"case": "f7_declares_itself_a_known_failure", "device": "cpu", "backend": "eager",
                            "dtype": "float32", "mode": "inference", "status": "xfail"}, "run": run})
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f8_says_it_passed(dtype):
    sender, run = channel()
    sender.send({"record": {"case": "f8_says_it_passed", "device": "cpu", "backend": "eager",
                            "dtype": "float32", "mode": "inference", "status": "pass",
                            "facts": {"compared": True}}, "run": run})
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])


@case(tags=("forge",))
def f6_adds_one(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])
'''


def test_messages_a_case_forges_on_its_own_channel_are_its_own_error_and_never_extend_its_deadline(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "forgeries.py").write_text(FORGERIES)
    out = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--tag",
            "forge",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--mode",
            "inference",
            "--timeout",
            "6",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    records = {r["case"]: r for r in json.loads(out.read_text())["records"]}
    forged = ("f1_empty_record", "f2_bogus_message", "f3_verdict_not_a_record", "f4_record_for_another_case")
    # f7 calls its own divergence expected, f8 calls it a pass: a case's process gives no verdict at all (the
    # judge decides the run, expectations included).
    for name in (*forged, "f7_declares_itself_a_known_failure", "f8_says_it_passed"):
        assert (records[name]["status"], records[name]["error"]["type"]) == ("error", "ChannelCorrupted"), name
    slow = records["f5_keeps_saying_started"]
    assert (slow["status"], slow["symptom"]) == ("error", "timeout"), slow
    assert slow["duration_s"] < 12  # the first `started` set the clock: 6 s, not the 15 s the case asked for
    assert records["f6_adds_one"]["status"] == "pass"
    assert result.returncode == 1


def test_module_isolation_shares_a_process_within_a_module_only(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "a_first.py").write_text(
        textwrap.dedent('''
        import os, sys
        from harness import Program, case, contiguous

        @case(tags=("shared",))
        def first_one(dtype):
            sys.harness_test_first_pid = os.getpid()  # left on the process, where the harness restores nothing
            return Program(lambda x: x + 1, [contiguous((4,))])

        @case(tags=("shared",))
        def first_two(dtype):
            assert getattr(sys, "harness_test_first_pid", None) == os.getpid(), "another process"
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    (cases / "b_second.py").write_text(
        textwrap.dedent('''
        import sys
        from harness import Program, case, contiguous

        @case(tags=("shared",))
        def second_one(dtype):
            assert not hasattr(sys, "harness_test_first_pid"), "a process another module's cases ran in"
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''')
    )
    common = ["run", "--tag", "shared", "--case-path", str(cases), "--backend", "eager", "--mode", "inference"]
    by_module = subprocess.run(
        [sys.executable, "-m", "harness", *common, "--isolation", "module"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert by_module.returncode == 0, by_module.stdout[-3000:]
    by_case = subprocess.run(
        [sys.executable, "-m", "harness", *common], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert by_case.returncode == 1 and "FAIL" not in by_case.stdout.replace("ERROR", ""), by_case.stdout[-3000:]
    assert "first_two" in by_case.stdout and "another process" in by_case.stdout


def test_the_receiver_reads_a_long_message_in_linear_time():
    import time

    from harness.isolation.channel import Receiver

    receiver = Receiver("t")
    payload = b't {"record": "' + b"x" * (32 << 20) + b'"}\n'
    started = time.perf_counter()
    messages = []
    for offset in range(0, len(payload), 1 << 16):
        messages += list(receiver.feed(payload[offset : offset + (1 << 16)]))
    assert len(messages) == 1 and len(messages[0]["record"]) == 32 << 20
    assert time.perf_counter() - started < 10  # quadratic: 512 chunks re-scanned and copied, minutes


LOADER_ATTACKS = {
    "a_dropper.py": '''
        import gc
        import harness.registry as registry
        from harness import Program, case, contiguous

        # Every other module's cases dropped from whatever registry this process holds, and no selection made.
        for found in gc.get_objects():
            if isinstance(found, registry.Registry):
                found.cases.clear()
        registry.Registry.select = lambda self, *args, **kwargs: []

        @case(tags=("loader",))
        def dropper_case(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''',
    "b_impostor.py": '''
        import os
        from harness import Program, case, contiguous

        @case(tags=("loader",), source=os.environ["HARNESS_TEST_VICTIM_MODULE"])
        def impostor_case(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''',
    "c_garbler.py": '''
        import sys
        import harness.isolation.loader as case_loader
        from harness import Program, case, contiguous

        # Wherever the loader's code lives (imported, or run as `python -m harness.isolation.loader`).
        for module in (case_loader, sys.modules["__main__"]):
            module.describe = lambda case: {"name": 5}

        @case(tags=("loader",))
        def garbled_case(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''',
    "d_victim.py": '''
        from harness import Program, case, contiguous

        @case(tags=("loader",))
        def victim_case(dtype):
            return Program(lambda x: x + 1, [contiguous((4,))])
    ''',
}


@pytest.mark.parametrize("front", ["cli", "pytest"])
def test_a_module_cannot_choose_drop_or_answer_for_another_modules_cases(tmp_path, front):
    cases = tmp_path / "cases"
    cases.mkdir()
    for name, text in LOADER_ATTACKS.items():
        (cases / name).write_text(textwrap.dedent(text))
    env = {
        **os.environ,
        "HARNESS_TEST_VICTIM_MODULE": str(cases / "d_victim.py"),
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    if front == "cli":
        out = tmp_path / "results.json"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                "--tag",
                "loader",
                "--case-path",
                str(cases),
                "--backend",
                "eager",
                "--mode",
                "inference",
                "--json",
                str(out),
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        ran = {r["case"]: r["status"] for r in json.loads(out.read_text())["records"]}
        text = result.stderr
    else:
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
                "-rA",
                "--case-path",
                str(cases),
                "--backend",
                "eager",
                "-k",
                "inference or load",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        ran = {
            line.split("::")[-1].split("[")[0]: "pass"
            for line in result.stdout.splitlines()
            if line.startswith("PASSED ")
        }
        text = result.stdout
    # The dropper's and the victim's cases both run: no module chose the selection or emptied another's.
    assert ran.get("dropper_case") == "pass" and ran.get("victim_case") == "pass", (ran, text[-3000:])
    # The impostor and the garbler are load errors of their own modules alone.
    assert "impostor_case" not in ran and "garbled_case" not in ran
    assert "b_impostor.py" in text and "names another module as its source" in text, text[-3000:]
    assert "c_garbler.py" in text and "does not read back" in text, text[-3000:]
    assert "d_victim.py: " not in text.replace("HARNESS_TEST_VICTIM_MODULE", "")


EVADERS = '''
import _thread, ctypes, os, signal, subprocess, sys, time
import torch
from harness import Program, case, contiguous


@case(tags=("evade",))
def e1_raw_thread_kills_its_process_later(dtype):
    _thread.start_new_thread(lambda: (time.sleep(1.5), os._exit(7)), ())
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("evade",))
def e2_child_named_as_a_compile_worker_kills_its_parent_later(dtype):
    subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; time.sleep(1.5); "
                      "os.kill(int(sys.argv[1]), signal.SIGKILL)", str(os.getpid()),
                      "torch._inductor.compile_worker"], start_new_session=True)
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("evade",))
def e3_innocent_and_slow(dtype):
    time.sleep(3)
    return Program(lambda x: x + 1, [contiguous((4,))])


@case(tags=("evade",))
def e4_diverges(dtype):
    time.sleep(1)
    return Program(lambda x: x + 2 if torch.compiler.is_compiling() else x + 1, [contiguous((4,))])
'''


def test_threads_and_children_a_case_hides_die_with_its_process(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "evaders.py").write_text(EVADERS)
    out = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            "--tag",
            "evade",
            "--case-path",
            str(cases),
            "--backend",
            "eager",
            "--mode",
            "inference",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    records = {r["case"]: r for r in json.loads(out.read_text())["records"]}
    assert records["e3_innocent_and_slow"]["status"] == "pass", result.stdout[-3000:]
    assert records["e4_diverges"]["status"] == "fail", result.stdout[-3000:]


HANGS_AND_HIDES = '''
import ctypes, os, signal, subprocess, sys, time
from harness import Program, case, contiguous

@case(tags=("hides",))
def hides_from_the_harness(dtype):
    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: cleared
    for signum in (signal.SIGUSR2, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    open(os.environ["HARNESS_TEST_STARTED"], "w").close()
    time.sleep(600)
'''


def test_a_case_that_clears_its_death_signal_and_ignores_signals_dies_with_a_sigkilled_harness(tmp_path):
    import time

    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "hides.py").write_text(HANGS_AND_HIDES)
    started = tmp_path / "case_writes" / "started"
    marker = f"HARNESS_HIDES_MARKER_{os.getpid()}"
    run = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "--tag", "hides", "--case-path", str(cases), "--backend", "eager"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, marker: "1", "HARNESS_TEST_STARTED": str(started), **writable_by_cases(started.parent)},
    )
    deadline = time.time() + 180
    while not started.exists() and time.time() < deadline:
        time.sleep(0.2)
    assert started.exists()
    time.sleep(0.5)
    assert len(processes_marked(marker)) >= 4  # the harness, its worker, the case's process, its daemon
    run.kill()
    run.wait()
    deadline = time.time() + 5
    while processes_marked(marker) and time.time() < deadline:
        time.sleep(0.2)
    assert processes_marked(marker) == []


def test_the_worker_compiles_nothing_before_forking_where_a_gpu_is_visible(monkeypatch):
    """A compile in the worker would start CUDA there (Dynamo saves CUDA's RNG state), and no case process forked
    from it could use the GPU: the warm-up is for hosts without one."""
    import torch

    from harness.isolation import worker
    from harness.run.config import RunConfig

    for device in ("cpu", "cuda"):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert worker._compiles_keep_forks_usable(RunConfig(device=device))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        assert not worker._compiles_keep_forks_usable(RunConfig(device=device))


def test_a_warm_up_that_must_be_tried_first_is_skipped_for_a_worker_with_one_case(monkeypatch):
    """A trial costs a warm-up, and pays from a worker's second case on: a worker with one case to run compiles it
    from cold, with no trial; with two or more (or where its share is not known) the trial runs."""
    from harness.isolation import worker
    from harness.run.config import RunConfig

    tried = []
    monkeypatch.setattr(worker, "_compiles_keep_forks_usable", lambda config: None)
    monkeypatch.setattr(worker, "_trial", lambda warm: tried.append(1) or ["a-pool_0"])
    assert worker._warm_up(RunConfig(device="cpu"), runs_per_worker=1) is False and tried == []
    assert worker._warm_up(RunConfig(device="cpu"), runs_per_worker=2) is False and tried == [1]
    assert worker._warm_up(RunConfig(device="cpu"), runs_per_worker=None) is False and tried == [1, 1]


def test_a_warm_up_that_leaves_a_thread_pool_is_named_and_tqdms_monitor_is_stopped():
    """What a fork would lack after a warm-up: a pool's idle threads (a task given to it in the fork waits for
    ever) are named; tqdm's monitor, which a fork could catch holding tqdm's lock, is stopped, not named."""
    import concurrent.futures
    import threading

    import tqdm

    from harness.isolation import worker

    if tqdm.tqdm.monitor is not None:  # one an earlier test in this process started: the bar below starts its own
        tqdm.tqdm.monitor.exit()
    before = set(threading.enumerate())
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-pool")
    pool.submit(lambda: None).result()
    bar = tqdm.tqdm(total=1, disable=False, file=open(os.devnull, "w"))  # starts tqdm's monitor thread
    monitor = tqdm.tqdm.monitor
    try:
        assert monitor is not None and monitor.is_alive()
        assert worker._threads_forks_lose(before) == ["compile-pool_0"]
        assert not monitor.is_alive()
    finally:
        bar.close()
        pool.shutdown()
    assert worker._threads_forks_lose(before) == []


@pytest.mark.gpu
def test_case_processes_forked_from_the_worker_run_on_the_gpu(tmp_path):
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    (tmp_path / "gpu_cases.py").write_text(
        "from harness import Program, case, contiguous\n\n"
        "@case()\ndef adds_one_on_gpu(dtype):\n    return Program(lambda x: x + 1, [contiguous((64,))])\n"
    )
    out = tmp_path / "results.json"
    command = [sys.executable, "-m", "harness", "run", "--case-path", str(tmp_path), "--device", "cuda"]
    result = subprocess.run(
        [*command, "--workers", "2", "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert [r["status"] for r in json.loads(out.read_text())["records"]] == ["pass"]


def test_a_thread_threading_did_not_start_is_not_called_the_cases_residue():
    """The autograd engine's per-device threads (a backward on a GPU) appear in `threading.enumerate()` as
    dummies once Python runs in them: torch's, not the case's. A thread the case starts through `threading`
    still counts."""
    import _thread
    import threading

    from harness.isolation import residue

    before = residue.snapshot()
    release, registered = threading.Event(), threading.Event()

    def native() -> None:  # as a thread started in C++ that then runs Python code
        threading.current_thread()
        registered.set()
        release.wait(30)

    _thread.start_new_thread(native, ())
    started = threading.Thread(target=release.wait, args=(30,), name="started-by-the-case")
    started.start()
    try:
        assert registered.wait(30)
        dummies = [t for t in threading.enumerate() if isinstance(t, threading._DummyThread)]
        assert dummies, "the native thread is listed as a dummy"
        assert [t.name for t in residue.foreign_threads(before)] == ["started-by-the-case"]
    finally:
        release.set()
        started.join()
