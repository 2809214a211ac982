"""Every command the harness prints (`reproduce:`, `localize:`) is run as printed, from the folder the user ran in,
and must run exactly the run it was printed for, with the same status."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

USERS_OWN = """
import time
import torch
from harness import Program, case, contiguous

def _off_when_compiled(x):
    return x + 2 if torch.compiler.is_compiling() else x + 1

@case(tags=("mine",), dtypes=(torch.float32,), modes=("inference",))
def undeclared_mutation_in_custom_op(dtype):
    return Program(_off_when_compiled, [contiguous((4,))])

@case(tags=("mine",), dtypes=(torch.float32,), modes=("inference",))
def keeps_its_word(dtype):
    return Program(lambda x: x + 1, [contiguous((4,))])

def _waits(x):
    time.sleep(600)
    return x

@case(tags=("slow",), dtypes=(torch.float32,), modes=("inference",))
def waits_forever(dtype):
    return Program(_waits, [contiguous((4,))])
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


def _run(command: str | list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """A printed command as the user runs it: its `python` is this interpreter."""
    words = shlex.split(command) if isinstance(command, str) else command
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "pytest":
        # (the plugin named too: where the checkout is not installed, as on the GPU host, no entry point loads it)
        words[:1] = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "harness.pytest_plugin"]
    return subprocess.run(words, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)


def _printed(output: str, label: str) -> list[str]:
    return re.findall(rf"^\s+{label}: (.+)$", output, flags=re.MULTILINE)


def _run_lines(output: str) -> list[str]:
    """The run lines of a CLI run: `[i/n] STATUS name[dtype-mode] ...`."""
    return re.findall(r"^\[\d+/\d+\] (\w+)\s+(\S+)", output, flags=re.MULTILINE)


def _users_folder(tmp_path: Path) -> Path:
    (tmp_path / "mycases").mkdir()
    (tmp_path / "mycases" / "my_ops.py").write_text(USERS_OWN)
    return tmp_path


def test_pytests_localize_line_for_a_users_own_case_runs_exactly_that_run(tmp_path):
    # It printed `pytest 'mycases/my_ops.py::undeclared_mutation_in_custom_op[...]' --bisect`: "not found", and with
    # --case-path added it ran every test of the folder.
    here = _users_folder(tmp_path)
    session = _run(["pytest", "--case-path", "mycases", "--backend", "eager", "-k", "mine"], here)
    assert session.returncode == 1, session.stdout + session.stderr
    [localize] = _printed(session.stdout, "localize")
    [reproduce] = _printed(session.stdout, "reproduce")
    for printed in (localize, reproduce):
        again = _run(printed, here)
        assert again.returncode == 1, printed + "\n" + again.stdout + again.stderr
        assert _run_lines(again.stdout) == [("FAIL", "undeclared_mutation_in_custom_op[float32-inference]")], (
            printed + "\n" + again.stdout
        )


def test_the_commands_printed_for_an_injected_run_inject_again(tmp_path):
    # pytest's localize line dropped --inject: the printed command simply passed.
    session = _run(
        ["pytest", "cases/small_models.py", "-k", "relu_mlp and inference", "--inject", "fault-scale@1"], REPO
    )
    assert session.returncode == 1, session.stdout + session.stderr
    [localize] = _printed(session.stdout, "localize")
    assert "--inject fault-scale@1" in localize
    again = _run(localize, tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    assert _run_lines(again.stdout) == [("FAIL", "relu_mlp[float32-inference]")], again.stdout


def test_extracts_reproduce_line_extracts_again(tmp_path):
    # After `extract`, the reproduce line showed a `run --bisect` command, which writes no repro.
    first = _run(
        [
            "python", "-m", "harness", "extract", "relu_mlp", "--mode", "inference", "--inject", "fault-scale@1",
            "-o", "repros",
        ],
        tmp_path,
    )  # fmt: skip
    assert first.returncode == 1, first.stdout + first.stderr
    [reproduce] = _printed(first.stdout, "reproduce")
    # The kernel source named outlives the case's own compile caches, removed with its process.
    [source] = _printed(first.stdout, "kernel source")
    assert Path(source).is_file() and "def call(" in Path(source).read_text(), source
    assert reproduce.startswith(f"python -m harness extract -o {tmp_path / 'repros'} relu_mlp "), reproduce
    assert "--bisect" not in reproduce
    written = sorted(p.name for p in (tmp_path / "repros").rglob("*.py"))
    assert written
    for path in (tmp_path / "repros").rglob("*.py"):
        path.unlink()
    again = _run(reproduce, tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr
    assert _run_lines(again.stdout) == [("FAIL", "relu_mlp[float32-inference]")], again.stdout
    assert sorted(p.name for p in (tmp_path / "repros").rglob("*.py")) == written


def test_pytests_timeout_message_names_pytests_option_and_where_the_case_was(tmp_path):
    # It said "(--timeout)", the CLI's option; pytest's is --harness-timeout.
    here = _users_folder(tmp_path)
    session = _run(
        ["pytest", "--case-path", "mycases", "--backend", "eager", "-k", "slow", "--harness-timeout", "6"], here
    )
    assert session.returncode == 1, session.stdout + session.stderr
    assert "no result after 6s (--harness-timeout); stopped in " in session.stdout, session.stdout
    assert "my_ops.py:18 in _waits" in session.stdout
