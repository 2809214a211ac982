"""What a run is, before anything runs: its configuration, the (dtype, mode) pairs a case yields, and the
record every run starts from (its identity: case, device, backend, dtype, mode, the command reproducing it).

The CLI, the pytest plugin, the worker processes and the known-issues file all name runs through here. This module
imports no torch (the pool and the CLI import it before torch has loaded). `RunConfig` itself is a plain value
(`harness.records.run_config`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import records as R
from harness.records.run_config import BISECT_MODES, RunConfig  # noqa: F401 - where the runner's modules take it

if TYPE_CHECKING:
    import torch

    from harness.registry import Case


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
    """A record with the run's identity filled in, nothing measured yet and no verdict."""
    from harness.devices import Npu, get_device
    from harness.layout import dtype_name

    device = get_device(config.device)
    return R.CaseResult(
        case=case.name,
        device=config.device,
        backend=config.backend,
        dtype=dtype_name(dtype),
        mode=mode,
        status=None,
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
    from harness.layout import dtype_name
    from harness.registry import keyword_matcher

    chosen_dtypes = [d for d in case.dtypes if not dtypes or dtype_name(d) in dtypes]
    chosen_modes = [m for m in case.modes if not modes or m in modes]
    matches = keyword_matcher(keyword) if keyword else (lambda words: True)
    return [(d, m) for d in chosen_dtypes for m in chosen_modes if matches(case.run_keywords(d, m, dynamic))]
