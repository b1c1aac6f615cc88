"""The Benchmark page's "Sequential" tab (dashboard/sequential_view.py) and its figures, with AppTest."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.analysis.sequential import sequential_paths, sequential_replay
from engine.figures_sequential import sequential_cs_figure, stopping_times_figure
from tests.test_app import ROOT, TIMEOUT, _n_charts, _texts, build_small_db


@pytest.fixture(scope="module")
def seq_db(tmp_path_factory):
    return build_small_db(tmp_path_factory.mktemp("seqdb") / "small.duckdb")


def test_sequential_tab_on_the_benchmark_page(seq_db, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(seq_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(navigation.path("benchmark")).run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert "Stop when decided" in text and "not valid for a data-dependent stop" in text
    summary = next(d.value for d in at.dataframe if "median stop" in d.value.columns)
    assert summary["mode"].tolist() == ["coupled", "independent"] and (summary["of N"] == 40).all()
    # the same numbers as the analysis (the page adds nothing of its own)
    ref = sequential_replay(seq_db, "run-small", ["m-base", "m-int4"], seeds=list(range(20)), rule="paper")
    assert summary["median stop"].tolist() == [m.summary()["median"] for m in ref.modes]
    n_charts = _n_charts(at)
    assert any(s in text for s in ("decided:", "undecided:"))
    at.number_input(key="bm_seq_seed").set_value(3).run()
    assert not at.exception and _n_charts(at) == n_charts
    at.text_input(key="bm_seq_stop").set_value("width:0").run()  # a rule that cannot fire: one line, no trace
    assert not at.exception and any("width:0" in i.value for i in at.info)


def test_figures_draw_both_modes_zero_line_and_stop(seq_db):
    paths = sequential_paths(seq_db, "run-small", "m-base", "m-int4", stop="budget:10", rule="paper")
    fig = sequential_cs_figure(paths)
    names = [t.name for t in fig.data]
    assert "coupled CS" in names and "independent CS" in names
    assert any(n and n.startswith("coupled stop (question 10)") for n in names)
    assert any(s.y0 == 0.0 and s.y1 == 0.0 for s in fig.layout.shapes)  # the zero line
    assert fig.layout.xaxis.type == "log"
    assert all(p.state.startswith(("decided", "undecided")) and "question 10 of 40" in p.state for p in paths)
    rep = sequential_replay(seq_db, "run-small", ["m-base", "m-int4"], seeds=[0, 1, 2], rule="paper")
    box = stopping_times_figure(rep.modes)
    assert [t.name for t in box.data] == ["coupled", "independent"] and len(box.data[0].y) == 3
