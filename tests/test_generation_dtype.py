"""``generate --dtype``: auto keeps run ids; an explicit dtype loads every model in it
(both backends through the one factory), enters the run id and the run config; a bad value is one
line with nothing written."""

from __future__ import annotations

import json

import pytest

from engine import generation as G
from engine import store
from engine.cli import main as cli_main
from engine.errors import UserError
from engine.tasks import datasets
from engine.testing import tiny_lm


def _dataset() -> datasets.Dataset:
    ps = tuple(
        datasets.Prompt(
            prompt_id=f"toy/{i}", user_prompt=f"Question {i}?", subject="toy", question=f"q{i}"
        )
        for i in range(2)
    )
    return datasets.Dataset("toy", "prompts", "memory", ps, "Be brief.")


def _config(db, run: str) -> dict:
    return json.loads(
        store.query_df(db, "SELECT config FROM runs WHERE run_id = ?", [run])["config"].iloc[0]
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny-lm"
    m, t = tiny_lm(0)
    m.save_pretrained(path)
    t.save_pretrained(path)
    return str(path)


def test_dtype_auto_keeps_the_run_id_and_an_override_loads_records_and_keys_it(tmp_path, folder):
    db = tmp_path / "runs.duckdb"
    kw = dict(
        repeats=1,
        modes=["coupled"],
        seed=3,
        cfg=G.GenConfig(max_new_tokens=3),
        show_bar=False,
        device="cpu",
    )
    plain = G.run_generation(db, [folder], _dataset(), **kw)
    auto = G.run_generation(db, [folder], _dataset(), dtype="auto", **kw)
    assert auto == plain  # auto = the default: existing run ids stay
    assert _config(db, plain)["dtype"] == "auto"
    bf16 = G.run_generation(db, [folder], _dataset(), dtype="bf16", **kw)
    assert bf16 != plain
    cfg = _config(db, bf16)
    assert cfg["dtype"] == "bfloat16"
    (desc,) = cfg["backends"].values()
    assert desc["dtype"] == "bfloat16"  # the model really loaded in it
    (desc,) = _config(db, plain)["backends"].values()
    assert desc["dtype"] == "float32"  # the CPU default


def test_bad_dtype_is_one_line_and_writes_nothing(tmp_path, folder, capsys):
    db = tmp_path / "runs.duckdb"
    with pytest.raises(
        UserError, match=r"unknown dtype 'float8'; allowed: auto, float32, bfloat16, float16"
    ):
        G.run_generation(db, [folder], _dataset(), 1, dtype="float8", show_bar=False)
    assert (
        cli_main(
            [
                "generate",
                "--models",
                folder,
                "--dataset",
                "demo",
                "--limit",
                "1",
                "--repeats",
                "1",
                "--db",
                str(db),
                "--device",
                "cpu",
                "--dtype",
                "int8",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown dtype 'int8'" in err[0]
    assert not db.exists() or store.query_df(db, "SELECT count(*) AS n FROM runs")["n"].iloc[0] == 0


def test_generate_form_passes_dtype_only_when_not_auto():
    from dashboard import jobs_panel

    base = (["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0)
    assert "--dtype" not in jobs_panel.generate_args(*base)
    args = jobs_panel.generate_args(*base, dtype="bfloat16")
    assert args[args.index("--dtype") + 1] == "bfloat16"
