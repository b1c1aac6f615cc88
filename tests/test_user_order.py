"""A − B follows the user's order (the first path imported, the first --models entry),
never the alphabet, and every output says which difference it is."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.store import transaction
from engine.store.run_models import model_order
from engine.tasks.harness_import import import_harness
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "harness" / "lm_eval" / "tinyqa"


def test_benchmark_compare_takes_the_first_path_imported_as_a(tmp_db, capsys):
    import_harness(tmp_db, [str(DATA / "dummy-b"), str(DATA / "dummy-a")], name="h")
    assert model_order(tmp_db, "h") == ["dummy-b", "dummy-a"]
    assert main(["benchmark-compare", "--run", "h", "--db", str(tmp_db), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["models"] == ["dummy-b", "dummy-a"]  # A, B of every difference A − B
    acc_b, acc_a = d["accuracy"]
    assert d["paired"]["diff"] == pytest.approx(acc_b - acc_a)
    assert main(["benchmark-compare", "--run", "h", "--db", str(tmp_db)]) == 0
    assert "A − B = dummy-b − dummy-a" in capsys.readouterr().out


def test_model_order_reads_the_generate_order(tmp_db):
    with transaction(tmp_db) as con:
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status, n_units) VALUES "
            """('g', 'ds', '{"models": ["zeta", "alpha"]}', 'done', 0)"""
        )
    assert model_order(tmp_db, "g") == ["zeta", "alpha"]
    assert model_order(tmp_db, "nope") == []
