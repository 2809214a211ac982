"""The OpInfo case source: lazy loading, stable names, counts, layouts, the summary, and real runs on the CPU."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from harness import records as R
from harness.layout import is_non_overlapping, is_non_overlapping_and_dense
from harness.registry import Case, CaseSource, Program, Registry, load_registry
from harness.report.summary import console_lines, summarize
from harness.registry.selection import keyword_asks, wanted

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OP_DB_MODULE = "torch.testing._internal.common_methods_invocations"
needs_expecttest = pytest.mark.skipif(
    __import__("importlib").util.find_spec("expecttest") is None, reason="needs expecttest: pip install -e '.[opinfo]'"
)


def _python(code: str, env: dict | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


# Lazy loading.


def test_a_plain_registry_and_selection_never_import_op_db():
    out = _python(f"""
        import sys
        from harness.registry import load_registry
        registry = load_registry()
        assert any(s.name == "opinfo" for s in registry.case_sources)
        sizes = [len(registry.select()), len(registry.select(keyword="seed")), len(registry.select(tags=["upstream"])),
                 len(registry.select(keyword="not opinfo")), len(registry.select(["layernorm_gelu"]))]
        assert all(n > 0 for n in sizes[:2] + sizes[3:]), sizes
        assert not any(c.name.startswith("opinfo-") for c in registry.cases.values())
        print("{OP_DB_MODULE}" in sys.modules)
    """)
    assert out.strip() == "False"


def _source(**kw):
    return CaseSource(
        name="opinfo", prefix="opinfo-", tags=("opinfo", "ci"), generate=lambda full: [], lookup=lambda name: None, **kw
    )


@pytest.mark.parametrize(
    "expression, asks",
    [
        ("opinfo", True),
        ("opinfo and softmax", True),
        ("opinfo and not add", True),
        ("opinfo-add", True),
        ("not slow", True),
        ("seed or opinfo", True),
        ("seed", False),
        ("add", False),
        ("not opinfo", False),
        ("seed and not opinfo", False),
    ],
)
def test_a_keyword_loads_the_source_only_when_it_can_select_its_cases(expression, asks):
    assert keyword_asks(_source(), expression) is asks


def test_tags_and_full_load_the_source_by_the_documented_rule():
    registry = Registry()
    registry.cases["seed_case"] = Case("seed_case", build=lambda d: None, tags=("seed",))
    source, known = _source(), registry.known_tags()
    assert wanted(source, None, ["opinfo"], False, known)
    assert wanted(source, None, ["nn.functional.conv2d"], False, known)  # a tag no loaded case carries
    assert not wanted(source, None, ["seed"], False, known)
    assert not wanted(source, None, [], False, known)
    assert wanted(source, None, [], True, known)  # --full alone: the whole catalogue
    assert not wanted(source, "seed", [], True, known)


def test_an_unavailable_source_is_one_line_naming_the_extra():
    registry = Registry(
        case_sources=[_source(unavailable=lambda: "needs the expecttest package: pip install -e '.[opinfo]'")]
    )
    assert registry.select(tags=["opinfo"]) == []
    assert [str(e) for e in registry.errors] == [
        "cannot load cases from case source opinfo: needs the expecttest package: pip install -e '.[opinfo]'"
    ]


def test_opinfo_unavailable_without_expecttest(monkeypatch):
    import importlib.util

    from harness import opinfo

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "expecttest" else real(name, *a))
    assert "pip install -e '.[opinfo]'" in opinfo.unavailable()


@pytest.mark.parametrize("command", ["list", "run"])
def test_the_cli_says_why_opinfo_cases_are_missing(monkeypatch, capsys, tmp_path, command):
    """The selection loads the source: its reason is printed after it, not lost before it."""
    from harness.frontends.cli import EXIT_USAGE, main

    # The case modules load in a loader process: expecttest is hidden there by a sitecustomize it imports.
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(
        "import importlib.util\nreal = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'expecttest' else real(name, *a)\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")]))
    assert main([command, "--tag", "opinfo"]) == EXIT_USAGE
    assert "case source opinfo: needs the expecttest package" in capsys.readouterr().err


# Generation.


@pytest.fixture(scope="module")
def registry():
    if __import__("importlib").util.find_spec("expecttest") is None:
        pytest.skip("needs expecttest: pip install -e '.[opinfo]'")
    return load_registry()


@pytest.fixture(scope="module")
def ci_cases(registry):
    """The static cases of the ci sample (the dynamic axis has its own test)."""
    return [c for c in registry.select(tags=["opinfo"]) if not c.always_dynamic]


@pytest.fixture(scope="module")
def full_cases(registry):
    return [c for c in registry.select(tags=["opinfo"], include_full=True) if not c.always_dynamic]


def test_the_dynamic_axis_repeats_static_cases_under_a_suffix(registry, ci_cases):
    dynamic = [c for c in registry.select(tags=["opinfo"]) if c.always_dynamic]
    static = {c.name: c for c in ci_cases}
    assert 10 <= _runs(dynamic) <= 40
    for case in dynamic:
        twin = static[case.name.removesuffix("-dynamic")]
        assert case.tags == (*twin.tags, "dynamic") and (case.dtypes, case.modes) == (twin.dtypes, twin.modes)


def _runs(cases):
    return sum(len(c.dtypes) * len(c.modes) for c in cases)


def test_the_ci_sample_is_about_200_runs_one_case_per_op_every_layout(ci_cases):
    from harness.opinfo.layouts import LAYOUTS

    assert 190 <= _runs(ci_cases) <= 210
    ops = [c.tags[-3] for c in ci_cases]
    assert len(set(ops)) == len(ops) >= 100
    assert all(c.size == "ci" and "ci" in c.tags and c.tags[0] == "opinfo" for c in ci_cases)
    layouts = {layout: sum(c.tags[-2] == layout for c in ci_cases) for layout in LAYOUTS}
    assert min(layouts.values()) >= 15, layouts


def test_the_full_sweep_lists_at_least_5000_runs_of_300_ops(full_cases, ci_cases):
    assert _runs(full_cases) >= 5000
    assert len({c.tags[1] for c in full_cases}) >= 300
    ci_names = {c.name for c in ci_cases}
    assert ci_names <= {c.name for c in full_cases}
    assert all(c.size == ("ci" if c.name in ci_names else "full") for c in full_cases)


def test_names_are_stable_identifiers_that_parse_back(full_cases):
    from harness.opinfo import catalog as C

    names = [c.name for c in full_cases]
    assert len(names) == len(set(names))
    for case in full_cases[::97]:
        op, dtype, index, layout = C.parse_name(case.name)
        assert C.case_name(op, dtype, index, layout) == case.name
        assert case.dtypes == (dtype,) and layout in case.tags
        assert C.op_key(op) in case.tags


def _fingerprint(names):
    """What another process would make of these cases: names, modes and the exact input values and layouts."""
    return f"""
        import hashlib, json, sys, torch
        from harness.registry import load_registry
        registry = load_registry()
        out = {{"ci": [c.name for c in registry.select(tags=["opinfo"]) if not c.always_dynamic]}}
        for name in {names!r}:
            case = registry.cases[name]
            program = case.build(case.dtypes[0])
            digest = hashlib.sha256()
            for t in program.inputs:
                digest.update(str((tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)).encode())
                digest.update(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
            out[name] = [case.size, list(case.modes), digest.hexdigest()]
        print(json.dumps(out))
    """


def test_generation_is_deterministic_across_processes(ci_cases):
    names = [c.name for c in ci_cases[:12:3]] + [c.name for c in ci_cases if c.tags[-2] in ("gapped", "overlapping")][
        :2
    ]
    first = json.loads(_python(_fingerprint(names)))
    second = json.loads(_python(_fingerprint(names), env={"PYTHONHASHSEED": "123"}))
    assert first == second
    assert first["ci"] == [c.name for c in ci_cases]  # this process made the same sample


def _named(cases, op, layout, dtype="float32"):
    return next(c.name for c in cases if c.tags[1] == op and layout in c.tags and c.dtypes[0] == getattr(torch, dtype))


def test_a_case_is_looked_up_by_name_without_generating_the_others(full_cases, ci_cases):
    name = _named([c for c in full_cases if c.size == "full"], "add", "gapped")
    out = _python(f"""
        from harness.opinfo import catalog as C
        from harness.registry import load_registry
        registry = load_registry()
        case = registry.cases["{name}"]  # what a spawned worker does
        print(case.name, case.size, C.samples.cache_info().currsize < 200)
        assert registry.lookup("{name}".replace("-gapped", "-nonsense")) is None
        assert registry.lookup("opinfo-add-float32-s99-gapped") is None
    """)
    assert out.split() == [name, "full", "True"]
    assert load_registry().cases[ci_cases[0].name].size == "ci"


def test_a_declaration_for_every_op_reaches_each_case_but_names_no_issue_of_its_own(ci_cases):
    # cases/opinfo.py declares seed 000's narrowing and the two widened loads' over-reads by mechanism, for every op.
    for case in ci_cases:
        mechanisms = {k.mechanism for k in case.known_failures}
        assert {"launcher-narrowing", "select-lane-load", "extract-slice-load"} <= mechanisms, case.name
    plain = [c for c in ci_cases if all(k.mechanism for k in c.known_failures)]
    assert plain and all(c.issue is None for c in plain)  # (an op's own declaration names its issue)


# The catalogue remembered on disk.

_SELECT_AND_SAY_WHAT_WAS_IMPORTED = f"""
    import json, sys
    from harness.registry import load_registry
    registry = load_registry()
    ci = [c for c in registry.select(tags=["opinfo"]) if not c.always_dynamic]  # the dynamic axis: its own test
    full = [c for c in registry.select(tags=["opinfo"], include_full=True) if not c.always_dynamic]
    print(json.dumps({{"op_db": "{OP_DB_MODULE}" in sys.modules, "compiler": "torch._inductor" in sys.modules,
                      "ci": [[c.name, c.size, list(c.tags), list(c.modes), c.description] for c in ci],
                      "full": len(full), "known": sum(bool(c.known_failures) for c in full)}}))
"""


@pytest.mark.nightly(reason='builds the full OpInfo catalogue twice in fresh processes (40 s)')
@needs_expecttest
def test_a_second_selection_reads_the_catalogue_from_disk_without_op_db(ci_cases, full_cases, tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    first = json.loads(_python(_SELECT_AND_SAY_WHAT_WAS_IMPORTED, env=env))
    assert first["op_db"] and len(list(tmp_path.glob("harness-opinfo-catalogue-*.json"))) == 1
    second = json.loads(_python(_SELECT_AND_SAY_WHAT_WAS_IMPORTED, env=env))
    assert not second["op_db"] and not second["compiler"]
    # The same cases as made from op_db here: names, sizes, tags, modes, descriptions, known failures.
    assert second == {**first, "op_db": False, "compiler": False}
    assert [c[0] for c in second["ci"]] == [c.name for c in ci_cases]
    assert second["ci"][5] == [
        ci_cases[5].name,
        "ci",
        list(ci_cases[5].tags),
        list(ci_cases[5].modes),
        ci_cases[5].description,
    ]
    assert second["full"] == len(full_cases) and second["known"] == sum(bool(c.known_failures) for c in full_cases)


@pytest.mark.nightly(reason='builds the full OpInfo catalogue in a fresh process (45 s)')
@needs_expecttest
def test_a_worker_looks_remembered_cases_up_without_probing_and_loads_op_db_before_the_clock(full_cases, tmp_path):
    """A worker's lookup reads the file (no sample drawn or probed); `prepare` then loads op_db, which the
    worker calls before a case's clock starts, and the case builds as one made from op_db."""
    name = _named([c for c in full_cases if c.size == "full"], "add", "gapped")
    made_here = next(c for c in full_cases if c.name == name)
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path)}
    _python(_SELECT_AND_SAY_WHAT_WAS_IMPORTED, env=env)  # the parent's selection writes the file
    out = json.loads(
        _python(
            f"""
        import json, sys
        from harness.opinfo import catalog as C
        from harness.registry import load_registry
        registry = load_registry()
        case = registry.lookup("{name}")
        looked_up = ["{OP_DB_MODULE}" in sys.modules, C.samples.cache_info().currsize]
        registry.prepare(case)
        prepared = "{OP_DB_MODULE}" in sys.modules
        program = case.build(case.dtypes[0])
        print(json.dumps({{"looked_up": looked_up, "prepared": prepared, "size": case.size,
                          "description": case.description, "inputs": [list(t.shape) for t in program.inputs]}}))
    """,
            env=env,
        )
    )
    assert out["looked_up"] == [False, 0] and out["prepared"]
    assert (out["size"], out["description"]) == ("full", made_here.description)
    assert out["inputs"] == [list(t.shape) for t in made_here.build(made_here.dtypes[0]).inputs]


