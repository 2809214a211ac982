"""The glue between a run and the probe (`harness.probe`): the hooks localization calls (probe runs, stage
backends, graph passes turned off) and the capture of a localized launch for `--extract`."""

from __future__ import annotations

from typing import Any, Callable

import torch

from harness import records as R
from harness.inductor_compat.launches import KIND_FALLBACK
from harness.inject.launch import parse_injection
from harness.judge.results import Results
from harness.judge.sent_values import all_pass
from harness.run.config import RunConfig
from harness.run.contracts import breach_answer, first_breach
from harness.run.diagnoses import (
    emulated_casts_said,
    overlapping_compiled_results,
    reproduces,
    retyped_results,
)
from harness.run.errors import timed_stage, traceback_text
from harness.run.sides import CompiledSide, EagerSide, compile_kwargs, launches_through, loaded_afresh, rewriting_for


def localize_run(
    eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult
) -> R.Localization | None:
    """Localization's answer; None when a failing run's first probe run (its retry) passed."""
    from harness.probe import LocalizationHooks, NotReproduced, localize

    def passes(results: Results) -> bool:
        if all_pass(results, eager_side.expected, eager_side.references, eager_side.verdict):
            return True
        if eager_side.references is None and eager_side.reference_policy != "none" and eager_side.make_references():
            return all_pass(results, eager_side.expected, eager_side.references, eager_side.verdict)
        return False

    # A failing run's candidate matters only if it moves a result that failed. One that moves only results
    # that passed explains nothing of the failure, and its eager twin may be what is wrong there (a post-grad
    # graph that already differs from the program: docs/localization.md, "false blame").
    failed = {c.name for c in compiled.comparisons if not c.passed} or None

    def moved(results: Results) -> bool:
        return not all_pass(results, compiled.results, None, eager_side.verdict, only=failed)

    def with_passes(disabled: frozenset) -> tuple[bool, list]:
        return _compiled_with_passes(eager_side, compiled, config, record, disabled, passes)

    program = LocalizationHooks(
        rerun=lambda probe: _probe_run(eager_side, compiled, config, record, probe),
        passes=passes,
        moved=moved,
        diverges_under=lambda backend: diverges_under(eager_side, backend),
        injection=compiled.handler_factory,
        first_launches=compiled.first_launch,
        wrong_layout_or_dtype=(
            overlapping_compiled_results(eager_side, compiled) is not None or retyped_results(eager_side, compiled)
        ),
        graph_passes=lambda: with_passes(frozenset())[1],
        passes_without=lambda keys: with_passes(keys)[0],
        graphs_pass_eagerly=lambda: _graphs_pass_eagerly(compiled, passes),
        graphs_without=lambda dropped: _graphs_eagerly(compiled, dropped),
    )
    failing = record.facts.diverged
    if failing and (breach := first_breach(eager_side)) is not None:
        # Before any kernel or pass is blamed: a custom op that breaks its own schema is the answer.
        return R.Localization(
            answer=R.Answer.KERNEL,
            diverged=True,
            stage="inductor",
            kind=KIND_FALLBACK,
            name=breach.qualified,
            isolated=breach_answer(breach),
            reason=f"torch.library.opcheck on the arguments the program gave {breach.op}: {breach.text}",
        )
    try:
        found = localize(program, eager_side.verdict, failing)
        found.check(R.FAIL if failing else R.PASS)
        return _as_the_launcher_called_it(found, config)
    except NotReproduced:
        return None
    except Exception as exc:  # the probe's own failure must never cost the run its verdict
        if failing and not compiled.first_launch and not reproduces(eager_side, compiled):
            return None
        answer = R.Answer.UNLOCALIZED if failing else R.Answer.NONE
        return R.Localization(
            answer=answer,
            diverged=failing,
            reason=f"the probe itself failed ({type(exc).__name__}: {R.exception_line(exc)})",
            problems=[traceback_text(exc)[-2000:]],
        )


