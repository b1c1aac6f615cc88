"""The run report's sequential and judge-audit sections (engine/report/run_sequential.py,
engine/report/run_audit.py; docs/REPORT.md): a ``generate --until`` run reports its stop with the numbers
of the run itself, a fixed run with enough questions a replay equal to ``sequential_replay``, and a run with
verdicts and human labels the audit equal to ``engine judge-audit --json``; runs without them have neither."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from engine import cli
from engine.analysis.sequential import sequential_replay
from engine.report.context import RunContext
from engine.report.run_audit import judge_audit_section
from engine.report.run_sequential import REPLAY_ORDERS, sequential_section
from engine.store.db import insert_df, transaction
from tests.system_packages import chromium_or_skip
from tests.test_app import build_small_db
from tests.test_judge_audit import RUN, make_db


def _keyed(html: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r'data-key="([^"]+)" data-value="([^"]+)"', html)}


def _report(db, run: str, tmp_path) -> str:
    out = tmp_path / f"{run}.html"
    assert cli.main(["report", "--run", run, "--db", str(db), "--out", str(out)]) == 0
    return out.read_text()


@pytest.fixture(scope="module")
def until_run(tmp_path_factory):
    import torch

    from tests.test_until import _run

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        db = tmp_path_factory.mktemp("until_report") / "u.duckdb"
        res = _run(db)
    finally:
        torch.set_num_threads(before)
    return db, res


def test_an_until_run_reports_its_stop_with_the_run_s_own_numbers(until_run, tmp_path):
    db, res = until_run
    html = _report(db, res.run_id, tmp_path)
    assert '<section id="sequential">' in html and '<section id="judge_audit">' not in html
    got = _keyed(html)
    pair = res.pairs[0]
    for m in res.modes:  # both modes: the CS at the stop equals what the live loop decided on
        lo, up = m.state.lower, m.state.upper
        assert got[f"seq/{m.mode}/{pair}/lower"] == pytest.approx(float(lo[0]), abs=1e-12)
        assert got[f"seq/{m.mode}/{pair}/upper"] == pytest.approx(float(up[0]), abs=1e-12)
    coupled = res.modes[0]
    assert coupled.n_stop is not None and f"stopped at question {coupled.n_stop:,} of {res.N:,}" in html
    assert "not valid for the stopping decision" in html and "--until width:0.5" in html
    assert "Sequential replay" not in html  # a live run shows its own stop, not a what-if


def _audit_db(path):
    units, labels, _ = make_db(path)
    models = sorted(set(units.model_a) | set(units.model_b))
    rows = [
        (RUN, m, p, 0, "coupled", "exact", "x", float((hash((m, p)) % 3) == 0))
        for m in models
        for p in sorted(units.prompt_id.unique())
    ]
    sc = pd.DataFrame(
        rows, columns=["run_id", "model", "prompt_id", "repeat", "mode", "rule", "extracted", "score"]
    )
    with transaction(path) as con:
        insert_df(con, "scores", sc, list(sc.columns))
    return path


@pytest.fixture(scope="module")
def audit(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit_report")
    db = _audit_db(d / "a.duckdb")
    out = d / "audit.html"
    assert cli.main(["report", "--run", RUN, "--db", str(db), "--out", str(out)]) == 0
    return db, out


def test_a_run_with_verdicts_and_labels_reports_the_judge_audit(audit, capsys):
    db, out = audit
    html = out.read_text()
    assert '<section id="judge_audit">' in html
    capsys.readouterr()
    assert cli.main(["judge-audit", "--run", RUN, "--judge", "j1", "--db", str(db), "--json"]) == 0
    want = json.loads(capsys.readouterr().out)
    got = _keyed(html)
    assert got["audit/j1/agreement"] == pytest.approx(want["agreement"]["estimate"], abs=1e-12)
    assert got["audit/j1/kappa"] == pytest.approx(want["kappa"]["estimate"], abs=1e-12)
    assert got["audit/j2/agreement"] is not None and "Rank-sets by method" in html and "PPR" in html
    # this fixed run (40 questions, coupled) gets the replay, its numbers those of sequential_replay
    ctx = RunContext(db, RUN)
    sec = sequential_section(ctx)
    assert sec is not None and sec.title.startswith("Sequential replay")
    rep = sequential_replay(
        db,
        RUN,
        models=list(ctx.pair),
        mode="both",
        seeds=list(range(REPLAY_ORDERS)),
        rule=ctx.summary.rule,
    )
    s = rep.mode("coupled").summary()
    assert (
        got["seq_replay/coupled/median"] == s["median"]
        and got["seq_replay/coupled/decided"] == s["decided"]
    )


def test_paper_tables_carry_the_audit_and_the_sequential_tables(audit, until_run, tmp_path, capsys):
    """--format md: the judge audit's table of each judge (its intervals as the HTML shows them) and the
    sequential section's table (a live run: the CS at the stop) join the headline tables."""
    db, _ = audit
    md = tmp_path / "audit.md"
    assert cli.main(["report", "--run", RUN, "--db", str(db), "--format", "md", "--out", str(md)]) == 0
    text = md.read_text()
    assert "**Judge j1: agreement with the human labels" in text and "**Judge j2: agreement" in text
    assert "| agreement (judge vs human) |" in text and "Stopping question over" in text
    udb, res = until_run
    md2 = tmp_path / "until.md"
    assert (
        cli.main(["report", "--run", res.run_id, "--db", str(udb), "--format", "md", "--out", str(md2)])
        == 0
    )
    assert "Each pair's confidence sequence at the stop" in md2.read_text()


