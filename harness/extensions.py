"""Devices and injections other packages add through entry points: a fourth backend is one adapter.

A package declares, in its pyproject.toml,

    [project.entry-points."harness.devices"]
    mydev = "mypackage.harness_adapter:MyDevice"        # a harness.devices.Device subclass

    [project.entry-points."harness.injections"]
    my-fault = "mypackage.harness_adapter:MY_FAULT"     # a harness.emulation.Injection

and `--device mydev` / `--inject my-fault` then work in the CLI and in pytest. An injection's handler that
defines `missed()` (a sentence, or None) makes a run in which it changed nothing an `injection-missed` error,
as the built-in ones do.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from typing import Any, Callable, Mapping

DEVICE_GROUP = "harness.devices"
INJECTION_GROUP = "harness.injections"


def declared(group: str) -> dict[str, importlib.metadata.EntryPoint]:
    """The entry points of `group`, by name (none when the metadata cannot be read)."""
    try:
        return {point.name: point for point in importlib.metadata.entry_points(group=group)}
    except Exception:  # a broken distribution elsewhere must not stop the harness
        return {}


@dataclass(frozen=True)
class Catalog:
    """Built-in entries of one kind (devices, injections) and the ones entry points of `group` add."""

    kind: str  # "device", "injection": for messages
    group: str
    built_in: Mapping[str, Any]
    accepts: Callable[[Any], bool]

    def names(self) -> list[str]:
        return [*self.built_in, *(name for name in declared(self.group) if name not in self.built_in)]

    def get(self, name: str) -> Any:
        """The entry called `name`; ValueError naming the choices (or the faulty entry point) otherwise."""
        if name in self.built_in:
            return self.built_in[name]
        point = declared(self.group).get(name)
        if point is None:
            raise ValueError(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        try:
            found = point.load()
        except Exception as exc:
            raise ValueError(f"{self.group} entry point {name!r} ({point.value}) failed to load: {exc}") from None
        if not self.accepts(found):
            raise ValueError(f"{self.group} entry point {name!r} ({point.value}) is not a harness {self.kind}")
        return found
