"""The label planner (docs/METHODS.md 9.3; engine/stats/label_plan.py, engine/analysis/run_ranksets.py),
checked by subsampling: predictions made from half of a run's labels against the widths measured
with all of them, over seeds; plus exact cases of the closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from engine.analysis.audit_sim import simulated_run
from engine.analysis.run_ranksets import labelled_term, rank_units, unit_frame
from engine.errors import UserError
from engine.stats import label_plan as LP


def test_predicted_sigma_scales_the_labelled_term_only():
    sigma = np.array([[3.0, 1.0], [1.0, 2.0]])
    lab = np.array([[2.0, 0.5], [0.5, 1.0]])
    np.testing.assert_allclose(LP.predicted_sigma(sigma, lab, 100, 0), sigma)
    np.testing.assert_allclose(LP.predicted_sigma(sigma, lab, 100, 100), sigma - lab / 2)
    np.testing.assert_allclose(LP.predicted_sigma(sigma, lab, 100, np.inf), sigma - lab)


def test_more_for_ci_width_closed_form_hits_the_target():
    sigma = np.diag([0.004, 0.003])
    lab = np.diag([0.003, 0.001])
    z2 = 2 * 1.959963984540054
    target = z2 * np.sqrt(0.0025)  # needs floor 0.001 + 0.003 n/(n+n') = 0.0025 -> n' = n
    more = LP.more_for_ci_width(sigma, lab, 200, 0.05, target)
    assert more == 200
    assert LP.ci_widths(sigma, lab, 200, more, 0.05).max() <= target + 1e-12
    assert LP.ci_widths(sigma, lab, 200, more - 2, 0.05).max() > target
    assert (
        LP.more_for_ci_width(sigma, lab, 200, 0.05, z2 * np.sqrt(0.0009)) is None
    )  # below the judge floor
    with pytest.raises(UserError):
        LP.more_for_ci_width(sigma, lab, 200, 0.05, 0.0)


def test_rankset_width_plan_reaches_its_target():
    theta = np.array([0.7, 0.5, 0.3])
    sigma = np.eye(3) * 0.01
    lab = np.eye(3) * 0.009
    more = LP.more_for_rankset_width(theta, sigma, lab, 100, 0.05, 1)
    assert more is not None and more > 0
    assert LP.rankset_width(theta, LP.predicted_sigma(sigma, lab, 100, more), 0.05, "maxt", 0, 4000) <= 1
    tied = np.array([0.5, 0.5, 0.3])
    assert (
        LP.more_for_rankset_width(tied, sigma, lab, 100, 0.05, 1) is None
    )  # equal estimates: never separated


def _predict_from_half(seed: int):
    units, labels = simulated_run(400, 4, 600, np.random.default_rng(seed), doubled=0)
    half = labels.iloc[:300]  # the first half of a uniform random sample is a uniform random sample
    rh = rank_units("r", "j", units, half, procedure="chi2")
    rf = rank_units("r", "j", units, labels, procedure="chi2")
    ph, pf = rh.results["ppr"], rf.results["ppr"]
    sig_lab, n = labelled_term(unit_frame(units, half), ph)  # what plan_labels scales
    assert n == 300
    pred = LP.ci_widths(np.array(ph.sigma), sig_lab, n, 300, 0.05)

    def widths(r):
        return np.array([r.theta_ci[m][1] - r.theta_ci[m][0] for m in r.models])

    return pred, widths(pf), widths(ph)


def test_planner_by_subsampling_half_the_labels():
    """Tolerance: per model within 20% of the width measured with all labels, and on average over
    4 seeds x 4 models within 8%; keeping the half-label widths (no prediction) misses by ~40%."""
    ratios, naive = [], []
    for seed in range(4):
        pred, actual, now = _predict_from_half(seed)
        ratios.append(pred / actual)
        naive.append(now / actual)
    r = np.concatenate(ratios)
    assert np.all(np.abs(np.log(r)) < np.log(1.2)), r
    assert abs(np.mean(np.log(r))) < np.log(1.08), r
    assert np.mean(np.log(np.concatenate(naive))) > np.log(1.2)  # the prediction is doing work


def test_plan_text_and_result():
    units, labels = simulated_run(200, 3, 200, np.random.default_rng(0), doubled=0)
    res = rank_units("r", "j", units, labels, procedure="chi2", plan_width=1, plan_ci_width=0.5)
    p = res.plan
    assert p is not None and p.n_labelled == 200 and p.more_for_ci_width == 0
    assert "theta CIs no wider than 0.5: met with the labels there are" in p.text  # 0 more
    assert p.ci_width_floor <= p.ci_width_now
    assert set(res.table.method) == {"PPR (judge + human)", "judge only", "human only"}


def test_rankset_sizes_from_half_the_labels():
    """Mean max-t rank-set size (5 models, normal calibration, same seeded draws) predicted from half the
    labels against the size with all of them: mean absolute error over 6 seeds <= 0.5 rank, and
    smaller than keeping the half-label sizes (no prediction)."""

    def sizes(theta, sig):
        rs = LP.R.rank_sets(
            theta, sig, 0.05, procedure="maxt", rng=np.random.default_rng(0), n_draws=4000
        )
        return np.mean(np.asarray(rs["upper"]) - np.asarray(rs["lower"]) + 1)

    err, naive = [], []
    for seed in range(6):
        units, labels = simulated_run(400, 5, 600, np.random.default_rng(seed), doubled=0)
        half = labels.iloc[:300]
        ph = rank_units("r", "j", units, half, procedure="chi2").results["ppr"]
        pf = rank_units("r", "j", units, labels, procedure="chi2").results["ppr"]
        sig_lab, n = labelled_term(unit_frame(units, half), ph)
        th, tf = (np.array([r.theta[m] for m in r.models]) for r in (ph, pf))
        actual = sizes(tf, np.array(pf.sigma))
        err.append(abs(sizes(th, LP.predicted_sigma(np.array(ph.sigma), sig_lab, n, 300)) - actual))
        naive.append(abs(sizes(th, np.array(ph.sigma)) - actual))
    assert np.mean(err) <= 0.5 and np.mean(err) < np.mean(naive), (err, naive)
