"""A device or an injection from another package (entry points) works like a built-in one."""

import importlib.metadata
import textwrap

import pytest
import torch

from harness import extensions
from harness.devices import UnknownDeviceError, device_names, get_device
from harness.inject.launch import injection_names, parse_injection
from harness.registry import Case, Program
from harness.run.config import RunConfig
from harness.run.case import run_case

PLUGIN = '''
from harness.devices import Cpu
from harness.inject.launch import Injection, KernelFault

class PretendAccelerator(Cpu):
    """A CPU that says it is another device and adds a compile option, as a new backend's adapter would."""
    name = "pretend"

    def compile_options(self, config):
        return {"max_autotune": False}

SCALE_EVERYTHING = Injection("scale-everything", "multiplies every kernel output by 2",
                             lambda selector: KernelFault("scale", selector or "*"), takes_selector=True)
NOT_A_DEVICE = 42
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    (tmp_path / "harness_plugin_example.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    points = {
        extensions.DEVICE_GROUP: [
            ("pretend", "harness_plugin_example:PretendAccelerator"),
            ("broken", "harness_plugin_example:NOT_A_DEVICE"),
        ],
        extensions.INJECTION_GROUP: [("scale-everything", "harness_plugin_example:SCALE_EVERYTHING")],
    }
    monkeypatch.setattr(
        extensions,
        "declared",
        lambda group: {
            name: importlib.metadata.EntryPoint(name, value, group) for name, value in points.get(group, [])
        },
    )


def test_a_declared_device_is_listed_built_and_adds_its_compile_options(plugin):
    assert device_names()[:3] == ["cpu", "cuda", "npu"] and "pretend" in device_names()
    device = get_device("pretend")
    assert device.compile_options(RunConfig(device="pretend")) == {"max_autotune": False}
    with pytest.raises(UnknownDeviceError, match="is not a harness device"):
        get_device("broken")
    with pytest.raises(UnknownDeviceError, match="choose one of: cpu, cuda, npu, pretend, broken"):
        get_device("tpu")


def test_a_declared_injection_runs_like_a_built_in_one(plugin):
    assert "scale-everything" in injection_names()
    injection, selector = parse_injection("scale-everything")
    assert injection.summary.startswith("multiplies") and selector is None
    case = Case("plugin_relu", lambda dtype: Program(lambda x: torch.relu(x) * 2, [torch.ones(8)]))
    record = run_case(case, torch.float32, "inference", RunConfig(inject="scale-everything"))
    assert record.status == "fail" and record.emulation == "scale-everything"
    assert record.outputs[0].max_abs == pytest.approx(2.0)  # relu(1) * 2 doubled, against 2
