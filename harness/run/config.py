"""What a run is, before anything runs: its configuration, the (dtype, mode) pairs a case yields, and the
record every run starts from (its identity: case, device, backend, dtype, mode, the command reproducing it).

The CLI, the pytest plugin, the worker processes and the known-issues file all name runs through here.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness import records as R
from harness.layout import dtype_name
from harness.registry import Case

BISECT_MODES = ("on-failure", "always")


@dataclass(frozen=True)
class RunConfig:
    device: str = "cpu"
    backend: str = "inductor"
    npu_backend: str | None = None
    compile_mode: str | None = None
    compile_options: dict[str, Any] = field(default_factory=dict)
    reference: str | None = None  # overrides the case's own choice when set
    inject: str | None = None
    # Localization: None (off), "on-failure" (probe failing runs), "always" (passing runs too).
    bisect: str | bool | None = None
    # Eager's dtype semantics are the contract: no pass by being closer to float64.
    strict_eager: bool = False
    # On a failure whose compile took graphs from the compile caches: compile once more with them off, and say
    # whether that passes (a cache entry made for another program: a key that misses what the code depends on).
    fresh_compile: bool = False
    # Case modules beyond the project's (for the reproduction command).
    case_paths: tuple[str, ...] = ()
    # `--extract DIR`: write a verified repro of each localized kernel here (changes no verdict: not in identity).
    extract_dir: str | None = None
    # `--dynamic`: compile once with symbolic sizes, run at two sizes (harness/run/dynamic.py).
    dynamic: bool = False
    # `--dynamic strict`: a recompilation at the second size fails, even where its values pass.
    dynamic_strict: bool = False

    def __post_init__(self) -> None:
        if self.dynamic_strict and not self.dynamic:
            object.__setattr__(self, "dynamic", True)
        if self.bisect is True:
            object.__setattr__(self, "bisect", "on-failure")
        elif self.bisect is False:
            object.__setattr__(self, "bisect", None)
        if self.bisect not in (None, *BISECT_MODES):
            raise ValueError(f"bisect must be one of {BISECT_MODES}, not {self.bisect!r}")

    def identity(self) -> dict[str, Any]:
        """What a record made under this configuration is comparable by (`--resume` carries over only records of
        the same identity): every option that changes what runs or how it is judged, and torch's version.
        Localization (`--bisect`) is not among them: it adds an answer to a failure and changes no verdict."""
        return {
            "device": self.device,
            "backend": self.backend,
            "npu_backend": self.npu_backend,
            "compile_mode": self.compile_mode,
            "compile_options": {k: repr(v) for k, v in sorted(self.compile_options.items())},
            "reference": self.reference,
            "inject": self.inject,
            "strict_eager": self.strict_eager,
            "fresh_compile": self.fresh_compile,
            "torch": torch.__version__,
            # Only when set: records of static runs keep the identity they always had.
            **({"dynamic": True} if self.dynamic else {}),
            **({"dynamic_strict": True} if self.dynamic_strict else {}),
        }

    def runs_dynamic(self, case: Case) -> bool:
        return self.dynamic or case.always_dynamic

    def command_for(self, case: str, dtype: str, mode: str, shipped: bool = False) -> str:
        """The command that runs this one case again: `extract` where the run wrote repros (`--extract`, or the
        `extract` command: it localizes and extracts again), else `run`. A `shipped` case run beside `--case-path`
        cases needs `--shipped-cases` (a case path replaces the shipped cases otherwise)."""
        verb = f"extract -o {shlex.quote(self.extract_dir)}" if self.extract_dir else "run"
        parts = [f"python -m harness {verb}", case, f"--device {self.device}", f"--dtype {dtype}", f"--mode {mode}"]
        parts += [f"--case-path {shlex.quote(path)}" for path in self.case_paths]
        if shipped and self.case_paths:
            parts.append("--shipped-cases")
        if self.backend != "inductor":
            parts.append(f"--backend {self.backend}")
        if self.npu_backend:
            parts.append(f"--npu-backend {self.npu_backend}")
        if self.compile_mode:
            parts.append(f"--compile-mode {self.compile_mode}")
        parts += [f"--compile-option {k}={v}" for k, v in self.compile_options.items()]
        if self.reference:
            parts.append(f"--reference {self.reference}")
        if self.inject:
            parts.append(f"--inject {self.inject}")
        if self.bisect and not (self.extract_dir and self.bisect == "on-failure"):  # (extract's own default)
            parts.append("--bisect" if self.bisect == "on-failure" else f"--bisect {self.bisect}")
        if self.strict_eager:
            parts.append("--strict-eager")
        if self.fresh_compile:
            parts.append("--fresh-compile")
        if self.dynamic or self.dynamic_strict:
            parts.append("--dynamic strict" if self.dynamic_strict else "--dynamic")
        return " ".join(parts)


def is_shipped(case: Case) -> bool:
    """Whether the case comes with the harness (its `cases/`, or a case source declared there)."""
    from harness.registry import CASE_SOURCE_ORIGIN, DEFAULT_CASE_DIR

    if case.source.startswith(CASE_SOURCE_ORIGIN):
        return True  # generated (OpInfo is shipped): with the shipped cases too it is found wherever it is from
    try:
        return DEFAULT_CASE_DIR.resolve() in Path(case.source).resolve().parents
    except (OSError, ValueError):
        return False


# The package extra that installs a case's requirement (`requires=`); others come with `models`.
EXTRA_FOR = {"expecttest": "opinfo"}


def missing_requirements(case: Case) -> list[str]:
    import importlib.util

    return [name for name in case.requires if importlib.util.find_spec(name) is None]


def new_record(case: Case, dtype: torch.dtype, mode: str, config: RunConfig) -> R.CaseResult:
    """A record with the run's identity filled in and nothing measured yet."""
    from harness.devices import Npu, get_device

    device = get_device(config.device)
    return R.CaseResult(
        case=case.name,
        device=config.device,
        backend=config.backend,
        dtype=dtype_name(dtype),
        mode=mode,
        status=R.PASS,
        tags=list(case.tags),
        issue=case.issue,
        size=case.size,
        culprit=case.culprit,
        npu_backend=Npu.asked_backend(config) if isinstance(device, Npu) else None,
        surrogate=device.surrogate(),
        emulation=config.inject,
        dynamic=True if config.runs_dynamic(case) else None,
        command=device.command_prefix() + config.command_for(case.name, dtype_name(dtype), mode, is_shipped(case)),
        run_identity=config.identity(),
    )


