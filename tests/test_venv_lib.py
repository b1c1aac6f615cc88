"""scripts/venv_lib.sh: the install scripts' one way to install into a venv. uv does the work when
it can be had, with pip's settings handed over (uv reads no pip configuration: without them it would
miss the local torch wheel and take PyPI's CUDA build); pip does it when uv cannot be installed or
INSTALLER=pip. A fake venv records what each would be asked: its bin/python answers
`-m pip config list` with fixed settings and logs every call, its bin/uv logs its arguments."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "scripts" / "venv_lib.sh"

CONFIG = """:env:.cert='/etc/certs/ca.crt'
:env:.find-links='/opt/wheels /opt/more'
global.cert='/etc/ignored.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/ignored'
"""


def _fake_venv(tmp_path: Path, uv_installable: bool) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "config.txt").write_text(CONFIG)
    log = tmp_path / "calls.log"
    uv_body = f'#!/bin/sh\necho "uv SSL_CERT_FILE=$SSL_CERT_FILE $*" >> {log}\n'
    (tmp_path / "uv.sh").write_text(uv_body)
    python = f"""#!/bin/sh
echo "python $*" >> {log}
case "$*" in
  "-m pip config list") cat {tmp_path / "config.txt"} ;;
  "-m pip install -q uv=="*) {"cp " + str(tmp_path / "uv.sh") + " " + str(venv / "bin" / "uv") + "; chmod +x " + str(venv / "bin" / "uv") if uv_installable else "exit 1"} ;;
  "-m pip show -q torchvision") exit 0 ;;
  "-m pip show -q"*) exit 1 ;;
esac
"""
    (venv / "bin" / "python").write_text(python)
    (venv / "bin" / "python").chmod(0o755)
    return venv


def _run(tmp_path: Path, script: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    full_env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "INSTALLER")}
    r = subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {LIB}; {script}"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**full_env, **env},
        cwd=tmp_path,
    )
    log = tmp_path / "calls.log"
    return r, log.read_text().splitlines() if log.exists() else []


def test_uv_gets_pips_settings_with_the_variables_first(tmp_path):
    venv = _fake_venv(tmp_path, uv_installable=True)
    r, calls = _run(tmp_path, f"venv_install {venv} -q -r requirements.txt")
    assert r.returncode == 0, r.stderr
    uv_calls = [c for c in calls if c.startswith("uv ")]
    assert uv_calls == [
        f"uv SSL_CERT_FILE=/etc/certs/ca.crt pip install --python {venv}/bin/python"
        " --index-strategy=unsafe-best-match"
        " --extra-index-url=file:///opt/pypi/simple --extra-index-url=file:///opt/pypi-more/simple"
        " --find-links=/opt/wheels --find-links=/opt/more"
        " --constraint=/etc/xdg/pip/constraints.txt -q -r requirements.txt"
    ]
    assert f"python -m pip install -q {_uv_pin()}" in calls  # uv itself came from pip, once
    assert calls.count("python -m pip config list") == 1  # pip's settings read once per install
    assert not any(c.startswith("python -m pip install -q -r") for c in calls)  # pip did not install


def test_pip_does_the_work_when_uv_cannot_be_had_or_installer_is_pip(tmp_path):
    venv = _fake_venv(tmp_path, uv_installable=False)
    r, calls = _run(tmp_path, f"venv_install {venv} -q torch==2.13.0")
    assert r.returncode == 0, r.stderr
    assert f"could not install {_uv_pin()} into {venv}; installing with pip" in r.stderr
    assert calls[-1] == "python -m pip install --no-compile -q torch==2.13.0"

    (tmp_path / "calls.log").unlink()
    venv = _fake_venv(tmp_path / "b", uv_installable=True)
    r, calls = _run(tmp_path / "b", f"venv_install {venv} -q torch==2.13.0", INSTALLER="pip")
    assert r.returncode == 0 and r.stderr == ""
    assert calls == ["python -m pip install --no-compile -q torch==2.13.0"]  # not even uv installed


def test_uninstall_skips_what_is_not_installed(tmp_path):
    venv = _fake_venv(tmp_path, uv_installable=True)
    r, calls = _run(tmp_path, f"venv_install {venv} x && venv_uninstall {venv} torchvision torchaudio")
    assert r.returncode == 0, r.stderr
    assert calls[-1] == f"uv SSL_CERT_FILE= pip uninstall -q --python {venv}/bin/python torchvision"
    (tmp_path / "calls.log").unlink()
    r, calls = _run(tmp_path, f"venv_uninstall {venv} torchaudio torchcodec")
    assert r.returncode == 0 and calls == [
        "python -m pip show -q torchaudio",
        "python -m pip show -q torchcodec",
    ]


def _uv_pin() -> str:
    line = next(x for x in LIB.read_text().splitlines() if x.startswith("UV_PIN="))
    return line.split("=", 1)[1]
