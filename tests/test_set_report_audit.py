"""The comparison-set report's judge-audit section (engine/report/set_audit.py) and a
set whose every row carries both labels gets a report (human-label rank-sets, the audit) instead of an
error that suggests a ``--human-labels`` flag ``report`` does not have."""

from __future__ import annotations

import pytest

from engine.analysis.set_audit import set_judge_audit
from engine.cli import main as cli
from engine.report.build import set_report
from engine.store import comparisons as SC
from tests.test_judge_audit_page import simulated_run_rows


@pytest.fixture
def both(tmp_path):
    db = tmp_path / "s.duckdb"
    rows, _ = simulated_run_rows()
    SC.write_set(db, rows, "both", "csv", {"judge": "gpt-x"}, False)
    SC.write_set(db, rows.assign(human_winner=None), "judge-only", "csv", {}, False)
    return db


def test_report_of_a_set_with_both_labels_on_every_row(both, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert cli(["report", "--db", str(both), "--set", "both", "--out", str(out)]) == 0
    html = out.read_text()
    assert "Judge audit against the human labels" in html and "Gwet" in html
    assert "engine ranksets --set both --method ppr --human-labels N" in html
    assert "report --set both --human-labels" not in html


def test_set_audit_section_numbers_are_the_set_audit(both):
    rep = set_report(both, "both", seed=3)
    sec = rep.section("set_judge_audit")
    assert sec is not None
    res = set_judge_audit(both, "both", seed=3)
    rows = {r[0].text: r[1] for r in sec.tables[0].rows}
    assert rows["agreement (judge vs human)"].value == pytest.approx(res.agreement.estimate)
    assert "Gwet's AC1 (a / b / tie)" in rows and "Krippendorff's alpha (nominal)" in rows
    assert set_report(both, "judge-only").section("set_judge_audit") is None
