"""``engine race``: a live race of many models that stops generating for the ones already beaten
(docs/METHODS.md 8.4, docs/SEQUENTIAL.md "Racing").

The questions (the dataset after --limit / --subject / --drop-long-prompts) are taken in the
seeded order ``question_order(N, seed)`` (stored with the run, with the goal, α, rounds and budget,
in its config's ``"race"`` entry). Each round (16, 32, 64, 128, then 256 questions, or
``--round-size``): 1. the models still active in each mode generate the round's questions (the
ordinary resumable driver, so Ray workers and the vLLM backend work as for ``generate``); 2. the
run is scored inside the loop; 3. each mode's :class:`engine.stats.racing.Race` takes the round's
stored scores and decides who leaves. Everything the loop decides is a function of stored scores,
so a killed race, rerun with the same command, takes the same rounds to the same answer; a rerun
with another goal, α or order is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from engine.analysis.race import RaceState
from engine.errors import UserError
from engine.generation.rounds import KeptBackends
from engine.generation.run import RunPlan
from engine.generation.types import ModelTask


@dataclass(frozen=True)
class RacePlan(RunPlan):
    """A round of a race: the run's plan with only the (model, mode) pairs still racing; ``planned``
    is every unit the race has planned so far (its ``n_units``: complete -> done, as for any run)."""

    want: frozenset = frozenset()  # (model name, mode) pairs that generate in this round
    planned: int = 0

    @property
    def n_units(self) -> int:
        return self.planned

    def tasks(self, stored) -> list[ModelTask]:
        tasks = []
        for t in super().tasks(stored):
            modes = self.mode_of(t.name)
            units = tuple(u for u in t.units if (t.name, modes[u.seed]) in self.want)
            if units:
                tasks.append(ModelTask(t.model, t.name, units))
        return tasks


@dataclass(frozen=True)
class RaceResult:
    run_id: str
    state: RaceState
    rounds: int

    def to_dict(self) -> dict:
        return {**self.state.to_dict(), "run_id": self.run_id, "rounds": self.rounds}


def _check_resume(db, run_id: str, race_cfg: dict, resume: bool) -> dict | None:
    """A stored run with this id must be the same race (goal, α, order, rounds): else one line, nothing
    written. Returns the stored race settings (None for a new race); a new budget is allowed."""
    import json

    from engine.store.runs import run_config_text

    if not os.path.exists(db):
        return None
    text = run_config_text(db, run_id)
    if text is None:
        return None
    if not resume:
        raise UserError(f"run {run_id!r} already exists; resume it or pass another --run-id")
    prev = json.loads(text).get("race")
    if not prev:
        raise UserError(
            f"run {run_id!r} exists and was not started with engine race; pass another --run-id"
        )
    keys = ("goal", "alpha", "order_seed", "order", "round_size")
    diff = [k for k in keys if prev.get(k) != race_cfg[k]]
    if diff:
        was = ", ".join(f"{k} {prev.get(k)!r}" for k in diff if k != "order")
        raise UserError(
            f"race {run_id!r} exists with another {', '.join(diff)}"
            + (f" ({was})" if was else "")
            + "; rerun it with its own settings, or pass another --run-id for a new race"
        )
    return prev


def _plan(
    db,
    model_names,
    dataset,
    repeats,
    modes,
    seed,
    cfg,
    goal,
    alpha,
    budget,
    round_size,
    score_rule,
    plan_kw,
):
    from engine.analysis.race import check_models
    from engine.commands._until import scoring_rule_for
    from engine.generation.run import plan_run, run_id_for
    from engine.stats.racing import round_ends
    from engine.stats.sequential import question_order

    check_models([m if isinstance(m, str) else m.name for m in model_names])
    try:  # the rule scored inside the loop (generate --until's check; its words for a race)
        score_rule = scoring_rule_for(dataset, score_rule)
    except UserError as exc:
        raise UserError(str(exc).replace("--until", "a race")) from None
    run_id = plan_kw.pop("run_id", None)
    plan = plan_run(db, model_names, dataset, repeats, modes, seed, cfg, **plan_kw)
    goal.check(len(plan.names))
    pids = list(plan.prompts)
    N = len(pids)
    ends = round_ends(N, round_size, budget)
    order = [pids[i] for i in question_order(N, seed)]
    race_cfg = {
        "goal": str(goal),
        "alpha": alpha,
        "order_seed": seed,
        "order": order,
        "round_size": round_size,
        "budget": budget,
        "score_rule": score_rule,
        "modes": list(plan.modes),
    }
    run_id = run_id or run_id_for({**plan.settings, "race": True})
    prev = _check_resume(db, run_id, race_cfg, plan.resume)
    if prev is not None and prev.get("budget") != budget:  # a resumed race may get a new budget
        from engine.store.runs import set_config_entry

        set_config_entry(db, run_id, "race", {**prev, "budget": budget})
    base = {f.name: getattr(plan, f.name) for f in fields(RunPlan)}
    base.update(run_id=run_id, config={**plan.config, "race": race_cfg})
    return RacePlan(**base), order, ends, score_rule


def run_race(
    db: str | os.PathLike,
    model_names: Sequence,
    dataset,
    repeats: int,
    modes: Sequence[str],
    seed: int,
    cfg,
    *,
    goal,
    alpha: float = 0.05,
    budget: int | None = None,
    round_size: int | None = None,
    score_rule: str | None = None,
    executor=None,
    show_bar: bool = True,
    progress_file=None,
    _after_chunk=None,
    **plan_kw,
) -> RaceResult:
    """Race ``model_names`` on ``dataset`` (see the module docstring); returns the race's state.

    ``goal``: an :class:`engine.stats.racing.Goal` or its text; ``plan_kw``: the remaining arguments
    of engine.generation.run.plan_run (run_id, resume, device, drop_long_prompts, command, backend,
    tensor_parallel, dtype).
    """
    from engine.analysis.race import race_state
    from engine.generation.run import drive
    from engine.stats.racing import Goal, Race
    from engine.stats.sequential import check_alpha

    alpha = check_alpha(alpha)
    goal = goal if isinstance(goal, Goal) else Goal.parse(goal)
    plan, order, ends, score_rule = _plan(
        db,
        model_names,
        dataset,
        repeats,
        modes,
        seed,
        cfg,
        goal,
        alpha,
        budget,
        round_size,
        score_rule,
        plan_kw,
    )
    names = list(plan.names)
    races = {m: Race(len(names), len(order), goal, alpha) for m in plan.modes}
    start = planned = rounds = 0
    # the models stay loaded between rounds while they fit (the plain executor reloaded each, each round)
    with KeptBackends() if executor is None else contextlib.nullcontext(executor) as executor:
        for end in ends:
            # ---- 1. the models still racing (per mode) generate this round's questions
            want = frozenset((names[i], m) for m, r in races.items() if not r.done for i in r.active)
            if not want:
                break
            planned += len(want) * (end - start) * repeats
            rplan = replace(
                plan, prompts={p: plan.prompts[p] for p in order[:end]}, want=want, planned=planned
            )
            drive(
                rplan, executor, progress_file=progress_file, show_bar=show_bar, after_chunk=_after_chunk
            )
            # ---- 2. score inside the loop; 3. each mode's race takes the round and decides who leaves
            scores = _round_scores(db, plan.run_id, score_rule, names, order[start:end])
            for m, r in races.items():
                if not r.done:
                    r.update(scores[m])
            start, rounds = end, rounds + 1
    for r in races.values():
        r.finish("budget")
    from engine.store.runs import set_planned_units

    set_planned_units(db, plan.run_id, planned, status="done")
    return RaceResult(plan.run_id, race_state(db, plan.run_id), rounds)


def _round_scores(db, run_id: str, score_rule: str, names, pids) -> dict:
    """Score the run; per mode, the (len(pids), k) mean score over repeats (NaN: not generated)."""
    from engine.store.scores import per_question_scores, question_means
    from engine.tasks.scoring import score_run

    score_run(db, run_id, score_rule)
    df = per_question_scores(db, run_id, score_rule)
    out = {}
    for m in sorted(set(df["mode"])):
        wide = question_means(df[df["mode"] == m])
        out[m] = wide.reindex(index=list(pids), columns=names).to_numpy(dtype=float)
    return out


def summary_text(res: RaceResult) -> str:
    st = res.state
    lines = [
        f"run {res.run_id}: race (goal {st.goal}, alpha {st.alpha:g}, {len(st.models)} models, "
        f"{res.rounds} round(s), question order seed {st.order_seed})"
    ]
    for m in st.modes:
        lines.append(race_mode_text(m, st.N))
    return "\n".join(lines)


def race_mode_text(m, N: int) -> str:
    """One mode of a race in a few lines: the answer, who left when and why, the cost."""
    head = {
        "decided": f"decided after {m.t:,} of {N:,} questions",
        "budget": f"budget reached after {m.t:,} of {N:,} questions (not decided)",
        "all N questions used": f"all {N:,} questions used (full-run differences; not a sampled decision)",
        "running": f"running: {m.t:,} of {N:,} questions so far",
    }[m.reason]
    lines = [f"  {m.mode}: {head}; answer: {', '.join(m.answer) or '(none)'}"]
    for lv in m.leaves:
        lines.append(
            f"    {lv.model} {lv.status} after {lv.after:,} questions: {'; '.join(lv.evidence)}"
        )
    lines.append(
        f"    generations: {m.generations:,} (a fixed run: {m.fixed_generations:,}; "
        f"{m.generations / max(m.fixed_generations, 1):.1%}); saved so far vs every model on the "
        f"questions taken: {m.saved:,}"
    )
    return "\n".join(lines)
