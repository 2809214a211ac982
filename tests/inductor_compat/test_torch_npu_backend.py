"""Which backend torch_npu loaded, for each shape of its registry (read in its wheels on PyPI).

Each stand-in below keeps, of `torch_npu/utils/_dynamo.py` and `torch_npu/_inductor/__init__.py`, what decides
which backend loads: 2.7.1 to 2.11.0 (one backend, imported once), 2.12.0 (loaders `mlir` and `default`, the
resolution spelled out in its wrapper), 2.14.0 (`_resolve_npu_backend`, five loaders).
"""

import sys
import types
import warnings

import pytest

from harness.inductor_compat import torch_npu_backend

ONE_BACKEND = '''
import importlib, sys
class _InductorNpuRegistry:
    _has_inited = False
    @classmethod
    def register_inductor_npu(cls):
        if not cls._has_inited:
            importlib.import_module("torch_npu._inductor")
            cls._has_inited = True
    @classmethod
    def has_initialized(cls):
        return cls._has_inited or "torch_npu._inductor" in sys.modules
def register_inductor_npu():
    _InductorNpuRegistry.register_inductor_npu()
'''

SELECTING = '''
import importlib, os, sys
class _InductorNpuRegistry:
    _loaded_backend = None
    @classmethod
    def register_inductor_npu(cls):
        current = os.getenv("TORCHINDUCTOR_NPU_BACKEND", "default")
        if cls._loaded_backend != current:
            if "torch_npu._inductor" not in sys.modules:
                importlib.import_module("torch_npu._inductor")
            else:
                sys.modules["torch_npu._inductor"]._load_backend()
            cls._loaded_backend = current
def register_inductor_npu():
    _InductorNpuRegistry.register_inductor_npu()
class _NpuBackendScope:
    def __init__(self, backend):
        self.backend = backend
    def __enter__(self):
        self.old = os.environ.get("TORCHINDUCTOR_NPU_BACKEND")
        os.environ["TORCHINDUCTOR_NPU_BACKEND"] = self.backend
        register_inductor_npu()
    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("TORCHINDUCTOR_NPU_BACKEND", None)
        else:
            os.environ["TORCHINDUCTOR_NPU_BACKEND"] = self.old
'''

RESOLVING = (
    SELECTING
    + '''
def _resolve_npu_backend(selected_backend=None):
    if selected_backend not in (None, "", "default"):
        return selected_backend
    return os.getenv("TORCHINDUCTOR_NPU_BACKEND", "default")
'''
)

LOADERS = '''
import os, warnings
LOADED = []
def _load_triton_backend():
    if os.environ.get("NO_TRITON"):
        warnings.warn("triton-ascend is not installed. Please install it first.")
        return
    LOADED.append("default")
_BACKEND_LOADERS = {name: (lambda name=name: LOADED.append(name)) for name in NAMES}
_BACKEND_LOADERS["default"] = _load_triton_backend
def _load_backend():
    backend = os.getenv("TORCHINDUCTOR_NPU_BACKEND", "default")
    _BACKEND_LOADERS.get(backend, _load_triton_backend)()
    sys.modules["torch_npu.utils._dynamo"]._InductorNpuRegistry._loaded_backend = backend
_load_backend()
'''


def _module(name, source, **names):
    module = types.ModuleType(name)
    module.__dict__.update(names, sys=sys)
    exec(source, module.__dict__)
    return module


@pytest.fixture
def torch_npu(monkeypatch):
    """Install the stand-in of one release: `torch_npu(registry_source, loader_names)`."""
    monkeypatch.delenv("TORCHINDUCTOR_NPU_BACKEND", raising=False)
    monkeypatch.delitem(sys.modules, "torch_npu._inductor", raising=False)

    def install(registry, loaders=None):
        package = types.ModuleType("torch_npu")
        package.__path__ = []  # a package: `torch_npu._inductor` is looked for by the finder below
        monkeypatch.setitem(sys.modules, "torch_npu", package)
        monkeypatch.setitem(sys.modules, "torch_npu.utils", types.ModuleType("torch_npu.utils"))
        monkeypatch.setitem(sys.modules, "torch_npu.utils._dynamo", _module("torch_npu.utils._dynamo", registry))

        class Finder:  # `import torch_npu._inductor` loads the backend, as the real one does at import
            @staticmethod
            def find_spec(name, path=None, target=None):
                if name != "torch_npu._inductor":
                    return None
                import importlib.machinery

                source = LOADERS if loaders is not None else "LOADED = ['default']"

                class Loader:
                    def create_module(self, spec):
                        return None

                    def exec_module(self, module):
                        module.__dict__.update(NAMES=loaders or (), sys=sys)
                        sys.modules[name] = module
                        exec(source, module.__dict__)

                return importlib.machinery.ModuleSpec(name, Loader())

        monkeypatch.setattr(sys, "meta_path", [Finder, *sys.meta_path])

    return install


def test_a_release_with_one_backend_loads_default_whatever_is_asked(torch_npu):
    torch_npu(ONE_BACKEND)
    assert not torch_npu_backend.selects_backends()
    found = torch_npu_backend.load("triton_experimental")
    assert (found.asked, found.loaded) == ("triton_experimental", "default")
    assert found.mismatch == "npu_backend 'triton_experimental' was asked for, but torch_npu loaded 'default'"
    assert torch_npu_backend.load("default").mismatch is None


@pytest.mark.parametrize("registry", [SELECTING, RESOLVING], ids=["2.12.0", "2.14.0"])
def test_an_unknown_name_loads_default_and_the_record_says_so(torch_npu, registry):
    torch_npu(registry, ("mlir", "dvm", "ascendc", "triton_experimental"))
    assert torch_npu_backend.selects_backends()
    assert torch_npu_backend.load("triton_experimental").mismatch is None
    assert sys.modules["torch_npu._inductor"].LOADED == ["triton_experimental"]
    found = torch_npu_backend.load("nonesuch")  # torch_npu records the name asked for, and loads default
    assert sys.modules["torch_npu.utils._dynamo"]._InductorNpuRegistry._loaded_backend == "nonesuch"
    assert (found.loaded, sys.modules["torch_npu._inductor"].LOADED[-1]) == ("default", "default")
    assert "npu_backend 'nonesuch' was asked for, but torch_npu loaded 'default'" == found.mismatch


def test_the_v2_12_branch_has_no_triton_experimental(torch_npu):
    torch_npu(SELECTING, ("mlir",))
    assert torch_npu_backend.load("triton_experimental").loaded == "default"
    assert torch_npu_backend.load("mlir").mismatch is None


@pytest.mark.parametrize("registry", [SELECTING, RESOLVING], ids=["2.12.0", "2.14.0"])
def test_default_asked_while_the_variable_names_another_is_a_mismatch(torch_npu, registry, monkeypatch):
    torch_npu(registry, ("mlir", "triton_experimental"))
    monkeypatch.setenv("TORCHINDUCTOR_NPU_BACKEND", "mlir")
    found = torch_npu_backend.load("default")
    assert (found.asked, found.loaded) == ("default", "mlir")


def test_a_triton_backend_without_triton_ascend_loads_nothing(torch_npu, monkeypatch):
    torch_npu(RESOLVING, ("triton_experimental",))
    monkeypatch.setenv("NO_TRITON", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what torch_npu warns is taken in, not shown
        found = torch_npu_backend.load("default")
    assert found.loaded is None and found.warnings == ["triton-ascend is not installed. Please install it first."]
    assert found.mismatch == (
        "npu_backend 'default' was asked for, but torch_npu loaded none (torch_npu said: "
        "triton-ascend is not installed. Please install it first.)"
    )
