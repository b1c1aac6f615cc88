"""Analysis layer of the sequential evaluation: stored data -> engine.stats -> a frozen result.

Replay of a stored run as a sequential (anytime-valid) evaluation: "when could it have stopped?".

docs/METHODS.md section 8. The run's questions are shuffled with a seed (as a live ``--until`` run
takes them); per noise mode, each pair's betting confidence sequence (engine.stats.sequential, at
α/P for P pairs) is updated question by question, and the stop rule's first firing is reported with
the CS there, the fixed-n t interval on the same questions (not valid for the stopping decision:
shown for reference) and the full-run difference Δ_N. Several seeds summarise the stopping time
over orders (median, quartiles).

Works on any scored run: generated, imported harness and ``import paper-mmlu`` runs; reads go
through engine.store only.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from engine.analysis.sequential_stop import StopState, cs_path, pair_text, stop_state, stop_text
from engine.config import MODES
from engine.errors import UserError
from engine.stats.sequential import StopRule, check_alpha, pair_alpha, pairs_of, question_order
from engine.store.scores import per_question_scores, question_means


@dataclass(frozen=True)
class SequentialStop:
    """One question order's stop (engine.analysis.sequential_stop.StopState) and its seed."""

    seed: int
    state: StopState

    @property
    def n(self) -> int | None:  # first question count at which the rule held; None: never before N
        return self.state.n_stop

    @property
    def lower(
        self,
    ) -> tuple[float, ...]:  # per pair, the CS at the stop (or at N; current C_t on a miss)
        return self.state.lower

    @property
    def upper(self) -> tuple[float, ...]:
        return self.state.upper

    @property
    def decided(self) -> bool:  # every pair decided before N (a stop at N is "all questions used")
        return self.state.all_decided

    @property
    def missed(self) -> bool:  # some pair's running intersection was empty: its current C_t is shown
        return any(self.state.missed)

    @property
    def t_low(self) -> tuple[float, ...]:  # fixed-n t interval (NOT valid for the stopping decision)
        return self.state.t_low

    @property
    def t_high(self) -> tuple[float, ...]:
        return self.state.t_high

    @property
    def ranksets(self) -> tuple[tuple[int, int], ...]:
        return self.state.ranksets

    def to_dict(self, single: bool) -> dict:
        return {"seed": self.seed, **self.state.to_dict(single)}


@dataclass(frozen=True)
class ModeReplay:
    mode: str
    n_questions: int  # N: the population (questions every chosen model has in this mode)
    n_repeats: int
    full: tuple[float, ...]  # Δ_N per pair
    stops: tuple[SequentialStop, ...]

    def stop_counts(self) -> np.ndarray:
        """n per seed, N where the rule never fired (the run went to the end)."""
        return np.array([s.n if s.n is not None else self.n_questions for s in self.stops], dtype=float)

    def summary(self) -> dict:
        n = self.stop_counts()
        q1, med, q3 = (float(v) for v in np.percentile(n, [25, 50, 75]))
        return {
            "median": med,
            "q1": q1,
            "q3": q3,
            "min": float(n.min()),
            "max": float(n.max()),
            "never": sum(s.n is None for s in self.stops),
            "decided": sum(s.decided for s in self.stops),  # decided before N (METHODS 8.3)
            "all_used": sum(s.state.outcome == "full" for s in self.stops),  # stopped at N
            "missed": sum(s.missed for s in self.stops),
            "fraction_of_N": med / self.n_questions,
        }

    def to_dict(self, single: bool) -> dict:
        return {
            "n_questions": self.n_questions,
            "n_repeats": self.n_repeats,
            "full": self.full[0] if single else list(self.full),
            "stops": [s.to_dict(single) for s in self.stops],
            "summary": self.summary(),
        }


