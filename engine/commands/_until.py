"""``generate --until RULE``: a sequential run that stops when the answer is known (docs/SEQUENTIAL.md,
docs/METHODS.md section 8).

The questions (the population: the dataset after --limit / --subject / --drop-long-prompts) are
taken in the seeded random order ``engine.stats.sequential.question_order(N, seed)``; the order and
its seed are stored in the run's config (``"sequential"``). Each round is a shard of questions
(:func:`round_ends`: 16, then doubling, or ``--round-size``; never past the budget) for every model
and active mode: generate it (the ordinary resumable driver, so a killed round resumes from what is
stored), score the run inside the loop (the dataset's rule or ``--rule``), rebuild each mode's
confidence sequences from the stored scores of the questions taken so far, and stop when the rule
holds. Everything the loop decides is a function of stored scores, so a killed run, rerun, takes the
same rounds and reaches the same stopping point; a rerun with another rule, α, mode-stop or scoring
rule is refused (engine.generation.run.check_sequential_resume).

Two modes: by default the coupled mode's rule stops the run (independent units are generated only
alongside); ``mode_stop="each"`` runs each mode until its own rule holds.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.analysis.sequential_stop import THIS_BENCHMARK, StopState, stop_state, stop_text
from engine.errors import UserError
from engine.stats.sequential import StopRule, check_alpha, pairs_of, question_order

MODE_STOPS = ("coupled", "each")
FIRST_ROUND = 16  # the default schedule: 16 questions, then double the questions taken ...
MAX_ROUND = 256  # ... by at most this many per round: 16, 32, 64, 128, 256, 512, 768, ...


def round_ends(N: int, round_size: int | None = None, budget: int | None = None) -> list[int]:
    """The question counts after each round: fixed rounds of ``round_size``, or (None, the default)
    16 then doubling, at most :data:`MAX_ROUND` more per round; never past N or the budget.

    The default overshoots a stop at question n by less than max(n, 16) questions while n ≤ 256 (the
    medians of METHODS 8.3 are a few dozen questions) and by less than 256 after that; each round
    rescores and rebuilds the sequences, so rounds are not made smaller than that.
    """
    cap = min(N, budget) if budget is not None else N
    ends, end = [], 0
    while end < cap:
        if round_size is not None:
            end = end + round_size
        else:
            end = FIRST_ROUND if end == 0 else end + min(end, MAX_ROUND)
        end = min(end, cap)
        ends.append(end)
    return ends


@dataclass(frozen=True)
class ModeProgress:
    mode: str
    n_seen: int  # questions generated and scored in this mode
    n_stop: int | None  # first question count at which the rule held (None: not yet)
    state: StopState  # the stop (or the last question): the CS shown, decided, target, t interval
    units: int
    tokens: int


@dataclass(frozen=True)
class UntilResult:
    run_id: str
    N: int
    order_seed: int
    rule: str
    alpha: float
    mode_stop: str
    models: tuple[str, ...]
    pairs: tuple[str, ...]
    repeats: int
    rounds: int
    modes: tuple[ModeProgress, ...]

    def follows(self, mode: str) -> bool:
        """This mode is generated alongside the coupled mode, which stops the run."""
        return (
            self.mode_stop == "coupled"
            and mode != "coupled"
            and "coupled" in {m.mode for m in self.modes}
        )

    def to_dict(self) -> dict:
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "N": self.N,
            "order_seed": self.order_seed,
            "stop": self.rule,
            "alpha": self.alpha,
            "mode_stop": self.mode_stop,
            "models": list(self.models),
            "pairs": list(self.pairs),
            "repeats": self.repeats,
            "rounds": self.rounds,
            "target": THIS_BENCHMARK,
            "modes": {},
        }
        for m in self.modes:
            full_units = self.N * len(self.models) * self.repeats
            out["modes"][m.mode] = {
                **m.state.to_dict(),
                "questions_used": m.n_seen,
                "text": stop_text(m.state, self.pairs, follows=self.follows(m.mode)),
                "units": m.units,
                "tokens": m.tokens,
                "full_run_units": full_units,
                "full_run_tokens_estimate": round(m.tokens * self.N / max(m.n_seen, 1)),
            }
        return out


def scoring_rule_for(dataset, rule: str | None) -> str:
    """The rule scored inside the loop; a dataset without an automatic rule is refused."""
    from engine.config import RULES
    from engine.tasks.scoring import default_rule

    if dataset.kind == "prompts":
        raise UserError(
            f"dataset {dataset.dataset_id!r} has no automatic scoring rule (open prompts, no gold "
            "answers): --until needs every question scored inside the loop"
        )
    no_gold = [p.prompt_id for p in dataset.prompts if p.gold in (None, "")]
    if no_gold:
        raise UserError(
            f"--until needs a gold answer for every question; {len(no_gold)} have none "
            f"(e.g. {no_gold[0]!r})"
        )
    rule = rule or default_rule(dataset.kind, dataset.dataset_id)
    if rule not in RULES:
        raise UserError(f"unknown scoring rule {rule!r}; allowed: {', '.join(RULES)}")
    return rule


def mode_progress(
    db,
    run_id: str,
    order: Sequence[str],
    names: Sequence[str],
    mode: str,
    score_rule: str,
    alpha: float,
    stop: StopRule,
    n_seen: int,
    N: int,
) -> ModeProgress:
    """Rebuild one mode's pairwise CSs from the stored scores of the first ``n_seen`` questions."""
    from engine.store.generations import per_model_counts
    from engine.store.scores import per_question_scores, question_means

    df = per_question_scores(db, run_id, score_rule)
    df = df[df["mode"] == mode]
    wide = question_means(df)
    M = wide.reindex(index=list(order[:n_seen]), columns=list(names)).to_numpy(dtype=float)
    if np.isnan(M).any():
        raise RuntimeError(
            f"{int(np.isnan(M).any(axis=1).sum())} of the first {n_seen} questions have no "
            f"score in mode {mode}"
        )
    state = stop_state(M, N, stop, alpha)
    counts = [c for c in per_model_counts(db, run_id) if c.mode == mode]
    return ModeProgress(
        mode,
        n_seen,
        state.n_stop,
        state,
        sum(c.units for c in counts),
        sum(c.tokens for c in counts),
    )


