"""From a captured launch to verified repros on disk (`--extract DIR`).

Each form is written, run once under the run's injection (its selector
narrowed to the kernel) or none, and kept only if it diverges:

1. the kernel-level repro (`repro.py`): the generated kernel on its launch's
   arguments against its subgraph run eagerly;
2. the graph-level case (`extracted_*.py`): the kernel's subgraph compiled
   from scratch, inputs regenerated from a seed when that still diverges,
   saved otherwise; widened ring by ring to the neighbouring kernels when
   the kernel's own subgraph does not diverge (its fusion differs out of
   context); with an injected fault, it must also pass without it;
3. the plain script (`plain_repro.py`, no harness import): eager against
   `torch.compile` with `assert_close`. Under an injection it carries the
   emulation inline where a few lines of torch can (`inline_emulation.py`),
   and must then also pass without it; otherwise it is not written, and the
   console line says why.

Verification runs in the worker's own process (no interpreter start, the
compile pipeline warm), through the same `run_case` every case goes through.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import re
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

from harness import records as R
from harness.extraction import forms, inline_emulation
from harness.extraction.capture import CapturedLaunch
from harness.extraction.kernel_repro import LAUNCH_FILE, MANIFEST, MODULE_FILE
from harness.extraction import kernel_repro
from harness.layout import dtype_name
from harness.extraction import subgraph as S
from harness.records.run_config import RunConfig
from harness.registry import Case

CASE_PREFIX = "extracted_"
PLAIN_FILE = "plain_repro.py"
UNFINISHED = "UNFINISHED"
REPRO_FILE = "repro.py"


@dataclasses.dataclass
class FailingRun:
    """The run a repro is extracted from."""

    case: Case
    dtype: torch.dtype
    mode: str
    config: RunConfig
    record: R.CaseResult
    # How a candidate case is run to verify it: the runner's `run_case(case, dtype, mode, config) -> CaseResult`,
    # handed in so that extraction never imports the runner that calls it.
    run_case: Callable[..., R.CaseResult]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")


def folder_name(case: str, dtype_name: str, mode: str) -> str:
    """The folder a run's repros are written to, under the extraction directory."""
    exact = f"{case}_{dtype_name}_{mode}"
    name = slug(exact)
    if name != exact:  # the slug lost characters (`ex-a` and `ex_a` both slug to ex_a): the exact id's hash keeps
        name += "_" + hashlib.sha256(exact.encode("utf-8", "surrogatepass")).hexdigest()[:8]  # them apart
    return name


def discard_unfinished(extract_dir: str, case: str, dtype_name: str, mode: str) -> bool:
    """Remove a run's repro folder that an extraction left unfinished (its process lost); True if there was one."""
    directory = Path(extract_dir).resolve() / folder_name(case, dtype_name, mode)
    if not (directory / UNFINISHED).exists():
        return False
    shutil.rmtree(directory, ignore_errors=True)
    return True


