"""The package layout is the pipeline: no import cycles, and each package imports only what lies below it.

The graph is read from the source (every `import`, inside functions too), so a lazy import counts.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"

# Package (or top-level module) -> what it may import of the harness. Read top to bottom: the pipeline, each
# layer on those above it. `records` and `report` need no torch and import nothing below them.
ALLOWED: dict[str, set[str]] = {
    "records": set(),
    "report": {"records"},
    "layout": set(),
    "extensions": set(),
    "torch_import": set(),
    "inputs": {"layout"},
    "inductor_compat": {"layout"},
    "devices": {"extensions", "inductor_compat"},
    "judge": {"devices", "layout", "records"},
    "registry": {"judge", "layout", "records"},
    "inject": {"extensions", "inductor_compat", "layout", "records"},
    "probe": {"inductor_compat", "judge", "layout", "records"},
    "extraction": {"devices", "inductor_compat", "inject", "judge", "layout", "probe", "records", "registry"},
    "opinfo": {"inductor_compat", "inputs", "judge", "layout", "records", "registry"},
    "run": {
        "devices",
        "extraction",
        "inductor_compat",
        "inject",
        "inputs",
        "judge",
        "layout",
        "probe",
        "records",
        "registry",
        "torch_import",
    },
    "isolation": {"devices", "extraction", "inductor_compat", "judge", "layout", "records", "registry", "run"},
    "frontends": {
        "devices",
        "inductor_compat",
        "inject",
        "isolation",
        "judge",
        "layout",
        "records",
        "registry",
        "report",
        "run",
        "torch_import",
    },
    # The old entry points, kept as re-exports.
    "emulation": {"inject"},
    "pytest_plugin": {"frontends"},
    "__main__": {"frontends"},
    "__init__": {"inputs", "judge", "registry"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(HARNESS.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """harness module -> the harness modules it imports."""
    paths = {_module_name(p): p for p in HARNESS.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        found = graph.setdefault(name, set())
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                submodules = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in paths]
                found.update(submodules)
                if base in paths and len(submodules) < len(node.names):
                    found.add(base)
        found.discard(name)
    return graph


def _unit(module: str) -> str:
    """The package or top-level module a harness module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_module_imports_itself_through_others():
    assert _cycle(import_graph()) is None, " -> ".join(_cycle(import_graph()) or [])


def test_each_package_imports_only_the_packages_below_it():
    graph = import_graph()
    units = {_unit(m) for m in graph}
    assert units <= set(ALLOWED), f"packages without a rule: {sorted(units - set(ALLOWED))}"
    wrong = sorted(
        f"{m} imports {d}"
        for m, deps in graph.items()
        for d in deps
        if _unit(d) != _unit(m) and _unit(d) not in ALLOWED[_unit(m)]
    )
    assert not wrong, "\n".join(wrong)
    # And the packages, taken whole, form no cycle either.
    assert _cycle({unit: allowed for unit, allowed in ALLOWED.items()}) is None


def test_the_top_level_holds_at_most_eight_modules():
    modules = sorted(p.stem for p in HARNESS.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert len(modules) <= 8, modules


def test_the_code_keeps_its_format_and_line_length():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (the test extra installs it)")
    root = HARNESS.parent
    checked = subprocess.run([ruff, "check", "."], cwd=root, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout[-3000:]
    formatted = subprocess.run([ruff, "format", "--check", "."], cwd=root, capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stdout[-3000:]


def test_no_two_modules_share_a_file_name():
    """A module's file name says which room it is in: `grep` and a traceback name one module."""
    names: dict[str, list[str]] = {}
    for path in HARNESS.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py"):
            names.setdefault(path.name, []).append(str(path.relative_to(HARNESS)))
    assert not {n: p for n, p in names.items() if len(p) > 1}


def _verdict_writers() -> dict[str, set[str]]:
    """Module -> how it sets a record's verdict: a record's `.conclude(...)`, `x.status = ...`, `x.symptom = ...`,
    `record.stage = ...` (a localization's own `stage`, an exception's own fields are others), and calls of
    `decide(...)`. (`decision.conclude(...)`, the one way in, is not among them.)"""
    found: dict[str, set[str]] = {}
    for path in HARNESS.rglob("*.py"):
        module = str(path.relative_to(HARNESS))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
                receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
                if name == "decide" or (
                    name == "conclude" and not (isinstance(receiver, ast.Name) and receiver.id == "decision")
                ):
                    found.setdefault(module, set()).add(f"{name}()")
            for target in node.targets if isinstance(node, ast.Assign) else []:
                for element in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if not isinstance(element, ast.Attribute):
                        continue
                    owner = element.value.id if isinstance(element.value, ast.Name) else ""
                    if owner == "self" and module != "records/schema.py":
                        continue
                    if element.attr in ("status", "symptom") or (element.attr == "stage" and owner == "record"):
                        found.setdefault(module, set()).add(f".{element.attr} =")
    return found


def test_a_records_verdict_is_set_in_one_place_and_decided_in_one_function():
    """`decision.conclude` decides (`decide`, its one caller) and writes through `CaseResult.conclude`, which
    refuses a second verdict: the status, stage and symptom of a record are set in those two modules only."""
    writers = _verdict_writers()
    assert set(writers) <= {"judge/decision.py", "records/schema.py"}, writers
    assert writers["judge/decision.py"] == {"decide()", "conclude()"}, writers
