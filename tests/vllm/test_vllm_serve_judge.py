"""`vllm serve` (vLLM's OpenAI-compatible server, from .venv-vllm) on the tiny model as the endpoint
of an API judge: the real openai client against a real server, on 127.0.0.1. Slow (the server
starts an engine: about a minute on 2 cores), hence marked slow."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from vllm_testlib import needs_vllm

from engine import store
from engine.cli import main
from engine.testing import tiny_lm

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs_vllm]
KEY = "sk-vllm-serve-test-key-3141"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 420) -> None:
    req = urllib.request.Request(url + "/models", headers={"Authorization": f"Bearer {KEY}"})
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, "vllm serve exited before it was ready"
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise AssertionError(f"vllm serve not ready after {timeout_s} s")


def test_vllm_serve_is_an_api_judge_endpoint(tmp_path, monkeypatch):
    from tests.test_judge import make_judge_run

    folder = tmp_path / "tiny"
    m, t = tiny_lm(seed=3, hidden=128)
    m.save_pretrained(folder)
    t.save_pretrained(folder)
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(folder),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enforce-eager",
            "--api-key",
            KEY,
            "--served-model-name",
            "tiny-judge",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"},
        start_new_session=True,
        cwd=tmp_path,
    )
    try:
        _wait_ready(url, proc)
        db = tmp_path / "j.duckdb"
        make_judge_run(
            db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",)
        )  # 4 comparisons
        pf = tmp_path / "prompt.txt"
        pf.write_text("Say A, B or tie.")  # the char-level tiny model has 512 positions
        monkeypatch.setenv("VLLM_JUDGE_KEY", KEY)
        args = [
            "judge",
            "--db",
            str(db),
            "--run",
            "r1",
            "--judge",
            "openai:tiny-judge",
            "--base-url",
            url,
            "--api-key-env",
            "VLLM_JUDGE_KEY",
            "--max-new-tokens",
            "4",
            "--prompt-file",
            str(pf),
            "--concurrency",
            "4",
            "--out",
            str(tmp_path / "res.json"),
        ]
        assert main(args) == 0
        res = json.loads((tmp_path / "res.json").read_text())
        df = store.query_df(
            db,
            "SELECT raw, reported_model, prompt_tokens, completion_tokens, attempts, error "
            "FROM judgments",
        )
        assert res["n_judged_now"] == 4 == len(df) and df.error.isna().all() and (df.attempts == 1).all()
        assert (df.reported_model == "tiny-judge").all() and (df.prompt_tokens > 0).all()
        assert (df.completion_tokens <= 4).all() and df.raw.notna().all()
        assert main(args) == 0 and json.loads((tmp_path / "res.json").read_text())["n_judged_now"] == 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        log.close()
    assert KEY.encode() not in db.read_bytes()