@needs_expecttest
def test_an_unreadable_or_foreign_catalogue_file_is_made_again(ci_cases, tmp_path, monkeypatch):
    from harness.opinfo import remembered

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    for content in (
        "{not json",
        json.dumps({"key": "another torch", "ci": [["nonsense"]]}),
        json.dumps({"key": remembered._key(), "ci": [{"op_piece": "add"}]}),
    ):
        with open(remembered.path(), "w") as handle:
            handle.write(content)
        remembered.ci_sample.cache_clear()
        remembered._on_disk.cache_clear()
        assert [f.entry.name for f in remembered.ci_sample()] == [c.name for c in ci_cases]
        with open(remembered.path()) as handle:
            assert json.load(handle)["key"] == remembered._key()
    remembered.ci_sample.cache_clear()
    remembered._on_disk.cache_clear()


def test_the_catalogue_file_is_named_for_torch_and_the_catalogue_code(monkeypatch, tmp_path):
    from harness.opinfo import remembered

    assert os.path.join(os.path.dirname(remembered.__file__), "catalog.py") in remembered._SOURCES
    here = remembered.path()
    remembered._key.cache_clear()
    try:
        monkeypatch.setattr(torch, "__version__", "2.99.0+other")
        assert remembered.path() != here
        monkeypatch.undo()
        remembered._key.cache_clear()
        assert remembered.path() == here
        # An edit to the catalogue's code names another file.
        source = tmp_path / "catalog.py"
        source.write_text("SAMPLES = 1\n")
        monkeypatch.setattr(remembered, "_SOURCES", [str(source)])
        remembered._key.cache_clear()
        before = remembered.path()
        source.write_text("SAMPLES = 2\n")
        remembered._key.cache_clear()
        assert remembered.path() != before
    finally:
        remembered._key.cache_clear()


