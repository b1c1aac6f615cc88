"""`engine serve --backend vllm` (engine/serving/vllm_worker.py) against the transformers backend's
server: the same requests to two tiny fp32 Llamas that differ a little.

(a) vLLM-served and engine-served choices of one model are the same tokens (the tiny model's logits
    agree between the backends to ~1e-5, far from any near-tie: tests/vllm/test_vllm_equivalence.py),
    with the same probabilities and model log-probabilities, for completions, chats, n > 1 and echo;
(b) the same request to the two models served by vLLM is coupled: both draw with the request's key
    (prompt id, repeat, seed), and they agree far more often than the transformers backend's
    `--noise independent` server's samples of the same two models.

Run with the vLLM venv: ``$VLLM_VENV/bin/python -m pytest tests/vllm -q -p no:xdist``.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from vllm_testlib import ENGINE_KWARGS, needs_vllm

from engine import models
from engine.serving.core import ServeConfig
from engine.serving.server import ServerThread
from engine.store.served import served_rows
from engine.testing import tiny_pair

pytestmark = [pytest.mark.vllm, pytest.mark.slow, needs_vllm]

PROMPTS = [f"Question {i}: name {'a thing ' * (i % 3)}please:" for i in range(6)]
CHATS = [[{"role": "user", "content": f"Say something about {w}."}] for w in ("cats", "rain")]


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def _ask(url: str, model: str) -> list[dict]:
    """The requests of the test, in a fixed order: (request kind, choices)."""
    out = []
    for p in PROMPTS:
        body = {"model": model, "prompt": p, "max_tokens": 6, "temperature": 1.0, "n": 3, "seed": 7}
        out.append(_post(url + "/completions", {**body, "logprobs": 2}))
    for m in CHATS:
        body = {"model": model, "messages": m, "max_tokens": 6, "temperature": 0.8, "n": 2}
        out.append(_post(url + "/chat/completions", body))
    # lm-eval's log-likelihood request: the prompt's log-probabilities
    echo = {"model": model, "prompt": PROMPTS[0], "max_tokens": 1, "temperature": 0, "echo": True}
    out.append(_post(url + "/completions", {**echo, "logprobs": 1}))
    return out


def _texts(resp: dict) -> list[str]:
    return [c.get("text", (c.get("message") or {}).get("content")) for c in resp["choices"]]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """Every answer of three servers: vLLM coupled, transformers coupled, transformers independent."""
    from engine.generation.vllm_backend import VllmBackend

    root = tmp_path_factory.mktemp("vllm-serve")
    folders = tiny_pair(root, hidden=128)  # head size 32: vLLM's CPU attention needs >= 32
    names = [f.name for f in folders]
    out: dict = {"db": root / "served.duckdb", "names": names}
    backends = [
        VllmBackend(str(f), dtype="float32", max_model_len=512, engine_kwargs=ENGINE_KWARGS)
        for f in folders
    ]
    try:
        cfg = ServeConfig(run_id="vllm", db=out["db"], seed=0, traces=True)
        with ServerThread(cfg, backends) as srv:
            out["vllm"] = {m: _ask(srv.url, m) for m in names}
    finally:
        for be in backends:
            be.close()
    lms = [models.load_model(str(f), device="cpu") for f in folders]
    for run, noise in (("hf", "coupled"), ("hf-ind", "independent")):
        cfg = ServeConfig(run_id=run, db=out["db"], seed=0, noise=noise, traces=True)
        with ServerThread(cfg, lms) as srv:
            out[run] = {m: _ask(srv.url, m) for m in names}
    return out


def test_vllm_and_transformers_served_choices_are_the_same_tokens(served):
    for m in served["names"]:
        for v, h in zip(served["vllm"][m], served["hf"][m]):
            assert _texts(v) == _texts(h)
            for cv, ch in zip(v["choices"], h["choices"]):
                lv, lh = cv.get("logprobs"), ch.get("logprobs")
                if lv and lv.get("token_logprobs"):
                    got = [x for x in lv["token_logprobs"] if x is not None]
                    want = [x for x in lh["token_logprobs"] if x is not None]
                    assert got == pytest.approx(want, abs=1e-4)
    rows = {run: served_rows(served["db"], run) for run in ("vllm", "hf")}
    key = ["model", "prompt_id", "repeat", "seed"]
    v = rows["vllm"].sort_values(key).reset_index(drop=True)
    h = rows["hf"].sort_values(key).reset_index(drop=True)
    assert v[key].equals(h[key])  # the same units, from the same requests
    assert [list(t) for t in v["token_ids"]] == [list(t) for t in h["token_ids"]]
    for pv, ph in zip(v["probs"], h["probs"]):
        assert list(pv) == pytest.approx(list(ph), abs=1e-4)


def test_two_models_served_by_vllm_are_coupled(served):
    a, b = served["names"]
    rows = served_rows(served["db"], "vllm")
    ra = rows[rows["model"] == a].set_index(["prompt_id", "repeat"])
    rb = rows[rows["model"] == b].set_index(["prompt_id", "repeat"])
    assert set(ra.index) == set(rb.index)  # the same requests: the same units ...
    assert (ra.loc[rb.index, "seed"].to_numpy() == rb["seed"].to_numpy()).all()  # ... and seeds

    def agreement(run: str) -> float:
        """Share of the sampled units (temperature > 0: the echo request left out) whose first tokens
        agree between the two models."""
        r = served_rows(served["db"], run)
        r = r[[json.loads(q)["temperature"] > 0 for q in r["request"]]]
        first = r.assign(t=[int(t[0]) for t in r["token_ids"]]).pivot_table(
            index=["prompt_id", "repeat"], columns="model", values="t", aggfunc="first"
        )
        assert len(first) == 6 * 3 + 2 * 2
        return float((first[a] == first[b]).mean())

    assert agreement("vllm") == agreement("hf")  # the same tokens (test above), the same agreement
    assert agreement("vllm") > agreement("hf-ind") + 0.2, (agreement("vllm"), agreement("hf-ind"))


def test_a_vllm_served_run_records_its_backend(served):
    from engine.store.runs import run_settings

    assert run_settings(served["db"], "vllm")["backend"] == "vllm"
    assert run_settings(served["db"], "hf")["backend"] == "hf"
