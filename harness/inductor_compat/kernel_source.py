"""Reading generated kernel source: the C++ declarations and Triton reduction loops the source-rewriting
emulations (kernel_variants.py, padding_variants.py) find their places by."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A Triton reduction loop header (see kernel_variants.py for the forms), and an accumulator's initialisation.
TRITON_LOOP = re.compile(r"^(?P<indent>[ \t]*)for (?:r\d*_?offset|r\d*_\d+(?:inner)?) in (?:tl\.)?range\(.*\):[ \t]*$")
TRITON_INIT = re.compile(r"^[ \t]*(?P<name>\w+) = tl\.(?:full|zeros)\(")


def cpp_declaration(lines: list[str], name: str, before: int) -> tuple[int, str | None] | None:
    """(line, re-initialising statement or None for a stateless static) of `name`'s nearest declaration."""
    pattern = re.compile(
        r"^\s*(?P<static>static\s+)?(?P<type>[A-Za-z_][^=;]*?)\s+"
        + re.escape(name)
        + r"\s*(?:=\s*(?P<init>.+)|(?P<args>\(.*\))|(?P<brace>\{.*\}));\s*$"
    )
    for number in range(before - 1, -1, -1):
        match = pattern.match(lines[number])
        if match is None or match["type"].strip() in ("return", "else"):
            continue
        if match["static"]:
            return number, None
        if match["init"] is not None:
            return number, f"{name} = {match['init'].strip()};"
        return number, f"{name} = {match['type'].strip()}{match['args'] or match['brace']};"
    return None


def indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def block_end(lines: list[str], header: int) -> int:
    """One past the last line of the Python block opened by `lines[header]`."""
    indent = len(indent_of(lines[header]))
    end = header + 1
    for number in range(header + 1, len(lines)):
        if not lines[number].strip():
            continue
        if len(indent_of(lines[number])) <= indent:
            break
        end = number + 1
    return end


@dataclass
class TritonReductionLoop:
    """A reduction loop nest of a Triton kernel: its outermost loop's header, one past its last line, its
    innermost loop's header, and the accumulators set before it (their lines) and reassigned in it."""

    outer: int
    end: int
    innermost: int
    inits: list[str]
    accumulators: set[str]


def triton_reduction_loops(lines: list[str]) -> list[TritonReductionLoop]:
    found = []
    number = 0
    while number < len(lines):
        match = TRITON_LOOP.match(lines[number])
        if match is None:
            number += 1
            continue
        outer, end = number, block_end(lines, number)
        innermost = outer
        for inner in range(outer + 1, end):
            if TRITON_LOOP.match(lines[inner]):
                innermost = inner
        assigned_in_loop = {m.group(1) for line in lines[outer + 1 : end] if (m := re.match(r"^[ \t]*(\w+) = ", line))}
        indent = match["indent"]
        inits, names = [], set()
        for previous in range(outer - 1, -1, -1):
            line = lines[previous]
            if (line.strip() and len(indent_of(line)) < len(indent)) or TRITON_LOOP.match(line):
                break  # the function's start, or the loop before this one
            if indent_of(line) != indent:
                continue
            init = TRITON_INIT.match(line)
            if init and init["name"] in assigned_in_loop:
                inits.insert(0, line.strip())
                names.add(init["name"])
        found.append(TritonReductionLoop(outer, end, innermost, inits, names))
        number = end
    return found


def triton_loop_accumulators(lines: list[str]) -> list[tuple[range, set[str]]]:
    """(the lines inside each reduction loop nest, the accumulators it updates)."""
    return [
        (range(loop.outer + 1, loop.end), loop.accumulators)
        for loop in triton_reduction_loops(lines)
        if loop.accumulators
    ]
