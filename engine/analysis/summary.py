"""The headline findings of one scored run: what the Home page shows after the demo and what
``python -m engine summary --run RUN`` prints.

Per model and mode: accuracy with a 95% t interval over questions (questions are clusters: the
repeats of one question are dependent; METHODS.md 7). Per model pair: how often the two models give
the same answer on the same unit in coupled vs independent mode, and the paired comparison of
their accuracies in each mode (per-question differences, METHODS.md 7.1: ``paired_diff_ci``) with
the variance saving of coupling, 1 - SE_coupled^2 / SE_independent^2 (the share of questions the
coupled design saves for the same precision of the difference).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from engine import store
from engine.errors import UserError
from engine.stats.benchmark import paired_diff_ci
from engine.stats.multigen import score_variance
from engine.stats.saving import variance_saving

LEVEL = 0.95


def _matrix(df: pd.DataFrame, col: str, prompts: list[str], repeats: list[int]) -> np.ndarray:
    """(Q, R) matrix of ``col`` indexed by prompt x repeat (NaN where a unit is missing)."""
    wide = df.pivot_table(index="prompt_id", columns="repeat", values=col, aggfunc="first")
    return wide.reindex(index=prompts, columns=repeats).to_numpy(dtype=float)


def _complete_rows(*mats: np.ndarray) -> np.ndarray:
    keep = np.ones(mats[0].shape[0], dtype=bool)
    for m in mats:
        keep &= ~np.isnan(m).any(axis=1)
    return keep


def _chance(kind: str | None, choices: list, golds: list) -> float | None:
    """The accuracy of answering without reading the question.

    Multiple choice: a uniform guess, mean of 1 / number of options. Numeric / exact answers: the
    best constant answer, the share of the most common gold answer (always replying "4" scores
    that). None when there are no gold answers.
    """
    if kind == "multiple_choice":
        sizes = [len(json.loads(c)) for c in choices if isinstance(c, str) and c]
        return float(np.mean([1.0 / s for s in sizes if s])) if sizes else None
    golds = [str(g).strip() for g in golds if g is not None]
    if not golds:
        return None
    return float(pd.Series(golds).value_counts().iloc[0] / len(golds))


def run_summary(db: str | os.PathLike, run: str, rule: str | None = None) -> dict:
    """Headline findings of a scored run.

    Args:
        db: the database.  run: a stored run id.
        rule: the scoring rule to summarise (default: the rule that fits the run's dataset,
            ``scoring.run_default_rule``, else the only rule the run was scored with).
    Returns:
        dict: run, dataset_id, kind, rule, models, modes, n_questions, n_repeats, n_generations,
        n_tokens, generation_s (first run record -> last generation stored), chance (accuracy without
        reading the question: 1/options, or the most common gold answer's share; see ``_chance``),
        accuracy (list of {model, mode, accuracy, ci_low, ci_high,
        se, n_questions, n_repeats}), pairs (list of {model_a, model_b, agreement_coupled,
        agreement_independent (+ _ci_low/_ci_high: per-question means, t interval), diff_coupled,
        diff_independent ({diff, se, ci_low, ci_high} from paired_diff_ci), variance_saving,
        questions_factor (SE_ind^2 / SE_coup^2)}), level, status.
    Raises:
        UserError: unknown run, or a run without scores (names the rules it has).
    """
    from engine.tasks.scoring import run_default_rule

    with store.reader(db) as con:
        store.require_run(con, run)
        row = con.execute("""SELECT r.dataset_id, d.kind, r.status, CAST(r.created_at AS VARCHAR)
                             FROM runs r LEFT JOIN datasets d USING (dataset_id) WHERE r.run_id = ?""",
                          [run]).fetchone()
        dataset_id, kind, status, created = row if row else (None, None, None, None)
        rules = [r[0] for r in con.execute(
            "SELECT DISTINCT rule FROM scores WHERE run_id = ? ORDER BY rule", [run]).fetchall()]
        gen_stats = con.execute("""SELECT count(*), coalesce(sum(n_tokens), 0),
                                          epoch(max(g.created_at)) - epoch(min(r.created_at))
                                   FROM generations g JOIN runs r USING (run_id) WHERE g.run_id = ?""",
                                [run]).fetchone()
        prompt_rows = con.execute("""SELECT CAST(p.choices AS VARCHAR), p.gold FROM prompts p
                                     WHERE p.dataset_id = ? AND p.prompt_id IN
                                           (SELECT DISTINCT prompt_id FROM generations WHERE run_id = ?)""",
                                  [dataset_id, run]).fetchall()
    if not rules:
        raise UserError(f"run {run!r} has no scores yet: score it first (python -m engine score --run {run})")
    if rule is None:
        preferred = run_default_rule(db, run)
        rule = preferred if preferred in rules else rules[0]
    if rule not in rules:
        raise UserError(f"run {run!r} has no scores for rule {rule!r}; scored rules: {', '.join(rules)}")
    df = store.query_df(db, """
        SELECT model, mode, prompt_id, repeat, score, extracted FROM scores
        WHERE run_id = ? AND rule = ? AND score IS NOT NULL""", [run, rule])
    if df.empty:
        raise UserError(f"run {run!r} has no gold answers to score under rule {rule!r}")
    models = sorted(df["model"].unique().tolist())
    modes = [m for m in ("coupled", "independent") if m in set(df["mode"])]
    prompts = sorted(df["prompt_id"].unique().tolist())
    repeats = sorted(int(r) for r in df["repeat"].unique())

    accuracy, mats = [], {}
    for model in models:
        for mode in modes:
            part = df[(df["model"] == model) & (df["mode"] == mode)]
            Y = _matrix(part, "score", prompts, repeats)
            mats[(model, mode)] = (Y, part)
            Yc = Y[_complete_rows(Y)]
            if Yc.shape[0] < 2:
                continue
            sv = score_variance(Yc, conf=LEVEL)
            # the t interval clipped to [0, 1] (an accuracy cannot leave it; coverage is unchanged)
            accuracy.append({"model": model, "mode": mode, "accuracy": sv["mu"], "ci_low": max(sv["ci_low"], 0.0),
                             "ci_high": min(sv["ci_high"], 1.0), "se": sv["se"], "n_questions": sv["n"],
                             "n_repeats": sv["k"]})

    pairs = []
    for i, a in enumerate(models):
        for b in models[i + 1:]:
            out: dict = {"model_a": a, "model_b": b}
            se2 = {}
            for mode in modes:
                (A, pa), (B, pb) = mats[(a, mode)], mats[(b, mode)]
                keep = _complete_rows(A, B)
                if keep.sum() < 2:
                    continue
                # Same answer on the same unit (prompt, repeat): the extracted answers agree.
                ea = pa.assign(x=pa["extracted"].astype("string")).set_index(["prompt_id", "repeat"])["x"]
                eb = pb.assign(x=pb["extracted"].astype("string")).set_index(["prompt_id", "repeat"])["x"]
                both = pd.concat([ea.rename("a"), eb.rename("b")], axis=1, join="inner").reset_index()
                both["agree"] = (both["a"].fillna("<none>") == both["b"].fillna("<none>")).astype(float)
                G = _matrix(both, "agree", prompts, repeats)
                G = G[_complete_rows(G)]
                if G.shape[0] >= 2:
                    ag = score_variance(G, conf=LEVEL)
                    out[f"agreement_{mode}"] = ag["mu"]
                    out[f"agreement_{mode}_ci_low"] = ag["ci_low"]
                    out[f"agreement_{mode}_ci_high"] = ag["ci_high"]
                pd_ = paired_diff_ci(A[keep], B[keep], alpha=1 - LEVEL)
                out[f"diff_{mode}"] = {k: pd_[k] for k in ("diff", "se", "ci_low", "ci_high", "n_questions")}
                se2[mode] = pd_["se"] ** 2
            if "coupled" in se2 and "independent" in se2 and se2["independent"] > 0:
                # the one headline saving (engine.stats.saving.variance_saving), on the questions of both modes
                (Ac, _), (Bc, _), (Ai, _), (Bi, _) = (mats[(m, mo)] for mo in ("coupled", "independent") for m in (a, b))
                both_q = _complete_rows(Ac, Bc, Ai, Bi)
                if both_q.sum() >= 2:
                    vs = variance_saving(Ac[both_q] - Bc[both_q], Ai[both_q] - Bi[both_q], level=LEVEL)
                    out["variance_saving"], out["questions_factor"] = vs["saving"], vs["questions_factor"]
                    out["variance_saving_ci"] = [vs["ci_low"], vs["ci_high"]]
                    out["saving_definition"] = vs["definition"]
            pairs.append(out)

    n_gen, n_tok, gen_s = gen_stats if gen_stats else (0, 0, None)
    chance = _chance(kind, [r[0] for r in prompt_rows], [r[1] for r in prompt_rows])
    return {"run": run, "dataset_id": dataset_id, "kind": kind, "status": status, "created_at": created,
            "rule": rule, "rules": rules, "models": models, "modes": modes, "n_questions": len(prompts),
            "n_repeats": len(repeats), "n_generations": int(n_gen), "n_tokens": int(n_tok),
            "generation_s": None if gen_s is None else float(gen_s), "chance": chance,
            "level": LEVEL, "accuracy": accuracy, "pairs": pairs}


def latest_scored_run(db: str | os.PathLike) -> str | None:
    """The newest run that has scores (the Home page summarises it), or None."""
    if not os.path.exists(db):
        return None
    df = store.query_df(db, """SELECT r.run_id FROM runs r WHERE EXISTS (SELECT 1 FROM scores s WHERE s.run_id = r.run_id)
                               ORDER BY r.created_at DESC LIMIT 1""")
    return None if df.empty else str(df.iloc[0, 0])
