"""Every command the README and docs/ show, run as written.

Commands are read from the fenced blocks of README.md and docs/*.md: a line that starts with a program
(`harness`, `python`, `pytest`, `pip`, `examples/...`, `.venv/bin/...`, optionally after `VAR=value` words).
Each is one test, run by bash in a sandbox folder that links the checkout's files (so relative paths work)
and keeps what the command writes. `harness`, `python`, `pytest` and `.venv/bin/` are this interpreter's.

How each is checked comes from `RULES`, the first pattern that matches; a command no rule names runs here and
must exit 0. Slow ones carry the `nightly` marker (deselected by default, run by `.ci/nightly`), GPU ones the
`gpu` marker, and NPU-host ones run only where torch_npu imports; each says why.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `VAR=value` words first (a value may be quoted or hold `$(...)`), then the program.
PROGRAM = re.compile(
    r"^(?:[A-Z_]+=(?:\$\([^)]*\)|\"[^\"]*\"|[^\s\"$])*\s+)*"
    r"(?:harness|python3?|pytest|pip|examples/|\.venv/bin/)"
)
SYNOPSIS = re.compile(r"\[[^\]]*[A-Z.]{2,}[^\]]*\]|\S\|\S")  # `[-k EXPR]`, `cpu|cuda|npu`: a usage line


@dataclass(frozen=True)
class Command:
    document: str  # relative to the checkout
    line: int
    text: str
    continuation: tuple[str, ...] = ()  # a synopsis's indented option lines

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"


@dataclass(frozen=True)
class Rule:
    pattern: str  # a regular expression searched in the command
    kind: str  # run | nightly | gpu | npu | ci | synopsis
    why: str = ""
    exit_code: int = 0
    before: str = ""  # shell run first, in the same sandbox (what the docs assume is there)
    in_checkout: bool = False  # runs in the checkout itself (it installs the checkout)
    timeout: int = 600


# The two runs docs/npu.md shows before comparing them: the same commands, read from it.
TORCH_NPU_SIDE_BY_SIDE = "\n".join(
    line
    for line in (REPO / "docs" / "npu.md").read_text().splitlines()
    if "NPU_SURROGATE_CODEGEN=torch_npu" in line and "--json torch_npu_2.1" in line
)

# First match wins. Exit code 1 is a run that found the failure the command is shown for.
RULES = [
    Rule(r"^python3 -m venv", "ci", "the README's set-up commands: .ci/run runs them verbatim on a clean clone"),
    Rule(r"^pip install", "npu", "sets up an Ascend NPU host (torch for it, torch_npu, CANN)"),
    Rule(r"--device cuda|DEVICE=cuda", "gpu", "needs a CUDA GPU"),
    Rule(r"^(?!PYTHONPATH=tests/npu_surrogate).*--device npu", "npu", "needs torch_npu and an Ascend NPU"),
    Rule(SYNOPSIS.pattern, "synopsis", "a usage synopsis: its subcommand and every option it names exist"),
    Rule(
        r"pytest cases -k longformer",
        "nightly",
        "installs the checkout, then trains Longformer's ci size (40 s on two cores, installed)",
        in_checkout=True,
        timeout=1200,
    ),
    # Every upstream bug is a declared known failure: they xfail, and the run exits 0.
    Rule(
        r"--tag upstream --bisect --extract",
        "nightly",
        "localizes and extracts every upstream bug (70 s on two cores)",
        timeout=1800,
    ),
    Rule(
        r"SHARD=2/4 examples/nightly.sh run",
        "nightly",
        "a quarter of the shipped suite, localized (160 s on two cores)",
        timeout=1800,
    ),
    Rule(
        r"examples/nightly.sh merge",
        "nightly",
        "runs that shard first, then merges it against itself as the baseline (70 s with warm caches)",
        before="SHARD=2/4 examples/nightly.sh run >/dev/null; mkdir -p last; cp nightly/shard-2-of-4.json "
        "last/results.json",
        timeout=1800,
    ),
    Rule(
        r"PYTHONPATH=tests/npu_surrogate \.venv/bin/pytest cases",
        "nightly",
        "every seed_index case through pytest on the surrogate NPU, a process each (105 s on two cores)",
        timeout=1200,
    ),
    # The torch_npu mode: CI runs the same seed run (test_npu_path's torch_npu tests); the side-by-side runs download
    # a second release.
    Rule(
        r"NPU_SURROGATE_CODEGEN=torch_npu .*run seed_index_as_strided_view --device npu --bisect$",
        "nightly",
        "the run test_npu_path's torch_npu seed test makes in CI (30 s once the wheel is unpacked)",
        timeout=1200,
    ),
    Rule(
        r"NPU_SURROGATE_CODEGEN=torch_npu .*run --tag opinfo --device npu --workers 2$",
        "nightly",
        "torch_npu's own compiler through the OpInfo ci sample, every failure declared (5 min on two cores)",
        timeout=1800,
    ),
    Rule(
        r"install_torch_npu.py( --version [\d.]+)?\) NPU_SURROGATE_CODEGEN=torch_npu .*--json torch_npu_2\.1[34]\.json",
        "nightly",
        "downloads a torch-npu release, then runs the found bugs and seed 000 through its backend (60 s)",
        timeout=1200,
    ),
    Rule(
        r"harness report torch_npu_2.14.json --baseline torch_npu_2.13.json",
        "nightly",
        "runs the two releases first (120 s)",
        before=TORCH_NPU_SIDE_BY_SIDE,
        timeout=1800,
    ),
    Rule(
        r"install_triton.py",
        "nightly",
        "installs triton-ascend into a folder of its own on first use, then "
        "runs the Triton surrogate's interpreter (18 s once installed)",
        exit_code=1,
        timeout=1200,
    ),
    Rule(
        r"regenerate_npu_kernels.py",
        "nightly",
        "downloads the torch-npu 2.14 wheel from the package index",
        timeout=1200,
    ),
    # The same runs as tests that CI runs (test_extraction's seed test, test_npu_path's seed on the surrogate).
    Rule(
        r"harness extract seed_index_as_strided_index_put",
        "nightly",
        "the extraction test_extraction's seed test makes in CI (30 s)",
        exit_code=1,
    ),
    Rule(
        r"PYTHONPATH=tests/npu_surrogate \.venv/bin/python -m harness run -k seed_index",
        "nightly",
        "the surrogate run test_npu_path's seed test makes in CI (40 s)",
        exit_code=1,
    ),
    Rule(r"--inject (fault-|boundary-downcast)", "run", exit_code=1),
]


def documented_commands() -> list[Command]:
    found = []
    for document in DOCUMENTS:
        lines = document.read_text().splitlines()
        inside = False
        for number, line in enumerate(lines, 1):
            if line.startswith("```"):
                inside = not inside
                continue
            if inside and PROGRAM.match(line):
                continuation = []
                for following in lines[number:]:
                    if not following.startswith("    -"):
                        break
                    continuation.append(following.strip())
                found.append(Command(str(document.relative_to(REPO)), number, line.strip(), tuple(continuation)))
    return found


def rule_for(command: Command) -> Rule:
    return next((r for r in RULES if re.search(r.pattern, command.text)), Rule("", "run"))


COMMANDS = documented_commands()


def _marks(rule: Rule) -> list:
    return {"nightly": [pytest.mark.nightly], "gpu": [pytest.mark.gpu]}.get(rule.kind, [])


def _params():
    return [pytest.param(c, rule_for(c), id=c.id, marks=_marks(rule_for(c))) for c in COMMANDS]


def test_the_docs_show_commands_and_every_one_is_checked():
    assert len(COMMANDS) >= 20, [c.id for c in COMMANDS]
    documents = {c.document for c in COMMANDS}
    assert {"README.md", "docs/usage.md", "docs/npu.md", "docs/nightly.md", "docs/extraction.md"} <= documents
    # Every rule still names a documented command: a rule whose command left the docs is stale.
    for rule in RULES:
        assert any(re.search(rule.pattern, c.text) for c in COMMANDS), f"no documented command matches {rule}"


# --- Running one ----------------------------------------------------------------------------------------------

# What the commands write, kept out of the checkout.
_OUTPUTS = {"reports", "repros", "nightly", "last", "known.toml", ".pytest_cache"}


def _sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder linking the checkout's entries, and an environment whose `harness`, `python`, `pytest`, `pip`
    are this interpreter's."""
    sandbox = tmp_path / "checkout"
    sandbox.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in _OUTPUTS and entry.name != ".git":
            (sandbox / entry.name).symlink_to(entry)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shims = {
        "harness": '-m harness "$@"',
        "python": '"$@"',
        "python3": '"$@"',
        "pytest": '-m pytest "$@"',
        "pip": '-m pip "$@"',
    }
    for name, call in shims.items():
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" {call}\n')
        shim.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "HARNESS_PYTHON": sys.executable,
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return sandbox, env


