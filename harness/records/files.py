"""Results files: strict JSON written atomically, read back into records, each record checked as it is read."""

from __future__ import annotations

import enum
import json
import math
import os
import stat
import tempfile
from typing import IO, Any, Iterable

from harness.records.schema import FLOAT_ENCODING, SCHEMA, CaseResult, Status
from harness.records.text import safe_text


def write_results(path: str | os.PathLike, records: Iterable[CaseResult], run: dict[str, Any] | None = None) -> None:
    """Write a results file atomically (a crash mid-write never leaves half a file), as strict JSON."""
    payload = {
        "schema": SCHEMA,
        "float_encoding": FLOAT_ENCODING,
        "run": run or {},
        "records": [r.to_dict() for r in records],
    }
    write_atomically(path, _json_text(encode_json(payload)) + "\n")


def write_atomically(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it: a reader (an artifact store) never sees half a
    file, and a write that fails (a full disk, a directory in the way) leaves no temporary file behind."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    stem, suffix = os.path.splitext(os.path.basename(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{stem}-", suffix=suffix)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide CI artifacts from other readers
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _json_text(value: Any, depth: int = 0) -> str:
    """Indented JSON whose lists of plain values sit on one line each.

    `json.dump(indent=...)` puts every number on a line of its own: a 64x64 mismatch map became
    4,160 lines of zeros, and a training run with a few hundred failing gradients a file of a
    million lines. Records stay readable (one key per line); a map is at most one line per row.
    """
    inner = "\n" + " " * (depth + 1)
    if isinstance(value, dict) and value:
        items = (f"{json.dumps(key, allow_nan=False)}: {_json_text(item, depth + 1)}" for key, item in value.items())
        return "{" + inner + ("," + inner).join(items) + "\n" + " " * depth + "}"
    if isinstance(value, list) and any(isinstance(item, (dict, list)) for item in value):
        items = (_json_text(item, depth + 1) for item in value)
        return "[" + inner + ("," + inner).join(items) + "\n" + " " * depth + "]"
    return json.dumps(value, allow_nan=False, separators=(",", ":") if isinstance(value, list) else None)


def open_input(path: str | os.PathLike, mode: str = "r", **options: Any) -> IO[Any]:
    """An input the harness reads whole, opened only if it is a regular file: opening a FIFO blocks until a
    writer comes (and no signal ends that), and a device such as /dev/zero never ends. ValueError naming it
    otherwise; OSError as `open` raises it."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO opens at once so, and is then refused)
    try:
        check_regular(descriptor, os.fspath(path))
        os.set_blocking(descriptor, True)
        return open(descriptor, mode, **options)
    except BaseException:
        os.close(descriptor)
        raise


def check_regular(descriptor: int, name: str) -> None:
    """ValueError naming it unless the open file is a regular one (a pipe or socket would block a read)."""
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        raise ValueError(f"{name}: not a regular file (a FIFO, device or socket is never read)")


def read_results(path: str | os.PathLike) -> tuple[dict[str, Any], list[CaseResult]]:
    """A results file's run metadata and records; ValueError naming the file when it cannot be used."""
    try:
        with open_input(path, encoding="utf-8", errors="backslashreplace") as handle:
            payload = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: not a harness results file ({exc})") from None
    except RecursionError:  # JSON nested deeper than Python's parser recurses: no file the harness writes
        raise ValueError(f"{path}: not a harness results file (nested too deeply to read)") from None
    if not isinstance(payload, dict) or payload.get("schema") != SCHEMA:
        schema = payload.get("schema") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path}: not a harness results file (schema {schema!r})")
    try:
        records = [CaseResult.from_dict(r) for r in payload["records"]]
    except (KeyError, TypeError, AttributeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{path}: a record cannot be read ({type(exc).__name__}: {exc})") from None
    for number, record in enumerate(records, 1):
        check_record(record, f"{path}: record {number}")
    return payload.get("run") or {}, records


_IDENTITY_FIELDS = ("case", "device", "backend", "dtype", "mode")


def check_record(record: CaseResult, where: str) -> None:
    """ValueError naming `where` and the run when a record read back cannot be judged: a status the harness does
    not know (a verdict nobody can read must not pass `report --check`), or an identity that is not text."""
    for name in _IDENTITY_FIELDS:
        if not isinstance(getattr(record, name), str):
            raise ValueError(f"{where}: its {name} is {getattr(record, name)!r}, not text")
    if not isinstance(record.status, Status):
        raise ValueError(
            f"{where} ({record.run_id}) has an unknown status {record.status!r} "
            f"(known: {', '.join(s.value for s in Status)})"
        )
    if not isinstance(record.duration_s, (int, float)) or isinstance(record.duration_s, bool):
        raise ValueError(f"{where} ({record.run_id}) has a duration_s that is not a number: {record.duration_s!r}")
    for name in ("tags", "warnings", "outputs"):  # lists every reader iterates
        value = getattr(record, name)
        if not isinstance(value, list) or (name != "outputs" and not all(isinstance(v, str) for v in value)):
            raise ValueError(f"{where} ({record.run_id}): its {name} is {value!r}, not a list"[:300])


def encode_json(value: Any) -> Any:
    """`value` with every non-finite float as "nan", "inf" or "-inf", and other objects as text: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): encode_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_json(v) for v in value]
    if isinstance(value, str):
        return safe_text(value)
    if value is None or isinstance(value, (int, float, bool)):
        return value
    return safe_text(str(value))