def extract(captured: CapturedLaunch, parent: FailingRun) -> R.Extraction:
    started = time.perf_counter()
    name = folder_name(parent.case.name, dtype_name(parent.dtype), parent.mode)
    directory = Path(parent.config.extract_dir).resolve() / name
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    # Until the extraction ends, the folder says it holds nothing verified: a process lost meanwhile (a timeout, a
    # crash) leaves it marked, and the harness removes it.
    (directory / UNFINISHED).write_text(
        "an extraction that did not finish wrote this folder: nothing here is a verified repro\n"
    )
    found = R.Extraction(
        R.Reproduction.DOES_NOT_REPRODUCE,
        str(directory),
        kernel=captured.kernel_name,
        graph=captured.graph,
        command=parent.record.command,
    )
    found.kernel_injection = _narrowed(parent.config.inject, captured.kernel_name)
    manifest = _manifest(captured, parent, found)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))
    clock = time.perf_counter()
    drift = parent.record.first_divergent_kernel.answer == R.Answer.DRIFT
    if drift:  # a kernel-level repro would contradict the answer it was extracted from
        found.notes.append(
            "kernel-level repro not written: the answer is a drift (no kernel is wrong on exact "
            "inputs); the graph-level forms are what reproduces it"
        )
    try:
        if not drift:
            _kernel_form(captured, parent, directory, found)
    except Exception as exc:  # noqa: BLE001 - one form failing leaves the others
        found.kernel_repro = R.Reproduction.NOT_WRITTEN
        found.notes.append(f"kernel-level repro failed: {type(exc).__name__}: {R.exception_line(exc)}")
        _remove(directory, REPRO_FILE, LAUNCH_FILE, MODULE_FILE, "kernel.cpp", "_kernel.py")
    found.timings["kernel"] = round(time.perf_counter() - clock, 3)
    try:
        _graph_forms(captured, parent, directory, found, CASE_PREFIX + name)
    except Exception as exc:  # noqa: BLE001
        found.notes.append(f"graph-level repro failed: {type(exc).__name__}: {R.exception_line(exc)}")
        # Whatever was written but not verified goes: a repro that did not reproduce is never left as one.
        if found.case_file is None:
            _remove(directory, f"{CASE_PREFIX}{name}.py", forms.VALUES_FILE)
        if found.plain_script != R.Reproduction.REPRODUCES:
            _remove(directory, PLAIN_FILE, PLAIN_VALUES_FILE)
    found.seconds = round(time.perf_counter() - started, 3)
    manifest["result"] = dataclasses.asdict(found)
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=1))
    (directory / UNFINISHED).unlink()
    return found


def _narrowed(inject: str | None, kernel: str) -> str | None:
    """The run's injection with its kernel selector narrowed to this kernel (the kernel-level repro launches it
    alone, as launch 0)."""
    if not inject or "@" not in inject:
        return inject
    return f"{inject.partition('@')[0]}@{kernel}"


def _manifest(captured: CapturedLaunch, parent: FailingRun, found: R.Extraction) -> dict[str, Any]:
    tolerances = {dtype_name(d): {"rtol": t.rtol, "atol": t.atol} for d, t in (parent.case.tolerances or {}).items()}
    return {
        "parent": {
            "case": parent.case.name,
            "dtype": dtype_name(parent.dtype),
            "mode": parent.mode,
            "command": parent.record.command,
            "torch": torch.__version__,
        },
        "device": parent.config.device,
        "kernel": {
            "name": captured.kernel_name,
            "kind": captured.kernel_kind,
            "graph": captured.graph,
            "launch_index": captured.launch_index,
            "accumulates": captured.accumulates,
        },
        "tolerances": tolerances,
        # The parent run's verdict policy beyond tolerances (an eager-semantics contract, the reference).
        "verdict": {
            "cosine_fallback": parent.case.cosine_fallback,
            "strict_eager": bool(parent.config.strict_eager or parent.case.strict_eager),
            "use_reference": (parent.config.reference or parent.case.reference) != "none",
        },
        "kernel_injection": found.kernel_injection,
    }


# --- The kernel-level repro ---------------------------------------------------------------------------------


