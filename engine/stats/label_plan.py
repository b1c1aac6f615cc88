"""How many more human labels (docs/METHODS.md 9.3): PPR's covariance has a term from the labelled set
that shrinks like 1/n; with the current estimates, predict the CI and rank-set widths after n' more
labels and the n' that reaches a target width.

Prediction: ``Sigma(n') = Sigma - Sigma_lab + Sigma_lab * n / (n + n')`` where ``Sigma`` is PPR's
covariance (section 4, cluster-robust by prompt; section 7.3) and ``Sigma_lab`` its labelled-set
term ``(B G_n / c_n)(B G_n / c_n)ᵀ`` (B the residuals of lambda w_hat - w on the labelled set about the
rectifier b, summed within prompts). theta_hat and lambda are held at their current values.

Guarantee: none beyond a plug-in prediction; it is consistent when the labelled set is a uniform
random sample of the run's units (section 9.1) and theta_hat, lambda are near their limits. It is
checked by subsampling in tests/test_label_plan.py (predictions from half the labels against the
widths with all of them).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from engine.errors import UserError
from engine.stats import ranking as R

MAX_FACTOR = 1024  # the search stops at n' = MAX_FACTOR * n more labels


def labelled_sigma(
    first_n, second_n, w_n, w2_n, wh_n, wh2_n, k: int, lam: float, cluster_n=None
) -> np.ndarray:
    """Sigma_lab = (B G / c_n)(B G / c_n)ᵀ: the labelled-set term of PPR's delta covariance.

    Args:
        first_n, second_n: (n,) model indices; w_n, w2_n: (n,) human win indicators of the first /
            second shown; wh_n, wh2_n: (n,) the judge's; k; lam: PPR's lambda; cluster_n: (n,) prompt ids
            or None.
    Returns:
        (k, k).
    """
    yn = lam * np.asarray(wh_n, float) - np.asarray(w_n, float)
    yn2 = lam * np.asarray(wh2_n, float) - np.asarray(w2_n, float)
    b = R.winrate_pointestimate(first_n, second_n, yn, yn2, k)
    B = R.winrate_residuals(first_n, second_n, yn, yn2, b, k)  # (k, n)
    cn = R.comparison_counts(np.asarray(first_n), np.asarray(second_n), k)
    U = B / cn[:, None]
    if cluster_n is not None:
        U = R.cluster_sum_columns(U, cluster_n)
    return U @ U.T


def predicted_sigma(sigma: np.ndarray, sigma_lab: np.ndarray, n: int, n_more) -> np.ndarray:
    """Sigma(n') = Sigma - Sigma_lab + Sigma_lab n / (n + n'); ``n_more`` scalar or (G,) -> (k, k) or (G,
    k, k)."""
    f = n / (n + np.asarray(n_more, float))
    return (sigma - sigma_lab) + f[..., None, None] * sigma_lab


def ci_widths(sigma: np.ndarray, sigma_lab: np.ndarray, n: int, n_more, alpha: float) -> np.ndarray:
    """Predicted widths 2 z_{1-alpha/2} sqrt(Sigma(n')_mm) of the marginal theta intervals: (..., k)."""
    s = predicted_sigma(sigma, sigma_lab, n, n_more)
    return (
        2 * stats.norm.ppf(1 - alpha / 2) * np.sqrt(np.maximum(np.diagonal(s, axis1=-2, axis2=-1), 0.0))
    )


def more_for_ci_width(
    sigma: np.ndarray, sigma_lab: np.ndarray, n: int, alpha: float, target: float
) -> int | None:
    """Fewest more labels n' with every model's predicted theta CI no wider than ``target``; None when
    the judge-only floor (the width with infinitely many labels) is already at or above it.

    Per model: (target / 2z)² >= floor_m + lab_m n / (n + n')  <=>  n' >= n lab_m / (t - floor_m) - n.
    """
    if target <= 0:
        raise UserError(f"target CI width must be > 0; got {target}")
    t = (target / (2 * stats.norm.ppf(1 - alpha / 2))) ** 2
    lab = np.maximum(np.diag(sigma_lab), 0.0)
    floor = np.maximum(np.diag(sigma) - lab, 0.0)
    if np.any(floor >= t):
        return None
    need = np.where(lab > 0, n * lab / (t - floor) - n, 0.0)
    return int(np.ceil(max(float(need.max()), 0.0)))


def rankset_width(
    theta: np.ndarray, sigma: np.ndarray, alpha: float, procedure: str, seed: int, n_draws: int
) -> int:
    """The widest rank-set (upper - lower + 1) of :func:`engine.stats.maxt.rank_sets` at Sigma (normal
    calibration, seeded)."""
    rs = R.rank_sets(
        theta, sigma, alpha, procedure=procedure, rng=np.random.default_rng(seed), n_draws=n_draws
    )
    return int(np.max(np.asarray(rs["upper"]) - np.asarray(rs["lower"]) + 1))


def more_for_rankset_width(
    theta,
    sigma,
    sigma_lab,
    n: int,
    alpha: float,
    target: int,
    procedure: str = "maxt",
    seed: int = 0,
    n_draws: int = 4000,
) -> int | None:
    """Fewest more labels n' (to within 5%) whose predicted rank-sets are no wider than ``target`` ranks;
    None when even MAX_FACTOR * n more do not reach it (e.g. two models with equal theta_hat).

    Search: doubling n' from n / 8, then bisection; the same seeded normal draws at every n'.
    """
    if target < 1:
        raise UserError(f"target rank-set width must be >= 1; got {target}")

    def ok(m: float) -> bool:
        return (
            rankset_width(
                theta, predicted_sigma(sigma, sigma_lab, n, m), alpha, procedure, seed, n_draws
            )
            <= target
        )

    if ok(0):
        return 0
    hi = max(n / 8, 1.0)
    while not ok(hi):
        if hi > MAX_FACTOR * max(n, 1):
            return None
        hi *= 2
    lo = hi / 2 if hi > max(n / 8, 1.0) else 0.0
    while hi - lo > max(0.05 * hi, 1):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return int(np.ceil(hi))
