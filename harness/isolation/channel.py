"""The private channel between the harness and a process that runs case code (a worker, the case loader).

Case code runs in that process, so it can reach every descriptor the process
has. The channel keeps it out of the way of a careless or hostile case:

- the child moves the descriptors it was given (its end of the result pipe,
  and stdin, where tasks arrive) to high, close-on-exec numbers, puts
  /dev/null on fd 0 and removes the variable that named the pipe: a case
  that closes fd 0, or writes to the descriptor it read from the
  environment, touches nothing of the harness's, and a child it starts
  inherits neither;
- every message is one line, `<token> <json>`, with a token the parent made
  for that child and sent it on stdin: a line without it (a case that found
  the descriptor anyway, or bytes written half-way through a message) is a
  `ChannelCorrupted` the parent turns into an error record for the run.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from typing import Any, Callable, IO, Iterator

# Descriptors the child keeps for itself start here: far above what a case opens by accident.
PRIVATE_FD_FLOOR = 900
TOKEN_BYTES = 16


class ChannelCorrupted(Exception):
    """A line on the channel that the child's harness code did not write."""


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def private_copy(fd: int) -> int:
    """A close-on-exec copy of `fd` at a high number (the original is left to the caller)."""
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, PRIVATE_FD_FLOOR)


def take_private(fd_variable: str) -> tuple[IO[str], IO[str]]:
    """In the child, before any case code: (tasks in, results out), both out of the case's reach.

    The results pipe is the descriptor `fd_variable` names; the tasks come on stdin. fd 0 becomes /dev/null.
    """
    result_fd = int(os.environ.pop(fd_variable))
    private_results = private_copy(result_fd)
    os.close(result_fd)
    private_tasks = private_copy(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    tasks = os.fdopen(private_tasks, "r", encoding="utf-8")
    results = os.fdopen(private_results, "w", buffering=1, encoding="utf-8")
    return tasks, results


def closer(*streams: IO[str]) -> Callable[[], None]:
    """What a process forked from this one calls first: these streams (its parent's channel) closed in it."""

    def close() -> None:
        for stream in streams:
            try:
                os.close(stream.fileno())
            except OSError:
                pass

    return close


class Sender:
    """The child's side: framed messages, one line each."""

    def __init__(self, stream: IO[str], token: str):
        self.stream, self.token = stream, token

    def send(self, message: dict[str, Any]) -> None:
        # One write of one line: a pipe write of up to PIPE_BUF bytes is atomic, and a longer one is still
        # written by this process alone (case threads are checked for after the case).
        self.stream.write(f"{self.token} {json.dumps(message, allow_nan=False)}\n")
        self.stream.flush()


class Receiver:
    """The parent's side: whole messages out of the bytes read so far (in time linear in their size)."""

    def __init__(self, token: str):
        self.token = token
        self._pieces: list[bytes] = []

    def feed(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        """The messages completed by `chunk`; ChannelCorrupted at the first line that is not one."""
        while chunk:
            end = chunk.find(b"\n")
            if end < 0:
                self._pieces.append(chunk)
                return
            line = b"".join(self._pieces) + chunk[:end]
            self._pieces, chunk = [], chunk[end + 1 :]
            yield self._decode(line.decode("utf-8", errors="backslashreplace"))

    def _decode(self, line: str) -> dict[str, Any]:
        token, _, text = line.partition(" ")
        if not secrets.compare_digest(token.encode("utf-8", "backslashreplace"), self.token.encode()):
            raise ChannelCorrupted(f"a line the harness did not write: {line[:80]!r}")
        try:
            message = json.loads(text)
        except (ValueError, RecursionError):
            raise ChannelCorrupted(f"a message that is not JSON: {text[:80]!r}") from None
        if not isinstance(message, dict):
            raise ChannelCorrupted(f"a message that is not an object: {text[:80]!r}")
        return message