def _as_the_launcher_called_it(found: R.Localization, config: RunConfig) -> R.Localization:
    """Under an emulation of the NPU launcher, a kernel "wrong" on eager inputs ran as the emulated launcher
    handed it its arguments (64-bit ones narrowed at the launch boundary): the answer says the launcher is what
    diverges, not the kernel's code."""

    if not config.inject or found.answer != R.Answer.KERNEL or not (found.isolated or "").startswith("kernel is"):
        return found
    injection, _ = parse_injection(config.inject)
    if injection.narrows:
        # One statement, short enough for a console line: the evidence is in the record's own fields.
        found.isolated = (
            f"kernel as the emulated launcher ({injection.name}) calls it, its 64-bit arguments "
            "narrowed at the launch boundary, is wrong: the launcher is what diverges, not the kernel's "
            "code"
        )
    return found


def _probe_run(
    eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult, probe: Any
) -> Results:
    """One more run of the compiled program with `probe` installed."""
    probe.copy_inputs = probe.copy_inputs or compiled.copy_graph_inputs
    results = _probe_run_once(eager_side, compiled, config, record, probe)
    if probe.unannounced_writes and not probe.copy_inputs:
        compiled.copy_graph_inputs = True
        graphs = ", ".join(probe.unannounced_writes)
        probe.restart(copy_inputs=True)
        probe.problems.append(
            f"{graphs}: a graph input changed with no kernel launch writing it (an ATen call in "
            "the wrapper): probed again with every graph input copied up front"
        )
        results = _probe_run_once(eager_side, compiled, config, record, probe)
    return results


def _probe_run_once(
    eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult, probe: Any
) -> Results:
    from harness.inductor_compat import adopt_facts, capture_graphs, intercept_launches

    if compiled.first_launch:  # the probe judges the kernels' first launches
        compiled.session = loaded_afresh(eager_side, config, record)
    with capture_graphs(probe.observe_graph) as capture, intercept_launches(probe.on_launch):
        results = compiled.session.run()
    if capture.missing:
        # A cache entry made without lowering facts: lower every graph again, caches off, probe that,
        # and leave the facts beside the cached entries for the next run.
        torch.compiler.reset()
        lowering, compiled.session = compiled.compile_again()
        probe.restart()
        # The probe judges first launches: they are the probed run's (unless it is lowered at another size).
        if compiled.first_launch and lowering is compiled.session:
            with (
                rewriting_for(probe.inner),
                capture_graphs(probe.observe_graph, cold=True) as lowered,
                intercept_launches(probe.on_launch),
            ):
                results = compiled.session.run()
        else:
            # Loaded anew, the kernels launch for the first time: in a run of their own, not in the probed
            # run, which stands for a second run of the program (a bug of first launches must not come back
            # there, as it would not in a plain retry).
            # (A dynamic run's second size is lowered at the first, where it was compiled.)
            with (
                rewriting_for(probe.inner),
                capture_graphs(cold=True) as lowered,
                launches_through(compiled.handler_factory()),
            ):
                lowering.run()
            with capture_graphs(probe.observe_graph), intercept_launches(probe.on_launch):
                results = compiled.session.run()
        adopted = adopt_facts(capture, lowered)
        probe.problems.append(
            f"{len(capture.missing)} compiled graph(s) came from a cache entry without lowering "
            f"facts: lowered again with caches off (facts kept for {adopted} of them)"
        )
    return results


def _graphs_pass_eagerly(compiled: CompiledSide, passes: Callable[[Results], bool]) -> bool | None:
    """Whether the compiled program passes with each graph's post-grad FX graph run eagerly in place of its
    wrapper's `call` (no kernel, no glue); None when a graph has no lowering facts or the run raises."""
    results = _graphs_eagerly(compiled, {})
    return None if results is None else passes(results)


