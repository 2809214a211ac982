"""The verdict from values: the results of both sides paired and compared, in whichever process holds them.

A run's process compares its results as it goes (localization and the
follow-up checks start from that), but that process ran the case's code, which can
change anything in it: the tolerance table, `harness.judge.compare`, `builtins`,
torch's comparisons. So the case's process also writes the values it judged
(`write_values`: eager's results, eager's second run, the compiled results,
the float64 reference, the elements left out as undefined), as one plain tensor
file with no name: an anonymous file (`memfd`) handed to its worker over a
socket of its own (`send_values`), so no other case can reach it by a path.
A process forked for it from the worker (`harness.isolation.case_process`),
where no case code ever ran, loads it with `torch.load(weights_only=True)`
and judges it again with the policy the harness declared for the task
and decides the run there (`judge_record`, `harness.judge.decision`): where
both agree the record keeps its analyses with the judge's comparisons; where
they differ the judge's verdict stands and the record says so.
"""

from __future__ import annotations

import array
import dataclasses
import json
import os
import socket
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any, Iterator, Mapping

import torch

from harness import records as R
from harness.judge import decision
from harness.judge.compare import VerdictPolicy, missing_result
from harness.judge.known_failures import Expectation
from harness.judge.results import Results
from harness.layout import clone_exact, dtype_name, dtype_named
from harness.records.run_config import RunConfig
from harness.judge.tolerances import Tolerance

# How long a message on the values socket may be (a run id and, where no values could be written, why).
VALUES_MESSAGE_BYTES = 4096
# A leaf result that is not a tensor nor a plain Python value travels as its type and repr (torch.load with
# weights_only=True accepts nothing else).
_PLAIN_LEAVES = (type(None), bool, int, float, complex, str, bytes)
_LEAF_TYPE, _LEAF_REPR = "__harness_leaf_type__", "__harness_leaf_repr__"


# -- pairing and comparing (the runner's, and the judge's) -------------------------------------------------------

MISSING = object()


def result_pairs(actual: Results, expected: Results, references: Results | None) -> Iterator[tuple[str, Any, Any, Any]]:
    """(name, compiled, eager, float64 reference) for every result either side has; MISSING where one has none."""
    references = references or Results()
    for name in list(expected.values) + [n for n in actual.values if n not in expected.values]:
        yield (name, actual.values.get(name, MISSING), expected.values.get(name, MISSING), references.values.get(name))
    # Judged by value: an input one side changed in place and the other did not is a divergence.
    for name in [n for n in expected.state if n in expected.changed | actual.changed]:
        if name in actual.state:
            yield name, actual.state[name], expected.state[name], references.state.get(name)


def compare_results(
    actual: Results, expected: Results, references: Results | None, verdict: VerdictPolicy
) -> list[R.OutputComparison]:
    """Every result of either side, judged: outputs, gradients, parameters, and state changed by either side."""
    comparisons = []
    for name, a, e, reference in result_pairs(actual, expected, references):
        if a is MISSING:
            comparison = missing_result(name, "eager", e)
        elif e is MISSING:
            comparison = missing_result(name, "compiled", a)
        else:
            comparison = verdict.values(name, a, e, reference)
        comparison.path = expected.paths.get(name, actual.paths.get(name))
        comparisons.append(comparison)
    return comparisons


def all_pass(
    actual: Results, expected: Results, references: Results | None, verdict: VerdictPolicy, only: set[str] | None = None
) -> bool:
    """Whether every result (of those named in `only`, if given) passes, stopping at the first that does not
    (for the probe's many reruns)."""
    for name, a, e, reference in result_pairs(actual, expected, references):
        if only is not None and name not in only:
            continue
        if a is MISSING or e is MISSING:
            return False
        if isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor) and verdict.quick_match(a, e):
            continue
        if not verdict.values(name, a, e, reference).passed:
            return False
    return True


# -- the values a case's process sends ---------------------------------------------------------------------------


@dataclass
class SizeValues:
    """What one size of a run was judged on: both sides' results and the facts the verdict took from the run."""

    actual: Results
    expected: Results
    references: Results | None
    # Eager's second run: the judge decides nondeterminism from it too.
    again: Results | None
    undefined: Mapping[str, torch.Tensor] = field(default_factory=dict)
    atomic_baseline: Mapping[str, torch.Tensor] = field(default_factory=dict)
    accumulated: bool = True


