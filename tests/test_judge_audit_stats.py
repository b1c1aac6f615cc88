"""engine/stats/judge_audit.py: exact tiny cases, vectorised vs naive loops, and a seeded coverage
simulation of the prompt-clustered bootstrap interval (docs/METHODS.md 9.2)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import UserError
from engine.stats import judge_audit as ja


def _ones(F):
    return ja.cluster_sums(F, np.zeros(len(F), np.int64), 1)[0]


def test_agreement_kappa_exact_tiny_case():
    # judge a a b b tie, human a b b tie tie: agree 3/5; judge (2,2,1)/5, human (1,2,2)/5
    j = np.array([0, 0, 1, 1, 2])
    h = np.array([0, 1, 1, 2, 2])
    po, kappa = ja.agreement_kappa_of_sums(_ones(ja.agreement_features(j, h)))
    pe = (2 * 1 + 2 * 2 + 1 * 2) / 25
    assert po == pytest.approx(0.6)
    assert kappa == pytest.approx((0.6 - pe) / (1 - pe))


def test_agreement_ignores_missing_and_kappa_undefined_for_one_category():
    j = np.array([0, 0, -1, 1])
    h = np.array([0, 0, 1, -1])
    po, kappa = ja.agreement_kappa_of_sums(_ones(ja.agreement_features(j, h)))
    assert po == 1.0 and np.isnan(kappa)  # both raters use one category only: p_e = 1


def test_bad_codes_are_one_line_user_error():
    with pytest.raises(UserError, match="outcome codes"):
        ja.agreement_features(np.array([0, 3]), np.array([0, 0]))


def test_bias_exact_tiny_case():
    # models 0,1,2; units (0,1) judge a human b; (0,2) judge a human a; (1,2) judge tie human b
    first, second = np.array([0, 0, 1]), np.array([1, 2, 2])
    b = ja.bias_of_sums(
        _ones(ja.bias_features(first, second, np.array([0, 0, 2]), np.array([1, 0, 1]), 3))
    )
    # model 0: judge 2/2, human 1/2 -> +0.5; model 1: judge 0/2, human 1/2 -> -0.5; model 2: 0/2 vs 1/2 -> -0.5
    np.testing.assert_allclose(b, [0.5, -0.5, -0.5])


def test_bias_equals_ppr_rectifier_with_lambda_one():
    from engine.stats.ranking import winrate_pointestimate

    rng = np.random.default_rng(3)
    k, n = 4, 300
    first = rng.integers(0, k, n)
    second = (first + rng.integers(1, k, n)) % k
    j, h = rng.integers(0, 3, n), rng.integers(0, 3, n)
    b = ja.bias_of_sums(_ones(ja.bias_features(first, second, j, h, k)))
    rect = winrate_pointestimate(first, second, (j == 0) * 1.0 - (h == 0), (j == 1) * 1.0 - (h == 1), k)
    np.testing.assert_allclose(b, rect)


def test_position_exact_tiny_case():
    # unit 1: ab says a, ba says a (consistent; first picked once of 2 decisive)
    # unit 2: ab says a, ba says b (flips: first picked both times)
    # unit 3: ab tie, ba tie (consistent; no decisive)
    # unit 4: ab missing (left out)
    F = ja.position_features(np.array([0, 0, 2, -1]), np.array([0, 1, 2, 0]))
    cons, pref = ja.position_of_sums(_ones(F))
    assert cons == pytest.approx(2 / 3)
    assert pref == pytest.approx(3 / 4 - 0.5)


def test_majority_rule():
    labels = np.array([[0, 0, 1], [0, 1, 2], [1, 1, 1], [0, -1, 0], [2, 0, 2]])
    np.testing.assert_array_equal(ja.majority(labels), [0, 2, 1, -1, 2])


def test_error_correlation_exact_and_effective_judges():
    h = np.zeros(8, np.int64)
    e1 = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    e2 = np.array([1, 0, 0, 0, 1, 0, 1, 0])
    J = np.stack([e1, e2], axis=1)  # a wrong label (1) is an error against human a (0)
    out = ja.error_correlation_of_sums(_ones(ja.error_features(J, h)))
    r = np.corrcoef(e1, e2)[0, 1]
    assert out[0] == pytest.approx(r)
    assert out[1] == pytest.approx(2 / (1 + r))
    np.testing.assert_allclose(out[2:].reshape(2, 2), [[1, r], [r, 1]])


def _naive_figures(first, second, j, h, k):
    """The same figures by explicit loops over units."""
    n = agree = 0
    cj, ch = np.zeros(3), np.zeros(3)
    inv, jw, hw = np.zeros(k), np.zeros(k), np.zeros(k)
    for f, s, a, b in zip(first, second, j, h):
        if a < 0 or b < 0:
            continue
        n += 1
        agree += a == b
        cj[a] += 1
        ch[b] += 1
        for m, code in ((f, 0), (s, 1)):
            inv[m] += 1
            jw[m] += a == code
            hw[m] += b == code
    po = agree / n
    pe = float((cj / n) @ (ch / n))
    return po, (po - pe) / (1 - pe), (jw - hw) / inv


def test_vectorised_equals_naive_loop_and_bootstrap_rows():
    rng = np.random.default_rng(7)
    k, n, C = 5, 400, 60
    first = rng.integers(0, k, n)
    second = (first + rng.integers(1, k, n)) % k
    j, h = rng.integers(-1, 3, n), rng.integers(-1, 3, n)
    cl = rng.integers(0, C, n)
    po, kappa, bias = _naive_figures(first, second, j, h, k)
    S = ja.cluster_sums(ja.agreement_features(j, h), cl, C)
    np.testing.assert_allclose(ja.agreement_kappa_of_sums(S.sum(0)), [po, kappa])
    Sb = ja.cluster_sums(ja.bias_features(first, second, j, h, k), cl, C)
    np.testing.assert_allclose(ja.bias_of_sums(Sb.sum(0)), bias)
    # one bootstrap row = the naive figure on the rows of the drawn prompts, repeated by multiplicity
    W = ja.bootstrap_weights(C, 3, np.random.default_rng(1))
    for w in W:
        rows = np.concatenate(
            [np.flatnonzero(cl == c).repeat(1) for c in range(C) for _ in range(int(w[c]))]
        )
        npo, nk, nb = _naive_figures(first[rows], second[rows], j[rows], h[rows], k)
        np.testing.assert_allclose(ja.agreement_kappa_of_sums(w @ S), [npo, nk])
        np.testing.assert_allclose(ja.bias_of_sums(w @ Sb), nb)


def test_interval_is_seeded_and_brackets_estimate():
    rng = np.random.default_rng(0)
    n, C = 500, 100
    cl = rng.integers(0, C, n)
    j, h = rng.integers(0, 3, n), rng.integers(0, 3, n)
    S = ja.cluster_sums(ja.agreement_features(j, h), cl, C)
    a = ja.interval(
        S, ja.bootstrap_weights(C, 200, np.random.default_rng(5)), ja.agreement_kappa_of_sums
    )
    b = ja.interval(
        S, ja.bootstrap_weights(C, 200, np.random.default_rng(5)), ja.agreement_kappa_of_sums
    )
    np.testing.assert_array_equal(a.lower, b.lower)
    assert np.all(a.lower <= a.estimate) and np.all(a.estimate <= a.upper)


def test_clustered_interval_covers_at_nominal_rate():
    """Seeded simulation: prompts with a shared random effect on agreement (strong within-prompt
    correlation); the 90% clustered (expanded percentile) interval of the agreement rate covers the truth in
    ~90% of 200 replications (binomial MC s.e. 2.1%); a row-level bootstrap would under-cover."""
    rng = np.random.default_rng(2026)
    C, per, reps, conf = 60, 5, 200, 0.90
    truth = 0.7  # E[p_c] with p_c ~ Beta(2.1, 0.9)
    cover = 0
    for _ in range(reps):
        p = rng.beta(2.1, 0.9, C)
        agree = rng.random((C, per)) < p[:, None]
        j = np.zeros(C * per, np.int64)
        h = np.where(agree.ravel(), 0, 1)
        cl = np.repeat(np.arange(C), per)
        S = ja.cluster_sums(ja.agreement_features(j, h), cl, C)
        iv = ja.interval(S, ja.bootstrap_weights(C, 400, rng), ja.agreement_kappa_of_sums, conf=conf)
        cover += iv.lower[0] <= truth <= iv.upper[0]
    assert abs(cover / reps - conf) < 3.5 * np.sqrt(conf * (1 - conf) / reps)


def test_interval_expands_the_percentile_by_the_prompts_that_hold_data():
    """interval(): 'percentile' is the (1 - conf)/2 quantiles of the resampled figure; 'expanded' (the
    default) the expanded_tail(conf, C') quantiles with C' the prompts whose sums are not all zero
    (a prompt without a labelled unit adds nothing), so it contains the percentile interval; a bad
    method is named."""
    from engine.stats.clusters import expanded_tail

    rng = np.random.default_rng(5)
    C, C_data = 30, 12
    j = rng.integers(0, 3, 60)
    h = np.where(rng.random(60) < 0.6, j, rng.integers(0, 3, 60))
    S = ja.cluster_sums(
        ja.agreement_features(j, h), rng.integers(0, C_data, 60), C
    )  # rows >= C_data: zero
    W = ja.bootstrap_weights(C, 500, rng)
    boot = ja.agreement_kappa_of_sums(W @ S)[:, 0]
    pc = ja.interval(S, W, ja.agreement_kappa_of_sums, 0.9, method="percentile")
    ex = ja.interval(S, W, ja.agreement_kappa_of_sums, 0.9)
    assert np.allclose([pc.lower[0], pc.upper[0]], np.quantile(boot, [0.05, 0.95]))
    q = expanded_tail(0.9, C_data)
    assert q < 0.05
    assert np.allclose([ex.lower[0], ex.upper[0]], np.quantile(boot, [q, 1 - q]))
    assert ex.lower[0] < pc.lower[0] and ex.upper[0] > pc.upper[0]
    assert ex.estimate[0] == pc.estimate[0]
    with pytest.raises(ValueError, match="method must be 'expanded' or 'percentile', got 'bca'"):
        ja.interval(S, W, ja.agreement_kappa_of_sums, 0.9, method="bca")


def test_labels_needed():
    from engine.analysis.judge_audit import LabelNeed

    assert LabelNeed.of("kappa", 40, 30) is None and LabelNeed.of("kappa", 30, 30) is None
    need = LabelNeed.of("kappa", 12, 30)
    assert need == LabelNeed("kappa", 12, 30, 18) and need.to_dict()["more"] == 18