def _kernel_form(captured: CapturedLaunch, parent: FailingRun, directory: Path, found: R.Extraction) -> None:
    if not captured.rings or not captured.own_nodes_known:
        found.notes.append("kernel-level repro not written: codegen did not say which nodes the kernel computes")
        return
    outputs = [w.node.rpartition("@")[2] for w in captured.written if w.node and w.whole_value]
    own = S.cut(captured.gm, captured.rings[0], outputs)
    written = []
    for argument in captured.written:
        node = argument.node.rpartition("@")[2] if argument.node else None
        output = own.outputs.index(node) if argument.whole_value and node in own.outputs else None
        written.append(
            {
                "key": argument.key,
                "name": argument.name,
                "output": output,
                "expected": None if output is not None else argument.expected,
            }
        )
    if any(w["output"] is None and w["expected"] is None for w in written):
        found.notes.append("kernel-level repro not written: an argument it writes has no eager value to judge by")
        return
    missing = [n for n in own.inputs if n not in captured.values]
    if missing:
        found.notes.append(f"kernel-level repro not written: no eager value for {', '.join(missing[:3])}")
        return
    torch.save(
        {
            "launch": kernel_repro.pack(captured.args, captured.kwargs),
            "inputs": [captured.values[n] for n in own.inputs],
            "written": written,
        },
        directory / LAUNCH_FILE,
    )
    shutil.copyfile(captured.module_path, directory / MODULE_FILE)
    source_file = "kernel.cpp" if captured.kernel_kind == "cpp" else "_kernel.py"
    if captured.kernel_source:
        (directory / source_file).write_text(captured.kernel_source + "\n")
    docstring = [
        f"Kernel-level repro: {captured.kernel_name} ({captured.graph}, launch {captured.launch_index}) of "
        f"{parent.case.name} ({parent.mode}, {dtype_name(parent.dtype)}).",
        "",
        "`graph` is the post-grad subgraph the kernel implements; the kernel is launched on the saved arguments",
        f"({LAUNCH_FILE}: exact size, stride, storage offset and storage; read arguments hold eager values) from",
        f"its generated module ({MODULE_FILE}; its source alone: {source_file}), and each argument it writes",
        "is judged against `graph` run eagerly, by the harness's verdict rules.",
        "",
        "Run: python repro.py   (exit 1: the kernel diverges; --without-injection: as generated)",
    ]
    if found.kernel_injection:
        docstring.insert(
            2,
            f"Verified under the injected fault/emulation {found.kernel_injection} (not real "
            "hardware); repro.py applies it unless --without-injection.",
        )
    (directory / REPRO_FILE).write_text(forms.kernel_repro(own.code, own.imports, docstring))
    graph = _function(own.code, own.imports)
    checked = kernel_repro.check(directory, graph, parent.config.device, found.kernel_injection)
    if checked.error or not checked.diverged:
        why = checked.error or "the kernel matches its subgraph on the saved launch"
        found.notes.append(f"kernel-level repro does not reproduce ({why}): not kept")
        found.kernel_repro = R.Reproduction.DOES_NOT_REPRODUCE
        _remove(directory, REPRO_FILE, LAUNCH_FILE, MODULE_FILE, source_file)
        return
    found.kernel_repro = R.Reproduction.REPRODUCES


# --- The graph-level case and the plain script -------------------------------------------------------------


def _graph_forms(
    captured: CapturedLaunch, parent: FailingRun, directory: Path, found: R.Extraction, case_name: str
) -> None:
    """The smallest subgraph that reproduces: parts of the kernel's own subgraph first (`_parts`), then the
    whole of it, then each wider ring; the first that reproduces is written."""
    path = directory / f"{case_name}.py"
    clock = time.perf_counter()
    if captured.rings and not captured.own_nodes_known:
        found.notes.append(
            "codegen named no graph nodes for the kernel: the graph-level forms are cut from the whole graph"
        )
    for widened, ring in enumerate(captured.rings):
        whole = S.cut(captured.gm, ring)
        tries = [S.cut(captured.gm, part, [part[-1]], only=True) for part in _parts(captured, parent, ring)]
        for sub in tries + [whole]:
            kept = _candidate(captured, parent, sub, case_name, widened, found, path, quiet=sub is not whole)
            if kept is None:
                continue
            if sub is not whole:
                found.notes.append(
                    f"reduced from {len(whole.nodes)} to {len(sub.nodes)} node(s): {', '.join(sub.nodes)}"
                )
            sub, values, specs, injection = kept
            found.extracted = R.Reproduction.REPRODUCES if widened == 0 else f"widened({widened})"
            found.widened, found.values, found.case_injection = widened, values, injection
            found.case_file, found.case_name, found.graph_lines = str(path), case_name, sub.lines
            found.code = sub.code
            found.timings["graph"] = round(time.perf_counter() - clock, 3)
            clock = time.perf_counter()
            _plain_form(sub, specs, [captured.values[n] for n in sub.inputs], parent, directory, found)
            found.timings["plain"] = round(time.perf_counter() - clock, 3)
            return
    found.timings["graph"] = round(time.perf_counter() - clock, 3)
    found.notes.append("no subgraph around the kernel diverges compiled from scratch: no case written")


