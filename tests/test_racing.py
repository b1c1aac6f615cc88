"""The racing core (engine/stats/racing.py, METHODS 8.4): goals and rounds, the screen against the exact
confidence sequence, the three goals on populations with a known answer, frozen pairs, the two
"not a decision" cases (a miss, a first exclusion at question N), and the guarantee by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from engine.errors import UserError
from engine.stats.racing import Goal, PointScreen, Race, race_scores, round_ends
from engine.stats.sequential import SequentialCS, pair_alpha, pairs_of, question_order


def _population(N, acc, rng, noise=0.05):
    """Coupled-like scores: one uniform per question shared by every model (as coupled sampling
    shares its noise), each model right when it falls under its accuracy (+ a little own noise)."""
    acc = np.asarray(acc, float)
    u = rng.random(N)[:, None]
    return (u < acc[None] + rng.normal(0, noise, (N, acc.size))).astype(float)


# ----------------------------------------------------------------------------- goals and rounds


def test_goal_parse_and_check():
    assert Goal.parse("best") == Goal("best") and str(Goal.parse(" Top:2 ")) == "top:2"
    assert Goal.parse("ranked").kind == "ranked"
    for bad in ("top", "top:x", "top:0", "winner", "best:1"):
        with pytest.raises(UserError, match="goal"):
            Goal.parse(bad)
    with pytest.raises(UserError, match=r"top:3 with 3 models.*top:1 \.\. top:2"):
        Goal.parse("top:3").check(3)
    assert Goal.parse("top:2").check(3).m == 2


def test_round_ends_default_schedule_custom_rounds_and_budget():
    assert round_ends(1000) == [16, 48, 112, 240, 496, 752, 1000]
    assert round_ends(40) == [16, 40]
    assert round_ends(10, round_size=4) == [4, 8, 10]
    assert round_ends(1000, budget=100) == [16, 48, 100]  # the budget is never crossed
    assert round_ends(1000, round_size=30, budget=30) == [30]
    with pytest.raises(UserError, match="below one round"):
        round_ends(1000, budget=15)
    with pytest.raises(UserError, match="below one round"):
        round_ends(1000, round_size=64, budget=50)
    with pytest.raises(UserError, match="exceeds"):
        round_ends(100, budget=101)
    with pytest.raises(UserError, match="round-size"):
        round_ends(100, round_size=0)


# ----------------------------------------------------------------------------- screen vs exact CS


def _first(mask):
    return int(np.argmax(mask)) + 1 if np.any(mask) else 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_screen_agrees_with_the_exact_sequence(seed):
    """Two implementations: the screen's first decision (and first miss of Δ_N) per pair equals
    the question at which SequentialCS's running intersection first excludes 0 (Δ_N)."""
    rng = np.random.default_rng(seed)
    N, P = 300, 24
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.15, 0.6, 0.25], size=(N, P))
    d[:, :8] = rng.choice([-1.0, 0.0, 1.0], p=[0.3, 0.4, 0.3], size=(N, 8))
    truth = d.mean(axis=0)
    alpha = 0.05 / 10
    sc = PointScreen(N, alpha, np.stack([np.zeros(P), truth], axis=1))
    for s in range(0, N, 37):
        sc.update(np.arange(P), d[s : s + 37])
    for p in range(P):
        lo, up = SequentialCS(N, alpha=alpha).update(d[:, p])
        want = (
            _first(lo > 0),
            _first(up < 0),
            _first(lo > truth[p] + 1e-12),
            _first(up < truth[p] - 1e-12),
        )
        got = tuple(int(v) for v in (*sc.first_low[p], *sc.first_high[p]))
        assert (got[0], got[2], got[1], got[3]) == want, p