def write_values(handle: IO[bytes], sizes: list[SizeValues]) -> None:
    """Every size's values into one file, tensors on the CPU with their layouts."""
    bundles = [
        {
            "actual": _plain_results(size.actual),
            "expected": _plain_results(size.expected),
            "references": _plain_results(size.references),
            "again": _plain_results(size.again),
            "undefined": {k: _plain_tensor(v) for k, v in size.undefined.items()},
            "atomic_baseline": {k: _plain_tensor(v) for k, v in size.atomic_baseline.items()},
            "accumulated": bool(size.accumulated),
        }
        for size in sizes
    ]
    torch.save({"sizes": bundles}, handle)


def _anonymous_file() -> int:
    """A file with no name (Linux's `memfd_create`; elsewhere a temporary file unlinked at once)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("harness-values", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as handle:
        return os.dup(handle.fileno())


def send_values(channel: socket.socket, run: str, sizes: list[SizeValues]) -> None:
    """In the case's process: the run's values, written into an anonymous file whose descriptor goes to the worker
    over the case process's own socket; where they cannot be written, why."""
    descriptor = _anonymous_file()
    try:
        try:
            with os.fdopen(os.dup(descriptor), "wb") as handle:
                write_values(handle, sizes)
            message, descriptors = {"run": run}, [descriptor]
        except Exception as exc:  # noqa: BLE001 - the judge then says the verdict is this process's own
            # (Short enough that the message, JSON-escaped, stays whole within VALUES_MESSAGE_BYTES.)
            message, descriptors = {"run": run, "unjudgeable": f"{type(exc).__name__}: {exc}"[:500]}, []
        socket.send_fds(channel, [json.dumps(message).encode()], descriptors)
    finally:
        os.close(descriptor)


def received_values(channel: socket.socket, run: str) -> int | str | None:
    """In the worker: what the case's process sent for `run` so far, the last of it: a descriptor of its values,
    or why it has none (text); None when nothing came. What came for another run is dropped."""
    found: int | str | None = None
    while True:
        try:  # (`socket.recv_fds` drops its flags before Python 3.12: recvmsg itself)
            data, ancillary, _, _ = channel.recvmsg(
                VALUES_MESSAGE_BYTES, socket.CMSG_SPACE(4 * array.array("i").itemsize), socket.MSG_DONTWAIT
            )
        except OSError:  # (nothing more waiting: BlockingIOError)
            return found
        descriptors = array.array("i")
        for level, kind, payload in ancillary:
            if (level, kind) == (socket.SOL_SOCKET, socket.SCM_RIGHTS):
                descriptors.frombytes(payload[: len(payload) - len(payload) % descriptors.itemsize])
        descriptors = list(descriptors)
        if not data and not descriptors:  # (the case's process is gone: its end reads as empty)
            return found
        try:
            message = json.loads(data.decode("utf-8", "replace"))
        except ValueError:
            message = None
        if not isinstance(message, dict) or message.get("run") != run:
            for descriptor in descriptors:
                os.close(descriptor)
            continue
        if isinstance(found, int):
            os.close(found)
        for descriptor in descriptors[1:]:
            os.close(descriptor)
        found = descriptors[0] if descriptors else str(message.get("unjudgeable") or "its process sent no values")


def _plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    tensor = tensor.detach()
    if tensor.device.type == "cpu":
        return tensor
    try:
        return clone_exact(tensor, device="cpu")  # the layout kept: overlapping and gapped views too
    except (RuntimeError, NotImplementedError):  # no storage to copy (sparse): its values, densely
        return tensor.cpu()


