"""How many questions and repeats a comparison needs (docs/METHODS.md sections 5 and 7.1): the
standard error of a paired difference for an ``n`` questions × ``k`` repeats design from its variance
components, the power of the paired t test, and the minimum detectable effect.

Family:

* :func:`predict_se`               SE(n, k) = sqrt(σ²_b/n + σ²_w/(n k))
* :func:`paired_power`             power of the paired t test at effect Δ for an n × k design
* :func:`plan_mde`                 questions × repeats (coupled vs independent) for MDE = x at power 1 −
  β
* :func:`plan_sample_size`         questions × repeats for a target standard error / error
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as _st

from engine.errors import UserError
from engine.stats.saving import MAE_PER_SE


def predict_se(sigma2_between, sigma2_within, n, k):
    """SE of Δ̂ for an n-question × k-repeat design: sqrt(σ²_b/n + σ²_w/(n k)) (broadcasts over n, k)."""
    n = np.asarray(n, float)
    k = np.asarray(k, float)
    return np.sqrt(sigma2_between / n + sigma2_within / (n * k))


def paired_power(delta: float, sigma2_between: float, sigma2_within: float, n, k, alpha: float = 0.05):
    """Power of the two-sided paired t test (:func:`paired_diff_ci`) at true effect Δ.

    power = P(|T| > t_{n−1,1−α/2}), T ~ noncentral t(n − 1, Δ/SE(n, k)); SE from :func:`predict_se`
    (d_i treated as normal). Broadcasts over n, k.
    """
    n = np.asarray(n, float)
    se = predict_se(sigma2_between, sigma2_within, n, k)
    df = n - 1
    tq = _st.t.ppf(1 - alpha / 2, df)
    ncp = delta / se
    return _st.nct.sf(tq, df, ncp) + _st.nct.cdf(-tq, df, ncp)


def plan_mde(
    components: dict,
    mde: float,
    alpha: float = 0.05,
    power: float = 0.8,
    repeats=(1, 2, 5, 10),
    max_questions: int = 10_000_000,
) -> list[dict]:
    """How many questions × repeats reach a minimum detectable effect, per noise mode.

    For each mode and k: the smallest n with paired_power(mde, σ²_b, σ²_w, n, k, α) >= power
    (starting from the normal solution n = (z_{1−α/2} + z_{1−β})² (σ²_b + σ²_w/k) / mde²).

    Args:
        components: {mode: {"sigma2_between", "sigma2_within"}} e.g. {"coupled":
            variance_components_diff(Ac, Bc), "independent": independent_components(Ac, Bc)
            or variance_components_diff(Ai, Bi)}.
        mde: the effect (accuracy difference) to detect, > 0.  alpha, power, repeats.
    Returns:
        list of {mode, repeats, questions, samples, se, power} rows (questions None if above
        max_questions).
    """
    if not mde > 0:
        raise UserError(f"the minimum detectable effect must be > 0, got {mde}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UserError(f"alpha and power must be in (0, 1), got {alpha} and {power}")
    zz = _st.norm.ppf(1 - alpha / 2) + _st.norm.ppf(power)
    rows = []
    for mode, c in components.items():
        sb, sw = float(c["sigma2_between"]), float(c["sigma2_within"])
        for k in repeats:
            k = int(k)
            if k < 1:
                raise UserError(f"repeats must be >= 1, got {k}")
            n = max(2, math.ceil(zz**2 * (sb + sw / k) / mde**2))
            if sb + sw / k <= 0:
                n = 2
            while n <= max_questions and paired_power(mde, sb, sw, n, k, alpha) < power:
                n = n + max(1, n // 100)
            # step back to the smallest n that reaches the power (the coarse steps above overshoot)
            while n > 2 and paired_power(mde, sb, sw, n - 1, k, alpha) >= power:
                n -= 1
            ok = n <= max_questions
            rows.append(
                {
                    "mode": mode,
                    "repeats": k,
                    "questions": int(n) if ok else None,
                    "samples": int(n * k) if ok else None,
                    "se": float(predict_se(sb, sw, n, k)) if ok else None,
                    "power": float(paired_power(mde, sb, sw, n, k, alpha)) if ok else None,
                }
            )
    return rows


def plan_sample_size(
    sigma2_between: float,
    sigma2_within: float,
    target_se: float | None = None,
    target_error: float | None = None,
    repeats=(1, 2, 5, 10),
) -> list[dict]:
    """Questions × repeats needed for a target precision of the estimated difference.

    Var(mean diff over n questions × k repeats) = σ²_b / n + σ²_w / (n k)  (docs/METHODS.md 5 on
    differences), so n(k) = ceil((σ²_b + σ²_w / k) / se²).  A target mean absolute error ε is converted
    with se = ε / sqrt(2/π) (E|N(0, se²)| = se sqrt(2/π)).

    Args:
        sigma2_between, sigma2_within: from :func:`variance_components_diff` of one mode.
        target_se or target_error: exactly one.
        repeats: the k values to plan for.
    Returns:
        list of {repeats, questions, samples} dicts.
    """
    if (target_se is None) == (target_error is None):
        raise UserError("give exactly one of target_se and target_error")
    if target_se is None:
        assert target_error is not None  # exactly one of the two is given (checked above)
        if not target_error > 0:
            raise UserError(f"target error must be > 0, got {target_error}")
        target_se = target_error / MAE_PER_SE
    if not target_se > 0:
        raise UserError(f"target standard error must be > 0, got {target_se}")
    out = []
    for k in repeats:
        k = int(k)
        if k < 1:
            raise UserError(f"repeats must be >= 1, got {k}")
        n = max(1, math.ceil((sigma2_between + sigma2_within / k) / target_se**2))
        out.append({"repeats": k, "questions": int(n), "samples": int(n * k)})
    return out