def _from_dynamic(record: R.CaseResult, dynamic: bool) -> str:
    """What a case extracted from a dynamic run is: the failing size's graph at its shapes, static when that
    reproduces, else a case that always runs dynamic (from those shapes to one more)."""
    size = 2 if record.failed_sizes == [2] else 1
    shapes = ", ".join(str(tuple(s)) for s in (record.dynamic_sizes or [[], []])[size - 1])
    where = f"extracted from a dynamic run at its {'second' if size == 2 else 'first'} size ({shapes})"
    if not dynamic:
        return f"{where}: the case is static at those shapes, and reproduces run without --dynamic"
    return (
        f"{where}: static at those shapes it does not reproduce, so the case always runs dynamic "
        "(always_dynamic: compiled at those shapes, run at one more)"
    )


Kept = tuple  # (Subgraph, values: "regenerated" | "saved", specs or None, the injection verified under)


def _candidate(
    captured: CapturedLaunch,
    parent: FailingRun,
    sub: S.Subgraph,
    case_name: str,
    widened: int,
    found: R.Extraction,
    path: Path,
    quiet: bool = False,
) -> Kept | None:
    """Write `sub` as the case and verify it, inputs regenerated first, then saved; left written when it
    reproduces, removed otherwise."""
    if any(n not in captured.values for n in sub.inputs):
        found.notes.append(f"ring {widened}: no eager value for an input of the subgraph")
        return None
    tensors = [captured.values[n] for n in sub.inputs]
    specs = [forms.regenerable(t) for t in tensors]
    choices = [("regenerated", specs)] if all(s is not None for s in specs) else []
    choices.append(("saved", None))
    values_file = path.parent / forms.VALUES_FILE
    # A dynamic run's failing size is tried as a static case first; only then as a case that always runs dynamic.
    for dynamic in (False, True) if parent.record.dynamic else (False,):
        for values, chosen in choices:
            if chosen is None:
                torch.save(tensors, values_file)
            verdict, injection = _verify_graph(captured, parent, sub, chosen, case_name, widened, values, path, dynamic)
            if verdict == R.Reproduction.REPRODUCES:
                if chosen is not None:
                    values_file.unlink(missing_ok=True)
                if parent.record.dynamic:
                    found.notes.append(_from_dynamic(parent.record, dynamic))
                return sub, values, chosen, injection
            if not quiet:
                found.notes.append(f"ring {widened}, {values} values{', dynamic' if dynamic else ''}: {verdict}")
            path.unlink(missing_ok=True)
            values_file.unlink(missing_ok=True)
    return None


# Parts of the kernel's subgraph tried before the whole of it, each a compile from scratch.
MAX_PARTS = 2


def _parts(captured: CapturedLaunch, parent: FailingRun, ring: list[str]) -> list[list[str]]:
    """Parts of the kernel's own subgraph to try before the whole, in order, each a node with what it is
    computed from inside the subgraph (as the only output): the smallest ones that read an input (the
    seed's index producer inside a fused scatter is its view and copy), at most MAX_PARTS, then the part
    computing the buffer localization found diverging. An injected fault that selects kernels hits
    whichever kernel it selects, so any part would "reproduce" it: for it, only the diverging buffer's part."""
    if ring is not captured.rings[0]:
        return []
    parts: list[list[str]] = []
    if not _fault_follows_selector(parent.config.inject):
        smallest = []
        for node in ring:
            closure = S.closure(captured.gm, ring, node)
            if S.reads_outside(captured.gm, closure) and closure not in smallest:
                smallest.append(closure)
        parts += sorted(smallest, key=len)[:MAX_PARTS]
    if captured.diverging in ring:
        diverging = S.closure(captured.gm, ring, captured.diverging)
        if diverging not in parts:
            parts.append(diverging)
    return [part for part in parts if len(part) < len(ring)]


def _fault_follows_selector(inject: str | None) -> bool:
    """An injected fault that selects kernels hits whichever kernel it selects: any part of a subgraph would
    \"reproduce\" it. Its repro is the kernel's own subgraph, not reduced."""
    if not inject:
        return False
    from harness.inject.launch import parse_injection

    return parse_injection(inject)[0].needs_selector


