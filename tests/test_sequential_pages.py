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
    paths = sequential_paths(seq_db, "run-small", "m-base", "m-int4", rule="paper")
    plain = text.replace("\\", "")  # the page escapes markdown's special characters in data
    assert all(p.state in plain for p in paths) and "about this benchmark" in plain
    at.number_input(key="bm_seq_seed").set_value(3).run()
    assert not at.exception and _n_charts(at) == n_charts
    at.text_input(key="bm_seq_stop").set_value(
        "width:0"
    ).run()  # a rule that cannot fire: one line, no trace
    # as the reader sees it: md_escape's backslashes removed
    assert not at.exception and any("width:0" in i.value.replace("\\", "") for i in at.info)


def test_figures_draw_both_modes_zero_line_and_stop(seq_db):
    paths = sequential_paths(seq_db, "run-small", "m-base", "m-int4", stop="budget:10", rule="paper")
    fig = sequential_cs_figure(paths)
    names = [t.name for t in fig.data]
    assert "coupled CS" in names and "independent CS" in names
    assert any(n and n.startswith("coupled stop (question 10)") for n in names)
    assert any(s.y0 == 0.0 and s.y1 == 0.0 for s in fig.layout.shapes)  # the zero line
    assert fig.layout.xaxis.type == "log"
    assert all(
        p.state.startswith(("decided", "not decided")) and "question 10 of 40" in p.state for p in paths
    )
    assert all("budget:10 held at question 10" in p.summary for p in paths)
    rep = sequential_replay(seq_db, "run-small", ["m-base", "m-int4"], seeds=[0, 1, 2], rule="paper")
    box = stopping_times_figure(rep.modes)
    assert [t.name for t in box.data] == ["coupled", "independent"] and len(box.data[0].y) == 3


def _make_sequential(db, unseen: int = 0):
    """Mark run-small as a --until run (its stored order, rule and alpha), as generate --until stores them;
    ``unseen``: questions of the benchmark after the stored 40 that the run never generated (it stopped
    early)."""
    import json

    from engine import store
    from engine.stats.sequential import question_order

    order = [f"q{i}" for i in range(40)]
    order = [order[i] for i in question_order(40, 7)] + [f"unseen{i}" for i in range(unseen)]
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
    text = _texts(at).replace("\\", "")  # the page escapes markdown's special characters in data
    assert all(p.state in text and p.summary in text for p in paths) and "question" in paths[0].state
    assert at.selectbox(key="gen_seq_run").value == "run-small" and _n_charts(at) >= 1
    # the form: "Stop when decided" adds --until RULE --alpha A to the generate command
    at.multiselect(key="gen_models").set_value([])
    at.text_input(key="gen_extra").set_value("m1 m2")
    at.checkbox(key="gen_until").check()
    at.text_input(key="gen_until_rule").set_value("decided,budget:30")
    at.number_input(key="gen_until_alpha").set_value(0.1)
    assert at.number_input(key="gen_until_round").value is None  # auto: 16, then doubling
    at.button[0].click().run()  # the form's submit button
    assert not at.exception, at.exception
    assert started, [e.value for e in at.error]
    args = started[-1]
    assert (
        args[args.index("--until") + 1] == "decided,budget:30"
        and args[args.index("--alpha") + 1] == "0.1"
        and "--round-size" not in args
    )
    assert "--rule" not in args  # the dataset's rule: the engine picks it
    at.number_input(key="gen_until_round").set_value(8)
    at.selectbox(key="gen_score_rule").set_value("exact")
    at.button[0].click().run()
    assert not at.exception and started[-1][started[-1].index("--round-size") + 1] == "8"
    assert started[-1][started[-1].index("--rule") + 1] == "exact"  # the rounds score by it


def test_the_sequential_tab_of_a_run_stopped_early_says_whose_N_it_replays(tmp_path, monkeypatch):
    """A --until run that stopped at 40 of a 60-question benchmark: the tab's replay reorders the 40
    questions stored (its N is 40), so it says so beside the run's own stop, the words Home shows."""
    from engine.analysis.sequential import live_stop

    db = build_small_db(tmp_path / "early.duckdb")
    _make_sequential(db, unseen=20)
    ls = live_stop(db, "run-small")
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    at.switch_page(navigation.path("benchmark")).run()
    assert not at.exception, at.exception
    text = _texts(at).replace("\\", "")
    summary = next(d.value for d in at.dataframe if "median stop" in d.value.columns)
    assert (summary["of N"] == 40).all()  # the replay's population: the questions stored
    assert "it generated 40 of the benchmark's 60 questions. A replay can only reorder those 40" in text
    for m in ls.modes:
        assert f"Sequential stop, {m.mode}: {ls.text(m.mode)}." in text
    assert ls.replay_note() is not None
    _make_sequential(db)  # every question generated: the replay is of the benchmark itself, no note
    assert live_stop(db, "run-small").replay_note() is None


def test_generate_args_without_until_unchanged():
    from dashboard.jobs_panel import generate_args

    base = generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0)
    assert "--until" not in base and "--alpha" not in base
    assert generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0, until="width:0.1", alpha=0.2)[
        -4:
    ] == ["--until", "width:0.1", "--alpha", "0.2"]
    assert generate_args(
        ["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0, until="decided", alpha=0.05, round_size=16
    )[-2:] == ["--round-size", "16"]
    # the form's scoring rule reaches the rounds' scoring (it decides when to stop), only with --until
    args = generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0, until="decided", rule="numeric")
    assert args[-2:] == ["--rule", "numeric"]
    assert "--rule" not in generate_args(["a", "b"], "demo", 1, 0.7, 8, ["coupled"], 0, rule="numeric")


def test_cs_chart_axis_ends_at_N_with_whole_number_ticks(seq_db):
    """The log axis read "10, 2, 3, 4, 5" and ran to 50 on a 40-question run."""

    paths = sequential_paths(seq_db, "run-small", "m-base", "m-int4", stop="budget:10", rule="paper")
    ax = sequential_cs_figure(paths).layout.xaxis
    assert list(ax.tickvals) == [1, 2, 5, 10, 20, 40] and list(ax.ticktext)[-1] == "40"
    assert ax.range[0] == 0 and 40 <= 10 ** ax.range[1] < 45


def test_home_puts_the_stop_beside_the_headline_each_with_its_target(tmp_path, monkeypatch):
    """Home's headline interval is about questions like these; a --until run's stop beside it is about
    this benchmark's Δ_N, and a missed sequence reads as missed (never "decided")."""
    from tests.test_sequential_stop import make_sorted_until_run

    db = tmp_path / "home.duckdb"
    make_sorted_until_run(db)
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    text = _texts(at).replace("\\", "")
    assert "95% CI (about questions like these)" in text
    assert (
        "Sequential stop, coupled: stopped at question 36 of 40 (budget:36 held at question 36)" in text
    )
    assert "missed" in text and "about this benchmark's full-run difference Δ_N" in text


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
        # the live section's sentence is the stop's (Home, report): a mode generated alongside the
        # coupled mode says so, never "stopped at question n" beside the coupled mode's own stop
        assert path.summary == stop.text(path.mode)
        at = (st.n_stop or st.n_seen) - 1
        assert (path.lower[at], path.upper[at]) == (st.lower[0], st.upper[0])