def test_the_cache_directory_is_inductors_without_importing_the_compiler():
    out = json.loads(
        _python("""
        import json, os, sys
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        from harness.inductor_compat import inductor_cache_dir
        import tempfile
        os.chdir(tempfile.mkdtemp())  # Inductor makes the relative folder it is asked for: not in the checkout
        mine = [inductor_cache_dir()]
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = "relative-cache"
        mine.append(inductor_cache_dir())
        compiler = "torch._inductor" in sys.modules
        from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir
        print(json.dumps({"mine": mine, "inductor": [default_cache_dir(), cache_dir()], "compiler": compiler}))
    """)
    )
    assert out["mine"] == out["inductor"] and not out["compiler"]


# Layouts.


def _primary(case):
    return case.build(case.dtypes[0]).inputs[0]


@pytest.mark.parametrize("layout", ["contiguous", "permuted", "gapped", "broadcast", "storage_offset", "overlapping"])
def test_layouts_have_the_strides_they_declare(full_cases, layout):
    from harness.opinfo.layouts import OFFSET

    chosen = [c for c in full_cases if c.tags[-1 if c.tags[-1] != "ci" else -2] == layout][::250][:8]
    assert chosen
    for case in chosen:
        tensors = [t for t in case.build(case.dtypes[0]).inputs if isinstance(t, torch.Tensor)]
        sized = [t for t in tensors if sum(n > 1 for n in t.shape) >= 1]
        if layout == "contiguous":
            assert all(t.is_contiguous() for t in tensors), case.name
        elif layout == "permuted":
            assert any(is_non_overlapping_and_dense(t) and not t.is_contiguous() for t in sized), case.name
        elif layout == "gapped":
            assert any(is_non_overlapping(t) and not is_non_overlapping_and_dense(t) for t in sized), case.name
        elif layout == "storage_offset":
            assert any(t.storage_offset() == OFFSET and t.is_contiguous() for t in tensors), case.name
        elif layout == "broadcast":
            first = tensors[0]
            assert any(s == 0 and n > 1 for n, s in zip(first.shape, first.stride())), case.name
            assert all(is_non_overlapping(t) for t in tensors[1:]), case.name
        else:
            assert not is_non_overlapping(tensors[0]) and all(is_non_overlapping(t) for t in tensors[1:]), case.name