def _verify_graph(
    captured: CapturedLaunch,
    parent: FailingRun,
    sub: S.Subgraph,
    specs: list[forms.InputSpec] | None,
    case_name: str,
    widened: int,
    values: str,
    path: Path,
    dynamic: bool = False,
) -> tuple[str, str | None]:
    """Write the candidate case and run it: (verdict, the injection it was verified under). With an injected
    fault it must pass without it first; a fault selecting kernels is then moved to the standalone program's
    kernel named most like the parent's (a subgraph compiled from scratch names and numbers its kernels
    afresh)."""
    inject = parent.config.inject
    if not inject:
        path.write_text(_case_text(captured, parent, sub, specs, case_name, widened, values, None, dynamic))
        return _verify_case(path, case_name, parent, None), None
    path.write_text(_case_text(captured, parent, sub, specs, case_name, widened, values, inject, dynamic))
    launched: list[str] = []
    without = _verify_case(path, case_name, parent, None, launched)
    if without != "passes":
        return f"without the injection: {without}", None
    injection = _selector_for(inject, captured.kernel_name, launched)
    if injection is None:
        return "the standalone program launches no generated kernel", None
    path.write_text(_case_text(captured, parent, sub, specs, case_name, widened, values, injection, dynamic))
    return _verify_case(path, case_name, parent, injection), injection


def _selector_for(inject: str, kernel: str, launched: list[str]) -> str | None:
    """`inject` with its kernel selector moved to the launched kernel whose name shares the most ops with
    `kernel`'s (the whole injection when it selects no kernel)."""
    if "@" not in inject:
        return inject
    ops = _ops(kernel)
    names = [
        n for n in dict.fromkeys(launched) if n.startswith("extern_kernels.") == kernel.startswith("extern_kernels.")
    ]
    if not names:
        return None
    best = max(names, key=lambda n: len(ops & _ops(n)) / max(1, len(ops | _ops(n))))
    return f"{inject.partition('@')[0]}@{best}"


def _ops(kernel: str) -> set[str]:
    return {w for w in re.split(r"[_.]", kernel) if w and not w.isdigit()} - {
        "cpp",
        "triton",
        "fused",
        "poi",
        "per",
        "red",
        "unk",
        "extern",
        "kernels",
    }


def _case_text(
    captured: CapturedLaunch,
    parent: FailingRun,
    sub: S.Subgraph,
    specs: list[forms.InputSpec] | None,
    case_name: str,
    widened: int,
    values: str,
    injection: str | None,
    dynamic: bool = False,
) -> str:
    case = parent.case
    options = {**case.compile_options, **parent.config.compile_options}
    # Generated code holds literals written here, never a case's own `repr` (which could be any code).
    kwargs: dict[str, str] = {}
    if case.tolerances:
        kwargs["tolerances"] = (
            "{"
            + ", ".join(
                f"torch.{str(d).removeprefix('torch.')}: Tolerance(rtol={float(t.rtol)!r}, atol={float(t.atol)!r})"
                for d, t in case.tolerances.items()
                if isinstance(d, torch.dtype)
            )
            + "}"
        )
    if options:
        kwargs["compile_options"] = _literal(options)
    for field_name, default, kind in (
        ("reference", "auto", str),
        ("cosine_fallback", False, bool),
        ("strict_eager", False, bool),
    ):
        if getattr(case, field_name) != default:
            kwargs[field_name] = repr(kind(getattr(case, field_name)))
    if case.issue:
        kwargs["issue"] = repr(str(case.issue))
    if dynamic:
        kwargs["always_dynamic"] = "True"
    where = "its own subgraph" if widened == 0 else f"widened by {widened} ring(s) of neighbouring kernels"
    run = (
        f"python -m harness run --case-path {shlex.quote(_extract_root(parent))} {case_name} "
        f"--device {parent.config.device}"
    )
    docstring = [
        f"Extracted from {case.name} ({parent.mode}, {dtype_name(parent.dtype)}): "
        f"{captured.kernel_name}, {captured.graph}, {where}.",
        "",
        f"Parent run: {parent.record.command}",
        f"Inputs: {values}"
        + (
            " from a seed, within each input's observed range"
            if values == "regenerated"
            else f" ({forms.VALUES_FILE}, torch.save: exact layouts and storages, loads on any device)"
        )
        + ".",
        f"Run: {run}" + (f" --inject {shlex.quote(injection)}" if injection else ""),
    ]
    where_run = parent.config.device + (f", {parent.record.surrogate}" if parent.record.surrogate else "")
    if injection:
        docstring.append(
            f"Verified on torch {torch.__version__} ({where_run}): fails under --inject "
            f"{shlex.quote(injection)} (an injected fault or emulation, not real hardware), passes "
            "without it."
        )
    else:
        docstring.append(f"Verified: fails on torch {torch.__version__} ({where_run}).")
    parent_info = {
        "case": case.name,
        "dtype": dtype_name(parent.dtype),
        "mode": parent.mode,
        "graph": captured.graph,
        "kernel": captured.kernel_name,
        "command": parent.record.command,
    }
    return forms.case_module(case_name, sub.code, sub.imports, specs, parent.dtype, docstring, kwargs, parent_info)


