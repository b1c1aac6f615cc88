"""engine serve on tiny models, in process: the served samples are the engine's, whatever the
concurrency or a restart; two models answering the same requests are coupled; the real ``openai``
client works, whole and streamed; echo gives the model's prompt log-probabilities; every bad
request gets one OpenAI-style error and the server stays up; overload is a 429 with Retry-After.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import threading
import time

import openai
import pytest
import torch

from engine.generation import GenConfig, generate_units
from engine.generation.prompts import chat_text
from engine.generation.types import Unit
from engine.serving import keys
from engine.serving.prefix import MIN_PREFIX
from engine.serving.seq import Seq
from engine.serving.worker import ModelWorker
from engine.store.served import served_rows
from tests.conftest import ROOT
from tests.serve_helpers import get, post, server, tiny


@pytest.fixture(scope="module")
def models():
    return tiny("tiny-a", 0), tiny("tiny-b", 0, nudge=0.02)


def stored(db, run="run") -> dict[tuple, tuple]:
    df = served_rows(db, run)
    return {(r.model, r.prompt_id, r.repeat): (tuple(r.token_ids), r.text) for r in df.itertuples()}


# ---------------------------------------------------------------------------- the engine's samples


def test_worker_equals_the_transformers_loop(models):
    """Choices arriving one by one into a running batch, with per-row settings, give the tokens of
    engine generate's loop (generate_units) for the same units."""
    lm = models[0]
    prompts = {f"p{i}": f"Answer in one word. Question {i}: {'ab' * i}?" for i in range(5)}
    units = [(p, r) for p in prompts for r in range(3)]
    cfg = GenConfig(temperature=0.9, top_k=20, max_new_tokens=10, batch_size=4, trace_top_k=0)
    ref = {(r.prompt_id, r.repeat): r for r in generate_units(lm, prompts, units, 7, cfg)}
    done, ev = [], threading.Event()

    def on_done(s):
        done.append(s)
        if len(done) == len(units):
            ev.set()

    w = ModelWorker("tiny-a", lm, "token_id", batch_size=4)
    try:
        for p, r in units:
            ids = lm.tokenizer(
                chat_text(lm.tokenizer, [{"role": "user", "content": prompts[p]}]),
                add_special_tokens=False,
            )["input_ids"]
            w.submit([Seq(Unit(p, r, 7), ids, 0.9, 20, 1.0, 10, on_done)])
            time.sleep(0.002)
        assert ev.wait(60)
    finally:
        w.close(10)
    # the prefill cache across requests was in play (serving/prefix.py): the chat template and the
    # instruction are the shared prefix, prefilled once
    pre = w.prefill
    assert pre is not None and len(pre.prefix_ids) >= MIN_PREFIX
    own = sum(len(x) for x in pre.tok_ids.values())
    assert pre.prefilled_tokens < own
    for s in done:
        g = ref[(s.unit.prompt_id, s.unit.repeat)]
        assert (s.ids, s.text, s.finish) == (list(g.token_ids), g.text, g.finish_reason)
        assert s.probs == pytest.approx(list(g.probs), abs=1e-6)


def test_a_served_chat_is_the_generated_unit(tmp_db, models):
    """The key of METHODS 1.6 and the engine's unit: the served choices are generate_units' for
    Unit(request prompt id, repeat, seed)."""
    lm = models[0]
    body = {
        "model": "tiny-a",
        "messages": [{"role": "user", "content": "2+2?"}],
        "max_tokens": 9,
        "temperature": 0.8,
        "n": 3,
        "seed": 11,
    }
    with server(tmp_db, [lm]) as srv:
        status, out, _ = post(srv.url + "/chat/completions", body)
    assert status == 200
    pid = keys.questions(body, "chat")[0].prompt_id
    assert [u["prompt_id"] for u in out["coupling"]["units"]] == [pid] * 3
    ref = generate_units(
        lm,
        {pid: "2+2?"},
        [(pid, r) for r in range(3)],
        11,
        GenConfig(temperature=0.8, max_new_tokens=9, trace_top_k=0),
    )
    assert [c["message"]["content"] for c in out["choices"]] == [g.text for g in ref]
    assert stored(tmp_db) == {("tiny-a", pid, g.repeat): (g.token_ids, g.text) for g in ref}


def _workload() -> list[dict]:
    """Completions and chats, identical ones repeated, n > 1, two models."""
    out = []
    for i in range(8):
        m = ("tiny-a", "tiny-b")[i % 2]
        out.append(
            {"model": m, "prompt": f"item {i % 3} is", "max_tokens": 6 + i % 4, "temperature": 1.0}
        )
        out.append(
            {
                "model": m,
                "messages": [{"role": "user", "content": f"say {i % 2}"}],
                "max_tokens": 5,
                "n": 2,
            }
        )
    return out