@dataclass(frozen=True)
class SequentialReplay:
    run: str
    models: tuple[str, ...]
    pairs: tuple[str, ...]  # "A - B" per pair, engine.stats.sequential.pairs_of order
    alpha: float
    pair_alpha: float  # α/P
    rule: str
    repeat: int | None  # None: the mean over the stored repeats
    seeds: tuple[int, ...]
    modes: tuple[ModeReplay, ...]

    def mode(self, name: str) -> ModeReplay:
        return next(m for m in self.modes if m.mode == name)

    def to_dict(self) -> dict:
        single = len(self.pairs) == 1
        return {
            "run": self.run,
            "models": list(self.models),
            "pairs": list(self.pairs),
            "alpha": self.alpha,
            "pair_alpha": self.pair_alpha,
            "stop": self.rule,
            "repeat": self.repeat,
            "seeds": list(self.seeds),
            "modes": {m.mode: m.to_dict(single) for m in self.modes},
        }


def _choose_modes(present: list[str], mode: str) -> list[str]:
    if mode not in (*MODES, "both"):
        raise UserError(f"unknown mode {mode!r}; allowed: coupled, independent, both")
    wanted = [m for m in MODES if m in present] if mode == "both" else [mode]
    missing = [m for m in wanted if m not in present]
    if missing or not wanted:
        raise UserError(
            f"the run has no {', '.join(missing) or mode} scores; modes stored: "
            f"{', '.join(present) or '(none)'}"
        )
    return wanted


def _choose_models(stored: list[str], models: list[str] | None) -> list[str]:
    chosen = list(models) if models else sorted(stored)
    unknown = [m for m in chosen if m not in stored]
    if unknown:
        raise UserError(f"unknown model {unknown[0]!r}; models in the run: {', '.join(sorted(stored))}")
    if len(set(chosen)) < 2:
        raise UserError(
            f"a sequential comparison needs 2 or more models; got {', '.join(chosen) or '(none)'} "
            f"(models in the run: {', '.join(sorted(stored))})"
        )
    return chosen


def mode_matrix(
    df, models: list[str], mode: str, repeat: int | None
) -> tuple[np.ndarray, np.ndarray, int]:
    """(prompt ids (Q,) sorted, scores (Q, k) per-question mean over repeats (or repeat R), repeats)
    on the questions every chosen model has in ``mode``."""
    sub = df[(df["mode"] == mode) & df["model"].isin(models)]
    reps = sorted(int(r) for r in sub["repeat"].unique())
    if repeat is not None:
        if repeat not in reps:
            raise UserError(
                f"--repeat {repeat} is not stored in mode {mode}; repeats: {reps[0]}..{reps[-1]}"
                if reps
                else f"--repeat {repeat}: mode {mode} has no scores"
            )
        sub = sub[sub["repeat"] == repeat]
    wide = question_means(sub).dropna()
    if wide.empty:
        raise UserError(f"no question has scores of every chosen model in mode {mode}")
    wide = wide.sort_index()
    return (
        wide.index.to_numpy(dtype=str),
        wide[models].to_numpy(dtype=float),
        1 if repeat is not None else len(reps),
    )


def _stop(seed: int, scores: np.ndarray, rule: StopRule, alpha: float, grid: int) -> SequentialStop:
    N = scores.shape[0]
    return SequentialStop(seed, stop_state(scores[question_order(N, seed)], N, rule, alpha, grid))


