"""Analysis layer of racing many models: stored data -> engine.stats -> a frozen result.

Racing many models (docs/METHODS.md 8.4), read from the store: a replay of any stored run as a
race over seeded orders (``engine race --replay``), and the state of a live ``engine race`` run.

A replay asks, for each question order: which models would have left when, what the race would
have spent (questions answered summed over models, times the repeats), against 8.3's joint stop for
the same goal (every model answering until the goal is decided: k · n_stop) and the fixed run
(k · N). Works on generated, harness-imported and ``import paper-mmlu`` runs: only scores are read.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from engine.analysis.sequential import _choose_modes, mode_matrix
from engine.errors import UserError
from engine.stats.racing import Goal, Race, RaceAnswer, race_scores, round_ends
from engine.stats.sequential import check_alpha, pairs_of, question_order
from engine.store.scores import per_question_scores, question_means

REPLAY_SEEDS = tuple(range(20))


@dataclass(frozen=True)
class LeaveRow:
    """A model leaving, in names: after how many questions, why, on what evidence."""

    model: str
    after: int  # questions it answered
    status: str  # eliminated | rejected | accepted | ranked
    evidence: tuple[str, ...]  # "A > B (decided at question 37)"

    def to_dict(self) -> dict:
        return {**vars(self), "evidence": list(self.evidence)}


def leave_rows(ans: RaceAnswer, names) -> tuple[LeaveRow, ...]:
    """The answer's leaves in model names (the report's and the CLI's "who left when")."""
    pairs = pairs_of(ans.k)
    out = []
    for lv in ans.leaves:
        ev = []
        for p, at, win in zip(lv.pairs, lv.decided_at, lv.winners):
            lose = sum(pairs[p]) - win
            ev.append(f"{names[win]} > {names[lose]} (decided at question {at})")
        out.append(LeaveRow(str(names[lv.model]), lv.t, lv.status, tuple(ev)))
    return tuple(out)


@dataclass(frozen=True)
class RaceOrder:
    """One seeded order of a replay."""

    seed: int
    answer: tuple[str, ...]
    reason: str  # decided | budget | all N questions used
    questions: int  # questions taken by the models that stayed to the end
    generations: int  # questions answered summed over models, times the repeats
    joint_stop_question: int | None  # 8.3's joint stop for the goal (None: not before N / budget)
    joint_stop_generations: int  # k · n_stop · repeats (k · N · repeats when it never stopped)
    fixed_generations: int  # k · N · repeats
    leaves: tuple[LeaveRow, ...]

    def to_dict(self) -> dict:
        return {
            **{k: v for k, v in vars(self).items() if k != "leaves"},
            "answer": list(self.answer),
            "leaves": [lv.to_dict() for lv in self.leaves],
        }


@dataclass(frozen=True)
class RaceMode:
    mode: str
    N: int
    repeats: int
    full: tuple[float, ...]  # full-run accuracy per model (the truth a replay is judged against)
    orders: tuple[RaceOrder, ...]

    def summary(self) -> dict:
        g = np.array([o.generations for o in self.orders], float)
        j = np.array([o.joint_stop_generations for o in self.orders], float)
        f = float(self.orders[0].fixed_generations) if self.orders else math.nan
        return {
            "median_generations": float(np.median(g)),
            "median_joint_stop_generations": float(np.median(j)),
            "fixed_generations": f,
            "race_vs_fixed": float(np.median(g)) / f,
            "race_vs_joint_stop": float(np.median(g / j)),
            "decided": sum(o.reason == "decided" for o in self.orders),
        }

    def to_dict(self) -> dict:
        return {
            "N": self.N,
            "repeats": self.repeats,
            "full_accuracy": list(self.full),
            "orders": [o.to_dict() for o in self.orders],
            "summary": self.summary(),
        }


@dataclass(frozen=True)
class RaceReplay:
    run: str
    models: tuple[str, ...]
    goal: str
    alpha: float
    round_size: int | None  # None: the default schedule 16, 32, 64, 128, 256, 256, ...
    budget: int | None
    repeat: int | None
    modes: tuple[RaceMode, ...]

    def mode(self, name: str) -> RaceMode:
        return next(m for m in self.modes if m.mode == name)

    def to_dict(self) -> dict:
        N = self.modes[0].N if self.modes else 0
        return {
            "run": self.run,
            "k": len(self.models),
            "N": N,
            "models": list(self.models),
            "goal": self.goal,
            "alpha": self.alpha,
            "round_size": self.round_size,
            "budget": self.budget,
            "repeat": self.repeat,
            "modes": {m.mode: m.to_dict() for m in self.modes},
        }


