"""One file for a judged and labelled run: ``report --run`` on a chat run without
scores gives the judge's win-rates with Bradley-Terry and Elo and their intervals, the judge audit, the
PPR rank-sets with the labels and the planner, from the CLI and the dashboard's Download button;
``score`` refuses a run without gold answers instead of storing empty scores; Home never defaults to a
run it cannot show."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest

from engine import cli
from engine.errors import UserError
from tests.test_app import ROOT, TIMEOUT, build_small_db
from tests.test_judge_audit import RUN, make_db


def _keyed(html: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r'data-key="([^"]+)" data-value="([^"]+)"', html)}


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict[str, Path]:
    """The judge-audit tests' run: 3 models, 2 judges, 72 human labels, no scores (no gold answers)."""
    d = tmp_path_factory.mktemp("judged")
    db = d / "j.duckdb"
    make_db(db)
    out = d / "judged.html"
    assert cli.main(["report", "--run", RUN, "--db", str(db), "--out", str(out)]) == 0
    return {"db": db, "html": out}


def test_a_judged_run_without_scores_reports_winrates_elo_audit_and_ppr(judged, capsys):
    html = judged["html"].read_text()
    assert re.findall(r'<section id="([^"]+)">', html) == [
        "headline",
        "design",
        "winrates",
        "judge_audit",
        "reproduce",
    ]
    got = _keyed(html)
    from engine.analysis.winrates import winrates_view

    v = winrates_view(judged["db"], "judgments", RUN, judge="j1", elo=True)
    table = v.table.set_index("model")
    elo = v.ratings["coupled"].set_index("model")
    for m in table.index:  # the headline's numbers are the win-rate analysis' own
        assert got[f"winrate/{m}"] == pytest.approx(table.loc[m, "coupled_winrate"], abs=1e-12)
        assert got[f"elo/{m}"] == pytest.approx(elo.loc[m, "elo"], abs=1e-9)
    assert "Elo [95% CI]" in html and "BT strength" in html
    capsys.readouterr()
    assert (
        cli.main(["judge-audit", "--run", RUN, "--judge", "j1", "--db", str(judged["db"]), "--json"])
        == 0
    )
    want = json.loads(capsys.readouterr().out)
    assert got["audit/j1/agreement"] == pytest.approx(want["agreement"]["estimate"], abs=1e-12)
    assert "Rank-sets (PPR (judge + human)" in html and "Label planner: with 60 labels" in html
    assert "score it first" not in html and "python -m engine score" not in html


def test_the_download_button_serves_the_judged_run_s_report(judged, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from engine.report.build import run_report_html

    body = run_report_html(judged["db"], RUN).decode()
    assert '<section id="judge_audit">' in body and "Elo [95% CI]" in body
    monkeypatch.setenv("COUPLED_EVAL_DB", str(judged["db"]))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("app_pages/judge_audit.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Download report" in [b.proto.label for b in at.get("download_button")]


def test_score_refuses_a_run_without_gold_answers_and_stores_nothing(tmp_path):
    from engine.tasks.scoring import score_run

    db = tmp_path / "chat.duckdb"
    make_db(db)
    with pytest.raises(UserError, match=r"no gold answers to score .* nothing was stored: compare"):
        score_run(db, RUN, "exact")
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM scores").fetchone()[0] == 0
    con.close()


def test_home_defaults_to_the_newest_run_it_can_show(tmp_path, monkeypatch):
    """A newer run scored without gold answers (stored by an older ``score``) is never Home's default;
    chosen, it says why in one line instead of an empty section."""
    from streamlit.testing.v1 import AppTest

    db = build_small_db(tmp_path / "h.duckdb")
    con = duckdb.connect(str(db))
    con.execute(
        "INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES ('chat', 'test', 'prompts', 1)"
    )
    con.execute("INSERT INTO prompts VALUES ('chat', 'c0', 0, NULL, 'Say hi', NULL, NULL, 'Say hi')")
    con.execute(
        "INSERT INTO runs (run_id, created_at, dataset_id, config, status, n_units) VALUES "
        "('chat-new', now() + INTERVAL 1 DAY, 'chat', '{}', 'done', 2)"
    )
    for m in ("m-base", "m-int8"):
        con.execute(
            "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, text) VALUES "
            "('chat-new', ?, 'c0', 0, 'coupled', 'hi')",
            [m],
        )
        con.execute(
            "INSERT INTO scores VALUES ('chat-new', ?, 'c0', 0, 'coupled', 'exact', 'hi', NULL)", [m]
        )
    con.close()
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    box = at.selectbox(key="home_run")
    assert box.options[0].startswith("chat-new") and box.value == "run-small"
    assert any("Headline findings" in s.value for s in at.subheader)
    box.set_value("chat-new").run()
    assert not at.exception
    assert any("chat-new" in i.value and "no gold answers" in i.value for i in at.info)