def _send_all(url: str, bodies: list[dict], concurrency: int) -> None:
    def one(b):
        ep = "/chat/completions" if "messages" in b else "/completions"
        status, out, _ = post(url + ep, b)
        assert status == 200, out

    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        list(ex.map(one, bodies))


def test_concurrency_1_and_16_give_identical_samples(tmp_path, models):
    runs = {}
    for c in (1, 16):
        db = tmp_path / f"c{c}.duckdb"
        with server(db, list(models), batch_size=8) as srv:
            _send_all(srv.url, _workload(), c)
        runs[c] = stored(db)
    assert len(runs[1]) == 8 * 1 + 8 * 2 and runs[1] == runs[16]


def test_a_restarted_server_continues_as_an_uninterrupted_one(tmp_path, models):
    work = _workload()
    with server(tmp_path / "one.duckdb", list(models)) as srv:
        _send_all(srv.url, work + work, 1)
    db = tmp_path / "two.duckdb"
    for _ in range(2):  # the same requests again after a restart take the next repeats
        with server(db, list(models)) as srv:
            _send_all(srv.url, work, 1)
    assert stored(db) == stored(tmp_path / "one.duckdb")
    assert len(stored(db)) == 2 * (8 + 8 * 2)


# ---------------------------------------------------------------------------- coupling


def _agreement(db) -> float:
    """Share of (prompt, repeat) units where both models wrote the same text."""
    s = stored(db)
    pairs = [(v, s.get(("tiny-b", p, r))) for (m, p, r), v in s.items() if m == "tiny-a"]
    return sum(a[1] == b[1] for a, b in pairs if b is not None) / len(pairs)


def test_two_models_answering_the_same_requests_are_coupled(tmp_path, models):
    """The openai client asks both models the same questions: coupled noise makes their answers
    agree far more often than the --noise independent control."""
    agree = {}
    for noise in ("coupled", "independent"):
        db = tmp_path / f"{noise}.duckdb"
        with server(db, list(models), noise=noise) as srv:
            client = openai.OpenAI(base_url=srv.url, api_key="unused")
            for i in range(12):
                for m in ("tiny-a", "tiny-b"):
                    client.completions.create(
                        model=m, prompt=f"Q{i}: the answer is", max_tokens=4, temperature=1.0, n=3
                    )
        agree[noise] = _agreement(db)
    assert agree["coupled"] >= 0.5 and agree["independent"] <= 0.1, agree


# ---------------------------------------------------------------------------- the openai client


