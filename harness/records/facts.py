"""What a run found, before any verdict: the facts its steps gather, which `harness.judge.decision.decide` turns
into the record's status, stage and symptom, once.

A plain value (JSON both ways): the case's process sends it beside its record, which carries no status (a case's
process gives no verdict), and the judge (`harness.judge.sent_values`) adds what it found in the values sent.
Nothing here is written to a results file: the verdict it leads to is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class JudgedValues:
    """What the judge found in the values a case's process sent, judged apart from the case's code."""

    # The outputs that fail, by the judge's comparisons (which replace the case's process's in the record).
    failing: list[str] = field(default_factory=list)
    # The outputs whose eager repeat differs from eager's first run.
    nondeterministic: list[str] = field(default_factory=list)
    # The outputs the judge and the case's process judged differently (pass against fail).
    differing: list[str] = field(default_factory=list)


@dataclass
class RunFacts:
    """Each step of a run says what it found here; none of them sets a verdict."""

    # The run could not finish: [stage, symptom] (what went wrong is the record's `error`).
    error: list[str | None] | None = None
    # The run tested nothing of the compiler: [stage, why] (a skip).
    untested: list[str | None] | None = None
    # A compiled kernel loaded or stored outside its buffers, and the device's memory checker stopped it there: what
    # it said (the record's `first_divergent_kernel` names the kernel). A failure, with no values to compare.
    out_of_bounds: str | None = None
    # Both sides ran and their results were compared (the record's `outputs`).
    compared: bool = False
    # The outputs that failed, by the case's process's own comparisons.
    failing: list[str] = field(default_factory=list)
    # Eager ran twice and these results differ: no verdict on compiled.
    nondeterministic: list[str] = field(default_factory=list)
    # A divergence retried: it did not come back, or came back with other values (a compiled result that changes
    # from run to run); or it shows on the first launches of freshly loaded kernels only.
    run_to_run: bool = False
    first_launch: bool = False
    # A steady divergence is rounding the program asks for, kept in float32 (`precision-cast-elided`).
    casts_elided: bool = False
    # A dynamic run whose second size compiled again: what happened, in words (None: it did not).
    recompiled: str | None = None
    # The case is generated (OpInfo): a run that tests nothing of the compiler is a skip, not a verdict.
    generated: bool = False
    # `--dynamic strict`: a recompilation fails the run.
    dynamic_strict: bool = False
    # The judge's findings, where the values reached it; `unjudged` says why they did not.
    judged: JudgedValues | None = None
    unjudged: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> "RunFacts":
        """Facts read back; ValueError for what is not facts (a message a case forged)."""
        if not isinstance(data, dict):
            raise ValueError(f"facts must be a mapping, not {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown facts {unknown[:3]}")
        values = dict(data)
        if values.get("judged") is not None:
            values["judged"] = JudgedValues(**values["judged"])
        facts = cls(**values)
        for name in ("error", "untested"):
            pair = getattr(facts, name)
            if pair is not None and (not isinstance(pair, list) or len(pair) != 2):
                raise ValueError(f"{name} must be [stage, {'symptom' if name == 'error' else 'why'}]")
        return facts

    def failed(self, stage: str | None, symptom: str | None) -> None:
        """The run stops as an error here (the latest error stands, as the record's `error` does)."""
        self.error = [stage, symptom]

    def tested_nothing(self, stage: str | None, why: str) -> None:
        self.untested = [stage, why]

    @property
    def diverged(self) -> bool:
        """What the case's own process saw: a divergence that is not eager's nondeterminism (its follow-up
        analyses, localization and extraction start from this; the verdict is `decide`'s)."""
        return self.compared and bool(self.failing) and not self.nondeterministic

    @property
    def steady(self) -> bool:
        """A divergence that came back alike (neither run-to-run nor of first launches only)."""
        return self.diverged and not self.run_to_run and not self.first_launch
