"""The torch release is checked before anything runs: too old is a usage error, newer than tested a warning."""

import pytest
import torch

from harness.frontends.cli import EXIT_USAGE, main
from harness.inductor_compat import torch_version_problem


@pytest.mark.parametrize(
    "version, fatal",
    [("2.5.1+cu121", True), ("2.6.0", None), ("2.13.0+cpu", None), ("2.14.0.dev20261101", False), ("3.0.0", False)],
)
def test_the_torch_version_is_checked_up_front(version, fatal):
    problem = torch_version_problem(version)
    assert (problem[0] if problem else None) == fatal
    if problem:
        assert version in problem[1]


def test_the_cli_refuses_a_torch_too_old_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(torch, "__version__", "2.4.0")
    assert main(["run", "relu_mlp", "--mode", "inference"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err == "error: torch 2.4.0 is older than 2.6, the oldest release the harness supports"