def _run(command: Command, rule: Rule, tmp_path: Path) -> subprocess.CompletedProcess:
    sandbox, env = _sandbox(tmp_path)
    text = command.text.replace(".venv/bin/", str(tmp_path / "bin") + "/")
    before = rule.before.replace(".venv/bin/", str(tmp_path / "bin") + "/")
    script = f"set -e\n{before}\nset +e\n{text}\n" if before else text
    return subprocess.run(
        ["bash", "-c", script],
        cwd=REPO if rule.in_checkout else sandbox,
        env=env,
        capture_output=True,
        text=True,
        timeout=rule.timeout,
    )


@pytest.mark.parametrize("command, rule", _params())
def test_a_documented_command_does_what_its_document_says(command, rule, tmp_path):
    if rule.kind == "ci":
        ci = (REPO / ".ci" / "run").read_text()
        assert command.text in ci.splitlines(), f"{command.id}: .ci/run does not run {command.text!r}"
        return
    if rule.kind == "synopsis":
        _check_synopsis(command, tmp_path)
        return
    if rule.kind == "npu" and importlib.util.find_spec("torch_npu") is None:
        pytest.skip(f"{rule.why}: torch_npu is not installed here")
    if rule.kind == "gpu" and not torch.cuda.is_available():
        pytest.skip(f"{rule.why}: none here")
    if rule.kind == "npu" and command.text.startswith("pip install"):
        pytest.skip(f"{rule.why}: not run by the tests")
    done = _run(command, rule, tmp_path)
    assert done.returncode == rule.exit_code, (
        f"{command.id}: `{command.text}` exited {done.returncode}, not {rule.exit_code}\n"
        f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    assert "Traceback (most recent call last)" not in done.stderr, done.stderr[-3000:]


def _check_synopsis(command: Command, tmp_path: Path) -> None:
    """`harness SUB ...`: `harness SUB --help` works and lists every option the synopsis names."""
    words = command.text.split()
    assert words[0] == "harness", command.text
    sandbox, env = _sandbox(tmp_path)
    helped = subprocess.run(
        ["harness", words[1], "--help"], cwd=sandbox, env=env, capture_output=True, text=True, timeout=120
    )
    assert helped.returncode == 0, helped.stderr
    shown = " ".join((command.text.split("#")[0], *command.continuation))
    for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", shown):
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", helped.stdout), (
            f"{command.id}: `harness {words[1]} --help` does not list {option}"
        )


def test_the_surrogate_commands_name_the_interpreter_that_has_torch():
    # A system `python` may have no torch: the surrogate's commands run the README's environment's interpreter.
    surrogate = [c for c in COMMANDS if "npu_surrogate" in c.text or "regenerate_npu_kernels" in c.text]
    assert len(surrogate) >= 4, [c.id for c in surrogate]
    bare = [c.id for c in surrogate if re.search(r"(?:^|[\s(])(?:python3?|pytest) ", c.text)]
    assert bare == [], f"commands calling a bare python or pytest: {bare}"
