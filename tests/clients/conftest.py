"""Fixtures of the real-client tests: lm-evaluation-harness and Inspect AI, from their own venv
(scripts/install_clients.sh builds .venv-clients; $CLIENTS_VENV names another), against `engine serve`
subprocesses on two tiny models that differ a little (so that coupling shows), offline.

Every process here is started, waited for and stopped by these helpers, which also log each one's wall
time (:class:`Clock`), so that a slow client or server shows in the test output."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
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
CLIENT_TIMEOUT_S = 900


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


@dataclass
class Clock:
    """Wall times of the module's processes, in seconds since its start, and the CPU time of each
    subprocess (user + system, its own children included; measured as the growth of this process's
    reaped children's usage while it is reaped, so only one is reaped at a time):
    ``(what, start, wall, cpu or None)``."""

    t0: float = field(default_factory=time.perf_counter)
    load0: float = field(default_factory=lambda: os.getloadavg()[0])
    rows: list[tuple[str, float, float, float | None]] = field(default_factory=list)

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def add(self, what: str, start: float, wall: float, cpu: float | None = None) -> None:
        self.rows.append((what, start, wall, cpu))

    def table(self) -> str:
        head = "  start     wall      CPU  what"
        rows = sorted(self.rows, key=lambda r: r[1])
        return "\n".join(
            [head]
            + [
                f"{start:7.1f}  {wall:7.1f}  {'' if cpu is None else f'{cpu:7.1f}':>7}  {what}"
                for what, start, wall, cpu in rows
            ]
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """One `python -m engine serve` subprocess (:meth:`start`, :meth:`wait_ready`, :meth:`stop`)."""

    name: str
    proc: subprocess.Popen
    url: str  # .../v1
    log: Path
    started: float

    @classmethod
    def start(cls, clock: Clock, models_dir: Path, db: Path, run: str, noise: str, *extra: str):
        """Served from ``models_dir`` (the models are named as its folders are: ``tiny-a``)."""
        port = _free_port()
        log = db.parent / f"serve-{run}.log"
        models = sorted(p.name for p in models_dir.iterdir() if (p / "config.json").exists())
        cmd = [sys.executable, "-m", "engine", "serve", "--models", *models, "--port", str(port)]
        cmd += ["--db", str(db), "--run", run, "--noise", noise, "--threads", "1", *extra]
        env = {**os.environ, **OFFLINE, "PYTHONPATH": str(ROOT)}
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=models_dir, stdout=fh, stderr=subprocess.STDOUT, env=env)
        return cls(f"engine serve {run}", proc, f"http://127.0.0.1:{port}/v1", log, clock.now())

    def wait_ready(self, clock: Clock) -> None:
        deadline = time.time() + SERVER_START_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(self.url + "/models", timeout=5) as r:
                    if r.status == 200:
                        clock.add(
                            f"{self.name}: start until ready", self.started, clock.now() - self.started
                        )
                        return
            except OSError:
                time.sleep(0.5)
        raise AssertionError(
            f"{self.name} not ready after {SERVER_START_S} s:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self, clock: Clock) -> None:
        """SIGTERM (a graceful stop that flushes the store); it must end with status 0."""
        t, cpu = clock.now(), _children_cpu()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        clock.add(f"{self.name}: SIGTERM until exit", t, clock.now() - t)
        clock.add(
            f"{self.name}: whole life", self.started, clock.now() - self.started, _children_cpu() - cpu
        )
        assert self.proc.returncode == 0, (
            f"{self.name} ended with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Client:
    """One client command of the clients' venv, run from the project root (the tasks' relative
    paths), offline, with a private Hugging Face cache; output (stdout and stderr) in ``out/client.log``."""

    name: str
    proc: subprocess.Popen
    out: Path
    started: float

    @classmethod
    def start(cls, clock: Clock, name: str, args: list[str], out: Path, env: dict | None = None):
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
        exe = VENV / "bin" / args[0]
        with open(out / "client.log", "w") as fh:
            proc = subprocess.Popen(
                [str(exe), *args[1:]], cwd=ROOT, env=full_env, stdout=fh, stderr=subprocess.STDOUT
            )
        return cls(name, proc, out, clock.now())

    def finish(self, clock: Clock, timeout: float = CLIENT_TIMEOUT_S) -> Path:
        cpu = _children_cpu()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        clock.add(self.name, self.started, clock.now() - self.started, _children_cpu() - cpu)
        log = (self.out / "client.log").read_text()
        assert self.proc.returncode == 0, f"{self.name} failed ({self.proc.returncode}):\n{log[-6000:]}"
        return self.out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def lm_eval_timings(path: Path, clock: Clock, since: float) -> None:
    """The lm-eval driver's timings (tests/clients/lm_eval_driver.py) into ``clock`` (CPU: the run's
    thread's)."""
    for line in path.read_text().splitlines():
        r = json.loads(line)
        clock.add(f"lm-eval {r['name']}", since + r["start_s"], r["wall_s"], r["cpu_s"])


def lm_eval_results(folder: Path) -> dict:
    """The results file lm-eval wrote under ``folder`` (one run)."""
    found = sorted(folder.rglob("results_*.json"))
    assert len(found) == 1, f"expected one results file under {folder}, got {found}"
    return json.loads(found[0].read_text())
