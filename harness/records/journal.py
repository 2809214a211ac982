"""The run's journal: every record appended as its case ends (JSON lines, flushed and fsync'd).

Whatever ends a run (a signal, a crash, SIGKILL), every finished record is on
disk; the results JSON and the HTML report are built from the journal, and
`--resume` reads it back to skip the runs already recorded. A line cut short
by a kill is ignored on reading.
"""

from __future__ import annotations

import fcntl
import json
import os
from typing import Iterable

from harness import records as R


class JournalBusy(Exception):
    """Another run holds the journal (two runs into one report directory at once)."""


class JournalLock:
    """An exclusive `fcntl.flock` on `<journal>.lock`, held from before the journal is read for `--resume` or
    truncated until the run's results are published: a second run into the same place refuses to start
    (`JournalBusy`, naming the holder) instead of interleaving its records with the first's. The lock goes
    with the process, however it ends; the file stays, naming the last holder."""

    def __init__(
        self, journal: str, holder: str, lock_path: str | None = None, what: str = "its own --report-dir or --json"
    ):
        self.path = lock_path or journal + ".lock"
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(self._fd, 4096, 0).decode("utf-8", errors="backslashreplace").strip()
            os.close(self._fd)
            raise JournalBusy(
                f"{journal} is in use by another run ({other or 'holder unknown'}): give this run "
                f"{what}, or wait for that one to end"
            ) from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"pid {os.getpid()}: {holder}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class Journal:
    """Records appended as they come. A write that fails (a full disk) does not stop the run: the journal
    stops, `problem` says why, and the records are still in the caller's hands."""

    def __init__(self, path: str, carried: Iterable[R.CaseResult] = ()):
        self.path = path
        self.problem: str | None = None
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._handle = open(path, "w", encoding="utf-8")
        for record in carried:
            self.append(record)

    def append(self, record: R.CaseResult) -> None:
        if self.problem is not None:
            return
        try:
            self._handle.write(json.dumps(R.encode_json(record.to_dict()), allow_nan=False) + "\n")
            self._handle.flush()
            os.fsync(self._handle.fileno())
        except OSError as exc:
            self.problem = f"cannot write the journal {self.path} ({exc.strerror or exc})"

    def close(self) -> None:
        try:
            self._handle.close()
        except OSError as exc:  # the buffered rest could not be written
            self.problem = self.problem or f"cannot write the journal {self.path} ({exc.strerror or exc})"


def read_records(path: str) -> list[R.CaseResult]:
    """Records of a journal (JSON lines) or of a results file; ValueError naming the file if it is neither."""
    if not path.endswith(".jsonl"):
        return R.read_results(path)[1]
    try:
        with R.open_input(path, encoding="utf-8", errors="backslashreplace") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            record = R.CaseResult.from_dict(json.loads(line))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            if number == len(lines):
                break  # the last line, cut short by a kill
            raise ValueError(f"{path}: line {number} is not a harness record") from None
        R.check_record(record, f"{path}: line {number}")
        records.append(record)
    return records


def output_lock(output: str, holder: str) -> JournalLock:
    """The same lock on a file a run writes (results, report, JUnit), whatever the option that names it: two runs
    at once, one writing a path as its results and the other as its JUnit, would replace each other's file."""
    return JournalLock(output, holder, output_lock_path(output), "other output paths")


def output_lock_path(output: str) -> str:
    """Where the lock on an output is kept: a folder of the user's (`<temp>/harness-outputs-<uid>`, one lock per
    real path), not beside the file."""
    import hashlib
    import tempfile

    real = os.path.realpath(output)
    folder = os.path.join(tempfile.gettempdir(), f"harness-outputs-{os.getuid()}")
    return os.path.join(folder, hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:24] + ".lock")


def journal_path(json_path: str | None, report_dir: str | None) -> str | None:
    """Where a run keeps its journal: beside its results file, or in its report directory."""
    if json_path:
        return os.path.splitext(json_path)[0] + ".jsonl"
    if report_dir:
        return os.path.join(report_dir, "results.jsonl")
    return None
