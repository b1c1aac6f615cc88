"""The betting confidence sequence (engine/stats/sequential.py, docs/METHODS.md section 8)."""

import math

import numpy as np
import pytest

from engine.errors import UserError
from engine.stats.sequential import (
    PairwiseCS,
    SequentialCS,
    StopRule,
    confidence_sequence,
    decided,
    first_stop,
    logical_bounds,
    pair_alpha,
    sequential_ranksets,
    t_interval,
)
from tests import confseq_ref


def _population(rng, N, shape):
    if shape == "coupled":
        return rng.choice([-1.0, 0.0, 1.0], size=N, p=[0.1, 0.7, 0.2])
    if shape == "continuous":
        return np.clip(rng.normal(0.1, 0.4, N), -1, 1)
    return rng.choice([-1.0, 1.0], size=N, p=[0.05, 0.95])  # skewed


def test_exact_tiny_case():
    # N = 3, α = 0.5, B = 4, d = (1, 1). λ_1 = sqrt(2 log 4 / (1 · log 2 · 1/4)) = 4; at m = 0:
    # K⁺ = 1 + 4 = 5, K = 2.5 > 2 (rejected); m = 1/4: K⁺ = 1 + 2 · 3/4, K = 1.25 (kept), so
    # A_1 = {1/4 .. 1}, hull [0, 1] ∩ logical [1/3, 1]  ->  Δ ∈ [−1/3, 1].
    # t = 2: μ_2(1/4) < 0 (rejected), m = 1/2: K⁺ = 1.5 · (1 + 2 · 3/4) = 3.75, K = 1.875 (kept):
    # hull [1/4, 1] ∩ logical [2/3, 1]  ->  Δ ∈ [1/3, 1].
    lo, up = confidence_sequence([1.0, 1.0], N=3, alpha=0.5, grid=5)
    np.testing.assert_allclose(lo, [-1 / 3, 1 / 3], atol=1e-12)
    np.testing.assert_allclose(up, [1.0, 1.0], atol=1e-12)
    lo, up = confidence_sequence([1.0, 1.0, -1.0], N=3, alpha=0.5, grid=5)
    assert lo[-1] == pytest.approx(1 / 3) and up[-1] == pytest.approx(1 / 3)  # t = N: Δ_N itself


@pytest.mark.parametrize(
    "N,shape,alpha,B",
    [
        (60, "coupled", 0.05, 400),
        (300, "continuous", 0.1, 1000),
        (250, "skewed", 0.05, 500),
        (800, "coupled", 0.05, 2000),
    ],
)
def test_agrees_with_confseq_reference(N, shape, alpha, B):
    rng = np.random.default_rng(N)
    d = rng.permutation(_population(rng, N, shape))[: min(N, 300)]
    ref_lo, ref_up = confseq_ref.hedged_cs((d + 1) / 2, alpha=alpha, N=N, breaks=B)
    lo, up = confidence_sequence(d, N, alpha=alpha, grid=B + 1)
    step = 2.0 / B  # one grid step on the Δ scale
    assert np.max(np.abs(lo - (2 * ref_lo - 1))) <= step
    assert np.max(np.abs(up - (2 * ref_up - 1))) <= step
    assert np.max(np.abs(lo - (2 * ref_lo - 1))) < 1e-9  # in fact the same arithmetic


def test_agrees_with_reference_on_a_path_that_misses():
    # a sorted order is not random: the sequence misses, the class falls back to the full grid
    rng = np.random.default_rng(3)
    d = np.sort(rng.choice([-1.0, 0.0, 1.0], size=200, p=[0.2, 0.5, 0.3]))[::-1]
    ref_lo, ref_up = confseq_ref.hedged_cs((d + 1) / 2, alpha=0.05, N=200, breaks=1000)
    cs = SequentialCS(200, alpha=0.05, grid=1001)
    lo, up = cs.update(d[:150])
    np.testing.assert_allclose(lo, 2 * ref_lo[:150] - 1, atol=1e-9)
    np.testing.assert_allclose(up, 2 * ref_up[:150] - 1, atol=1e-9)
    assert cs.missed and cs.lower > cs.upper
    c_lo, c_up = cs.current  # shown instead of an empty interval
    ref_clo, ref_cup = confseq_ref.hedged_cs(
        (d[:150] + 1) / 2, alpha=0.05, N=200, breaks=1000, running_intersection=False
    )
    assert c_lo <= c_up
    assert c_lo == pytest.approx(2 * ref_clo[-1] - 1) and c_up == pytest.approx(2 * ref_cup[-1] - 1)