def _choose(stored: list[str], models: list[str] | None) -> list[str]:
    chosen = list(models) if models else sorted(stored)
    unknown = [m for m in chosen if m not in stored]
    if unknown:
        raise UserError(f"unknown model {unknown[0]!r}; models in the run: {', '.join(sorted(stored))}")
    check_models(chosen)
    return chosen


def check_models(names) -> None:
    """Racing needs 3 or more distinct models (two: ``generate --until decided``)."""
    if len(set(names)) < 3:
        raise UserError(
            f"a race needs 3 or more models, got {len(set(names))} ({', '.join(map(str, names)) or 'none'}); "
            "to compare two models sequentially use generate --until decided (or engine sequential "
            "for a stored run)"
        )


def replay_order(
    S: np.ndarray, names, seed: int, goal: Goal, alpha: float, round_size, budget, reps: int
) -> RaceOrder:
    """One seeded order: the race, and the joint stop of 8.3 for the same goal, on the same rounds."""
    N, k = S.shape
    order = question_order(N, seed)
    race, _ = race_scores(S, order, goal, alpha, round_size=round_size, budget=budget)
    joint, _ = race_scores(S, order, goal, alpha, round_size=round_size, budget=budget, eliminate=False)
    ans = race.answer(intervals=False)
    n_stop = joint.t if joint.reason == "decided" else None
    return RaceOrder(
        seed=int(seed),
        answer=tuple(str(names[i]) for i in ans.answer),
        reason=ans.reason,
        questions=race.t,
        generations=ans.generations * reps,
        joint_stop_question=n_stop,
        joint_stop_generations=k * (n_stop if n_stop is not None else N) * reps,
        fixed_generations=k * N * reps,
        leaves=leave_rows(ans, names),
    )


def race_replay(
    db: str | os.PathLike,
    run: str,
    models: list[str] | None = None,
    goal: str | Goal = "best",
    alpha: float = 0.05,
    mode: str = "both",
    repeat: int | None = None,
    seeds=REPLAY_SEEDS,
    round_size: int | None = None,
    budget: int | None = None,
    rule: str | None = None,
) -> RaceReplay:
    """What would a race have spent on this stored run? (METHODS 8.4; see the module docstring.)

    Args:
        db, run: a scored run (generated, harness-imported or paper-MMLU). models: 3 or more
        (default: every model of the run). goal: best | top:M | ranked. mode: coupled | independent |
        both. repeat: one stored repeat per question (as a live race with one repeat); None: the
        mean over the stored repeats (generations count every repeat). seeds: question orders.
        round_size, budget: the rounds (default 16, 32, 64, 128, then 256 questions). rule: scoring.
    Raises:
        UserError: fewer than 3 models, top:M with M >= k, a budget below one round, unknown names.
    """
    alpha = check_alpha(alpha)
    g = goal if isinstance(goal, Goal) else Goal.parse(goal)
    if not seeds:
        raise UserError("no seeds given; e.g. --seeds 0..19")
    df = per_question_scores(db, run, rule)
    if df.empty:
        raise UserError(
            f"run {run!r} has no scores; score it first (python -m engine score --run {run})"
        )
    chosen = _choose(sorted(str(m) for m in df["model"].unique()), models)
    g.check(len(chosen))
    out = []
    for m in _choose_modes(sorted(str(x) for x in df["mode"].unique()), mode):
        _, S, reps = mode_matrix(df, chosen, m, repeat)
        round_ends(S.shape[0], round_size, budget)  # one-line errors before any work
        orders = tuple(
            replay_order(S, chosen, int(s), g, alpha, round_size, budget, reps) for s in seeds
        )
        out.append(RaceMode(m, S.shape[0], reps, tuple(float(v) for v in S.mean(axis=0)), orders))
    return RaceReplay(run, tuple(chosen), str(g), alpha, round_size, budget, repeat, tuple(out))


# ----------------------------------------------------------------------------- a live race run


@dataclass(frozen=True)
class RaceModel:
    """One model of a race now: its state and its CS against the current leader."""

    model: str
    status: str  # active | eliminated | rejected | accepted | ranked
    answered: int  # questions answered
    mean: float  # mean score over the questions it answered
    lower: float  # CS of (leader − model), Δ scale, at α/P (frozen once either left); NaN for the leader
    upper: float
    missed: bool