def sequential_replay(
    db: str | os.PathLike,
    run: str,
    models: list[str] | None = None,
    mode: str = "both",
    repeat: int | None = None,
    alpha: float = 0.05,
    seeds: list[int] | tuple[int, ...] = (0,),
    stop: str | StopRule = "decided",
    rule: str | None = None,
    grid: int = 2001,
) -> SequentialReplay:
    """When could this stored run have stopped? (METHODS 8; see the module docstring.)

    Args:
        db, run: a scored run.  models: 2 or more (default: every model of the run; P pairs at α/P).
        mode: coupled | independent | both (both: the modes stored).  repeat: one stored repeat per
        question (as a live run with one repeat would see it); None: the mean over the stored repeats.
        alpha: family level.  seeds: question orders (engine.stats.sequential.question_order). stop: a
        StopRule or its text (decided | width:W | budget:N, comma-separated).  rule: scoring rule.
    Raises:
        UserError: one model, a missing mode, α outside (0, 1), a rule that cannot fire, unknown names.
    """
    alpha = check_alpha(alpha)
    srule = stop if isinstance(stop, StopRule) else StopRule.parse(stop)
    if not seeds:
        raise UserError("no seeds given; e.g. --seed 0 or --seeds 0..19")
    df = per_question_scores(db, run, rule)
    if df.empty:
        raise UserError(
            f"run {run!r} has no scores; score it first (python -m engine score --run {run})"
        )
    chosen = _choose_models(sorted(str(m) for m in df["model"].unique()), models)
    wanted = _choose_modes(sorted(str(m) for m in df["mode"].unique()), mode)
    out = []
    for m in wanted:
        _, S, reps = mode_matrix(df, chosen, m, repeat)
        srule.check(S.shape[0])
        full = tuple(float(np.mean(S[:, i] - S[:, j])) for i, j in pairs_of(len(chosen)))
        out.append(
            ModeReplay(
                mode=m,
                n_questions=S.shape[0],
                n_repeats=reps,
                full=full,
                stops=tuple(_stop(int(sd), S, srule, alpha, grid) for sd in seeds),
            )
        )
    return SequentialReplay(
        run=run,
        models=tuple(chosen),
        pairs=tuple(f"{chosen[i]} - {chosen[j]}" for i, j in pairs_of(len(chosen))),
        alpha=alpha,
        pair_alpha=pair_alpha(alpha, len(chosen)),
        rule=str(srule),
        repeat=repeat,
        seeds=tuple(int(s) for s in seeds),
        modes=tuple(out),
    )


# ----------------------------------------------------------------------------- one order's path (charts)


@dataclass(frozen=True)
class SequentialPath:
    """One pair's CS after every question of one order and mode (for the chart), and the state text."""

    mode: str
    pair: str
    seed: int
    N: int
    n_stop: int | None  # the stop rule's first firing (None: never)
    t: tuple[int, ...]  # question counts shown (a log-spaced subset of 1..N, the stop included)
    lower: tuple[float, ...]  # CS at those counts, Δ scale: the running intersection, or the current
    upper: tuple[float, ...]  # C_t from where the sequence missed (probability <= alpha)
    full: float  # Δ_N (NaN for a live run: not known before the end)
    state: str  # the pair at the stop (sequential_stop.pair_text): "decided: A > B at question 412 of
    # 14,042" | "not decided: Δ_N in [−0.02, 0.03] at ..." | "all 40 questions used: ..." | "missed: ..."
    summary: str  # the mode's stop in one sentence, with its target (sequential_stop.stop_text)
    missed_at: int | None  # first question at which the running intersection was empty (None: never)

    def to_dict(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self).items()}


def _shown(N: int, n_stop: int | None, points: int = 400) -> np.ndarray:
    t = np.unique(np.round(np.geomspace(1, N, points)).astype(int))
    return np.unique(np.concatenate([t, [n_stop] if n_stop else []])).astype(int)


def _path(
    mode, names, pair, seed, N, M, rule, alpha, full, every: bool, follows: bool = False
) -> SequentialPath:
    """Pair ``pair`` of ``names`` on scores M (T, k) in order: its whole CS path and the mode's stop
    (``follows``: the mode was generated alongside the one that stops the run, as in :class:`LiveStop`)."""
    i, j = pairs_of(len(names))[pair]
    state = stop_state(M, N, rule, alpha)
    path = cs_path(M, N, alpha)
    lo, up = (v[:, pair] for v in path.shown())
    miss = np.flatnonzero(path.lower[:, pair] > path.upper[:, pair])
    t = np.arange(1, M.shape[0] + 1) if every else _shown(N, state.n_stop)
    return SequentialPath(
        mode,
        f"{names[i]} - {names[j]}",
        int(seed),
        N,
        state.n_stop,
        tuple(int(x) for x in t),
        tuple(float(x) for x in lo[t - 1]),
        tuple(float(x) for x in up[t - 1]),
        full,
        pair_text(state, pair, names[i], names[j]),
        stop_text(state, [f"{names[a]} - {names[b]}" for a, b in pairs_of(len(names))], follows),
        int(miss[0]) + 1 if miss.size else None,
    )