def test_aliasing_layouts_only_where_the_op_does_not_write(full_cases):
    from harness.opinfo import catalog as C

    writers = {e.op_piece for e in C.full_catalogue() if C.probe(e.op_piece, e.dtype, e.index).writes}
    assert "_native_batch_norm_legit" in writers  # updates its running stats in place
    aliasing = [c for c in full_cases if {"broadcast", "overlapping"} & set(c.tags)]
    assert aliasing
    for case in aliasing:
        op, dtype, index, _ = C.parse_name(case.name)
        assert not C.probe(C.name_piece(op), dtype, index).writes, case.name


def test_a_writing_op_gets_no_aliasing_layout():
    from harness.opinfo import catalog as C

    index = next(i for i in range(C.DRAWN) if "overlapping" in C.layouts_of("add", torch.float32, i, C.Probe()))
    layouts = C.layouts_of("add", torch.float32, index, C.Probe(writes=True))
    assert "overlapping" not in layouts and "broadcast" not in layouts and "gapped" in layouts


def test_skips_carry_reasons():
    from harness.opinfo import catalog as C

    skips = []
    for piece in ("bernoulli", "nonzero", "empty_like", "resize_", "equal"):
        op = C.ops_by_piece()[piece]
        for dtype in C.dtypes_of(op)[:1]:
            C.entries_of(op, dtype, skips)
    reasons = " | ".join(f"{s.what}: {s.reason}" for s in skips)
    for expected in ("random", "data-dependent", "undefined", "intentionally not handled", "equal"):
        assert expected in reasons, reasons


