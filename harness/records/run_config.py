"""A run's configuration: a plain value, typed wherever it goes, that crosses to the worker processes as JSON a
reader can read (`to_json`, `from_json`). It says what runs and how it is judged; its `identity` is what makes
records of runs comparable (`--resume`), and `command_for` the command that runs one case again.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Protocol


class DeclaresDynamic(Protocol):
    """A case, as far as whether it always runs dynamic goes (`harness.registry.Case`)."""

    always_dynamic: bool


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
            "torch": _torch_version(),
            # Only when set: records of static runs keep the identity they always had.
            **({"dynamic": True} if self.dynamic else {}),
            **({"dynamic_strict": True} if self.dynamic_strict else {}),
        }

    def to_json(self) -> str:
        """The configuration as JSON a reader can read. A compile option's value that JSON would change (a tuple,
        from `--compile-option k=(1,2)`) is written as `{"python": repr}`."""
        data = dataclasses.asdict(self)
        data["compile_options"] = {k: _json_value(v) for k, v in self.compile_options.items()}
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RunConfig":
        import ast

        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise ValueError(f"not a run configuration: {text[:200]}")
        options = {
            k: ast.literal_eval(v["python"]) if isinstance(v, dict) and set(v) == {"python"} else v
            for k, v in (data.get("compile_options") or {}).items()
        }
        return cls(**{**data, "compile_options": options, "case_paths": tuple(data.get("case_paths") or ())})

    def runs_dynamic(self, case: DeclaresDynamic) -> bool:
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


def _json_value(value: Any) -> Any:
    try:
        if json.loads(json.dumps(value)) == value and not isinstance(value, tuple):
            return value
    except (TypeError, ValueError):
        pass
    return {"python": repr(value)}


def _torch_version() -> str:
    import torch

    return torch.__version__
