"""Racing on the dashboard and in the report (dashboard/race_view.py, engine/figures/race.py,
engine/report/run_race.py): the Benchmark page's Race tab, the Generate page's Race form and live
chart, the report's race section, with AppTest on the small three-model database."""

from __future__ import annotations

import json
import re

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine import store
from engine.analysis.race import race_replay, race_state
from engine.figures.race import GREY, race_intervals_figure, race_replay_figure
from engine.stats.sequential import question_order
from tests.test_app import MODELS, N_PROMPTS, ROOT, TIMEOUT, _n_charts, _texts, build_small_db


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    return build_small_db(tmp_path_factory.mktemp("racedb") / "small.duckdb")


def _make_race(db, goal="best"):
    """Mark run-small as an ``engine race`` run (its stored order, goal, alpha, rounds)."""
    order = [f"q{i}" for i in range(N_PROMPTS)]
    order = [order[i] for i in question_order(N_PROMPTS, 7)]
    with store.writer(db) as con:
        cfg = json.loads(
            con.execute(
                "SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = 'run-small'"
            ).fetchone()[0]
        )
        cfg["race"] = {
            "goal": goal,
            "alpha": 0.2,
            "order_seed": 7,
            "order": order,
            "round_size": 8,
            "budget": None,
            "score_rule": "paper",
            "modes": ["coupled", "independent"],
        }
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'run-small'", [json.dumps(cfg)])


def test_benchmark_page_race_tab(small_db, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(navigation.path("benchmark")).run()
    assert not at.exception, at.exception
    summary = next(d.value for d in at.dataframe if "race (median generations)" in d.value.columns)
    ref = race_replay(
        small_db, "run-small", list(MODELS), repeat=0, seeds=tuple(range(20)), rule="paper"
    )
    assert summary["mode"].tolist() == [m.mode for m in ref.modes]
    assert summary["race (median generations)"].tolist() == [
        m.summary()["median_generations"] for m in ref.modes
    ]
    assert (summary["fixed"] == 3 * N_PROMPTS).all()
    at.text_input(key="bm_race_goal").set_value("top:3").run()  # M >= k: one line, no trace
    # as the reader sees it: md_escape's backslashes removed
    assert not at.exception and any("top:3" in re.sub(r"\\(.)", r"\1", i.value) for i in at.info)


def test_generate_page_race_form_and_live_chart(tmp_path, monkeypatch):
    from dashboard import race_view

    db = build_small_db(tmp_path / "live.duckdb")
    _make_race(db)
    started = []
    monkeypatch.setattr(
        race_view.jobs, "start_job", lambda args, **kw: started.append((args, kw)) or "race-1"
    )
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(navigation.path("generate")).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="gen_race_run").value == "run-small"
    st = race_state(db, "run-small")
    text = _texts(at)
    for m in st.modes:
        assert race_view.state_text(m, st.N) in text
    assert _n_charts(at) >= len(st.modes)
    # the form: three models, goal top:2, alpha, budget -> the race command
    at.multiselect(key="race_models").set_value([])
    at.text_input(key="race_extra").set_value("m1 m2 m3")
    at.selectbox(key="race_goal").set_value("top:M")
    at.number_input(key="race_m").set_value(2)
    at.number_input(key="race_alpha").set_value(0.1)
    at.number_input(key="race_budget").set_value(200)
    next(b for b in at.button if b.label == "Start race").click().run()
    assert not at.exception, at.exception
    args, kw = started[-1]
    assert args[:5] == ["race", "--models", "m1", "m2", "m3"] and kw["kind"] == "race"
    assert args[args.index("--goal") + 1] == "top:2" and args[args.index("--alpha") + 1] == "0.1"
    assert args[args.index("--budget") + 1] == "200"
    # two models: refused on the page, nothing started
    n = len(started)
    at.text_input(key="race_extra").set_value("m1 m2")
    next(b for b in at.button if b.label == "Start race").click().run()
    assert len(started) == n and any("3 or more" in e.value for e in at.error)


def test_figures_grey_out_the_models_that_left(tmp_path):
    db = build_small_db(tmp_path / "fig.duckdb")
    _make_race(db)
    st = race_state(db, "run-small")
    for m in st.modes:
        fig = race_intervals_figure(m)
        left = {x.model for x in m.models if x.status != "active"}
        for tr in fig.data:
            assert (tr.line.color == GREY) == (tr.name in left)
        assert any(s.x0 == 0 and s.x1 == 0 for s in fig.layout.shapes)  # the zero line
    rep = race_replay(db, "run-small", repeat=0, seeds=(0, 1, 2), rule="paper")
    box = race_replay_figure(rep.modes)
    assert len(box.data) == 3 * len(rep.modes) and all(len(t.y) == 3 for t in box.data)


def test_report_race_section_live_and_replay(tmp_path):
    from engine.report.context import RunContext
    from engine.report.run_race import REPLAY_ORDERS, race_section

    db = build_small_db(tmp_path / "rep.duckdb")
    sec = race_section(RunContext(db, "run-small"))
    assert sec is not None and sec.title.startswith("Race replay")
    rep = race_replay(db, "run-small", repeat=0, seeds=tuple(range(REPLAY_ORDERS)), rule="paper")
    row = sec.figures[0].table.rows[0]
    assert row[2].value == rep.modes[0].summary()["median_generations"]
    _make_race(db)
    sec = race_section(RunContext(db, "run-small"))
    st = race_state(db, "run-small")
    assert sec.title == "Race: who left when, on what evidence"
    leaves = [r[1].text for t in sec.tables for r in t.rows]
    assert leaves == [lv.model for m in st.modes for lv in m.leaves]
    assert all("decided at question" in r[4].text for t in sec.tables for r in t.rows)
