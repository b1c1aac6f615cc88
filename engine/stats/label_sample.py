"""Which comparison units get a human label (docs/METHODS.md section 9.1).

A uniformly random sample without replacement of a run's comparison units, drawn from a recorded
seed in a recorded order, each with a fair-coin left/right presentation, and (optionally) a share of
the sampled units marked for a second labeller (human-human agreement).
"""

from __future__ import annotations

import numpy as np

from engine.errors import UserError


def draw_label_sample(
    n_units: int, n: int, seed: int, share: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw ``n`` of ``n_units`` units uniformly without replacement, in drawn order.

    Estimator: ``perm = rng.permutation(n_units)``, sample = ``perm[:n]`` (every n-subset, and every
    ordering of it, equally likely); ``swap_i ~ Bernoulli(1/2)`` independently (the unit's second
    model shown first); ``overlap_i ~ Bernoulli(share)`` independently. ``rng = default_rng(seed)``,
    so the draw is a pure function of its arguments, and the draw of ``n`` is the first ``n`` units
    (with their coins) of any larger draw with the same seed. A recorded sample never grows: its id
    names its ``n``, and a larger ``n`` is a new sample with a label log of its own.

    Guarantee: P(unit u in sample) = n / n_units for every u; presentation independent of the unit.

    Args:
        n_units: the number of units N (positions 0..N-1 of a canonically ordered unit list).
        n: sample size, 1 <= n <= N.
        seed: integer seed, recorded with the sample.
        share: fraction in [0, 1] of sampled units offered to a second labeller.

    Returns:
        (idx (n,) int64 unit positions in drawn order, swap (n,) bool, overlap (n,) bool).
    """
    if n_units < 1:
        raise UserError(
            "the run has no comparison units to sample (it needs two models with generations)"
        )
    if not 1 <= n <= n_units:
        raise UserError(
            f"sample size {n} is outside 1..{n_units} (the run has {n_units} comparison units)"
        )
    if not 0.0 <= share <= 1.0:
        raise UserError(f"second-labeller share {share} is outside [0, 1]")
    rng = np.random.default_rng(int(seed))
    perm = rng.permutation(n_units)
    coins = np.random.default_rng([int(seed), 1]).random((2, n_units))  # one stream, independent of n
    return perm[:n].astype(np.int64), coins[0, :n] < 0.5, coins[1, :n] < share
