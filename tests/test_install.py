"""The package as a user installs it: a wheel, in a fresh environment, used from outside the checkout."""

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A fresh venv with the built wheel; torch and the other dependencies are borrowed from this environment
    (a path entry, not its .pth files: the checkout's editable install stays out)."""
    work = tmp_path_factory.mktemp("install")
    wheels = work / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(REPO)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {built.stderr.strip().splitlines()[-1:]}")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(wheels.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    elsewhere = work / "elsewhere"
    elsewhere.mkdir()
    return venv, elsewhere


def run(installed, *command):
    venv, elsewhere = installed
    return subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]], cwd=elsewhere, capture_output=True, text=True, timeout=600
    )


def test_the_installed_package_is_the_wheel_not_the_checkout(installed):
    where = run(installed, "python", "-c", "import harness; print(harness.__file__)").stdout
    assert "site-packages" in where and str(REPO) not in where


def test_the_console_script_lists_the_shipped_cases(installed):
    assert run(installed, "harness", "--help").returncode == 0
    listing = run(installed, "harness", "list", "--tag", "seed")
    assert listing.returncode == 0 and "seed_index_as_strided_view" in listing.stdout


def test_the_console_script_runs_a_shipped_case(installed):
    result = run(installed, "harness", "run", "relu_mlp", "--mode", "inference")
    assert result.returncode == 0 and "PASS  relu_mlp[float32-inference]" in result.stdout, result.stderr


def test_pytest_has_the_harness_options_and_collects_the_shipped_cases(installed):
    helped = run(installed, "python", "-m", "pytest", "--help")
    assert "--case-path" in helped.stdout and "--inject" in helped.stdout and "--device" in helped.stdout
    collected = run(
        installed, "python", "-m", "pytest", "--collect-only", "-q", "--harness-shipped-cases", "-k", "seed"
    )
    assert "seed_index_as_strided_view[int64-inference" in collected.stdout, collected.stdout[-2000:]


def test_every_subpackage_of_the_harness_is_in_the_wheel(installed):
    venv, elsewhere = installed
    wanted = sorted(
        "harness." + p.parent.relative_to(REPO / "harness").as_posix().replace("/", ".")
        for p in (REPO / "harness").glob("*/__init__.py")
    )
    probe = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n",
            *wanted,
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr.strip().splitlines()[-1:]


def test_a_checkout_that_is_not_installed_finds_its_cases():
    """Run from the checkout on `sys.path` alone (no site-packages: no editable install maps `harness_cases`),
    as on a machine the tree is copied to: the shipped cases are the checkout's `cases/`."""
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from harness.registry.shipped import SHIPPED_CASE_DIR; print(SHIPPED_CASE_DIR)"
    )
    found = subprocess.run(
        [sys.executable, "-S", "-c", script, str(REPO)], capture_output=True, text=True, cwd="/", timeout=60
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()) == REPO / "cases"