def test_an_op_returning_uninitialized_memory_is_skipped_without_the_opinfo_flag(monkeypatch):
    # torch 2.11's OpInfo does not mark empty_like and its kin has_nondeterministic_output: on a GPU their two
    # eager runs then differed, and the runs were reported nondeterministic instead of skipped as undefined.
    from harness.opinfo import catalog as C

    for piece in ("empty_like", "new_empty_strided"):
        op = C.ops_by_piece()[piece]
        monkeypatch.setattr(op, "has_nondeterministic_output", False)
        C.probe.cache_clear()
        skips = []
        assert C.entries_of(op, torch.float32, skips) == []
        assert skips and all("uninitialized memory" in s.reason for s in skips), skips
    C.probe.cache_clear()
    assert C.probe("zeros_like", torch.float32, 0).skip is None  # an allocation that is then written


# The summary (records only).


def _record(case, status, dtype="float32", layout="gapped", op="add", error=None, stats=None, ci=False):
    tags = ["opinfo", op, layout] + (["ci"] if ci else [])
    record = R.CaseResult(
        case=case,
        device="cpu",
        backend="inductor",
        dtype=dtype,
        mode="inference",
        status=R.status_of(status),
        tags=tags,
        injection_stats=stats,
    )
    if status == "fail":
        record.outputs = [
            R.OutputComparison(
                name="out0",
                dtype=dtype,
                shape=[4],
                numel=4,
                bad=2,
                bad_pct=50.0,
                max_abs=1.0,
                max_rel=1.0,
                passed=False,
                rule="tolerance",
            )
        ]
    if error:
        record.error = R.ErrorInfo("RuntimeError", error)
        record.stage = "compile"
    return record


