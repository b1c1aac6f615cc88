"""Fixtures of the real-client tests: lm-evaluation-harness and Inspect AI, from their own venv
(scripts/install_clients.sh builds .venv-clients; $CLIENTS_VENV names another), against `engine serve`
subprocesses on two tiny models that differ a little (so that coupling shows), offline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT

VENV = Path(os.environ.get("CLIENTS_VENV", ROOT / ".venv-clients"))
needs_clients = pytest.mark.skipif(
    not (VENV / "bin" / "lm_eval").exists() or not (VENV / "bin" / "inspect").exists(),
    reason=f"the harness clients are not installed in {VENV}: run scripts/install_clients.sh",
)
TASKS = ROOT / "tests" / "data" / "clients"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SERVER_START_S = 300  # two tiny models on a busy 2-core machine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ready(url: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + SERVER_START_S
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(
                f"engine serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url + "/models", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"engine serve not ready after {SERVER_START_S} s:\n{log.read_text()[-3000:]}")


@contextmanager
def engine_serve(models: list[Path], db: Path, run: str, noise: str, *extra: str) -> Iterator[str]:
    """`python -m engine serve` in a subprocess; yields its base URL (.../v1); SIGTERM at the end (a
    graceful stop that flushes the store)."""
    port = _free_port()
    log = db.parent / f"serve-{run}.log"
    cmd = [sys.executable, "-m", "engine", "serve", "--models", *map(str, models), "--port", str(port)]
    cmd += ["--db", str(db), "--run", run, "--noise", noise, "--threads", "1", *extra]
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **OFFLINE}
        )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _ready(url, proc, log)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"engine serve ended with {proc.returncode}:\n{log.read_text()[-3000:]}"


def client(args: list[str], out: Path, env: dict | None = None, timeout: float = 600) -> Path:
    """Run one client command of the clients' venv from the project root (the tasks' relative
    paths); its output folder. Offline, with a private Hugging Face cache."""
    out.mkdir(parents=True, exist_ok=True)
    full_env = {
        **os.environ,
        **OFFLINE,
        "HF_HOME": str(out / "hf"),
        "INSPECT_LOG_DIR": str(out),
        "PYTHONWARNINGS": "ignore",
        **(env or {}),
    }
    full_env.pop("VIRTUAL_ENV", None)
    res = subprocess.run(
        [str(VENV / "bin" / args[0]), *args[1:]],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    (out / "client.log").write_text(res.stdout + "\n--- stderr\n" + res.stderr)
    assert res.returncode == 0, f"{args[0]} failed ({res.returncode}):\n{res.stderr[-4000:]}"
    return out


def lm_eval_results(folder: Path) -> dict:
    """The results file lm-eval wrote under ``folder`` (one run)."""
    found = sorted(folder.rglob("results_*.json"))
    assert len(found) == 1, f"expected one results file under {folder}, got {found}"
    return json.loads(found[0].read_text())
