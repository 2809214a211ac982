"""The run's journal: every record appended as its case ends (JSON lines, flushed and fsync'd).

Whatever ends a run (a signal, a crash, SIGKILL), every finished record is on
disk; the results JSON and the HTML report are built from the journal, and
`--resume` reads it back to skip the runs already recorded. A line cut short
by a kill is ignored on reading.
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from . import records as R


class Journal:
    def __init__(self, path: str, carried: Iterable[R.CaseResult] = ()):
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._handle = open(path, "w", encoding="utf-8")
        for record in carried:
            self.append(record)

    def append(self, record: R.CaseResult) -> None:
        self._handle.write(json.dumps(R.encode_json(record.to_dict()), allow_nan=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


def read_records(path: str) -> list[R.CaseResult]:
    """Records of a journal (JSON lines) or of a results file; ValueError naming the file if it is neither."""
    if not path.endswith(".jsonl"):
        return R.read_results(path)[1]
    try:
        with open(path, encoding="utf-8", errors="backslashreplace") as handle:
            lines = [line for line in handle.read().splitlines() if line.strip()]
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror})") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(R.CaseResult.from_dict(json.loads(line)))
        except (ValueError, TypeError, KeyError, AttributeError):
            if number == len(lines):
                break  # the last line, cut short by a kill
            raise ValueError(f"{path}: line {number} is not a harness record") from None
    return records


def journal_path(json_path: str | None, report_dir: str | None) -> str | None:
    """Where a run keeps its journal: beside its results file, or in its report directory."""
    if json_path:
        return os.path.splitext(json_path)[0] + ".jsonl"
    if report_dir:
        return os.path.join(report_dir, "results.jsonl")
    return None