def test_the_summary_counts_per_op_and_layout_and_groups_failures_by_op():
    records = [
        _record(f"opinfo-add-float32-s{i}-gapped", "fail", stats=R.InjectionStats(non_dense_args=1, converted_args=2))
        for i in range(300)
    ]
    records += [
        _record("opinfo-add-int64-s0-permuted", "pass", dtype="int64", layout="permuted"),
        _record(
            "opinfo-max-reduction_with_dim-float32-s0-overlapping",
            "error",
            op="max.reduction_with_dim",
            layout="overlapping",
            error="boom",
        ),
        _record("opinfo-sin-float32-s0-contiguous", "skip", op="sin", layout="contiguous", ci=True),
        _record("opinfo-cos-float32-s0-contiguous", "xfail", op="cos", layout="contiguous"),
        R.CaseResult(
            case="seed_x",
            device="cpu",
            backend="inductor",
            dtype="int64",
            mode="inference",
            status=R.FAIL,
            tags=["seed"],
        ),
    ]
    summary = summarize(records)
    assert summary.total == 304
    assert {c.name: c.counts["fail"] for c in summary.ops}["add"] == 300
    assert {c.name: (c.counts["fail"], c.counts["pass"]) for c in summary.layouts}["gapped"] == (300, 0)
    assert [g.op for g in summary.failures] == ["add", "max.reduction_with_dim"]
    lines = console_lines(records)
    add_lines = [line for line in lines if line.strip().startswith("add:")]
    assert (
        len(add_lines) == 1 and "300 fail" in add_lines[0] and "non-dense 64-bit arg reached a kernel" in add_lines[0]
    )
    assert any(line.startswith("overlapping") for line in lines)
    assert summarize([records[-1]]) is None and console_lines([records[-1]]) == []

    from harness.report import render_html

    page = render_html(records, {})
    assert page.index('id="opinfo-summary"') < page.index('id="summary"')
    assert page.count("<td class=\"mono\">add</td>") >= 1 and "max.reduction_with_dim" in page
    assert 'id="opinfo-summary"' not in render_html([records[-1]], {})


# Real runs on the CPU.

REAL = [
    ("add", "gapped", "float32"),
    ("index_select", "permuted", "float32"),
    ("cumsum", "overlapping", "int64"),
    ("softmax", "broadcast", "float32"),
    ("gather", "gapped", "bfloat16"),
]


@pytest.mark.parametrize("op, layout, dtype", REAL)
def test_real_opinfo_cases_pass_on_cpu(full_cases, op, layout, dtype):
    from harness.run.case import RunConfig, run_case

    case = load_registry().cases[_named(full_cases, op, layout, dtype)]
    for mode in case.modes:
        record = run_case(case, case.dtypes[0], mode, RunConfig())
        assert record.status == R.PASS, record.summary()


def test_the_float64_reference_of_an_op_with_a_dtype_argument_computes_in_float64(full_cases):
    # A float dtype among a sample's arguments fixed the float64 run's precision: `linspace(..., dtype=bfloat16)`
    # gave a bfloat16 "reference" equal to eager, and on CUDA `_softmax_backward_data(..., input_dtype=float16)`
    # raised on float64 tensors, so the case was judged by tolerance alone.
    from harness.devices import get_device
    from harness.run.program import Session, materialize_inputs
    from harness.run.case import RunConfig, run_case
    from harness.run.sides import as_program

    for op, dtype in (("linspace", torch.bfloat16), ("_softmax_backward_data", torch.float16)):
        case = load_registry().cases[_named(full_cases, op, "contiguous", str(dtype).removeprefix("torch."))]
        program = as_program(case.build(dtype))
        inputs = materialize_inputs(program.inputs, program.kwargs, dtype, get_device("cpu"), 0)
        reference = Session(program.fn, inputs, "inference", get_device("cpu"), 0, float64=True).run()
        assert reference.values["out0"].dtype == torch.float64, case.name
        eager = Session(program.fn, inputs, "inference", get_device("cpu"), 0).run()
        assert eager.values["out0"].dtype == dtype  # the program itself is unchanged
        record = run_case(case, dtype, "inference", RunConfig(reference="fp64"))
        assert record.status == R.PASS and record.reference == "eager+fp64", record.summary()