def run_until(
    db: str | os.PathLike,
    model_names: Sequence,
    dataset,
    repeats: int,
    modes: Sequence[str],
    seed: int,
    cfg,
    *,
    stop: StopRule,
    alpha: float = 0.05,
    score_rule: str | None = None,
    mode_stop: str = "coupled",
    round_size: int | None = None,
    executor=None,
    show_bar: bool = True,
    progress_file=None,
    _after_chunk=None,
    **plan_kw,
) -> UntilResult:
    """Generate and score in rounds until ``stop`` holds (see the module docstring).

    ``round_size``: questions per round (None: :func:`round_ends`' default schedule). ``plan_kw``: the
    remaining arguments of engine.generation.run.plan_run (run_id, resume, device, drop_long_prompts,
    command, backend, tensor_parallel, dtype); ``resume=False`` refuses an existing run at round 1 only
    (later rounds continue the run this call started).
    """
    from engine.generation.rounds import KeptBackends
    from engine.generation.run import drive, plan_run

    alpha = check_alpha(alpha)
    if mode_stop not in MODE_STOPS:
        raise UserError(f"unknown --mode-stop {mode_stop!r}; allowed: {', '.join(MODE_STOPS)}")
    if round_size is not None and (
        isinstance(round_size, bool) or not isinstance(round_size, int) or round_size < 1
    ):
        raise UserError(f"--round-size must be an integer >= 1, got {round_size!r}")
    score_rule = scoring_rule_for(dataset, score_rule)
    plan = plan_run(db, model_names, dataset, repeats, modes, seed, cfg, **plan_kw)
    if len(plan.names) < 2:
        raise UserError(f"--until compares models: give 2 or more, got {', '.join(plan.names)}")
    pids = list(plan.prompts)
    N = len(pids)
    stop.check(N)
    order = [pids[i] for i in question_order(N, seed)]
    plan = replace(
        plan,
        config={
            **plan.config,
            "sequential": {
                "until": str(stop),
                "alpha": alpha,
                "mode_stop": mode_stop,
                "round_size": round_size if round_size is not None else "auto",
                "score_rule": score_rule,
                "order_seed": seed,
                "order": order,
            },
        },
    )
    primary = "coupled" if "coupled" in plan.modes else plan.modes[0]
    active, ends, state = list(plan.modes), dict.fromkeys(plan.modes, 0), {}
    rounds = 0
    # the models stay loaded between rounds while they fit (the plain executor reloaded each, each round)
    with KeptBackends() if executor is None else contextlib.nullcontext(executor) as executor:
        for end in round_ends(N, round_size, stop.budget):
            rounds += 1
            rplan = replace(plan, prompts={p: plan.prompts[p] for p in order[:end]}, modes=tuple(active))
            drive(
                rplan, executor, progress_file=progress_file, show_bar=show_bar, after_chunk=_after_chunk
            )
            plan = replace(plan, resume=True)  # rounds 2.. continue the run this call started
            for m in active:
                ends[m] = end
            _store_progress(plan, ends, score_rule)
            for m in active:
                state[m] = mode_progress(
                    db, plan.run_id, order, plan.names, m, score_rule, alpha, stop, end, N
                )
            if mode_stop == "each":
                active = [m for m in active if state[m].n_stop is None]
            elif state[primary].n_stop is not None:
                active = []
            if not active:
                break
    return UntilResult(
        plan.run_id,
        N,
        seed,
        str(stop),
        alpha,
        mode_stop,
        tuple(plan.names),
        tuple(f"{plan.names[i]} - {plan.names[j]}" for i, j in pairs_of(len(plan.names))),
        repeats,
        rounds,
        tuple(state[m] for m in plan.modes),
    )