def _graphs_eagerly(compiled: CompiledSide, without: dict[str, list[str]]) -> Results | None:
    """The compiled program's results with each graph's post-grad FX graph run eagerly in place of its wrapper's
    `call`, without the nodes `without` names for its module (in-place updates nothing reads: `probe/dropped.py`);
    None when a graph has no lowering facts, a node cannot be left out, or the run raises."""
    import copy

    import torch.fx

    from harness.inductor_compat import capture_graphs

    graphs: dict[str, Any] = {}

    def graph_of(info: Any) -> Any:
        names = without.get(info.module_path)
        if not names:
            return info.gm
        if info.module_path not in graphs:
            graph = copy.deepcopy(info.gm.graph)
            for node in [n for n in graph.nodes if n.name in names]:
                if node.users:
                    raise ValueError(f"{node.name} is read: it cannot be left out")
                graph.erase_node(node)
            graphs[info.module_path] = torch.fx.GraphModule(info.gm, graph)
        return graphs[info.module_path]

    def eagerly(info: Any, args: list, call: Callable[[list], Any]) -> Any:
        outputs = graph_of(info)(*args)
        args.clear()  # as the wrapper's call does: the inputs it was handed are its to free
        return outputs

    try:
        with capture_graphs(eagerly) as capture:
            results = compiled.session.run()
    except Exception:  # noqa: BLE001 - no answer from this check: the answers that use it keep their others
        return None
    return None if capture.missing else results


def diverges_under(eager_side: EagerSide, backend: str) -> bool:
    """Whether the program compiled with a backend before Inductor's (CompilerBisector's `eager`, `aot_eager`,
    `aot_eager_decomp_partition`) diverges from eager: judged against the same eager results, without the
    injection (injections act on generated kernels). A backend that raises where eager did not diverges too."""
    from harness.inductor_compat import room_to_recompile

    try:
        with room_to_recompile():
            results = eager_side.compiled_session(backend).run()
    except Exception:  # noqa: BLE001 - eager ran this program: the stage's own failure is its divergence
        return True
    return not all(c.passed for c in eager_side.judge(results))


def _compiled_with_passes(
    eager_side: EagerSide,
    compiled: CompiledSide,
    config: RunConfig,
    record: R.CaseResult,
    disabled: frozenset,
    passes: Callable[[Results], bool],
) -> tuple[bool, list]:
    """The program compiled afresh (caches off: a cached graph runs no pass) with the Inductor graph passes of
    these keys turned off, run through the injection: whether it passes, and the passes that changed its graphs."""
    from harness.inductor_compat import (
        capture_graphs,
        compile_caches_off,
        distinct_inductor,
        graph_info,
        left_in_lowered,
        observing_passes,
        room_to_recompile,
    )

    if config.backend != "inductor":
        return False, []
    backend = distinct_inductor(
        compile_kwargs(config, record.compile_options).get("options", {}), eager_side.case.dynamic
    )
    with observing_passes(disabled) as changed, capture_graphs() as capture:
        try:
            with compile_caches_off(), room_to_recompile(), launches_through(compiled.handler_factory()):
                results = eager_side.compiled_session(backend).run()
        except Exception:  # noqa: BLE001 - a pass some other pass relies on, turned off: this set does not pass
            return False, list(changed)
    infos = [info for info in map(graph_info, capture.called) if info is not None]
    lowered = frozenset(node.name for info in infos for node in info.gm.graph.nodes)
    return passes(results), left_in_lowered(list(changed), lowered)


