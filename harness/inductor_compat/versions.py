"""Which torch releases the internals named in this package are known to work with, checked up front."""

from __future__ import annotations

import re

OLDEST_TORCH = (2, 6)  # the first with the lowering provenance and config-copy APIs relied on
NEWEST_TESTED_TORCH = (2, 13)


def _release(version: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def torch_version_problem(version: str | None = None) -> tuple[bool, str] | None:
    """None when `version` (default: the installed torch) is supported; else (fatal, message). Older than
    OLDEST_TORCH is fatal; newer than NEWEST_TESTED_TORCH is a warning (most likely it works)."""
    if version is None:
        import torch

        version = torch.__version__
    release = _release(version)
    if release is None:
        return None
    oldest, newest = ".".join(map(str, OLDEST_TORCH)), ".".join(map(str, NEWEST_TESTED_TORCH))
    if release < OLDEST_TORCH:
        return True, f"torch {version} is older than {oldest}, the oldest release the harness supports"
    if release > NEWEST_TESTED_TORCH:
        return False, (
            f"torch {version} is newer than {newest}, the newest release the harness was tested with: "
            "kernel localization may miss what changed in Inductor's internals"
        )
    return None
