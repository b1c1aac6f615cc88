"""The Benchmark page's "Sequential" tab (dashboard/sequential_view.py) and its figures, with AppTest."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.analysis.sequential import sequential_paths, sequential_replay
from engine.figures.sequential import sequential_cs_figure, stopping_times_figure
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
    ref = sequential_replay(
        seq_db, "run-small", ["m-base", "m-int4"], seeds=list(range(20)), rule="paper"
    )
    assert summary["median stop"].tolist() == [m.summary()["median"] for m in ref.modes]
    n_charts = _n_charts(at)
    assert any(s in text for s in ("decided:", "undecided:"))
    at.number_input(key="bm_seq_seed").set_value(3).run()
    assert not at.exception and _n_charts(at) == n_charts
    at.text_input(key="bm_seq_stop").set_value(
        "width:0"
    ).run()  # a rule that cannot fire: one line, no trace
    assert not at.exception and any("width:0" in i.value for i in at.info)


def test_figures_draw_both_modes_zero_line_and_stop(seq_db):
    paths = sequential_paths(seq_db, "run-small", "m-base", "m-int4", stop="budget:10", rule="paper")
    fig = sequential_cs_figure(paths)
    names = [t.name for t in fig.data]
    assert "coupled CS" in names and "independent CS" in names
    assert any(n and n.startswith("coupled stop (question 10)") for n in names)
    assert any(s.y0 == 0.0 and s.y1 == 0.0 for s in fig.layout.shapes)  # the zero line
    assert fig.layout.xaxis.type == "log"
    assert all(
        p.state.startswith(("decided", "undecided")) and "question 10 of 40" in p.state for p in paths
    )
    rep = sequential_replay(seq_db, "run-small", ["m-base", "m-int4"], seeds=[0, 1, 2], rule="paper")
    box = stopping_times_figure(rep.modes)
    assert [t.name for t in box.data] == ["coupled", "independent"] and len(box.data[0].y) == 3


def _make_sequential(db):
    """Mark run-small as a --until run (its stored order, rule and alpha), as generate --until stores them."""
    import json

    from engine import store
    from engine.stats.sequential import question_order

    order = [f"q{i}" for i in range(40)]
    order = [order[i] for i in question_order(40, 7)]
    with store.writer(db) as con:
        cfg = json.loads(
            con.execute(
                "SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = 'run-small'"
            ).fetchone()[0]
        )
        cfg["sequential"] = {
            "until": "width:1.2",
            "alpha": 0.05,
            "mode_stop": "coupled",
            "round_size": 8,
            "score_rule": "paper",
            "order_seed": 7,
            "order": order,
        }
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'run-small'", [json.dumps(cfg)])
    return order


def test_generate_page_stop_when_decided_form_and_live_chart(tmp_path, monkeypatch):
    from dashboard import jobs_panel
    from engine.analysis.sequential import live_paths

    db = build_small_db(tmp_path / "live.duckdb")
    _make_sequential(db)
    started = []
    monkeypatch.setattr(
        jobs_panel, "start_generation", lambda args, score_after, rule=None: started.append(args) or "j1"
    )
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(navigation.path("generate")).run()
    assert not at.exception, at.exception
    # the live view of the sequential run: state text per mode and the chart
    paths = live_paths(db, "run-small")
    text = _texts(at)
    assert all(p.state in text for p in paths) and "question" in paths[0].state
    assert at.selectbox(key="gen_seq_run").value == "run-small" and _n_charts(at) >= 1
    # the form: "Stop when decided" adds --until RULE --alpha A to the generate command
    at.multiselect(key="gen_models").set_value([])
    at.text_input(key="gen_extra").set_value("m1 m2")
    at.checkbox(key="gen_until").check()
    at.text_input(key="gen_until_rule").set_value("decided,budget:30")
    at.number_input(key="gen_until_alpha").set_value(0.1)
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    assert started, [e.value for e in at.error]
    args = started[-1]
    assert (
        args[args.index("--until") + 1] == "decided,budget:30"
        and args[args.index("--alpha") + 1] == "0.1"
    )


def test_generate_args_without_until_unchanged():
    from dashboard.jobs_panel import generate_args

    base = generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0)
    assert "--until" not in base and "--alpha" not in base
    assert generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0, until="width:0.1", alpha=0.2)[
        -4:
    ] == ["--until", "width:0.1", "--alpha", "0.2"]


def test_live_chart_and_stop_agree_on_models_order_and_stop(tmp_path):
    """The live chart (live_paths) and the run's stop (live_stop, what the report and summary show) read
    one thing: models in the run's configured order (here not alphabetical) and the run's joint stop, so
    the chart's pair, its sign and its stop marker are the table's."""
    import json

    from engine import store
    from engine.analysis.sequential import live_paths, live_stop

    db = build_small_db(tmp_path / "live.duckdb")
    _make_sequential(db)
    with store.writer(db) as con:
        cfg = json.loads(
            con.execute(
                "SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = 'run-small'"
            ).fetchone()[0]
        )
        cfg["models"] = list(reversed(cfg["models"]))
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'run-small'", [json.dumps(cfg)])
    stop = live_stop(db, "run-small")
    for path in live_paths(db, "run-small"):
        st = next(s for s in stop.modes if s.mode == path.mode)
        assert path.pair == stop.pairs[0] and path.pair.startswith(cfg["models"][0])
        assert path.n_stop == st.n_stop
        at = (st.n_stop or st.n_seen) - 1
        assert (path.lower[at], path.upper[at]) == (st.lower[0], st.upper[0])
