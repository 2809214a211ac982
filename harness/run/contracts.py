"""Custom ops that break their own contract, found before any kernel or pass is blamed.

Inductor trusts an op's schema: an op declared `mutates_args=()` that writes its input, or returns a view of it
as a fresh tensor, or whose fake kernel says another shape or stride than the real one, makes the compiled program
differ from eager while every kernel computes what it was given. `torch.library.opcheck` tells: its schema test
runs the op and checks what it wrote and what it returned against the schema, its fake-tensor test compares the
fake kernel's output with the real one.

`contract_breaches` runs the program eagerly once under a dispatch mode that records each call of an op of a
namespace outside torch's own (the ops the program registered: `torch.library.custom_op`, `Library.define`), with
copies of its arguments taken before the call (what the op is handed), then opchecks each op once, on the
arguments of its first call. Each breach is said in words, the op and the argument named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# Namespaces of torch's own ops (and torch_npu's CANN operators): never a program's custom op.
TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "inductor", "_inductor_test", "quantized", "_quantized", "npu", "c10d", "profiler"}
)
# opcheck's tests that check the op against its schema on real arguments (no compile of its own).
OPCHECK_TESTS = ("test_schema", "test_faketensor")
# What each test says when the op breaks its contract, as torch words it (torch/_subclasses/schema_check_mode.py,
# fake_utils.py; the same in torch 2.9 to 2.14). Any other failure is opcheck unable to run the op (an argument
# it cannot copy, as a profiler's ScriptObject): no word on the op, never a breach. (Longformer's
# `profiler::_record_function_exit` once was one: "'__len__' is not implemented for ...".)
BREACH_WORDS = {
    "test_schema": re.compile(
        r"is not defined as mutable but was mutated|is not defined to alias output but was aliasing"
        r"|not allowed to directly return inputs|Outputs \d+ and \d+ alias unexpectedly"
    ),
    "test_faketensor": re.compile(r"on FakeTensor and concrete Tensors, found"),
}


@dataclass(frozen=True)
class Breach:
    op: str  # "namespace::name.overload"
    test: str  # the opcheck test that failed
    text: str  # what the op does, in words: a verb phrase ("writes `x`, declared not mutable")

    @property
    def qualified(self) -> str:
        return f"torch.ops.{self.op.replace('::', '.')}"


class _CustomOpCalls(TorchDispatchMode):
    """Records the first call of each op outside torch's namespaces, with copies of its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: dict[Any, tuple[tuple, dict]] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "namespace", "aten") not in TORCH_NAMESPACES and func not in self.calls:
            self.calls[func] = torch.utils._pytree.tree_map_only(torch.Tensor, _copy, (args, kwargs))
        return func(*args, **kwargs)


def _copy(tensor: torch.Tensor) -> torch.Tensor:
    from harness.layout import clone_exact

    return clone_exact(tensor.detach()).requires_grad_(tensor.requires_grad)


def custom_op_calls(run: Any) -> dict[Any, tuple[tuple, dict]]:
    """The program's custom ops, each with the arguments of its first call, from one eager `run()`."""
    recorder = _CustomOpCalls()
    with recorder:
        run()
    return recorder.calls


def contract_breaches(calls: dict[Any, tuple[tuple, dict]]) -> list[Breach]:
    found = []
    for op, (args, kwargs) in calls.items():
        try:
            outcome = torch.library.opcheck(op, args, kwargs, test_utils=OPCHECK_TESTS, raise_exception=False)
        except Exception:  # noqa: BLE001 - an op opcheck cannot run is not judged by it
            continue
        for test in OPCHECK_TESTS:
            result = outcome.get(test)
            if result not in (None, "SUCCESS") and BREACH_WORDS[test].search(str(result)):
                found.append(Breach(str(op.name()), test, _in_words(test, str(result))))
                break
    return found


def _in_words(test: str, message: str) -> str:
    mutated = re.search(r"Argument (\w+) is not defined as mutable but was mutated", message)
    if mutated:
        return f"writes `{mutated.group(1)}`, declared not mutable"
    aliased = re.search(r"Argument (\w+) is not defined to alias output but was aliasing", message)
    if aliased:
        return f"returns a view of `{aliased.group(1)}`, declared as a fresh tensor"
    if test == "test_faketensor":
        metadata = re.search(r"mismatched tensor metadata: ([^\n]*)", message)
        first = metadata.group(1) if metadata else next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
        return f"has a fake kernel whose output differs from the real one's: {first[:200]}"
    first = next((line.strip() for line in message.splitlines() if line.strip()), message)
    return f"does what its schema does not say ({first[:200]})"


def first_breach(eager_side: Any) -> Breach | None:
    """The first custom op of the case's program that breaks its contract, from one more eager run of it (an
    `EagerSide`); None when it calls none, or none breaks."""
    from harness.run.program import Session

    session = Session(eager_side.program.fn, eager_side.inputs, eager_side.mode, eager_side.device, eager_side.seed)
    try:
        calls = custom_op_calls(session.run)
    except Exception:  # noqa: BLE001 - eager ran this program before: a failure now says nothing of a contract
        return None
    breaches = contract_breaches(calls)
    return breaches[0] if breaches else None


def breach_answer(breach: Breach) -> str:
    return (
        f"custom op {breach.op} breaks its own contract: it {breach.text} (torch.library.opcheck's {breach.test}); "
        "Inductor compiles by the schema, so the op, not a kernel or a graph pass, is what is wrong"
    )