def sequential_paths(
    db: str | os.PathLike,
    run: str,
    model_a: str,
    model_b: str,
    mode: str = "both",
    repeat: int | None = None,
    alpha: float = 0.05,
    seed: int = 0,
    stop: str = "decided",
    rule: str | None = None,
) -> tuple[SequentialPath, ...]:
    """Per mode, the CS of A − B after every question of order ``seed`` (the whole path to N)."""
    alpha, srule = check_alpha(alpha), StopRule.parse(stop)
    df = per_question_scores(db, run, rule)
    if df.empty:
        raise UserError(f"run {run!r} has no scores")
    chosen = _choose_models(sorted(str(m) for m in df["model"].unique()), [model_a, model_b])
    out = []
    for m in _choose_modes(sorted(str(x) for x in df["mode"].unique()), mode):
        _, S, _ = mode_matrix(df, chosen, m, repeat)
        N = S.shape[0]
        srule.check(N)
        M = S[question_order(N, seed)]
        out.append(
            _path(m, chosen, 0, seed, N, M, srule, alpha, float(np.mean(M[:, 0] - M[:, 1])), False)
        )
    return tuple(out)


# ----------------------------------------------------------------------------- a live --until run


def sequential_runs(db: str | os.PathLike) -> list[str]:
    """Runs started with ``generate --until``, newest first (the Generate page's live chart)."""
    from engine.store.runs import sequential_runs as stored

    return stored(db)


def _live_scores(db: str | os.PathLike, run: str):
    """A ``generate --until`` run's stored facts and its per-mode score matrices in the stored order:
    (seq config, order, models in the run's order, [(mode, M (seen, k), seen)]), modes with no scored
    question left out. The one read behind :func:`live_paths` and :func:`live_stop`, so the live chart
    and the stop agree (same models, same order, same joint stop)."""
    from engine.store.runs import run_record

    cfg = run_record(db, run).config
    seq = cfg.get("sequential")
    if not seq:
        raise UserError(f"run {run!r} was not started with --until (no stored question order)")
    order = list(seq["order"])
    try:
        df = per_question_scores(db, run, seq.get("score_rule"))
    except UserError:
        df = None
    if df is None or df.empty:
        raise UserError(f"run {run!r} has no scores yet: its first round is still being generated")
    names = [str(m) for m in (cfg.get("models") or sorted(df["model"].unique()))]
    modes = []
    for m in [x for x in MODES if x in set(df["mode"])]:
        wide = question_means(df[df["mode"] == m])
        M = wide.reindex(index=order, columns=names).to_numpy(dtype=float)
        seen = int(np.argmax(np.isnan(M).any(axis=1))) if np.isnan(M).any() else len(order)
        if seen:
            modes.append((m, M[:seen], seen))
    return seq, order, names, modes


def live_paths(db: str | os.PathLike, run: str, pair: int = 0) -> tuple[SequentialPath, ...]:
    """Per mode, pair ``pair``'s CS over the questions a ``generate --until`` run has scored so far,
    in its stored order, with its stored α (at α/P) and stop rule (for the live chart); the stop
    marked is the run's: the first question at which the rule held for all its pairs."""
    seq, order, names, modes = _live_scores(db, run)
    rule, pairs = StopRule.parse(seq["until"]), pairs_of(len(names))
    if len(names) < 2 or not 0 <= pair < len(pairs):
        raise UserError(f"run {run!r}: no pair {pair} (models: {', '.join(names)})")
    alpha, mode_stop = float(seq["alpha"]), str(seq.get("mode_stop", "coupled"))
    present = [m for m, _, _ in modes]
    return tuple(
        # Δ_N is not known before the end (NaN); a mode generated alongside says so, as the stop does
        _path(
            m,
            names,
            pair,
            seq["order_seed"],
            len(order),
            M,
            rule,
            alpha,
            math.nan,
            True,
            follows=_follows(mode_stop, m, present),
        )
        for m, M, _ in modes
    )


def _follows(mode_stop: str, mode: str, modes: list[str]) -> bool:
    """``mode`` is generated alongside the coupled mode, which stops the run (``modes``: those scored)."""
    return mode_stop == "coupled" and mode != "coupled" and "coupled" in modes


