"""engine/stats/agreement.py: Gwet's AC1, Krippendorff's alpha and sensitivity / specificity against
published worked examples, naive loops, the bootstrap rows, and a seeded coverage simulation of their
prompt-clustered intervals (docs/METHODS.md 9.2; docs/JUDGE_AUDIT.md)."""

from __future__ import annotations

import numpy as np
import pytest

from engine.stats import agreement as ag
from engine.stats import judge_audit as ja


def _sums(x, y):
    return ja.agreement_features(np.asarray(x), np.asarray(y)).sum(axis=0)


def _from_table(table) -> tuple[np.ndarray, np.ndarray]:
    """Rater 1 and rater 2 codes from a q x q contingency table (rows rater 1, columns rater 2)."""
    x, y = [], []
    for i, row in enumerate(table):
        for j, n in enumerate(row):
            x += [i] * n
            y += [j] * n
    return np.array(x), np.array(y)


def test_published_three_category_example():
    """Gwet (2014), Handbook of Inter-Rater Reliability, 4th ed.: two abstractors classify 100
    pregnancies as ectopic / AIU / NIU (the table ``cont3x3abstractors`` of the author's irrCAC package).
    Published values: Cohen's kappa 0.7964, Gwet's AC1 0.8493, Krippendorff's alpha 0.7973 (irrCAC 0.4.4
    prints 0.79641, 0.84933, 0.79726)."""
    x, y = _from_table([[13, 0, 0], [0, 20, 7], [0, 4, 56]])
    po, kappa, ac1, alpha = ag.agreement_coefficients_of_sums(_sums(x, y))
    assert po == pytest.approx(0.89)
    assert kappa == pytest.approx(0.79641, abs=5e-6)
    assert ac1 == pytest.approx(0.84933, abs=5e-6)
    assert alpha == pytest.approx(0.79726, abs=5e-6)