def _store_progress(plan, ends: dict, score_rule: str) -> None:
    """The run's planned units = the rounds taken; then score the run (inside the loop)."""
    from engine.store.runs import set_planned_units
    from engine.tasks.scoring import score_run

    set_planned_units(plan.db, plan.run_id, sum(ends.values()) * len(plan.names) * plan.repeats)
    score_run(plan.db, plan.run_id, score_rule)


def summary_text(r: UntilResult) -> str:
    """The CLI summary: per mode the stop in one sentence (which rule held, decided or not, its target:
    this benchmark's Δ_N), each pair's interval there, and the cost against the full run."""
    lines = [
        f"run {r.run_id}: sequential (--until {r.rule}, alpha {r.alpha:g}; stop on "
        f"{'each mode' if r.mode_stop == 'each' else 'the coupled mode'}), {r.rounds} round(s), "
        f"question order seed {r.order_seed}"
    ]
    for m in r.modes:
        st = m.state
        cs = "; ".join(
            f"{p}: [{a:+.4f}, {b:+.4f}]" + (" (missed: current C_t)" if miss else "")
            for p, a, b, miss in zip(r.pairs, st.lower, st.upper, st.missed)
        )
        full_units = r.N * len(r.models) * r.repeats
        lines.append(f"  {m.mode}: {stop_text(st, r.pairs, follows=r.follows(m.mode))}")
        lines.append(f"    CS at question {st.at:,}: {cs}")
        lines.append(
            f"    questions used: {m.n_seen:,} of {r.N:,} ({m.n_seen / r.N:.1%}); {m.units:,} "
            f"generations, {m.tokens:,} tokens; the full run would have cost {full_units:,} generations "
            f"(~{round(m.tokens * r.N / max(m.n_seen, 1)):,} tokens at this rate)"
        )
    return "\n".join(lines)