@dataclass(frozen=True)
class LiveModeStop:
    """One mode of a ``generate --until`` run at its stop (or at the last question scored)."""

    mode: str
    state: StopState

    @property
    def n_seen(self) -> int:  # questions of the stored order scored in this mode
        return self.state.n_seen

    @property
    def n_stop(self) -> int | None:  # the stop rule's first firing (None: not met in the questions seen)
        return self.state.n_stop

    @property
    def lower(self) -> tuple[float, ...]:  # per pair, the CS at the stop (current C_t on a miss)
        return self.state.lower

    @property
    def upper(self) -> tuple[float, ...]:
        return self.state.upper

    @property
    def decided(self) -> bool:  # every pair decided before N
        return self.state.all_decided

    @property
    def missed(self) -> bool:  # a pair's running intersection is empty there (probability <= α)
        return any(self.state.missed)


@dataclass(frozen=True)
class LiveStop:
    """Where a ``generate --until`` run stopped, per mode, from its stored order, α and rule."""

    run: str
    N: int
    order_seed: int
    rule: str
    alpha: float
    pair_alpha: float
    mode_stop: str
    models: tuple[str, ...]  # the run's model order (pairs: pairs_of over it)
    pairs: tuple[str, ...]
    modes: tuple[LiveModeStop, ...]

    def follows(self, mode: str) -> bool:
        """This mode is generated alongside the coupled mode, which stops the run."""
        return _follows(self.mode_stop, mode, [x.mode for x in self.modes])

    def text(self, mode: str) -> str:
        """The mode's stop in one sentence, with its target (sequential_stop.stop_text)."""
        lm = next(x for x in self.modes if x.mode == mode)
        return stop_text(lm.state, self.pairs, follows=self.follows(mode))

    def pair_text(self, mode: str, p: int) -> str:
        lm = next(x for x in self.modes if x.mode == mode)
        a, b = pairs_of(len(self.models))[p]
        return pair_text(lm.state, p, self.models[a], self.models[b])

    def replay_note(self) -> str | None:
        """What a replay of this run's stored scores (the Benchmark page's Sequential tab) is about when
        the run stopped before N: its population is the questions generated, so its N and Δ_N are
        theirs, not the benchmark's (METHODS 8.3: each number says its target). None when the run
        generated all N questions."""
        n = max(m.n_seen for m in self.modes)
        if n >= self.N:
            return None
        return (
            f"This run stopped early (--until {self.rule}): it generated {n:,} of the benchmark's "
            f"{self.N:,} questions. A replay can only reorder those {n:,}: its N is {n:,} and its Δ_N is "
            f"their difference, not the benchmark's full-run difference over {self.N:,} questions. The "
            "run's own stop, about the benchmark:"
        )

    def to_dict(self) -> dict:
        out = {k: v for k, v in vars(self).items() if k != "modes"}
        return {
            **{k: list(v) if isinstance(v, tuple) else v for k, v in out.items()},
            "modes": {m.mode: {**m.state.to_dict(), "text": self.text(m.mode)} for m in self.modes},
        }


def live_stop(db: str | os.PathLike, run: str) -> LiveStop:
    """The stop of a ``generate --until`` run (METHODS 8): per mode, the stored scores in the stored
    order, each pair's CS at level α/P (the run's α and rule, models in the run's order, as the run
    decided), the first question at which the rule held, the CS there, and the fixed-n t interval on
    the same questions (for reference: not valid for a data-dependent stop).

    Raises:
        UserError: a run not started with --until, or one without scores yet.
    """
    seq, order, names, modes = _live_scores(db, run)
    srule, alpha = StopRule.parse(seq["until"]), float(seq["alpha"])
    k = len(names)
    return LiveStop(
        run,
        len(order),
        int(seq["order_seed"]),
        str(srule),
        alpha,
        pair_alpha(alpha, k),
        str(seq.get("mode_stop", "coupled")),
        tuple(names),
        tuple(f"{names[i]} - {names[j]}" for i, j in pairs_of(k)),
        tuple(LiveModeStop(m, stop_state(M, len(order), srule, alpha)) for m, M, _ in modes),
    )