def test_the_screen_vectorised_over_pairs_equals_one_pair_at_a_time():
    rng = np.random.default_rng(5)
    N, P = 200, 6
    d = rng.choice([-1.0, 0.0, 1.0], p=[0.2, 0.5, 0.3], size=(N, P))
    together = PointScreen(N, 0.01, np.zeros((P, 1)))
    together.update(np.arange(P), d[:50])
    together.update(np.arange(P), d[50:])
    for p in range(P):
        alone = PointScreen(N, 0.01, np.zeros((1, 1)))
        alone.update([0], d[:120, p : p + 1])
        alone.update([0], d[120:, p : p + 1])
        assert alone.first_low[0, 0] == together.first_low[p, 0]
        assert alone.first_high[0, 0] == together.first_high[p, 0]
        np.testing.assert_allclose(alone._logKp[0], together._logKp[p], rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- goals on known answers


def test_best_the_weak_model_leaves_first_and_frozen_pairs_stay_as_they_were():
    rng = np.random.default_rng(0)
    N = 2000
    S = _population(N, [0.7, 0.58, 0.1], rng)
    race, rounds = race_scores(S, question_order(N, 3), "best", 0.05)
    ans = race.answer()
    assert ans.reason == "decided" and ans.answer == (0,)
    assert [lv.model for lv in ans.leaves] == [2, 1]  # the weakest first
    assert all(lv.status == "eliminated" for lv in ans.leaves)
    assert ans.answered[2] < ans.answered[1] == ans.answered[0] == race.t < N  # the last leave ends it
    # a frozen pair's CS is SequentialCS on the questions both models answered, at alpha/P
    order = question_order(N, 3)
    for p, (i, j) in enumerate(pairs_of(3)):
        n = ans.pair_t[p]
        assert n == min(ans.answered[i], ans.answered[j])
        cs = SequentialCS(N, alpha=pair_alpha(0.05, 3))
        cs.update(S[order[:n], i] - S[order[:n], j])
        assert (ans.lower[p], ans.upper[p]) == pytest.approx(cs.current)
    # the leave's evidence: a pair whose CS excludes 0, decided at a question within what was seen
    lv = ans.leaves[0]
    assert lv.pairs and all(0 < at <= lv.t for at in lv.decided_at)
    assert all(
        w != lv.model and lv.model in pairs_of(3)[p]
        for lv in ans.leaves
        for p, w in zip(lv.pairs, lv.winners)
    )
    assert ans.generations == sum(ans.answered)


def test_top_m_accepts_and_rejects_and_ranked_orders_everyone():
    rng = np.random.default_rng(1)
    N = 3000
    acc = [0.3, 0.75, 0.5, 0.9, 0.1]
    S = _population(N, acc, rng, noise=0.0)
    order = question_order(N, 0)
    race, _ = race_scores(S, order, "top:2", 0.05)
    ans = race.answer(intervals=False)
    assert ans.reason == "decided" and set(ans.answer) == {3, 1}
    assert {lv.status for lv in ans.leaves} <= {"accepted", "rejected"}
    for lv in ans.leaves:  # the evidence: accepted, it beat them; rejected, they beat it
        assert all((w == lv.model) == (lv.status == "accepted") for w in lv.winners)
    race, _ = race_scores(S, order, "ranked", 0.05)
    ans = race.answer()
    assert ans.reason == "decided" and ans.answer == (3, 1, 2, 0, 4)
    assert all(a == b for a, b in ans.ranksets)  # every rank-set a single rank
    assert all(d != 0 for d in ans.decided)


def test_joint_stop_every_model_answers_until_the_goal_is_decided():
    rng = np.random.default_rng(2)
    N = 2000
    S = _population(N, [0.7, 0.45, 0.2, 0.3], rng)
    order = question_order(N, 1)
    race, _ = race_scores(S, order, "best", 0.05)
    joint, _ = race_scores(S, order, "best", 0.05, eliminate=False)
    assert joint.reason == "decided" and joint.status == ["active"] * 4
    assert joint.answer(intervals=False).generations == 4 * joint.t
    assert race.t == joint.t  # the same evidence decides the same goal at the same round
    assert race.answer(intervals=False).generations < 4 * joint.t


def test_budget_ends_the_race_undecided():
    rng = np.random.default_rng(3)
    S = _population(1000, [0.5, 0.5, 0.5], rng)
    race, rounds = race_scores(S, question_order(1000, 0), "best", 0.05, budget=100)
    assert race.reason == "budget" and race.t == 100 and rounds == 3 and race.active == [0, 1, 2]


# ----------------------------------------------------------------------------- not a decision


def test_a_first_exclusion_at_question_N_is_not_a_decision():
    """Model 0 is right on one question more than models 1 and 2 (identical) of N = 30: only the
    logical bounds at t = N exclude 0 (the CS is the point Δ_N there): "all N questions used",
    nobody eliminated."""
    N = 30
    base = (np.arange(N) % 2).astype(float)
    S = np.stack([base, base, base], axis=1)
    S[0, 0] = 1.0  # Δ_N(0, 1) = Δ_N(0, 2) = 1/30
    order = question_order(N, 0)
    race = Race(3, N, "best", 0.05)
    race.update(S[order[:16]])
    race.update(S[order[16:]])
    ans = race.answer()
    p01 = pairs_of(3).index((0, 1))
    assert ans.lower[p01] == pytest.approx(1 / N)  # the logical bounds at N exclude 0 ...
    assert ans.decided[p01] == 0  # ... which is not a decision
    assert ans.reason == "all N questions used" and race.active == [0, 1, 2]


def test_decisions_are_the_exact_sequences_including_where_it_missed():
    """Two implementations: after every round, each pair's decision in the race (the screen,
    confirmed by a point that stayed in every C_s, else by SequentialCS) equals SequentialCS's own on
    the questions the pair has seen: decided iff its CS excludes 0, has not missed and first
    excluded 0 before N. At alpha = 0.95 (0.16 per pair) some sequences miss: those decide nothing."""
    rng = np.random.default_rng(0)
    N, k, missed = 120, 4, 0
    for _ in range(40):
        u = rng.random(N)[:, None]
        S = (u < np.array([0.5, 0.55, 0.45, 0.5])[None] + rng.normal(0, 0.15, (N, k))).astype(float)
        race, start = Race(k, N, "ranked", 0.95), 0
        for end in round_ends(N, round_size=10):
            race.update(S[start:end])
            start = end
            for p, (i, j) in enumerate(pairs_of(k)):
                t = int(race.pair_t[p])
                cs = SequentialCS(N, alpha=race.pair_alpha)
                lo, up = cs.update(S[:t, i] - S[:t, j])
                first_pos, first_neg = _first(lo > 0), _first(up < 0)
                want = 0
                if not cs.missed and cs.lower > 0 and 0 < first_pos < N:
                    want = 1
                elif not cs.missed and cs.upper < 0 and 0 < first_neg < N:
                    want = -1
                missed += cs.missed
                assert race._sign(p) == want, (p, t)
            if race.done:
                break
    assert missed > 0  # the miss path was exercised


# ----------------------------------------------------------------------------- the guarantee


def test_a_true_best_model_is_rarely_eliminated():
    """Seeded simulation: 3 models tied at the top (equal full-run accuracy: the same answers on
    shuffled questions) and 3 below; over many orders a true best model is eliminated in at most
    alpha of the races (here alpha = 0.2 so that misses are frequent enough to count)."""
    rng = np.random.default_rng(11)
    N, alpha, reps = 300, 0.2, 60
    base = (rng.random(N) < 0.6).astype(float)
    S = np.stack(
        [base, base[rng.permutation(N)], base[rng.permutation(N)]]
        + [(rng.random(N) < a).astype(float) for a in (0.3, 0.35, 0.4)],
        axis=1,
    )
    best = set(np.flatnonzero(S.mean(0) == S.mean(0).max()))
    assert best == {0, 1, 2}
    lost = 0
    for r in range(reps):
        race, _ = race_scores(S, question_order(N, r), "best", alpha)
        lost += any(race.status[b] == "eliminated" for b in best)
        assert {3, 4, 5} & set(race.active) == set() or race.reason != "decided"
    assert lost / reps <= alpha + 3 * np.sqrt(alpha * (1 - alpha) / reps)