def captured_launch(eager_side: EagerSide, compiled: CompiledSide, config: RunConfig, record: R.CaseResult) -> Any:
    """The kernel a failing run's localization named (a wrong kernel, or where a drift starts), captured on one
    more probe run for `--extract` (None, with the reason noted on the record, when there is none)."""
    from harness.probe import KernelProbe

    found = record.first_divergent_kernel
    if found is None or found.answer not in (R.Answer.KERNEL, R.Answer.DRIFT) or found.launch_index is None:
        answer = "no localization" if found is None else f"the answer is {found.answer}, not a kernel"
        if found is not None and found.fallback_index is not None:
            answer = f"the answer is fallback call aten:{found.fallback_index}; fallback calls are not extracted yet"
        record.extracted = R.Reproduction.NOT_EXTRACTED
        record.warnings.append(f"--extract: nothing extracted ({answer}); extraction starts from a kernel")
        return None
    kept: list[Any] = []

    def capture(launch: Any, call: Any, label: str) -> None:
        from harness.extraction.capture import capture_launch

        kept.append(capture_launch(launch, call, label, found.buffer))

    probe = KernelProbe(
        eager_side.verdict,
        inner=compiled.handler_factory(),
        substitute=frozenset(),
        describe=frozenset({found.launch_index}),
        capture=capture,
        capture_at=found.launch_index,
        first_launches=compiled.first_launch,
    )
    with timed_stage("extract", record.timings, wrap=False):
        try:
            _probe_run(eager_side, compiled, config, record, probe)
        except Exception as exc:  # noqa: BLE001 - extraction must never cost the run its verdict
            record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
            record.warnings.append(
                f"--extract: capturing launch {found.launch_index} failed ({type(exc).__name__}: "
                f"{R.exception_line(exc)})"
            )
            return None
    if not kept:
        record.extracted = R.Reproduction.DOES_NOT_REPRODUCE
        record.warnings.append(f"--extract: launch {found.launch_index} was not seen again on the probe run")
    return kept[-1] if kept else None


def answer_elided_casts(
    found: R.Localization, casts: list, removed: bool = False, removers: list[str] | None = None
) -> R.Localization:
    """The answer for a run that passes with eager's rounding at casts emulated (`diagnoses.elided_casts`): the
    kernel that fuses the cast, where the probe named it (a drift, or a kernel), else a kernel answer of its own
    in place of a vaguer one (a stage, nothing localized); where a graph pass removed the casts (`removed`), the
    stage of the graph passes, since no kernel ever saw them, and the passes, where those that ignore the switch
    had to be turned off beside it (`removers`: one, or several where each removes them once those before it
    are off)."""
    switches = emulated_casts_said()
    kernels = [cast.kernel for cast in casts if cast.kernel]
    if removed:
        said = ", ".join(c.text() for c in casts)
        remover = " and ".join(removers or []) or None
        if remover:
            chain = "; each removes it where those before it are off" if len(removers) > 1 else ""
            which = f" ({remover}, which the switch does not stop{chain})"
            switches = emulated_casts_said(removers)
        elif found.graph_passes_changed:
            which = f" (passes that changed the graphs: {', '.join(found.graph_passes_changed)})"
        else:
            which = ""
        return R.Localization(
            answer=R.Answer.STAGE,
            diverged=True,
            stage="inductor_graph_passes",
            graph_pass=remover,
            reason=(
                f"the program's explicit cast {said} is not in the graphs Inductor lowered: "
                f"{'graph passes' if len(removers or []) > 1 else 'a graph pass'} removed it{which}, so no kernel "
                f"rounds where eager rounds; compiled with {switches} the program matches "
                "eager"
            ),
            launches=found.launches,
            graphs=found.graphs,
            reruns=found.reruns,
            compiles=found.compiles + 1,
            graph_passes_changed=found.graph_passes_changed,
        )

    def said(kernel: str) -> str:
        fused = ", ".join(c.text() for c in casts if c.kernel == kernel)
        return (
            f"it fuses the explicit cast {fused} and keeps the value unrounded where eager rounds it; compiled with "
            f"{switches} the program matches eager"
        )

    if found.answer in (R.Answer.KERNEL, R.Answer.DRIFT) and found.name in kernels:
        found.reason = found.isolated = said(found.name)
        return found
    if not kernels:
        return found  # (the diagnosis says which casts; no kernel to name)
    kernel = kernels[0]
    return R.Localization(
        answer=R.Answer.KERNEL,
        diverged=True,
        stage="inductor",
        name=kernel,
        nodes=[c.node for c in casts if c.kernel == kernel],
        isolated=said(kernel),
        reason=f"{said(kernel)} (the probe's answer: {found.line()})",
        launches=found.launches,
        graphs=found.graphs,
        reruns=found.reruns,
        compiles=found.compiles + 1,
    )
