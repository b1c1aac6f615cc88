"""Statistics layer of the release gate: pure functions of numbers, no I/O.

A release gate's decision (pure statistics): is the candidate B non-inferior to the baseline A by
margin M, from an interval for Δ = acc(B) − acc(A)?

    non-inferior  when lower > −M   (the whole interval above −M)      exit 0
    worse         when upper < −M   (the whole interval below −M)      exit 1
    undecided     otherwise         (more questions needed)            exit 3

With a (1 − α) interval, "non-inferior" is the one-sided test of H0: Δ ≤ −M at level α/2, and "worse"
that of H0: Δ ≥ −M at level α/2: each wrong decision has probability at most α/2 when the interval
covers with probability 1 − α (a fixed-n t interval, METHODS 7.1, or a confidence sequence, METHODS 8,
which keeps the guarantee at a data-dependent stop). The planner's estimate (:func:`questions_needed`)
inverts the fixed-n interval's width: the questions at which z SE equals the distance from Δ̂ to −M.
"""

from __future__ import annotations

import math

from scipy import stats as _st

from engine.errors import UserError

NON_INFERIOR, WORSE, UNDECIDED = "non-inferior", "worse", "undecided"
EXIT_CODES = {NON_INFERIOR: 0, WORSE: 1, UNDECIDED: 3}


def check_margin(margin: float) -> float:
    """The margin M >= 0 (UserError otherwise): how much worse B may be and still pass."""
    if not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise UserError(
            f"--margin must be a number >= 0 (an accuracy difference, e.g. 0.01); got {margin!r}"
        )
    return float(margin)


def decide(lower: float, upper: float, margin: float) -> str:
    """The decision from an interval [lower, upper] for Δ = B − A and the margin M (module docstring)."""
    m = check_margin(margin)
    if lower > -m:
        return NON_INFERIOR
    if upper < -m:
        return WORSE
    return UNDECIDED


def questions_needed(diff: float, var_d: float, margin: float, alpha: float) -> int | None:
    """Total questions n at which the (1 − α) interval Δ̂ ± z sd(d)/sqrt(n) no longer contains −M (the
    same design: repeats per question as now, Δ̂ and sd held): n = z² Var(d) / (Δ̂ + M)², rounded up
    (at least 2). None when Δ̂ = −M (not reachable at this estimate).

    Args:
        diff: Δ̂ = B − A; var_d: the variance of the per-question differences d_i (ddof 1); margin: M;
        alpha: 1 − the interval's level.
    """
    gap = abs(diff + check_margin(margin))
    if gap <= 1e-12:
        return None
    z = float(_st.norm.ppf(1 - alpha / 2))
    return max(int(math.ceil(z * z * max(var_d, 0.0) / (gap * gap))), 2)
