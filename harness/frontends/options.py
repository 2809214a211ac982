"""Every run option, declared once: the CLI (argparse) and the pytest plugin are both built from this table.

An option has a name (`--device`), a help text, a default, and either a
fixed set of choices (taken from the registry, the devices, the injections)
or a typed parser that raises `ValueError` with a one-line message; the CLI
turns that into a usage error with exit code 2, pytest into a `UsageError`.
"""

from __future__ import annotations

import argparse
import ast
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from harness.judge.known_failures import Expectations

# Names of the run modes and references, owned by the registry; repeated here only as strings would
# duplicate them, so they are read from there lazily.


def _modes() -> Sequence[str]:
    from harness.registry import MODES

    return MODES


def _references() -> Sequence[str]:
    from harness.registry import REFERENCES

    return REFERENCES


# `--dynamic` alone, and `--dynamic strict`: a recompilation at the second size fails even where values pass.
DYNAMIC_MODES = ("on", "strict")


def _bisect_modes() -> Sequence[str]:
    from harness.run.config import BISECT_MODES

    return BISECT_MODES


def parse_device(text: str) -> str:
    from harness.devices import get_device

    get_device(text)  # raises UnknownDeviceError (a ValueError) naming the choices
    return text


def parse_dtype(text: str) -> str:
    """A dtype's name as the user wrote it (`--dtype` filters by name), once torch knows it."""
    from harness.layout import dtype_named

    try:
        dtype_named(text)
    except ValueError:
        raise ValueError(f"unknown dtype {text}; use torch's names, e.g. float32, bfloat16, int64") from None
    return text


def parse_injection(text: str) -> str:
    from harness.inject.launch import parse_injection as parse

    parse(text)  # raises ValueError naming the problem
    return text


def parse_compile_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--compile-option {text!r} is not KEY=VALUE")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def expectations(values: Mapping[str, Any]) -> Expectations:
    """What the run expects to fail (`harness.judge.known_failures`): the cases' declarations and the known issues
    the options name (none without `--known-issues`), read once the run's outputs are known not to collide with
    the file. The CLI and pytest hand it to the pool, which sends each run's with its task, to decide the run by.
    ValueError naming a file that does not read."""
    from harness.judge.known_failures import load_known_issues

    return Expectations(tuple(load_known_issues(values["known_issues"])) if values.get("known_issues") else ())


# Seconds a timeout may be: from a tenth of a second (a case shorter than that cannot even start) to a week
# (timers and deadlines beyond that overflow or never fire; `inf` and `nan` are no deadline at all).
SECONDS_RANGE = (0.1, 7 * 24 * 3600.0)


def parse_positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    low, high = SECONDS_RANGE
    if not low <= value <= high:  # also false for nan
        raise ValueError(f"{text!r} is not a number of seconds from {low:g} to {high:g}")
    return value


