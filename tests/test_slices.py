"""``engine benchmark-compare --by subject|task`` (engine/analysis/slices.py): per-subject differences
of an imported MMLU layout against a hand computation, per-task differences of an lm-eval group's
subtasks, the --json keys of issue 36 item 4, and bad input in one line."""

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
    assert main(["benchmark-compare", "--db", str(mmlu_db), "--run", "paper-mmlu", "--by", "subject"]) == 0
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
