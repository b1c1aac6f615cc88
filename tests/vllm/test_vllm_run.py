"""``run_generation(backend="vllm")`` end to end on a tiny Llama folder: the run records the backend,
its version, dtype and device; the run id differs from the hf run of the same settings (and the hf
run id is the pre-backend one); the stored generations equal the hf backend's; a model vLLM cannot
load is refused in one line before the run is written."""

from __future__ import annotations

import json

import pytest
from vllm_testlib import ENGINE_KWARGS, VLLM_VERSION, needs_vllm

from engine import store
from engine.errors import UserError
from engine.generation import GenConfig, run_generation
from engine.tasks import datasets
from engine.testing import tiny_lm, tiny_tokenizer

pytestmark = [pytest.mark.vllm, needs_vllm]


def _dataset():
    ps = tuple(
        datasets.Prompt(prompt_id=f"toy/{i}", user_prompt=f"Question {i}: " + "ab" * i + "?")
        for i in range(3)
    )
    return datasets.Dataset("toy", "prompts", "memory", ps, "Be brief.")


def test_vllm_run_records_backend_and_equals_hf(tmp_path, monkeypatch):
    from engine.generation import backends
    from engine.generation.vllm_backend import VllmBackend

    # eager mode, as the other vLLM tests (no torch.compile warm-up); the factory is otherwise the real one
    monkeypatch.setitem(
        backends.FACTORIES,
        "vllm",
        lambda model, device=None, tensor_parallel=1, dtype=None: VllmBackend(
            model, engine_kwargs=ENGINE_KWARGS
        ),
    )
    folder = tmp_path / "tiny-llama"
    m, t = tiny_lm(seed=0, hidden=128)
    m.save_pretrained(folder)
    t.save_pretrained(folder)
    db = tmp_path / "run.duckdb"
    cfg = GenConfig(temperature=1.0, max_new_tokens=6, batch_size=8, trace_top_k=3)
    kw = dict(repeats=2, modes=["coupled", "independent"], seed=9, cfg=cfg, show_bar=False, device="cpu")
    hf = run_generation(db, [str(folder)], _dataset(), backend="hf", **kw)
    vl = run_generation(db, [str(folder)], _dataset(), backend="vllm", **kw)
    assert hf != vl
    runs = store.query_df(db, "SELECT run_id, config, status FROM runs").set_index("run_id")
    c = json.loads(runs.loc[vl, "config"])
    assert (c["backend"], c["backend_version"]) == ("vllm", VLLM_VERSION)
    d = c["backends"][str(folder)]  # the run's model name is the path it was given
    assert (d["backend"], d["dtype"], d["device"]) == ("vllm", "float32", "cpu")
    assert json.loads(runs.loc[hf, "config"])["backend"] == "hf"
    q = "SELECT mode, prompt_id, repeat, token_ids, text FROM generations WHERE run_id = ? ORDER BY 1, 2, 3"
    a, b = store.query_df(db, q, [hf]), store.query_df(db, q, [vl])
    assert len(a) == len(b) == 12
    assert [list(x) for x in a["token_ids"]] == [list(x) for x in b["token_ids"]]
    assert list(a["text"]) == list(b["text"])


def test_model_vllm_cannot_load_is_refused_before_the_run(tmp_path):
    tiny_tokenizer().save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text(
        json.dumps({"architectures": ["NoSuchForCausalLM"], "model_type": "no_such_model"})
    )
    db = tmp_path / "run.duckdb"
    with pytest.raises(UserError) as e:
        run_generation(db, [str(tmp_path / "m")], _dataset(), 1, backend="vllm", show_bar=False)
    assert (
        "\n" not in str(e.value)
        and "NoSuchForCausalLM" in str(e.value)
        and "--backend hf" in str(e.value)
    )
    assert not db.exists() or store.table_counts(db).get("runs", 0) == 0