def test_label_page_votes_alone_bring_the_audit_and_its_needs_more_labels_notices(tmp_path):
    """Labels still in the Label page's log (not synced) count: no labels, no section; 5 votes, the section
    with "needs about N more labels"."""
    from engine.tasks import labels as T

    db = tmp_path / "few.duckdb"
    units, _, _ = make_db(db, n_labels=0)
    _audit_db_scores_only(db, units)
    assert judge_audit_section(RunContext(db, RUN)) is None
    sid = T.make_sample(db, RUN, "coupled", 6, seed=3)["sample_id"]
    for v in ("first", "second", "tie", "first", "second"):
        T.record(db, sid, T.next_unit(db, sid, "ann", "tab1"), v, "ann", "tab1")
    sec = judge_audit_section(RunContext(db, RUN))
    assert sec is not None and "of 5 units" in sec.paragraphs[0]
    assert any(
        "agreement and kappa: 5 labelled units, needs about 25 more labels" in w for w in sec.warnings
    )


def _audit_db_scores_only(path, units):
    models = sorted(set(units.model_a) | set(units.model_b))
    sc = pd.DataFrame(
        [
            (RUN, m, p, 0, "coupled", "exact", "x", 1.0)
            for m in models
            for p in sorted(units.prompt_id.unique())
        ],
        columns=["run_id", "model", "prompt_id", "repeat", "mode", "rule", "extracted", "score"],
    )
    with transaction(path) as con:
        insert_df(con, "scores", sc, list(sc.columns))


def test_runs_without_them_have_neither_section(tmp_path):
    db = build_small_db(
        tmp_path / "s.duckdb"
    )  # verdicts but no human labels naming the run, 40 questions
    ctx = RunContext(db, "run-small")
    assert judge_audit_section(ctx) is None and sequential_section(ctx) is not None  # the replay
    with transaction(db) as con:  # 10 questions: too few for a replay
        con.execute(
            "DELETE FROM scores WHERE prompt_id NOT IN ('q0','q1','q2','q3','q4','q5','q6','q7','q8','q9')"
        )
    small = RunContext(db, "run-small")
    assert small.summary.n_questions == 10 and sequential_section(small) is None


@pytest.mark.browser
def test_the_audit_and_replay_figures_draw_offline_in_chromium(audit):
    chromium = chromium_or_skip()
    sync = pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")
    url = audit[1].resolve().as_uri()
    requested, errors = [], []
    with sync.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = b.new_page(viewport={"width": 1200, "height": 1600})
        page.route(
            "**/*",
            lambda r: r.continue_()
            if r.request.url == url
            else (requested.append(r.request.url), r.abort()),
        )
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        ids = page.evaluate(
            "Array.from(document.querySelectorAll('#judge_audit div.plot[data-figure], "
            "#sequential div.plot[data-figure]')).map(d => d.id)"
        )
        page.wait_for_function(
            "document.querySelectorAll('div.plot.js-plotly-plot .main-svg').length >= "
            "document.querySelectorAll('div.plot[data-figure]').length",
            timeout=60_000,
        )
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('#judge_audit div.plot, #sequential div.plot'))"
            ".filter(d => d.querySelector('.main-svg .cartesianlayer') !== null).length"
        )
        b.close()
    assert requested == [] and errors == []
    assert len(ids) == 5 and drawn == 5  # 2 judges' bias, PPR rank-sets, the replay's two
