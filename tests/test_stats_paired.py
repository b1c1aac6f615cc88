"""Paired benchmark comparison (docs/METHODS.md 7.1): t over questions, MDE, planner, McNemar on one outcome per question."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from engine.errors import UserError
from engine.stats import benchmark as bm
from engine.stats import paired_difference as pdiff
from engine.stats import planning
from engine.stats import simulate as S


def test_paired_diff_exact_tiny():
    A = np.array([[1, 1, 0], [0, 0, 0], [1, 1, 1], [1, 0, 1]], float)
    B = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 0], [0, 0, 0]], float)
    d = (A - B).mean(axis=1)  # 1/3, -1/3, 2/3, 2/3
    r = pdiff.paired_diff_ci(A, B, alpha=0.05, power=0.8)
    se = d.std(ddof=1) / 2
    assert r["diff"] == pytest.approx(d.mean()) and r["se"] == pytest.approx(se)
    assert r["p_value"] == pytest.approx(stats.ttest_1samp(d, 0).pvalue)
    assert r["ci_low"] == pytest.approx(d.mean() - stats.t.ppf(0.975, 3) * se)
    assert r["mde"] == pytest.approx((1.959963984540054 + 0.8416212335729143) * se)
    assert r["corr"] == pytest.approx(np.corrcoef(A.mean(1), B.mean(1))[0, 1])
    assert r["bootstrap"] is None and (r["n_questions"], r["n_repeats"], r["df"]) == (4, 3, 3)
    comp = pdiff.variance_components_diff(A, B)
    assert r["sigma2_within"] == pytest.approx(comp["sigma2_within"])
    with pytest.raises(UserError, match="2 questions"):
        pdiff.paired_diff_ci(A[:1], B[:1])


def test_mcnemar_majority_is_one_outcome_per_question():
    A = np.array([[1, 1, 0], [0, 0, 1], [1, 1, 1]], float)
    B = np.array([[0, 0, 0], [1, 1, 0], [1, 1, 1]], float)
    r = pdiff.mcnemar_majority(A, B)
    assert (r["n"], r["n10"], r["n01"]) == (3, 1, 1)
    assert r["outcome"] == "majority vote per question"


def test_paired_t_holds_size_with_clustered_questions_and_mcnemar_over_pairs_does_not():
    d = S.BenchmarkDesign(n_questions=100, n_repeats=5, a=(0.2, 0.2), question_sd=1.0, model_sd=0.7)
    assert S.benchmark_truth(d) == 0.0
    rng = np.random.default_rng(0)
    rej_t, rej_pairs = [], []
    for _ in range(400):
        A, B = S.simulate_benchmark(d, rng)
        rej_t.append(pdiff.paired_diff_ci(A, B)["p_value"] < 0.05)
        rej_pairs.append(pdiff.mcnemar(A, B)["p_value"] < 0.05)
    # 400 reps: MC SE 0.011 at 0.05; bound 3 SE above nominal
    assert np.mean(rej_t) <= 0.083, np.mean(rej_t)
    assert np.mean(rej_pairs) > 0.15  # the invalid (question, repeat) McNemar, for the record


@pytest.mark.parametrize("coupled", [True, False])
def test_planner_predicts_power_and_se(coupled):
    # components from a large pilot; the planned design's simulated power and SE match the prediction
    rng = np.random.default_rng(1 if coupled else 2)
    base = dict(a=(0.25, 0.0), question_sd=1.0, model_sd=0.5, coupled=coupled)
    pilot = S.simulate_benchmark(S.BenchmarkDesign(n_questions=6000, n_repeats=4, **base), rng)
    comp = pdiff.variance_components_diff(*pilot)
    delta = S.benchmark_truth(S.BenchmarkDesign(**base))
    plan = planning.plan_mde({"m": comp}, mde=delta, alpha=0.05, power=0.8, repeats=(3,))[0]
    n, k = plan["questions"], plan["repeats"]
    pred_se = float(planning.predict_se(comp["sigma2_between"], comp["sigma2_within"], n, k))
    rej, diffs = [], []
    for _ in range(300):
        A, B = S.simulate_benchmark(S.BenchmarkDesign(n_questions=n, n_repeats=k, **base), rng)
        r = pdiff.paired_diff_ci(A, B)
        rej.append(r["p_value"] < 0.05)
        diffs.append(r["diff"])
    # 300 reps: power SE 0.023 at 0.8 (bound 3 SE); sd of Delta_hat within 15% (its own MC error ~4%)
    assert abs(np.mean(rej) - 0.8) <= 0.07, (np.mean(rej), n)
    assert np.std(diffs, ddof=1) == pytest.approx(pred_se, rel=0.15)


def test_independent_components_predicted_from_a_coupled_run():
    rng = np.random.default_rng(3)
    base = dict(n_questions=4000, n_repeats=6, a=(0.3, 0.1))
    Ac, Bc = S.simulate_benchmark(S.BenchmarkDesign(coupled=True, **base), rng)
    Ai, Bi = S.simulate_benchmark(S.BenchmarkDesign(coupled=False, **base), rng)
    pred = bm.independent_components(Ac, Bc)
    meas = pdiff.variance_components_diff(Ai, Bi)
    assert pred["sigma2_within"] == pytest.approx(meas["sigma2_within"], rel=0.05)
    assert pred["sigma2_between"] == pytest.approx(meas["sigma2_between"], rel=0.2)
    assert (
        pdiff.variance_components_diff(Ac, Bc)["sigma2_within"] < 0.6 * pred["sigma2_within"]
    )  # coupling helps
    rows = planning.plan_mde(
        {"coupled": pdiff.variance_components_diff(Ac, Bc), "independent": pred}, 0.03
    )
    nq = {(r["mode"], r["repeats"]): r["questions"] for r in rows}
    assert all(nq["coupled", k] < nq["independent", k] for k in (1, 2, 5, 10))
    comps = {"coupled": pdiff.variance_components_diff(Ac, Bc), "independent": pred}
    for r in rows:  # the smallest n reaching the power
        c = comps[r["mode"]]
        assert r["power"] >= 0.8
        assert (
            planning.paired_power(
                0.03, c["sigma2_between"], c["sigma2_within"], r["questions"] - 1, r["repeats"]
            )
            < 0.8
        )
    with pytest.raises(UserError, match="detectable"):
        planning.plan_mde({"m": pred}, 0.0)


def test_paired_bootstrap_check_agrees_with_t():
    rng = np.random.default_rng(4)
    A, B = S.simulate_benchmark(S.BenchmarkDesign(n_questions=400, n_repeats=5, a=(0.3, 0.2)), rng)
    r = pdiff.paired_diff_ci(A, B, rng=np.random.default_rng(5), n_resamples=3000)
    assert r["bootstrap"]["se"] == pytest.approx(r["se"], rel=0.08)
    assert r["bootstrap"]["ci_low"] == pytest.approx(r["ci_low"], abs=0.25 * r["se"])
    assert math.isfinite(r["corr"]) and r["corr"] > 0.5