def test_openai_client_whole_and_streamed_are_one_sample(tmp_db, models):
    """The same pinned key, asked whole and streamed (chat and completions, with a stop string): the
    streamed deltas add up to the whole answer."""
    with server(tmp_db, list(models)) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="unused")
        pin = {"coupling": {"prompt_id": "q1", "repeat": 0}}
        whole = client.chat.completions.create(
            model="tiny-a",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=12,
            extra_body=pin,
        )
        chunks = list(
            client.chat.completions.create(
                model="tiny-a",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=12,
                extra_body=pin,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == whole.choices[0].message.content and len(text) > 0
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[
            0
        ].finish_reason
        stop = whole.choices[0].message.content[3:5]
        body = {
            "prompt": "hello",
            "max_tokens": 12,
            "stop": [stop],
            "extra_body": {"coupling": {"prompt_id": "q2", "repeat": 0}},
        }
        w = client.completions.create(model="tiny-b", **body)
        s = list(client.completions.create(model="tiny-b", stream=True, **body))
        assert "".join(c.choices[0].text for c in s) == w.choices[0].text
        assert stop not in w.choices[0].text or not stop
    assert stored(tmp_db)[("tiny-a", "q1", 0)][1] == text  # pinned twice: stored once


def test_echo_gives_the_models_prompt_logprobs(tmp_db, models):
    """lm-eval's log-likelihood request (token ids, echo, logprobs 1, max_tokens 1, temperature 0), and
    max_tokens 0: the prompt tokens' log-probabilities equal the model's log_softmax."""
    lm = models[0]
    ids = [[5, 20, 31, 44, 60], [7, 8, 9]]
    with server(tmp_db, [lm]) as srv:
        st, out, _ = post(
            srv.url + "/completions",
            {
                "model": "tiny-a",
                "prompt": ids,
                "max_tokens": 1,
                "echo": True,
                "logprobs": 1,
                "temperature": 0,
                "seed": 1234,
            },
        )
        st0, out0, _ = post(
            srv.url + "/completions",
            {"model": "tiny-a", "prompt": ids[0], "max_tokens": 0, "echo": True, "logprobs": 2},
        )
    assert st == st0 == 200
    for x, choice in zip(ids, out["choices"]):
        with torch.no_grad():
            lsm = torch.log_softmax(lm.model(torch.tensor([x])).logits[0].float(), -1)
        want = [lsm[i, x[i + 1]].item() for i in range(len(x) - 1)]
        lp = choice["logprobs"]["token_logprobs"]
        assert (
            lp[0] is None and lp[1 : len(x)] == pytest.approx(want, abs=1e-5) and len(lp) == len(x) + 1
        )
        assert lp[-1] == pytest.approx(lsm[-1].max().item(), abs=1e-5)  # the greedy token
        top = choice["logprobs"]["top_logprobs"]
        assert all(max(t.values()) >= v - 1e-6 for t, v in zip(top[1:], lp[1:]))
    assert (
        out0["choices"][0]["logprobs"]["token_logprobs"]
        == out["choices"][0]["logprobs"]["token_logprobs"][:-1]
    )
    assert len(stored(tmp_db)) == 2  # max_tokens 0 samples nothing: nothing stored


# ---------------------------------------------------------------------------- manners


def test_bad_requests_get_one_error_each_and_the_server_stays_up(tmp_db, models):
    with server(tmp_db, [models[0]], api_key="sk-secret") as srv:
        u, k = srv.url, "sk-secret"
        ok = {"model": "tiny-a", "prompt": "hi", "max_tokens": 2}
        cases = [
            (post(u + "/completions", ok, key="wrong"), 401, None),
            (post(u + "/completions", ok), 401, None),
            (post(u + "/completions", None, key=k, raw=b"{not json"), 400, None),
            (post(u + "/completions", [1, 2], key=k), 400, None),
            (post(u + "/completions", {**ok, "model": "gpt-9"}, key=k), 404, "model"),
            (post(u + "/completions", {**ok, "prompt": "x" * 600}, key=k), 400, "prompt"),
            (post(u + "/completions", {**ok, "prompt": [3, 99999]}, key=k), 400, "prompt"),
            (post(u + "/completions", {**ok, "presence_penalty": 0.3}, key=k), 400, "presence_penalty"),
            (post(u + "/completions", {**ok, "logit_bias": {"5": 10}}, key=k), 400, "logit_bias"),
            (post(u + "/completions", {**ok, "n": 1000}, key=k), 400, "n"),
            (post(u + "/completions", {**ok, "temperature": -1}, key=k), 400, "temperature"),
            (post(u + "/completions", {**ok, "max_tokens": 0}, key=k), 400, "max_tokens"),
            (
                post(u + "/chat/completions", {"model": "tiny-a", "messages": "hi"}, key=k),
                400,
                "messages",
            ),
            (
                post(
                    u + "/chat/completions",
                    {
                        "model": "tiny-a",
                        "messages": [{"role": "user", "content": "x"}],
                        "tools": [{"type": "function"}],
                    },
                    key=k,
                ),
                400,
                "tools",
            ),
            (post(u + "/embeddings", ok, key=k), 404, None),
        ]
        for (status, body, _), want, param in cases:
            assert status == want, body
            err = body["error"]
            assert err["message"] and "\n" not in err["message"] and err["param"] == param, err
        assert get(u + "/models")[0] == 401
        status, body, _ = post(u + "/completions", ok, key=k)
        assert status == 200 and len(body["choices"]) == 1
    assert "sk-secret" not in (tmp_db.read_bytes().decode("latin-1"))


def test_a_prompt_asked_under_two_seeds_is_a_409(tmp_db, models):
    with server(tmp_db, [models[0]]) as srv:
        body = {"model": "tiny-a", "prompt": "x", "max_tokens": 2, "seed": 5}
        assert post(srv.url + "/completions", body)[0] == 200
        status, out, _ = post(srv.url + "/completions", {**body, "seed": 6})
        assert status == 409 and "seed 5" in out["error"]["message"]
        assert post(srv.url + "/completions", {**body, "prompt": "y", "seed": 6})[0] == 200


def test_overload_is_a_429_with_retry_after_and_the_rest_is_answered(tmp_db, models):
    with server(tmp_db, [models[0]], batch_size=1, max_queue=2) as srv:
        body = {"model": "tiny-a", "prompt": "a long answer", "max_tokens": 60, "n": 2}
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            res = list(
                ex.map(lambda i: post(srv.url + "/completions", {**body, "prompt": f"{i} go"}), range(8))
            )
        status, out, _ = post(
            srv.url + "/completions", {**body, "n": 3}
        )  # more than --max-queue: never fits
        assert status == 400 and out["error"]["param"] == "n"
    codes = sorted(r[0] for r in res)
    assert 429 in codes and 200 in codes and set(codes) <= {200, 429}
    assert all(h.get("retry-after") == "1" for s, _, h in res if s == 429)
    assert len(stored(tmp_db)) == 2 * codes.count(200)


def test_a_client_that_goes_away_stores_nothing_and_gives_its_repeat_back(tmp_db, models):
    with server(tmp_db, [models[0]]) as srv:
        client = openai.OpenAI(base_url=srv.url, api_key="unused")
        body = {"model": "tiny-a", "prompt": "go on", "temperature": 1.0}
        stream = client.completions.create(max_tokens=400, stream=True, **body)
        next(iter(stream))
        stream.close()  # the client leaves mid-answer
        time.sleep(0.5)
        full = client.completions.create(max_tokens=3, **body)
    assert full.model_extra["coupling"]["units"][0]["repeat"] == 0
    assert [k[2] for k in stored(tmp_db)] == [0] and len(stored(tmp_db)) == 1


def test_models_answers_once_loaded(tmp_db, models):
    with server(tmp_db, list(models)) as srv:
        status, body = get(srv.url + "/models")
    assert status == 200 and [m["id"] for m in body["data"]] == ["tiny-a", "tiny-b"]
    assert json.dumps(body["data"][0]["max_model_len"]) == "512"


READER = """
import json, sys, time
from engine.store.served import served_rows
out = []
for _ in range(8):
    time.sleep(0.3)
    t0 = time.monotonic()
    out.append((len(served_rows(sys.argv[1], "run")), time.monotonic() - t0))
print(json.dumps(out))
"""


def test_readers_browse_the_served_run_while_it_grows(tmp_db, models):
    """The server holds the file only for short stretches: another process's reads (the dashboard's)
    get in while requests keep coming, and see the run grow."""
    with server(tmp_db, [models[0]]) as srv:
        assert (
            post(srv.url + "/completions", {"model": "tiny-a", "prompt": "first", "max_tokens": 3})[0]
            == 200
        )
        stop = threading.Event()
        codes: list[int] = []

        def load():
            i = 0
            while not stop.is_set():
                codes.append(
                    post(
                        srv.url + "/completions",
                        {"model": "tiny-a", "prompt": f"p{i % 5}", "max_tokens": 3},
                    )[0]
                )
                i += 1

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(load) for _ in range(4)]
            try:
                out = subprocess.run(
                    [sys.executable, "-c", READER, str(tmp_db)],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            finally:
                stop.set()
            for f in futs:
                f.result()
    assert out.returncode == 0, out.stderr
    seen = [n for n, _ in json.loads(out.stdout)]
    assert seen == sorted(seen) and seen[-1] > seen[0] > 0, seen
    assert set(codes) == {200}
    assert (
        max(w for _, w in json.loads(out.stdout)) < 10
    )  # a reader waits for one hold of the writer at most


def test_traces_of_a_served_run_are_the_keyed_noise(tmp_db, models):
    """--traces: each token's trace is stored under the request's key, so the Token traces page
    recomputes the same Gumbel values from (seed, prompt id, repeat, step, token)."""
    from engine.analysis import traces

    with server(tmp_db, [models[0]], traces=True) as srv:
        status, out, _ = post(
            srv.url + "/completions",
            {"model": "tiny-a", "prompt": "trace me", "max_tokens": 6, "seed": 9, "n": 2},
        )
    assert status == 200
    n_tokens = {
        (r.prompt_id, r.repeat): len(r.token_ids) for r in served_rows(tmp_db, "run").itertuples()
    }
    for u in out["coupling"]["units"]:
        steps = traces.trace_steps(tmp_db, "run", u["prompt_id"], u["repeat"], "coupled", ["tiny-a"])
        assert len(steps) == n_tokens[(u["prompt_id"], u["repeat"])] > 0
        assert {int(s) for s in steps.seed} == {9}
        g = traces.recompute_gumbels(tmp_db, "run", u["prompt_id"], u["repeat"], steps)
        assert g is not None and traces.gumbel_check(g) == 0.0


def test_the_servers_connections_have_nagle_off():
    """asyncio sets TCP_NODELAY only on a socket whose ``proto`` is TCP, and an accepted connection
    takes the listener's: with ``bind``'s socket each response's two writes (headers, body) go out at
    once instead of waiting ~40 ms for the client's delayed ACK (bench/bench_serve.py)."""
    import asyncio
    import socket

    from engine.serving.server import bind

    async def main() -> int:
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        async def on_client(reader, writer):
            got.set_result(
                writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            )
            writer.close()

        srv = await asyncio.start_server(on_client, sock=bind("127.0.0.1", 0))
        port = srv.sockets[0].getsockname()[1]
        _, w = await asyncio.open_connection("127.0.0.1", port)
        nodelay = await asyncio.wait_for(got, 10)
        w.close()
        srv.close()
        return nodelay

    assert asyncio.run(main()) == 1