def _plain_leaf(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return _plain_tensor(value)
    if isinstance(value, _PLAIN_LEAVES):
        return value
    return {_LEAF_TYPE: type(value).__name__, _LEAF_REPR: repr(value)[:2000]}


def _plain_results(results: Results | None) -> dict[str, Any] | None:
    if results is None:
        return None
    return {
        "values": {k: _plain_leaf(v) for k, v in results.values.items()},
        "paths": dict(results.paths),
        "state": {k: _plain_tensor(v) for k, v in results.state.items()},
        "changed": sorted(results.changed),
    }


def _results(plain: Mapping[str, Any] | None) -> Results | None:
    if plain is None:
        return None
    return Results(
        values=dict(plain["values"]),
        paths=dict(plain["paths"]),
        state=dict(plain["state"]),
        changed=set(plain["changed"]),
    )


# -- the judge ----------------------------------------------------------------------------------------------------


def policy_of(case: Any, config: RunConfig) -> dict[str, Any]:
    """The verdict policy the harness declares for a task (from the case's declaration as the loader described
    it, and the run's options): sent with the task, so the judge never takes it from the case's process."""
    reference = getattr(config, "reference", None) or case.reference
    return {
        "tolerances": {dtype_name(dtype): [t.rtol, t.atol] for dtype, t in case.tolerances.items()},
        "cosine_fallback": bool(case.cosine_fallback),
        "strict_eager": bool(getattr(config, "strict_eager", False) or case.strict_eager),
        "use_reference": reference != "none",
    }


def _verdict(policy: Mapping[str, Any]) -> VerdictPolicy:
    tolerances = {dtype_named(name): Tolerance(*pair) for name, pair in policy.get("tolerances", {}).items()}
    return VerdictPolicy(
        tolerances,
        bool(policy.get("cosine_fallback")),
        bool(policy.get("strict_eager")),
        use_reference=bool(policy.get("use_reference", True)),
    )


@dataclass
class Judgement:
    outputs: list[R.OutputComparison]
    nondeterministic: list[str]

    @property
    def failing(self) -> list[str]:
        return [o.name for o in self.outputs if not o.passed]


def _bundles(values: int) -> list[Any]:
    """The sizes' values in the file the case's process sent (a descriptor, read from its start, left open)."""
    R.check_regular(values, "the file sent")
    with os.fdopen(os.dup(values), "rb") as handle:
        handle.seek(0)
        payload = torch.load(handle, weights_only=True, map_location="cpu")
    if not isinstance(payload, dict) or not isinstance(payload.get("sizes"), list) or not payload["sizes"]:
        raise ValueError("no sizes in it")
    return payload["sizes"]


def judge_values(values: int | str | None, policy: Mapping[str, Any]) -> Judgement | str:
    """The comparisons of every size in the values the case's process sent (`received_values`), or why there are
    none (a sentence)."""
    if values is None:
        return "its process sent no values"
    if isinstance(values, str):
        return f"its values could not be written ({values[:500]})"
    try:
        bundles = _bundles(values)
    except Exception as exc:  # noqa: BLE001 - a file the judge cannot read: no verdict from it
        return f"its values could not be read ({type(exc).__name__}: {R.exception_line(exc)})"
    base = _verdict(policy)
    outputs, nondeterministic = [], []
    for number, bundle in enumerate(bundles, 1):
        suffix = "" if number == 1 else f"@size{number}"
        verdict = dataclasses.replace(
            base,
            undefined=bundle["undefined"],
            accumulated=bundle["accumulated"],
            atomic_baseline=bundle["atomic_baseline"],
        )
        expected = _results(bundle["expected"])
        for comparison in compare_results(
            _results(bundle["actual"]), expected, _results(bundle["references"]), verdict
        ):
            outputs.append(_named_leaf(dataclasses.replace(comparison, name=comparison.name + suffix), expected))
        if bundle["again"] is not None:
            repeat = dataclasses.replace(base, undefined=bundle["undefined"], eager_repeat=True)
            nondeterministic += [
                c.name + suffix
                for c in compare_results(_results(bundle["again"]), expected, None, repeat)
                if not c.passed
            ]
    return Judgement(outputs, nondeterministic)


def _named_leaf(comparison: R.OutputComparison, expected: Results) -> R.OutputComparison:
    """A leaf that travelled as its type and repr is named by that type, as the case's process named it."""
    value = expected.values.get(comparison.name.split("@size")[0])
    if isinstance(value, dict) and _LEAF_TYPE in value:
        comparison.dtype = value[_LEAF_TYPE]
    return comparison


def judge_record(
    record: R.CaseResult, values: int | str | None, policy: Mapping[str, Any], expectation: Expectation
) -> R.CaseResult:
    """The record decided (`harness.judge.decision`), with what the judge found in the values the case's process
    sent (`judge_values`: its comparisons replace the case's process's) among its facts."""
    facts = record.facts
    if facts.compared and facts.error is None and facts.untested is None:
        judged = judge_values(values, policy)
        if isinstance(judged, str):
            facts.unjudged = judged
        else:
            theirs = {o.name: o.passed for o in record.outputs}
            ours = {o.name: o.passed for o in judged.outputs}
            record.outputs = judged.outputs
            differing = sorted(name for name in ours.keys() | theirs.keys() if ours.get(name) != theirs.get(name))
            facts.judged = R.JudgedValues(judged.failing, judged.nondeterministic, differing)
    decision.conclude(record, facts, expectation)
    return record