def test_a_generated_case_runs_by_name_in_a_worker_process(full_cases, tmp_path):
    # Workers import only the module a case comes from; a generated case has none and is looked up by name.
    name = _named(full_cases, "add", "gapped", "float32")
    done = subprocess.run(
        [sys.executable, "-m", "harness", "run", name, "--mode", "inference", "--json", str(tmp_path / "r.json")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (record,) = json.loads((tmp_path / "r.json").read_text())["records"]
    assert (record["case"], record["status"]) == (name, "pass")


@needs_expecttest
def test_an_input_eager_rejects_is_a_skip_with_the_reason():
    from harness.run.case import RunConfig, run_case

    def reject(x):
        raise RuntimeError("not on this layout")

    case = Case("opinfo-reject", build=lambda d: Program(reject, [torch.ones(3)]), generated=True)
    record = run_case(case, torch.float32, "inference", RunConfig())
    assert record.status == R.SKIP and "not on this layout" in record.reason


def test_a_sample_dynamo_compiles_nothing_of_is_a_skip_with_the_reason():
    from harness.run.case import RunConfig, run_case

    def data_dependent(x):
        return x.nonzero()

    generated = Case("opinfo-nothing", build=lambda d: Program(data_dependent, [torch.ones(3)]), generated=True)
    record = run_case(generated, torch.float32, "inference", RunConfig())
    assert record.status == R.SKIP and "Dynamo compiled nothing" in record.reason, record.summary()
    written = Case("nothing", build=lambda d: Program(data_dependent, [torch.ones(3)]))
    assert run_case(written, torch.float32, "inference", RunConfig()).status == R.ERROR  # a hand-written case


@needs_expecttest
def test_pytest_collects_the_ci_sample_and_not_for_other_selections():
    def collect(*args):
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "cases/opinfo.py", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        return [line for line in done.stdout.splitlines() if "::" in line]

    items = collect()
    static = [line for line in items if "dynamic" not in line]
    assert 190 <= len(static) <= 210 and all("opinfo-" in line for line in items)
    assert 10 <= len(items) - len(static) <= 40  # the dynamic axis's share of the ci sample
    assert collect("-k", "seed") == []


_draws = iter(range(10**6))


def _drifting(x):
    # Eager's result changes from run to run (as an op's seed outputs do): a value the seed does not decide.
    return x + next(_draws)


@pytest.mark.parametrize(
    "generated, status",
    [
        (True, R.SKIP),
        pytest.param(
            False, R.NONDETERMINISTIC, marks=pytest.mark.nightly(reason="a case process per eager run (28 s)")
        ),
    ],
)
def test_a_generated_sample_whose_eager_result_is_not_repeatable_is_skipped(generated, status):
    from harness.inputs import contiguous
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    case = Case(name="drifting", generated=generated, build=lambda d: Program(_drifting, [contiguous((4,))]))
    record = run_case(case, torch.float32, "inference", RunConfig())
    assert record.status == status
    if generated:
        assert "two eager runs differ (out0)" in record.reason and "not repeatable" in record.reason


def _unwritten(x):
    # An output the op never writes (flash attention's seed outputs without dropout, on CUDA): two plain eager runs
    # often agree on it, since the allocator hands the same block back.
    return x + torch.empty_like(x)


def test_a_generated_sample_whose_output_is_memory_never_written_is_skipped():
    from harness.inputs import contiguous
    from harness.registry import Case, Program
    from harness.run.case import RunConfig, run_case

    # 64 MiB: past malloc's largest mmap threshold, so each plain run gets fresh zeroed pages and the runs agree.
    case = Case(name="unwritten", generated=True, build=lambda d: Program(_unwritten, [contiguous((16, 1024, 1024))]))
    record = run_case(case, torch.float32, "inference", RunConfig())
    assert record.status == R.SKIP, (record.status, record.reason)
    assert "eager's result out0 holds memory no op wrote" in record.reason, record.reason
    assert "fill_uninitialized_memory" in record.reason


def test_memory_ops_allocate_is_filled_only_inside_the_block():
    from harness.run.sides import uninitialized_memory_filled

    before = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    with uninitialized_memory_filled():
        assert torch.empty(3).isnan().all()
        assert (torch.empty(2, dtype=torch.uint64) == torch.iinfo(torch.uint64).max).all()
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before


def test_an_op_decided_between_equal_values_gets_inputs_without_ties():
    # msort bfloat16 (8000 values, more than bfloat16 has integers for) and sort bool sorted equal values the
    # other way on CUDA: a tie, not a compiler bug.
    from harness.opinfo import catalog as C
    from harness.opinfo.skips import TIES

    for layout in ("contiguous", "permuted"):
        tensors, _ = C.laid_out("msort", torch.bfloat16, 0, layout, seed=1)
        values = tensors[0].detach().reshape(-1)
        assert values.unique().numel() == values.numel() == 8000 and values.isfinite().all()
    original, _, _ = C.flatten(C.samples("msort", torch.bfloat16)[0])
    # The order is the sample's own: equal values ordered by position.
    assert torch.equal(
        torch.argsort(tensors[0].detach().reshape(-1).float(), stable=True),
        torch.argsort(original[0].reshape(-1).float(), stable=True),
    )
    skips = []
    assert C.entries_of(C.ops_by_piece()["sort"], torch.bool, skips) == [] and skips[0].reason == TIES
    layouts = {e.layout for e in C.entries_of(C.ops_by_piece()["sort"], torch.float32)}
    assert layouts and not layouts & {"broadcast", "overlapping"}  # their repeated elements are ties
    assert {"broadcast", "overlapping"} & {e.layout for e in C.entries_of(C.ops_by_piece()["sin"], torch.float32)}


def test_rounding_decisions_widen_one_op_and_dtype_and_say_why():
    import cases.opinfo as declared

    source = declared.CASE_SOURCES[0]
    tan16 = source.lookup("opinfo-tan-float16-s0-storage_offset")
    assert tan16.tolerances[torch.float16].rtol == 2e-3 and "three float16 roundings" in tan16.description
    assert source.lookup("opinfo-tan-float32-s0-storage_offset").tolerances == {}


@pytest.mark.parametrize(
    "name, mode, declared",
    [
        ("opinfo-select_scatter-float32-s0-broadcast", "inference", True),
        ("opinfo-index_fill-float32-s4-permuted", "training", True),
        ("opinfo-fft_rfft-float32-s0-permuted", "inference", True),
        ("opinfo-fft_fft-float16-s0-permuted", "inference", False),  # complex32: passes there
        ("opinfo-as_strided_scatter-bool-s0-storage_offset", "inference", False),  # passes there: not declared
        ("opinfo-select_scatter-float32-s0-contiguous", "inference", False),
    ],
)
def test_cuda_declarations_cover_what_the_h200_showed(name, mode, declared):
    import cases.opinfo as cases

    case = cases.CASE_SOURCES[0].lookup(name)
    known = case.known_failure(
        False,
        device="cuda",
        backend="inductor",
        npu_backend=None,
        dtype=name.split("-")[2],
        mode=mode,
        emulation=None,
        torch="2.11.0+cu130",
    )
    assert (known is not None) == declared
    # Seen on CUDA only: CPU runs of these are not declared.
    assert (
        case.known_failure(
            False,
            device="cpu",
            backend="inductor",
            npu_backend=None,
            dtype=name.split("-")[2],
            mode=mode,
            emulation=None,
            torch="2.13.0+cpu",
        )
        is None
    )


_PRELOAD = """
import sys
from harness.isolation.case_process import CaseForker
from harness.opinfo import catalog

forker = CaseForker({"preload_sources": sys.argv[1] == "allowed"}, None, None, lambda: None)
forker._preload(sys.argv[2])
print(catalog.ops_by_piece.cache_info().currsize)
"""


@pytest.mark.parametrize(
    "allowed, origin, loaded",
    [
        ("allowed", "case source opinfo", 1),
        ("refused", "case source opinfo", 0),  # where an import may leave forks unusable (a GPU visible)
        ("allowed", "cases/opinfo.py", 0),  # a case module: its code is the author's, never the worker's to run
    ],
)
def test_the_worker_loads_opinfos_op_db_itself_once_so_no_case_process_loads_it(allowed, origin, loaded):
    result = subprocess.run(
        [sys.executable, "-c", _PRELOAD, allowed, origin], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) == loaded
