"""``--judge vllm:FOLDER``: the batched local judge on our vLLM backend (greedy, one request per
comparison) gives the transformers judge's replies on a tiny fp32 Llama, and ``engine judge`` stores
one verdict per comparison through it."""

from __future__ import annotations

import json

import pytest
from vllm_testlib import ENGINE_KWARGS, needs_vllm

from engine import store
from engine.cli import main
from engine.tasks import judge as J
from engine.testing import tiny_lm

pytestmark = [pytest.mark.vllm, needs_vllm]


def test_vllm_judge_equals_transformers_judge_and_stores_every_verdict(tmp_path, monkeypatch):
    from engine.commands._judges import model_complete_fn, vllm_complete_fn
    from tests.test_judge import make_judge_run

    folder = tmp_path / "tiny-judge"
    m, t = tiny_lm(seed=3, hidden=128)
    m.save_pretrained(folder)
    t.save_pretrained(folder)
    db = tmp_path / "j.duckdb"
    make_judge_run(
        db, n_prompts=3, repeats=1, models=("m1", "m2", "m3"), modes=("coupled",)
    )  # 18 comparisons
    cfg = J.JudgeConfig(str(folder), prompt_template="Say A, B or tie.", max_new_tokens=4)
    plan = J.plan_judging(db, "r1", "x", cfg)
    chats = [c for _, c in J.message_stream(db, plan)]
    vl = vllm_complete_fn(str(folder), max_new_tokens=4, engine_kwargs=ENGINE_KWARGS)
    try:
        got = vl(chats)
    finally:
        vl.backend.close()
    hf = model_complete_fn(str(folder), max_new_tokens=4, batch_size=6)(chats)
    assert len(got) == len(chats) == 18 and got == hf  # greedy: the same replies from both backends
    # the command end to end: one stored verdict per comparison, raw = the vLLM reply
    monkeypatch.setenv("COUPLED_EVAL_VLLM_ARGS", json.dumps(ENGINE_KWARGS))
    pf = tmp_path / "prompt.txt"
    pf.write_text("Say A, B or tie.")
    assert (
        main(
            [
                "judge",
                "--db",
                str(db),
                "--run",
                "r1",
                "--judge",
                f"vllm:{folder}",
                "--prompt-file",
                str(pf),
                "--max-new-tokens",
                "4",
                "--out",
                str(tmp_path / "res.json"),
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "res.json").read_text())  # (vLLM logs to stdout)
    df = store.query_df(
        db,
        "SELECT raw, parsed, reported_model, latency_s FROM judgments "
        "ORDER BY prompt_id, model_a, model_b, presented",
    )
    assert res["n_judged_now"] == 18 == len(df) and sorted(df.raw) == sorted(got)
    assert vl.reported_model == str(folder.resolve()) and (df.reported_model == vl.reported_model).all()
    assert (df.latency_s > 0).all()
    assert sorted(df.latency_s.value_counts()) == [2, 8, 8]  # one wall time per batch (--batch-size 8)
    assert [J.parse_verdict(r) for r in df.raw] == [p if isinstance(p, str) else None for p in df.parsed]