def test_published_krippendorff_binary_example():
    """Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section A (binary data, two
    observers, no missing data): ten units, alpha = 0.095."""
    obs_a = [0, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    obs_b = [1, 1, 1, 0, 0, 1, 0, 0, 0, 0]
    alpha = ag.agreement_coefficients_of_sums(_sums(obs_a, obs_b))[3]
    assert alpha == pytest.approx(0.095, abs=5e-4)
    assert alpha == pytest.approx(1 - 19 * 4 / (14 * 6))


def test_kappa_paradox_ac1_stays_high():
    """The paradox of Feinstein & Cicchetti (1990): 118 of 125 agreements (p_o = 0.944) with skewed
    margins (123 / 2 and 120 / 5) give p_e = 0.94528 and kappa = (0.944 - 0.94528) / 0.05472 = -0.0234 by
    hand, while AC1 stays near p_o: on the product's three-category scale (a / b / tie, q = 3, the tie
    unused) p_e = 2 * 0.972 * 0.028 / (q - 1) = 0.027216 and AC1 = 0.9424."""
    x, y = _from_table([[118, 5], [2, 0]])
    po, kappa, ac1, _ = ag.agreement_coefficients_of_sums(_sums(x, y))
    assert po == pytest.approx(0.944)
    assert kappa == pytest.approx((0.944 - 0.94528) / 0.05472)
    assert ac1 == pytest.approx((0.944 - 0.027216) / (1 - 0.027216))


def _naive(x, y, q=3):
    """The textbook formulas as loops: a contingency table; AC1 from its margins; alpha from the
    coincidence matrix (Krippendorff 2011: each unit's two values give the pairs (x, y) and (y, x))."""
    pairs = [(a, b) for a, b in zip(x, y) if a >= 0 and b >= 0]
    n = len(pairs)
    t = np.zeros((q, q))
    for a, b in pairs:
        t[a, b] += 1
    po = np.trace(t) / n
    r, c = t.sum(1) / n, t.sum(0) / n
    pe = sum(r[k] * c[k] for k in range(q))
    kappa = (po - pe) / (1 - pe)
    pi = [(r[k] + c[k]) / 2 for k in range(q)]
    pg = sum(p * (1 - p) for p in pi) / (q - 1)
    ac1 = (po - pg) / (1 - pg)
    o = np.zeros((q, q))
    for a, b in pairs:
        o[a, b] += 1
        o[b, a] += 1
    nc = o.sum(1)
    m = nc.sum()
    do = sum(o[i, j] for i in range(q) for j in range(q) if i != j)
    de = sum(nc[i] * nc[j] for i in range(q) for j in range(q) if i != j) / (m - 1)
    alpha = 1 - do / de
    return [po, kappa, ac1, alpha]


def _naive_sens_spec(j, h):
    pos = [(a, b) for a, b in zip(j, h) if a in (0, 1) and b == 0]
    neg = [(a, b) for a, b in zip(j, h) if a in (0, 1) and b == 1]
    sens = sum(a == 0 for a, _ in pos) / len(pos)
    spec = sum(a == 1 for a, _ in neg) / len(neg)
    return [sens, spec, (sens + spec) / 2]


def test_vectorised_equals_naive_loop_and_each_bootstrap_row():
    rng = np.random.default_rng(11)
    n, C = 300, 40
    x, y = rng.integers(-1, 3, n), rng.integers(-1, 3, n)
    cl = rng.integers(0, C, n)
    S = ja.cluster_sums(ja.agreement_features(x, y), cl, C)
    np.testing.assert_allclose(ag.agreement_coefficients_of_sums(S.sum(0)), _naive(x, y))
    jb, hb = rng.integers(0, 2, n), rng.integers(0, 2, n)
    Sb = ja.cluster_sums(ag.binary_features(jb, hb), cl, C)
    np.testing.assert_allclose(ag.sensitivity_specificity_of_sums(Sb.sum(0)), _naive_sens_spec(jb, hb))
    for w in ja.bootstrap_weights(C, 3, np.random.default_rng(2)):
        rows = np.concatenate([np.flatnonzero(cl == c) for c in range(C) for _ in range(int(w[c]))])
        np.testing.assert_allclose(ag.agreement_coefficients_of_sums(w @ S), _naive(x[rows], y[rows]))
        np.testing.assert_allclose(
            ag.sensitivity_specificity_of_sums(w @ Sb), _naive_sens_spec(jb[rows], hb[rows])
        )


def test_binary_detection_and_undefined_cases():
    assert ag.labels_binary(np.array([0, 1, 2]), np.array([0, 1, -1]))  # the tie is not on a shared unit
    assert not ag.labels_binary(np.array([0, 1, 2]), np.array([0, 1, 1]))
    assert not ag.labels_binary(np.array([-1]), np.array([0]))
    out = ag.agreement_coefficients_of_sums(_sums([0, 0], [0, 0]))
    assert out[0] == 1.0 and np.isnan(out[1]) and np.isnan(out[3])  # one category everywhere
    assert out[2] == pytest.approx(1.0)  # AC1's chance term is 0 there: defined
    assert np.isnan(ag.agreement_coefficients_of_sums(np.zeros(8))).all()
    assert np.isnan(ag.sensitivity_specificity_of_sums(np.zeros(4))).all()


def _population(P1, P2, mean_u):
    """Per-unit expected features of the mixture u P1 + (1 - u) P2 (joint 3 x 3 tables)."""
    P = mean_u * P1 + (1 - mean_u) * P2
    return np.concatenate([[np.trace(P)], P.sum(1), P.sum(0), [1.0]])


def test_clustered_intervals_cover_at_nominal_rate():
    """Seeded simulation: 50 prompts of 6 units; each prompt draws how skewed and how reliable its
    joint label table is (a mixture u P1 + (1 - u) P2, u ~ Beta(1, 1): strong within-prompt dependence).
    The 90% expanded percentile intervals of p_o, kappa, AC1, alpha and of sensitivity / specificity
    cover their population values (the figures of the expected per-unit features) in 0.90 +- 3.5 MC s.e.
    of 200 replications each."""
    rng = np.random.default_rng(2027)
    P1 = np.array([[0.70, 0.05, 0.02], [0.04, 0.10, 0.01], [0.03, 0.02, 0.03]])
    P2 = np.array([[0.20, 0.10, 0.05], [0.10, 0.30, 0.05], [0.05, 0.05, 0.10]])
    Q1 = np.array([[0.80, 0.05], [0.05, 0.10]])  # binary: sensitivity / specificity
    Q2 = np.array([[0.30, 0.20], [0.10, 0.40]])
    truth = ag.agreement_coefficients_of_sums(1e9 * _population(P1, P2, 0.5))  # alpha: n -> infinity
    Qm = 0.5 * Q1 + 0.5 * Q2  # rows human a / b, columns judge a / b
    truth_ss = [Qm[0, 0] / Qm[0].sum(), Qm[1, 1] / Qm[1].sum()]
    C, per, reps, conf = 50, 6, 200, 0.90
    cover = np.zeros(6)
    cells, cells2 = np.arange(9), np.arange(4)
    for _ in range(reps):
        u = rng.beta(1, 1, C)
        x, y, h, j = [], [], [], []
        for uc in u:
            c9 = rng.choice(cells, per, p=(uc * P1 + (1 - uc) * P2).ravel())
            x += list(c9 // 3)
            y += list(c9 % 3)
            c4 = rng.choice(cells2, per, p=(uc * Q1 + (1 - uc) * Q2).ravel())
            h += list(c4 // 2)
            j += list(c4 % 2)
        cl = np.repeat(np.arange(C), per)
        W = ja.bootstrap_weights(C, 400, rng)
        S = ja.cluster_sums(ja.agreement_features(np.array(x), np.array(y)), cl, C)
        iv = ja.interval(S, W, ag.agreement_coefficients_of_sums, conf)
        Sb = ja.cluster_sums(ag.binary_features(np.array(j), np.array(h)), cl, C)
        ivb = ja.interval(Sb, W, ag.sensitivity_specificity_of_sums, conf)
        cover[:4] += (iv.lower <= truth) & (truth <= iv.upper)
        cover[4:] += (ivb.lower[:2] <= truth_ss) & (truth_ss <= ivb.upper[:2])
    rate = cover / reps
    se = np.sqrt(conf * (1 - conf) / reps)
    assert np.all(np.abs(rate - conf) < 3.5 * se), rate
