"""Processes as /proc shows them: what a test checks after a run that must leave nothing running."""

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Running (a zombie, already dead and waiting to be reaped, is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def processes_marked(marker: str) -> list[int]:
    """Live processes other than this one whose environment holds `marker` (a harness run started with it, its
    workers and every child of a case)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes() and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def writable_by_cases(directory: Path) -> dict[str, str]:
    """The environment that lets the cases of a run write beneath `directory` (and nowhere else but their own
    folders: `harness.isolation.confine`), for a test whose case leaves a file to say it got somewhere."""
    directory.mkdir(parents=True, exist_ok=True)
    return {"HARNESS_CASE_WRITABLE": str(directory)}