@dataclass(frozen=True)
class Option:
    """One option of a run, as both the CLI and pytest take it."""

    name: str  # without dashes: "device" is --device
    help: str
    default: Any = None
    choices: Callable[[], Sequence[str]] | None = None
    parse: Callable[[str], Any] | None = None
    flag: bool = False  # takes no value
    repeatable: bool = False  # may be given several times; the value is a list
    # A value that may be left out (`--bisect` alone means `--bisect on-failure`).
    bare: Any = None
    metavar: str | None = None
    pytest_name: str | None = None  # the pytest spelling, when it must differ (pytest owns --full-trace, ...)
    # Where pytest keeps the value, when it must differ from `dest` (another plugin's `--timeout` keeps its own
    # `timeout`). Such an option is parsed as pytest reads it (no `check_values` pass over it).
    pytest_dest: str | None = None
    cli: bool = True
    pytest: bool = True

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def dest_in_pytest(self) -> str:
        return self.pytest_dest or self.dest

    def argparse_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"help": self.help, "dest": self.dest}
        if self.flag:
            return {**kwargs, "action": "store_true"}
        kwargs["default"] = [] if self.repeatable else self.default
        if self.repeatable:
            kwargs["action"] = "append"
        if self.bare is not None:
            kwargs.update(nargs="?", const=self.bare)
        if self.metavar:
            kwargs["metavar"] = self.metavar
        kwargs["type"] = self._typed
        return kwargs

    def _typed(self, text: str) -> Any:
        if self.choices is not None and text not in self.choices():
            raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from {', '.join(self.choices())})")
        if self.parse is not None:
            try:
                return self.parse(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return text


# What a run is: device, backend, compile settings, verdict settings, localization.
RUN_OPTIONS: tuple[Option, ...] = (
    Option("device", "device to run on: cpu, cuda or npu (default: cpu)", default="cpu", parse=parse_device),
    Option("backend", "torch.compile backend (default: inductor)", default="inductor"),
    Option("npu-backend", "Inductor's npu_backend option on --device npu (default: triton_experimental)"),
    Option("compile-mode", "torch.compile mode, e.g. max-autotune"),
    Option(
        "compile-option",
        "an Inductor config option for every case (repeatable)",
        repeatable=True,
        parse=parse_compile_option,
        metavar="KEY=VALUE",
    ),
    Option(
        "reference",
        "float64 reference: auto (when a float output misses tolerance), fp64 (always), none",
        choices=_references,
    ),
    Option(
        "strict-eager",
        "eager's dtype semantics are the contract: a float result closer to float64 than "
        "eager, but beyond eager's tolerance, fails",
        flag=True,
    ),
    Option(
        "inject",
        "emulate another backend's launch boundary or inject a kernel fault (see `harness list --injections`)",
        parse=parse_injection,
    ),
    Option(
        "fresh-compile",
        "on a failure whose compile came from the compile caches, compile once more with "
        "them off and say whether that passes (a cache entry made for another program)",
        flag=True,
    ),
    Option(
        "bisect",
        "localize divergences: name the kernel, stage or drift behind a failure (on-failure, the "
        "default), or also probe passing runs (always)",
        choices=_bisect_modes,
        bare="on-failure",
    ),
    Option(
        "dynamic",
        "dynamic shapes: compile each case once with symbolic sizes (its declared dynamic dims, or "
        "the leading dim of every input of rank 2 or more), run it at its size and at one more (not a multiple "
        "of 8), and judge both; a recompilation whose values pass is a pass with a note (on, the default), or a "
        "failure (strict)",
        choices=lambda: DYNAMIC_MODES,
        bare="on",
        pytest_name="harness-dynamic",
    ),
    Option(
        "known-issues",
        "triaged failures (TOML) applied as strict expected failures",
        metavar="FILE",
    ),
    Option(
        "extract",
        "with --bisect: write a verified repro of each kernel it names into this directory "
        "(a kernel-level repro.py, a case module, a plain script)",
        metavar="DIR",
        pytest_name="harness-extract",
    ),
)

# Which runs: filters over the registry's cases.
SELECTION_OPTIONS: tuple[Option, ...] = (
    Option("mode", "only these modes (repeatable)", repeatable=True, choices=_modes, pytest=False),
    Option("dtype", "only these dtypes, e.g. int64 (repeatable)", repeatable=True, parse=parse_dtype, pytest=False),
    Option("case-path", "more case modules: a directory, .py file or dotted module (repeatable)", repeatable=True),
    Option("full", "include full-size cases (real shapes, whole models)", flag=True, pytest_name="harness-full"),
    Option(
        "shipped-cases",
        "with --case-path: the cases shipped with the harness too (without --case-path they are the default)",
        flag=True,
        pytest_name="harness-shipped-cases",
        pytest_dest="harness_shipped_cases",
    ),
)


# Where a run's cases run, and for how long.
PROCESS_OPTIONS: tuple[Option, ...] = (
    Option(
        "timeout",
        "seconds one case may run, from its start in the worker (default: 300, or 1800 for a case tagged "
        "model or of size full)",
        parse=parse_positive,
        metavar="SECONDS",
        pytest_name="harness-timeout",
        pytest_dest="harness_timeout",
    ),
    Option(
        "isolation",
        "a fresh process for every case run (case, the default), or one for consecutive runs of one "
        "case module, replaced when a case leaves something behind (module: faster where imports and "
        "compiles dominate)",
        default="case",
        choices=lambda: ("case", "module"),
        metavar="{case,module}",
        pytest_name="harness-isolation",
        pytest_dest="harness_isolation",
    ),
    Option(
        "no-isolation",
        "run cases in this process (for a debugger; a crash then ends the run)",
        flag=True,
        pytest_name="harness-no-isolation",
        pytest_dest="harness_no_isolation",
    ),
)


def add_to_argparse(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    for option in options:
        if option.cli:
            parser.add_argument(f"--{option.name}", **option.argparse_kwargs())


def add_to_pytest(group: Any, options: Sequence[Option]) -> None:
    for option in options:
        if option.pytest:
            kwargs = option.argparse_kwargs()
            if option.pytest_dest:
                kwargs["dest"] = option.pytest_dest
            else:
                kwargs.pop("type", None)  # pytest parses late; `check_values` checks them
            group.addoption(f"--{option.pytest_name or option.name}", **kwargs)


def check_values(values: Mapping[str, Any], options: Sequence[Option]) -> dict[str, Any]:
    """Values as the typed parsers make them (for callers that received raw strings, like pytest)."""
    checked = dict(values)
    for option in options:
        raw = values.get(option.dest)
        if raw is None or option.flag:
            continue
        if option.repeatable:
            checked[option.dest] = [option._typed(v) if isinstance(v, str) else v for v in raw]
        elif isinstance(raw, str):
            checked[option.dest] = option._typed(raw)
    return checked


def run_config_from(values: Mapping[str, Any]):
    """The RunConfig for parsed option values; raises ValueError for a combination that cannot run."""
    from harness.inductor_compat.dynamo import backend_problem, compile_mode_problem, inductor_option_problem
    from harness.run.config import RunConfig

    device = values.get("device") or "cpu"
    if values.get("npu_backend") and device != "npu":
        raise ValueError(f"--npu-backend {values['npu_backend']}: applies to --device npu only, not {device}")
    # Checked only when given, as the options below; on the NPU torch_npu registers backends of its own as it loads.
    if (values.get("backend") or "inductor") != "inductor" and device != "npu":
        if problem := backend_problem(values["backend"]):
            raise ValueError(problem)
    if values.get("compile_mode") and (problem := compile_mode_problem(values["compile_mode"])):
        raise ValueError(problem)
    options = dict(values.get("compile_option") or [])
    # Only options given are checked: the check imports the compiler (2 s of a run's start otherwise).
    for key, value in options.items():
        problem = None if device == "npu" and key == "npu_backend" else inductor_option_problem(key, value)
        if problem:
            raise ValueError(problem)
    return RunConfig(
        device=device,
        backend=values.get("backend") or "inductor",
        npu_backend=values.get("npu_backend"),
        compile_mode=values.get("compile_mode"),
        compile_options=options,
        reference=values.get("reference"),
        inject=values.get("inject"),
        strict_eager=bool(values.get("strict_eager")),
        # Extraction starts from the kernel localization names: --extract implies --bisect.
        bisect=values.get("bisect") or ("on-failure" if values.get("extract") else None),
        fresh_compile=bool(values.get("fresh_compile")),
        dynamic=bool(values.get("dynamic")),
        dynamic_strict=values.get("dynamic") == "strict",
        extract_dir=os.path.abspath(values["extract"]) if values.get("extract") else None,
        case_paths=tuple(os.path.abspath(p) if os.path.exists(p) else p for p in values.get("case_path") or ()),
    )