@dataclass(frozen=True)
class RaceModeState:
    mode: str
    t: int  # questions taken by the models still active
    reason: str  # running | decided | budget | all N questions used
    leader: str
    answer: tuple[str, ...]
    models: tuple[RaceModel, ...]
    generations: int  # questions answered summed over models, times the repeats
    fixed_generations: int  # k · N · repeats
    repeats: int
    leaves: tuple[LeaveRow, ...]

    @property
    def saved(self) -> int:
        """Generations saved so far: every model answering the questions taken (k · t · repeats)
        minus what the race spent."""
        return len(self.models) * self.t * self.repeats - self.generations

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k not in ("models", "leaves")}
        return {
            **out,
            "answer": list(self.answer),
            "models": [vars(m) for m in self.models],
            "leaves": [lv.to_dict() for lv in self.leaves],
            "saved_so_far": self.saved,
        }


@dataclass(frozen=True)
class RaceState:
    """A race run as stored: its settings and, per mode, the race rebuilt from the stored scores."""

    run: str
    goal: str
    alpha: float
    N: int
    order_seed: int
    repeats: int
    budget: int | None
    round_size: int | None
    models: tuple[str, ...]
    modes: tuple[RaceModeState, ...]

    def to_dict(self) -> dict:
        return {
            **{k: (list(v) if k == "models" else v) for k, v in vars(self).items() if k != "modes"},
            "k": len(self.models),
            "modes": {m.mode: m.to_dict() for m in self.modes},
        }


def race_runs(db: str | os.PathLike) -> list[str]:
    """Runs started with ``engine race``, newest first (the Generate page's race chart)."""
    from engine.store.runs import race_runs as stored

    return stored(db)


def stored_race(db: str | os.PathLike, run: str) -> tuple[dict, dict]:
    """(the run's config, its "race" entry); UserError for a run not started with ``engine race``."""
    from engine.store.runs import run_record

    cfg = run_record(db, run).config
    rc = cfg.get("race")
    if not rc:
        raise UserError(f"run {run!r} was not started with engine race (no stored race settings)")
    return cfg, rc


def mode_state(
    race: Race, mode: str, names, repeats: int, fixed: int, intervals: bool = True
) -> RaceModeState:
    """A race's state in names: each model against the current leader (its CS, exact)."""
    lead = race.leader()
    ans = race.answer(intervals=False)
    rows = []
    means = race.means()
    for i, n in enumerate(names):
        lo, up, miss = (
            race.interval(lead, i) if (i != lead and intervals) else (math.nan, math.nan, False)
        )
        rows.append(
            RaceModel(str(n), race.status[i], int(race.answered[i]), float(means[i]), lo, up, miss)
        )
    return RaceModeState(
        mode,
        race.t,
        race.reason or "running",
        str(names[lead]),
        tuple(str(names[i]) for i in ans.answer),
        tuple(rows),
        ans.generations * repeats,
        fixed,
        repeats,
        leave_rows(ans, names),
    )


def race_state(db: str | os.PathLike, run: str) -> RaceState:
    """The stored race rebuilt round by round from its stored scores, in its stored order, with its
    stored goal, α, rounds and budget: the same decisions the live loop took (it reads the same)."""
    cfg, rc = stored_race(db, run)
    names = list(cfg.get("models") or [])
    order = list(rc["order"])
    df = per_question_scores(db, run, rc.get("score_rule"))
    repeats = int(cfg.get("repeats") or 1)
    modes = []
    for m in [x for x in ("coupled", "independent") if x in rc.get("modes", [])]:
        race = rebuild(df, names, order, m, rc)
        modes.append(mode_state(race, m, names, repeats, len(names) * len(order) * repeats))
    return RaceState(
        run,
        str(rc["goal"]),
        float(rc["alpha"]),
        len(order),
        int(rc["order_seed"]),
        repeats,
        rc.get("budget"),
        rc.get("round_size"),
        tuple(names),
        tuple(modes),
    )


def rebuild(df, names, order, mode: str, rc: dict) -> Race:
    """Replay the stored rounds of one mode through a :class:`Race` (stops at the first round not
    fully scored: a live race in the middle of a round)."""
    sub = df[df["mode"] == mode]
    wide = question_means(sub)
    M = wide.reindex(index=order, columns=names).to_numpy(dtype=float)
    race = Race(len(names), len(order), rc["goal"], float(rc["alpha"]))
    start = 0
    for end in round_ends(len(order), rc.get("round_size"), rc.get("budget")):
        block = M[start:end]
        act = np.array([s == "active" for s in race.status])
        if np.isnan(block[:, act]).any():
            break
        race.update(block)
        start = end
        if race.done:
            break
    else:
        race.finish("budget")
    return race