def test_incremental_equals_batch():
    rng = np.random.default_rng(7)
    N = 3000
    d = rng.permutation(_population(rng, N, "continuous"))
    lo, up = confidence_sequence(d, N, alpha=0.05)
    cs = SequentialCS(N, alpha=0.05)
    cuts = np.sort(rng.choice(np.arange(1, N), size=25, replace=False))
    parts = [cs.update(p) for p in np.split(d, cuts)]
    # same arithmetic up to the association of running sums (a few ulp)
    np.testing.assert_allclose(np.concatenate([p[0] for p in parts]), lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(np.concatenate([p[1] for p in parts]), up, rtol=0, atol=1e-12)
    assert cs.t == N and cs.lower == pytest.approx(lo[-1]) and cs.upper == pytest.approx(up[-1])
    assert lo[-1] == pytest.approx(d.mean()) and up[-1] == pytest.approx(d.mean())


def test_coverage_simulation_and_naive_t():
    # METHODS 8.2's measurement, smaller: N = 200, coupled-like population, 300 random orders.
    rng = np.random.default_rng(2024)
    N, alpha, reps = 200, 0.1, 300
    pop = _population(rng, N, "coupled")
    target = pop.mean()
    miss_cs = miss_t = 0
    for _ in range(reps):
        d = rng.permutation(pop)
        lo, up = confidence_sequence(d, N, alpha=alpha, grid=1001)
        miss_cs += bool(np.any((lo > target + 1e-12) | (up < target - 1e-12)))
        looks = range(10, N, 10)
        miss_t += any(
            not (t_interval(d[:n], alpha)[1] <= target <= t_interval(d[:n], alpha)[2]) for n in looks
        )
    mc = 3 * math.sqrt(alpha * (1 - alpha) / reps)
    assert miss_cs / reps <= alpha + mc
    assert miss_t / reps > 2 * alpha  # the invalid procedure the CS replaces


def test_validation_messages():
    with pytest.raises(UserError, match="1.5"):
        confidence_sequence([0.0, 1.5], N=5)
    with pytest.raises(UserError, match="alpha"):
        SequentialCS(10, alpha=1.0)
    with pytest.raises(UserError, match="N = 2"):
        confidence_sequence([0.0, 0.5, 1.0], N=2)
    with pytest.raises(UserError, match="width:0"):
        StopRule.parse("width:0")
    with pytest.raises(UserError, match="budget:0"):
        StopRule.parse("budget:0")
    with pytest.raises(UserError, match="soon"):
        StopRule.parse("soon")
    with pytest.raises(UserError, match="budget:50 exceeds"):
        StopRule.parse("budget:50").check(40)


def test_stop_rules():
    r = StopRule.parse("decided,width:0.5,budget:9")
    assert (r.decided, r.width, r.budget) == (True, 0.5, 9) and StopRule.parse(str(r)) == r
    lo = np.array([-0.9, -0.5, -0.1, 0.05, 0.1])
    up = np.array([0.9, 0.6, 0.5, 0.40, 0.3])
    assert first_stop(StopRule.parse("decided"), lo, up) == 4
    assert first_stop(StopRule.parse("width:0.5"), lo, up) == 4  # 0.35 < 0.5
    assert first_stop(StopRule.parse("width:0.25"), lo, up) == 5
    assert first_stop(StopRule.parse("budget:2"), lo, up, t0=10) == 11
    assert first_stop(StopRule.parse("width:0.1"), lo, up) is None
    # several pairs: every pair must hold
    lo2 = np.stack([lo, [-0.2, -0.2, -0.2, -0.2, 0.01]], axis=1)
    up2 = np.stack([up, [0.2, 0.2, 0.2, 0.2, 0.2]], axis=1)
    assert first_stop(StopRule.parse("decided"), lo2, up2) == 5


def test_pairwise_and_ranksets():
    assert pair_alpha(0.06, 4) == pytest.approx(0.01)
    with pytest.raises(UserError, match="at least 2 models"):
        pair_alpha(0.05, 1)
    # pairs (0,1), (0,2), (1,2): 0 > 1 established, 1 vs 2 undecided, 0 > 2 established
    rs = sequential_ranksets([0.1, 0.2, -0.1], [0.3, 0.4, 0.1], 3)
    np.testing.assert_array_equal(rs, [[1, 1], [2, 3], [2, 3]])
    rng = np.random.default_rng(0)
    N = 400
    scores = np.stack([rng.random(N) < p for p in (0.8, 0.5, 0.45)], axis=1).astype(float)
    pc = PairwiseCS(3, N, alpha=0.05, grid=1001)
    lo, up = pc.update(scores[:200])
    assert lo.shape == (200, 3) and pc.t == 200
    single = confidence_sequence(scores[:200, 0] - scores[:200, 2], N, alpha=0.05 / 3, grid=1001)
    np.testing.assert_array_equal(lo[:, 1], single[0])
    assert sequential_ranksets(lo[-1], up[-1], 3)[0, 0] == 1


def test_t_interval_matches_formula():
    d = np.array([0.0, 1.0, 1.0, -1.0, 0.0, 1.0])
    est, lo, hi = t_interval(d, 0.05)
    from scipy import stats

    half = stats.t.ppf(0.975, 5) * d.std(ddof=1) / math.sqrt(6)
    assert (est, lo, hi) == pytest.approx((d.mean(), d.mean() - half, d.mean() + half))
    assert math.isnan(t_interval([0.5])[1])


def test_decided_is_false_on_a_miss_and_ranksets_are_never_inverted():
    """A missed sequence (lower > upper) is never decided, whatever its bounds' signs (METHODS 8.2)."""
    lo = np.array([0.1, -0.3, 0.2, -0.1, 0.0])
    up = np.array([0.3, -0.1, -0.1, 0.1, 0.5])
    np.testing.assert_array_equal(decided(lo, up), [True, True, False, False, False])
    assert decided(0.2, -0.1).shape == () and not decided(0.2, -0.1)
    # a miss between two models establishes nothing: both keep the whole range (was [[2, 1], [2, 1]])
    np.testing.assert_array_equal(sequential_ranksets([0.2], [-0.1], 2), [[1, 2], [1, 2]])
    # a missed row fires neither "decided" nor "width" (an empty intersection has no width)
    for rule in ("decided", "width:0.5"):
        assert first_stop(StopRule.parse(rule), [0.2, 0.2], [-0.1, -0.1]) is None
    assert first_stop(StopRule.parse("decided,budget:2"), [0.2, 0.2], [-0.1, -0.1]) == 2


def test_fired_names_the_components_that_hold():
    r = StopRule.parse("decided,width:0.6,budget:15")
    assert r.fired([0.1], [0.5], 15) == ("decided", "width:0.6", "budget:15")
    assert r.fired([-0.1], [0.4], 3) == ("width:0.6",)
    assert r.fired([-0.5], [0.4], 3) == ()
    assert r.fired([0.3], [0.1], 3) == ()  # a miss


def test_logical_bounds_exact():
    # 3 of N = 5 seen, D_3 = 2: the 2 unseen d in [-1, 1] give Δ_N in [0, 4/5]
    lo, up = logical_bounds(2.0, 3, 5)
    assert (lo, up) == pytest.approx((0.0, 0.8))
    lo, up = logical_bounds(-1.0, 5, 5)  # t = N: the point Δ_N
    assert lo == up == pytest.approx(-0.2)


def test_current_path_is_the_reference_current_interval_where_the_sequence_missed():
    """SequentialCS.current_path, where the running intersection is empty (what is shown there, METHODS
    8.2), is confseq's hedged_cs without the running intersection (the reference code)."""
    d = np.array([1.0] * 12 + [-1.0] * 28)  # sorted: the sequence first concentrates on +1, then misses
    cs = SequentialCS(40, alpha=0.05, grid=401)
    lo, up = cs.update(d)
    miss = lo > up
    assert miss.sum() > 5  # this path misses
    ref_lo, ref_up = confseq_ref.hedged_cs(
        (d + 1) / 2, alpha=0.05, N=40, breaks=400, running_intersection=False
    )
    ok = miss & (ref_lo <= ref_up)  # C_t itself is empty on this path's last questions: logical bounds
    assert ok.sum() > 5 and (miss & ~ok).any()
    np.testing.assert_allclose(cs.current_path[0][ok], 2 * ref_lo[ok] - 1, atol=1e-9)
    np.testing.assert_allclose(cs.current_path[1][ok], 2 * ref_up[ok] - 1, atol=1e-9)
    t = np.arange(1, 41)
    D = np.cumsum(d)
    both = miss & ~ok
    np.testing.assert_allclose(cs.current_path[0][both], ((D - (40 - t)) / 40)[both], atol=1e-9)
    np.testing.assert_allclose(cs.current_path[1][both], ((D + (40 - t)) / 40)[both], atol=1e-9)
    assert np.all(cs.current_path[0] <= cs.current_path[1] + 1e-12)
    assert cs.current == (cs.current_path[0][-1], cs.current_path[1][-1])
