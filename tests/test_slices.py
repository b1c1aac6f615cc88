"""``engine benchmark-compare --by subject|task`` (engine/analysis/slices.py): per-subject differences
of an imported MMLU layout against a hand computation, per-task differences of an lm-eval group's
subtasks, the --json keys (slices: slice, n, difference, lower, upper, p_adjusted), and bad input in
one line."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.analysis.slices import slice_comparison
from engine.cli import main
from engine.store.scores import pair_scores
from engine.tasks.harness_import import import_harness
from engine.tasks.importers import import_paper_mmlu
from tests.conftest import ROOT
from tests.test_importers import _write_layout

GROUP = ROOT / "tests" / "data" / "harness" / "lm_eval" / "tinygroup"


@pytest.fixture
def mmlu_db(tmp_path, tmp_db):
    rdir, qdir, _ = _write_layout(tmp_path, np.random.default_rng(0))
    import_paper_mmlu(tmp_db, rdir, qdir, models=["Model-Y", "Model-X"])  # Y first: A = Model-Y
    return tmp_db


def test_per_subject_differences_equal_a_hand_computation(mmlu_db, capsys):
    assert main(["benchmark-compare", "--db", str(mmlu_db), "--run", "paper-mmlu", "--by", "subject",
                 "--json"]) == 0  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert d["models"] == ["Model-Y", "Model-X"] and d["by"] == "subject" and d["mode"] == "coupled"
    _, df = pair_scores(mmlu_db, ["Model-Y", "Model-X"], None, "paper-mmlu", "paper")
    df = df[df["mode"] == "coupled"]
    for s in d["slices"]:
        assert {"slice", "n", "difference", "lower", "upper", "p_adjusted"} <= set(s)
        part = df[df["subject"] == s["slice"]]
        per_q = part.pivot_table(index="prompt_id", columns="model", values="score", aggfunc="mean")
        ref = (per_q["Model-Y"] - per_q["Model-X"]).mean()
        assert s["n"] == len(per_q) and s["difference"] == pytest.approx(ref)
        assert s["lower"] <= s["upper"]
    assert [s["slice"] for s in d["slices"]] == ["aaa_subject", "bbb_subject"]
    assert (
        main(["benchmark-compare", "--db", str(mmlu_db), "--run", "paper-mmlu", "--by", "subject"]) == 0
    )
    out = capsys.readouterr().out
    assert "A − B = Model-Y − Model-X" in out and "aaa_subject" in out and "max-t" in out


def test_per_task_of_an_lm_eval_group(tmp_db):
    import_harness(tmp_db, [str(GROUP / "dummy-a"), str(GROUP / "dummy-b")], name="g")
    res = slice_comparison(tmp_db, "g", by="task")
    assert res.models == ("dummy-a", "dummy-b")
    assert [s.slice for s in res.slices] == ["tinyg_a", "tinyg_b"]
    assert sum(s.n for s in res.slices) == res.n_questions
    assert res.frame()["p_adjusted"].notna().all()


def test_bad_input_is_one_line(mmlu_db, capsys):
    assert main(["benchmark-compare", "--db", str(mmlu_db), "--by", "subject"]) == 2
    assert "--by needs --run RUN" in capsys.readouterr().err
    with pytest.raises(Exception, match="must be one of subject, task"):
        slice_comparison(mmlu_db, "paper-mmlu", by="category")


def test_report_has_the_per_subject_section(mmlu_db):
    from engine.report.build import run_report

    rep = run_report(mmlu_db, "paper-mmlu", models=["Model-Y", "Model-X"])
    sec = rep.section("slices")
    assert sec is not None and "Model-Y − Model-X" in sec.title
    res = slice_comparison(mmlu_db, "paper-mmlu", "Model-Y", "Model-X")
    fig = sec.figures[0]
    assert fig.table is not None and len(fig.table.rows) == len(res.slices)


def test_benchmark_page_draws_the_forest_plot(mmlu_db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard import navigation

    monkeypatch.setenv("COUPLED_EVAL_DB", str(mmlu_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(navigation.path("benchmark")).run()
    assert not at.exception, [e.value for e in at.exception]
    tables = [df.value for df in at.dataframe if "p_adjusted" in df.value.columns]
    assert tables and tables[0]["slice"].tolist() == ["aaa_subject", "bbb_subject"]
    assert any("holds for all 2 subjects at once" in c.value for c in at.caption)
