"""Where the cases shipped with the harness are, found without importing torch (the pytest plugin asks on
every file of a project that may not use the harness at all)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _shipped_case_dir() -> Path:
    """The project's cases: `cases/` beside the package in a checkout, `harness_cases` in an installed wheel."""
    checkout = Path(__file__).resolve().parents[2] / "cases"  # harness/registry/shipped.py -> the checkout
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec("harness_cases")
    locations = list(spec.submodule_search_locations or ()) if spec else []
    return Path(locations[0]) if locations else checkout


SHIPPED_CASE_DIR = _shipped_case_dir()
