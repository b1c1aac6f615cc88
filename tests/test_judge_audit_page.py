"""The Judge audit page and the Rank-sets page's run source (AppTest), on a stored run with verdicts of
two judges and a human label set naming the run; the run's rank-sets refresh when labels arrive."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.analysis import judge_audit as JA
from engine.analysis import set_audit as SA
from engine.store import comparisons as SC
from tests.conftest import ROOT
from tests.test_judge_audit import RUN, make_db


@pytest.fixture
def audit_db(tmp_path):
    db = tmp_path / "a.duckdb"
    make_db(db, n_prompts=60, n_labels=80)
    return db


def _open(db, monkeypatch, page: str) -> AppTest:
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(navigation.path(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_judge_audit_page_shows_the_audit(audit_db, monkeypatch):
    at = _open(audit_db, monkeypatch, "judge_audit")
    assert "judge j1" in at.selectbox(key="ja_source").format_func(at.selectbox(key="ja_source").value)
    at.number_input(key="ja_boot").set_value(200).run()
    assert not at.exception
    table = at.dataframe[0].value
    ref = JA.judge_audit(audit_db, RUN, "j1", n_boot=200)
    row = table.set_index("figure").loc["agreement (judge vs human)"]
    assert row["estimate"] == pytest.approx(ref.agreement.estimate) and row["lower"] == pytest.approx(
        ref.agreement.lower
    )
    assert "effective number of judges" in table["figure"].tolist()
    assert at.dataframe[1].value["model"].tolist() == ["m0", "m1", "m2"]


def test_rank_sets_page_run_source_refreshes_as_labels_arrive(audit_db, monkeypatch):
    at = _open(audit_db, monkeypatch, "ranksets")
    at.radio(key="rs_kind").set_value("a run's judge verdicts + its human labels").run()
    at.radio(key="rr_procedure").set_value("chi2").run()
    assert not at.exception, [e.value for e in at.exception]
    methods = set(at.dataframe[0].value["method"])
    assert methods == {"PPR (judge + human)", "judge only", "human only"}
    assert any(
        "80 with a human label (96 labels read)" in c.value for c in at.caption
    )  # 16 doubly labelled
    assert any("Planner" in m.value for m in at.markdown)
    # 40 more labels arrive in a second set naming the run: the next rerun shows them
    from engine.analysis.audit_sim import simulated_run

    units, _ = simulated_run(60, 3, 1, np.random.default_rng(0))
    more = units.iloc[:40][["prompt_id", "model_a", "model_b"]].assign(
        human_winner="a", judge_winner=None
    )
    SC.write_set(audit_db, more, "labels-y", "labels", {"run_id": RUN, "mode": "coupled"}, False)
    at.run()
    assert not at.exception
    caps = [c.value for c in at.caption]
    assert any("(136 labels read)" in c for c in caps), (
        caps + [str(e) for e in at.error] + [i.value for i in at.info]
    )
    at.toggle(key="rr_live").set_value(True).run()  # the live fragment renders the same view
    assert not at.exception and any("(136 labels read)" in c.value for c in at.caption)


def _display(at, i: int):
    """The i-th table as the browser shows it (the Styler's display values)."""
    import pyarrow as pa

    proto = at.dataframe[i].proto.arrow_data
    assert proto.HasField("styler"), "the table has no display format (empty cells would read 'None')"
    return pa.ipc.open_stream(proto.styler.display_values).read_all().to_pandas()


def test_comparison_set_source_empty_cells_and_plurals(audit_db, monkeypatch):
    """The source picker lists a comparison set with both labels and audits it; an undefined figure reads
    "–", never "None"; one skipped unit reads "1 sampled unit"."""
    from engine.tasks import labels as T

    units, _ = simulated_run_rows()
    SC.write_set(audit_db, units, "csv-both", "csv", {"judge": "gpt-x"}, False)
    s = T.make_sample(audit_db, RUN, "coupled", 4, seed=1)
    T.record(
        audit_db, s["sample_id"], T.next_unit(audit_db, s["sample_id"], "ann", "t"), "skip", "ann", "t"
    )
    at = _open(audit_db, monkeypatch, "judge_audit")
    caps = [c.value for c in at.caption]
    assert any("1 sampled unit skipped" in c for c in caps), caps
    shown = _display(at, 0).set_index("figure")
    assert shown.loc["human-human agreement", "estimate"] != "None"
    sb = at.selectbox(key="ja_source")
    sb.set_value(next(k for k, o in enumerate(sb.options) if "set csv-both" in o)).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value.set_index("figure")
    ref = SA.set_judge_audit(audit_db, "csv-both", n_boot=1000)
    assert table.loc["agreement (judge vs human)", "estimate"] == pytest.approx(ref.agreement.estimate)
    assert table.loc["Gwet's AC1 (a / b / tie)", "estimate"] == pytest.approx(ref.gwet_ac1.estimate)
    shown = _display(at, 0).set_index("figure")
    assert ref.human_agreement.estimate is None  # no second labeller in the set
    assert shown.loc["human-human agreement", "estimate"] == "–"
    assert "None" not in shown.to_string()


def simulated_run_rows():
    """A comparison set with both labels on every row (no provenance): 30 prompts, 3 models."""
    from engine.analysis.audit_sim import WIN, simulated_run

    units, _ = simulated_run(30, 3, 0, np.random.default_rng(4))
    h = np.where(np.random.default_rng(5).random(len(units)) < 0.7, units["judge"], 1)
    rows = units[["prompt_id", "model_a", "model_b"]].assign(
        human_winner=WIN[h], judge_winner=WIN[units["judge"].to_numpy()]
    )
    return rows, units
