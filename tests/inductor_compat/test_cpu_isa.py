"""Inductor's CPU vector-ISA build check runs once per host, not once per worker process."""

import pytest

cpu_vec_isa = pytest.importorskip("torch._inductor.cpu_vec_isa")

from harness.inductor_compat import cpu_isa  # noqa: E402


class _Probe:
    """Stands in for Inductor's build-and-load check: counts its calls, answers `passes`."""

    def __init__(self, passes: bool):
        self.passes, self.calls = passes, []

    def __call__(self, isa, code: str) -> bool:
        self.calls.append((str(isa), code))
        return self.passes


def _new_process(monkeypatch, probe: _Probe) -> None:
    """What a fresh process sees: Inductor's own check_build, then the harness's wrapper installed over it."""
    monkeypatch.setattr(cpu_vec_isa.VecISA, "check_build", probe)
    cpu_isa.remember_vec_isa_checks()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_passing_check_is_not_probed_again_by_a_later_process(cache_dir, monkeypatch):
    isa, probe = cpu_vec_isa.VecAVX2(), _Probe(passes=True)
    _new_process(monkeypatch, probe)
    assert isa.check_build("int main() {}") is True
    assert isa.check_build("int main() {}") is True  # the wrapper reads the file; Inductor's cache is per process
    later = _Probe(passes=True)
    _new_process(monkeypatch, later)
    assert isa.check_build("int main() {}") is True
    assert (len(probe.calls), len(later.calls)) == (1, 0)
    assert (cache_dir / "harness-vec-isa-checks.json").is_file()


def test_another_isa_or_test_code_is_probed_on_its_own(cache_dir, monkeypatch):
    probe = _Probe(passes=True)
    _new_process(monkeypatch, probe)
    cpu_vec_isa.VecAVX2().check_build("int main() {}")
    cpu_vec_isa.VecAVX512().check_build("int main() {}")
    cpu_vec_isa.VecAVX2().check_build("int main() { return 0; }")
    assert len(probe.calls) == 3


def test_a_failed_check_is_not_remembered(cache_dir, monkeypatch):
    isa = cpu_vec_isa.VecAVX2()
    failing = _Probe(passes=False)
    _new_process(monkeypatch, failing)
    assert isa.check_build("int main() {}") is False
    retried = _Probe(passes=True)
    _new_process(monkeypatch, retried)
    assert isa.check_build("int main() {}") is True
    assert (len(failing.calls), len(retried.calls)) == (1, 1)


def test_an_unreadable_verdicts_file_means_probing_again(cache_dir, monkeypatch):
    (cache_dir / "harness-vec-isa-checks.json").write_text("[not a dict")
    probe = _Probe(passes=True)
    _new_process(monkeypatch, probe)
    assert cpu_vec_isa.VecAVX2().check_build("int main() {}") is True
    assert len(probe.calls) == 1
