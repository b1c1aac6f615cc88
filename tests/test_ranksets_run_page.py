"""The Rank-sets page leads to what the run has: a run with human labels opens on
PPR over its own units, the page says what θ and PPR are, the planner never asks for more labels than
the run has units without saying that more generation is needed, and θ's interval stays in [0, 1]."""

from __future__ import annotations

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.analysis.audit_sim import simulated_run
from engine.analysis.run_ranksets import rank_units
from tests.conftest import ROOT
from tests.test_judge_audit import make_db


@pytest.fixture(scope="module")
def small_labelled_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("rsrun") / "r.duckdb"
    make_db(
        db, n_prompts=14, n_labels=12
    )  # 14 prompts x 3 pairs = 42 judged units, 12 labelled (+2 twice)
    return db


def test_theta_interval_exact_cases():
    from engine.analysis.ranksets import theta_interval

    assert theta_interval(0.1, 0.25) == pytest.approx([0.0, 0.35])
    assert theta_interval(0.9, 0.25) == pytest.approx([0.65, 1.0])
    assert theta_interval(0.5, 0.1) == pytest.approx([0.4, 0.6])
    assert theta_interval(-0.4, 0.1) == [0.0, 0.0]  # wholly below 0: the nearest end


def test_ppr_intervals_stay_in_0_1_with_few_labels():
    """10 labels on 42 units: the normal intervals θ̂ ± z·se of PPR and human-only pass below 0
    (checked), and the table shows them intersected with [0, 1]."""
    from scipy import stats

    units, labels = simulated_run(14, 3, 10, np.random.default_rng(0), doubled=0)
    res = rank_units("r", "j", units, labels, procedure="maxt")
    z = stats.norm.ppf(0.975)
    for name, r in res.results.items():
        assert r is not None, name
        se = np.sqrt(np.diag(np.asarray(r.sigma)))
        theta = np.array([r.theta[m] for m in r.models])
        lo, hi = np.array([r.theta_ci[m] for m in r.models]).T
        np.testing.assert_allclose(lo, np.clip(theta - z * se, 0, 1), atol=1e-12)
        np.testing.assert_allclose(hi, np.clip(theta + z * se, 0, 1), atol=1e-12)
    ppr = res.results["ppr"]
    assert min(ppr.theta[m] - z * np.sqrt(ppr.sigma[i][i]) for i, m in enumerate(ppr.models)) < 0
    assert res.table["theta_low"].min() == 0.0 and res.table["theta_high"].max() <= 1.0


def test_the_planner_caps_at_the_units_the_run_has():
    units, labels = simulated_run(14, 3, 10, np.random.default_rng(1), doubled=0)
    res = rank_units("r", "j", units, labels, procedure="maxt", plan_width=2, plan_ci_width=0.3)
    p = res.plan
    assert p is not None and p.n_units == 42 and p.n_unlabelled == 32
    assert p.more_for_ci_width is not None and p.more_for_ci_width > p.n_unlabelled
    assert (
        f"about {p.more_for_ci_width:,} more labels, more than the run has: only 32 judged units of 42 "
        "are unlabelled, so label them all and generate (and judge) more questions" in p.text
    )
    assert p.ci_width_all is not None and p.ci_width_all > 0.3  # all 32 labelled still misses 0.3
    assert "with all 32 unlabelled units of this run labelled" in p.text


def _open(db, monkeypatch) -> AppTest:
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(navigation.path("ranksets")).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_a_run_with_labels_opens_on_ppr_and_the_page_explains_theta_and_ppr(
    small_labelled_db, monkeypatch
):
    at = _open(small_labelled_db, monkeypatch)
    assert at.radio(key="rs_kind").value == "a run's judge verdicts + its human labels"
    from engine.analysis.run_ranksets import METHODS_TEXT

    assert "upload human labels" not in " ".join(c.value for c in at.caption).lower()
    table = at.dataframe[0].value
    assert set(table["method"]) == {"PPR (judge + human)", "judge only", "human only"}
    assert table["theta_low"].min() >= 0.0 and table["theta_high"].max() <= 1.0
    assert any(m.value == METHODS_TEXT for m in at.markdown)
    assert "strict win-rate" in METHODS_TEXT and "prediction-powered ranking" in METHODS_TEXT
    plan = next(m.value for m in at.markdown if m.value.startswith("**Planner**"))
    assert "more than the run has" in plan and "generate (and judge) more questions" in plan
    # the comparison-set source, on the run's verdicts: the caption points to the labels it has
    at.radio(key="rs_kind").set_value("comparison sets / Arena files").run()
    assert not at.exception, [e.value for e in at.exception]
    caps = " ".join(c.value for c in at.caption)
    assert "The run has 14 human labels" in caps and "Upload human labels" not in caps  # 2 doubled