def identity_difference(record: R.CaseResult, identity: dict[str, Any]) -> str | None:
    """How the run that made `record` differs from a run of `identity` ("device cuda, not cpu"), or None."""
    if not record.run_identity:
        return "it was made by a harness that did not record its run's identity"
    different = [
        f"{key} {record.run_identity.get(key)!r}, not {value!r}"
        for key, value in identity.items()
        if record.run_identity.get(key) != value
    ]
    # The record's own fields must say what its identity says: one forged or edited apart is not this run's.
    different += [
        f"its {key} {getattr(record, key)!r}, not {identity[key]!r}"
        for key in ("device", "backend")
        if key in identity and getattr(record, key) != identity[key]
    ]
    return "; ".join(different) or None


def runs_of(
    case: Case, dtypes: list[str] | None, modes: list[str] | None, keyword: str | None = None, dynamic: bool = False
) -> list[tuple[torch.dtype, str]]:
    """The (dtype, mode) pairs of a case that the user's filters keep: `--dtype`, `--mode`, and a `-k` expression
    over each run's words (`Case.run_keywords`)."""
    from harness.registry import keyword_matcher

    chosen_dtypes = [d for d in case.dtypes if not dtypes or dtype_name(d) in dtypes]
    chosen_modes = [m for m in case.modes if not modes or m in modes]
    matches = keyword_matcher(keyword) if keyword else (lambda words: True)
    return [(d, m) for d in chosen_dtypes for m in chosen_modes if matches(case.run_keywords(d, m, dynamic))]