_PLAIN = (bool, int, float, str, type(None))


def _literal(value: Any) -> str:
    """Python source for a plain value (numbers, text, None, and lists, tuples and dicts of them), written from
    the value itself; a value of any other type is refused rather than pasted as its `repr`."""
    if type(value) in _PLAIN:
        return repr(value)
    if type(value) in (list, tuple):
        items = ", ".join(_literal(v) for v in value)
        return f"[{items}]" if type(value) is list else f"({items}{',' if len(value) == 1 else ''})"
    if type(value) is dict:
        return "{" + ", ".join(f"{_literal(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"a compile option of type {type(value).__name__} cannot be written as a literal")


def _extract_root(parent: FailingRun) -> str:
    return str(Path(parent.config.extract_dir).resolve())


def _verify_case(
    path: Path, case_name: str, parent: FailingRun, inject: str | None, launched: list[str] | None = None
) -> str:
    """ "reproduces" (fails), "passes", or what else the run ended as; the names of the kernels it launched
    go to `launched` (a run without injection only: interception does not nest)."""
    from harness.inductor_compat import intercept_launches
    from harness.registry import _cases_in, _file_loader

    def log(launch: Any) -> Any:
        launched.append(launch.kernel.name)
        return launch.run()

    module = _file_loader(path)()
    try:
        cases = [c for c in _cases_in(module) if c.name == case_name]
        # Static, at the shapes the kernel was captured at: a dynamic run's failing size is extracted as it ran.
        config = dataclasses.replace(
            parent.config,
            inject=inject,
            bisect=None,
            extract_dir=None,
            compile_options={},
            dynamic=False,
            dynamic_strict=False,
        )
        with intercept_launches(log) if launched is not None else contextlib.nullcontext():
            record = parent.run_case(cases[0], parent.dtype, "inference", config)
    finally:
        sys.modules.pop(module.__name__, None)
    if record.status in (R.FAIL, R.XFAIL):
        return R.Reproduction.REPRODUCES
    if record.status in (R.PASS, R.XPASS):
        return "passes"
    detail = record.error.message if record.error else record.reason
    return f"{record.status} ({R.one_line(str(detail))[:200]})"


def _plain_form(
    sub: S.Subgraph,
    specs: list[forms.InputSpec] | None,
    tensors: list[torch.Tensor],
    parent: FailingRun,
    directory: Path,
    found: R.Extraction,
) -> None:
    """The plain script, with the case's inputs: regenerated ones from its own seed first, then the values
    saved (`plain_inputs.pt` beside a case that regenerates its own), when a seed of its own does not show it."""
    emulation = found.case_injection if parent.config.inject else None
    why = inline_emulation.why_not(emulation) if emulation else None
    if why:
        found.plain_script_reason = why
        found.notes.append(f"plain script not written: {why}")
        return
    tolerance = parent.case.tolerances.get(parent.dtype) if parent.case.tolerances else None
    close = None if tolerance is None else (float(tolerance.rtol), float(tolerance.atol))
    # The run's own: the device's options (the NPU's `npu_backend`), the case's, the run's.
    options = dict(parent.record.compile_options)
    # Python source of each keyword, written from the values as `_case_text` writes them: never a case's `repr`.
    compile_kwargs: dict[str, str] = {}
    if parent.config.backend != "inductor":
        compile_kwargs["backend"] = _literal(str(parent.config.backend))
    if parent.config.compile_mode:
        compile_kwargs["mode"] = _literal(str(parent.config.compile_mode))
    elif options:
        compile_kwargs["options"] = _literal(options)
    docstring = [
        f"{found.kernel} of {parent.case.name} ({parent.mode}): eager against torch.compile.",
        "",
        f"Found by the harness: {parent.record.command}",
        f"Run: python {PLAIN_FILE} [device]   (AssertionError: the bug reproduces)",
    ]
    if parent.record.surrogate:
        where = f"Verified on the {parent.record.surrogate}: run it where the device is real to see it there."
        docstring.insert(3, where)
    if emulation:
        docstring += [
            "",
            f"Carries the emulation {emulation} inline (the Emulation section below; torch and Inductor "
            "only): it is what diverges, on this machine, not real hardware.",
            f"Run: python {PLAIN_FILE} [device] --without-emulation   (compiled matches eager)",
        ]
    path = directory / PLAIN_FILE
    choices = [(specs, forms.VALUES_FILE)] if specs is not None else [(None, forms.VALUES_FILE)]
    if specs is not None:
        choices.append((None, PLAIN_VALUES_FILE))
    for chosen, values_file in choices:
        if chosen is None and values_file == PLAIN_VALUES_FILE:
            torch.save(tensors, directory / PLAIN_VALUES_FILE)
        path.write_text(
            forms.plain_script(
                sub.code,
                sub.imports,
                chosen,
                docstring,
                compile_kwargs,
                close,
                parent.config.device,
                values_file,
                emulation,
            )
        )
        outcome = _run_plain(path, parent.config.device, emulated=emulation is not None)
        if outcome is None:
            found.plain_script, found.plain_script_injection = R.Reproduction.REPRODUCES, emulation
            return
        found.notes.append(f"plain script ({'regenerated' if chosen else 'saved'} inputs): {outcome}")
    found.plain_script = R.Reproduction.DOES_NOT_REPRODUCE
    _remove(directory, PLAIN_FILE, PLAIN_VALUES_FILE)


PLAIN_VALUES_FILE = "plain_inputs.pt"


def _run_plain(path: Path, device: str, emulated: bool = False) -> str | None:
    """Run the plain script's `main` here: None when it raises AssertionError (it reproduces) and, carrying an
    emulation, passes without it; else what it did."""
    spec = importlib.util.spec_from_file_location(f"harness_plain_{id(path):x}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        torch.compiler.reset()
        module.main(device)
    except AssertionError:
        return _passes_without_emulation(module, device) if emulated else None
    except Exception as exc:  # noqa: BLE001
        return f"failed to run ({type(exc).__name__}: {R.exception_line(exc)}), not kept"
    return "assert_close passes (the harness's verdict rules differ), not kept"


def _passes_without_emulation(module: Any, device: str) -> str | None:
    """None when the script's compiled call matches eager without its inline emulation, else why not."""
    try:
        torch.compiler.reset()
        module.main(device, emulated=False)
    except AssertionError:
        return "fails without its inline emulation too (the emulation is not what it shows), not kept"
    except Exception as exc:  # noqa: BLE001
        return f"failed to run without its emulation ({type(exc).__name__}: {R.exception_line(exc)}), not kept"
    return None


def _function(code: str, imports: list[str]) -> Any:
    namespace: dict[str, Any] = {"torch": torch}
    exec("\n".join(imports + [code]), namespace)  # our own generated code, from torch.fx
    return namespace["graph"]


def _remove(directory: Path, *names: str) -> None:
    for name in names:
        (directory / name).unlink(missing_ok=True)
