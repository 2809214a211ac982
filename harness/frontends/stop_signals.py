"""SIGTERM and SIGINT during a run: held from the first moment, so that a stopped run still leaves its results file."""

from __future__ import annotations

import signal
from typing import Any


class Stopped(Exception):
    """SIGTERM or SIGINT arrived: stop the workers, publish what finished, exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class StopSignals:
    """SIGTERM and SIGINT for the whole of a run. Until `raising()`, a signal is only noted (the run is not set
    up: nothing to stop, nowhere to publish yet), and `check()` raises it at the next step; from then on, it
    raises `Stopped` at once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._raise = False

    def __enter__(self) -> "StopSignals":
        self._previous = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}
        return self

    def __exit__(self, *exc: Any) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signum
        if self._raise:
            raise Stopped(signum)

    def check(self) -> None:
        if self.received is not None:
            raise Stopped(self.received)

    def raising(self) -> None:
        self._raise = True
        self.check()
