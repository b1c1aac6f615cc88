"""The Benchmark page shows every analysis a run supports: a run with one repeat per
question (the dashboard's own sequential run) gets its accuracies, the paired comparison and the
Sequential tab, never a dead end; a run with repeats keeps the coupled-vs-independent tabs."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.stats.multigen import clopper_pearson
from tests.conftest import ROOT
from tests.test_app import N_PROMPTS, TIMEOUT, build_small_db


@pytest.fixture(scope="module")
def one_repeat_db(tmp_path_factory):
    return build_small_db(tmp_path_factory.mktemp("bm1") / "one.duckdb", repeats=1)


def _open(db, monkeypatch) -> AppTest:
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page(navigation.path("benchmark")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_one_repeat_run_reaches_the_paired_comparison_and_the_sequential_tab(
    one_repeat_db, monkeypatch
):
    at = _open(one_repeat_db, monkeypatch)
    assert [t.label for t in at.tabs] == [
        "Paired comparison",
        "Sequential",
        "Per task",
        "Race",
        "Release gate",
    ]
    info = " ".join(i.value for i in at.info)
    assert "1 repeat per question" in info and "1 repeats" not in info
    assert "need at least 2 questions and 2 repeats" not in info  # the old dead end
    # the Sequential tab's replay is drawn (its table and charts), not an error
    assert any(m.value.startswith("**Stop when decided**") for m in at.markdown)
    assert any("median stop" in d.value.columns for d in at.dataframe)
    # each model's accuracy carries the one accuracy interval (one 0/1 score per question: exact)
    acc = next(d.value for d in at.dataframe if "harness reported" in d.value.columns)
    for _, row in acc.iterrows():
        x = round(row["accuracy"] * N_PROMPTS)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(clopper_pearson(x, N_PROMPTS), abs=1e-12)
    assert {m.label for m in at.metric} >= {"Questions × repeats", "Diff A − B", "MDE (80% power)"}
    assert any(m.value == f"{N_PROMPTS} × 1" for m in at.metric)
    # the inputs of the coupled analysis are not offered where it cannot run
    assert not [w for w in at.number_input if w.key in ("bm_target", "bm_se")]


def test_a_run_with_repeats_keeps_the_coupled_tabs(tmp_path, monkeypatch):
    at = _open(build_small_db(tmp_path / "r.duckdb"), monkeypatch)
    assert [t.label for t in at.tabs] == [
        "Covariance & variance",
        "Error vs samples",
        "Paired comparison",
        "Sample-size planner",
        "Sequential",
        "Per subject",
        "Race",
        "Release gate",
    ]
    assert not at.info or all("repeat per question" not in i.value for i in at.info)


def test_the_release_gate_tab_is_engine_gate_s_decision(one_repeat_db, monkeypatch):
    """The tab shows exactly what ``engine gate`` decides for A (baseline) and B (candidate), its
    interval in the table, and the command that reproduces it; a wider margin can turn it to PASS."""
    from engine.analysis.gate import gate

    at = _open(one_repeat_db, monkeypatch)
    run, a, b, rule = (at.selectbox(key=k).value for k in ("bm_run", "bm_a", "bm_b", "bm_rule"))
    for margin in (0.01, 1.0):
        at.number_input(key="bm_gate_margin").set_value(margin).run()
        assert not at.exception, [e.value for e in at.exception]
        ref = gate(one_repeat_db, run, a, b, margin, 0.05, rule=rule)
        boxes = {"non-inferior": at.success, "worse": at.error, "undecided": at.warning}[ref.decision]
        assert any(x.value.replace("\\", "") == ref.text for x in boxes), [x.value for x in boxes]
        table = next(d.value for d in at.dataframe if "exit_code" in d.value.columns)
        assert table.iloc[0]["difference"] == pytest.approx(ref.difference)
        assert (table.iloc[0]["lower"], table.iloc[0]["upper"]) == pytest.approx((ref.lower, ref.upper))
        assert any(c.value == ref.command(one_repeat_db.name) for c in at.code)
    assert ref.decision == "non-inferior"  # a margin of 1 (the whole scale) passes these 40 questions


def test_plural_exact_cases():
    from engine.analysis.notices import plural

    assert plural(1, "repeat") == "1 repeat" and plural(3, "repeat") == "3 repeats"
    assert plural(1, "sampled unit") == "1 sampled unit" and plural(2000, "unit") == "2,000 units"
    assert plural(0, "label") == "0 labels" and plural(2, "query", "queries") == "2 queries"


def test_home_says_1_repeat_not_1_repeats(one_repeat_db, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(one_repeat_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    captions = " ".join(c.value for c in at.caption)
    assert f"{N_PROMPTS} questions × 1 repeat ·" in captions and "1 repeats" not in captions
