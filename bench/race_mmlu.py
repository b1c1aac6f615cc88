"""The racing headline, measured (docs/METHODS.md 8.4): generations to identify the best model,
racing vs 8.3's joint stop vs the fixed run, coupled vs independent.

1. The coupled-generation paper's MMLU outputs (three Llama models, 14,042 questions, 10 repeats per
   question; ``engine import paper-mmlu``): ``race --replay`` over 20 seeded orders, one stored
   repeat per question (repeat 0, as a live race with one repeat would see it) and the mean of the
   10 repeats (each question then costs 10 generations per model).
2. A synthetic training run of 20 checkpoints drawn from the paper's per-question accuracies: with
   p_s(i) and p_l(i) the smallest and the largest model's accuracy on question i (mean of its 10
   independent repeats), checkpoint c answers question i right with probability
   sigmoid((1 − w_c) logit p_s(i) + w_c logit p_l(i) + ε_ci), w_c evenly spaced over [0, 0.98] and
   the last three 0.98, 0.99, 1 (a plateau: three checkpoints nearly tied at the top), ε_ci ~
   N(0, 0.3²) each checkpoint's own question effects (checkpoints of one run differ question by
   question, not only in accuracy). Each question has the
   right option and three wrong ones sharing the rest of the probability; an answer is the
   Gumbel-max of the option log-probabilities, the Gumbel noise shared by every checkpoint
   (coupled) or drawn per checkpoint (independent): the Gumbel-max SCM of the paper on one token.
   One answer per question; the population is drawn once (seed 0) and raced over 20 orders.

    .venv/bin/python bench/race_mmlu.py --db /tmp/mmlu.duckdb     # after engine import paper-mmlu
    .venv/bin/python bench/race_mmlu.py --smoke                      # a synthetic stand-in run
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.analysis.race import race_replay, replay_order  # noqa: E402
from engine.stats.racing import Goal  # noqa: E402
from engine.store.scores import per_question_scores  # noqa: E402


def checkpoints(
    p_small: np.ndarray, p_large: np.ndarray, k: int, coupled: bool, seed: int
) -> np.ndarray:
    """(N, k) 0/1 answers of k checkpoints (see the module docstring)."""
    rng = np.random.default_rng(seed)
    eps = 1e-3
    lo = np.log(np.clip(p_small, eps, 1 - eps) / (1 - np.clip(p_small, eps, 1 - eps)))
    hi = np.log(np.clip(p_large, eps, 1 - eps) / (1 - np.clip(p_large, eps, 1 - eps)))
    w = np.concatenate([np.linspace(0.0, 0.98, k - 2)[:-1], [0.98, 0.99, 1.0]])
    eps = rng.normal(0.0, 0.3, (lo.size, k))  # each checkpoint's own question effects
    p = 1.0 / (1.0 + np.exp(-((1 - w[None]) * lo[:, None] + w[None] * hi[:, None] + eps)))  # (N, k)
    logp = np.stack([np.log(p), *(np.log((1 - p) / 3.0),) * 3], axis=2)  # option 0 = the right one
    N = p.shape[0]
    g = rng.gumbel(size=(N, 1, 4)) if coupled else rng.gumbel(size=(N, k, 4))
    return (np.argmax(logp + g, axis=2) == 0).astype(float)


def summarise(orders, best: set[str]) -> dict:
    g = np.array([o.generations for o in orders], float)
    j = np.array([o.joint_stop_generations for o in orders], float)
    return {
        "race": float(np.median(g)),
        "race_q": (float(np.percentile(g, 25)), float(np.percentile(g, 75))),
        "joint": float(np.median(j)),
        "fixed": float(orders[0].fixed_generations),
        "right": float(np.mean([set(o.answer) <= best for o in orders])),
        "decided": float(np.mean([o.reason == "decided" for o in orders])),
    }


def row(name: str, mode: str, s: dict) -> str:
    return (
        f"| {name} | {mode} | {s['race']:,.0f} [{s['race_q'][0]:,.0f}, {s['race_q'][1]:,.0f}] | "
        f"{s['joint']:,.0f} | {s['fixed']:,.0f} | {s['race'] / s['joint']:.0%} | "
        f"{s['race'] / s['fixed']:.2%} | {s['decided']:.0%} | {s['right']:.0%} |"
    )


def paper_rows(db, run: str, seeds) -> list[str]:
    rows = []
    for repeat, label in (
        (0, "paper MMLU, 3 models, 1 repeat"),
        (None, "paper MMLU, 3 models, 10 repeats"),
    ):
        res = race_replay(db, run, goal="best", mode="both", repeat=repeat, seeds=seeds)
        for m in res.modes:
            best = {res.models[int(np.argmax(m.full))]}
            rows.append(row(label, m.mode, summarise(m.orders, best)))
    return rows


def synthetic_rows(db, run: str, k: int, seeds) -> list[str]:
    df = per_question_scores(db, run)
    ind = df[df["mode"] == "independent"]
    acc = ind.groupby(["model", "prompt_id"])["score"].mean().unstack("model").dropna()
    means = acc.mean()
    p_small, p_large = acc[means.idxmin()].to_numpy(), acc[means.idxmax()].to_numpy()
    names = [f"ckpt-{c:02d}" for c in range(k)]
    rows = []
    for coupled in (True, False):
        S = checkpoints(p_small, p_large, k, coupled, seed=0)
        best = {names[i] for i in np.flatnonzero(S.mean(0) == S.mean(0).max())}
        orders = [replay_order(S, names, s, Goal("best"), 0.05, None, None, 1) for s in seeds]
        rows.append(
            row(
                f"synthetic, {k} checkpoints",
                "coupled" if coupled else "independent",
                summarise(orders, best),
            )
        )
    return rows


def smoke_db() -> tuple[str, str]:
    """A stand-in for the paper's files (one subject, 200 questions, 10 repeats, 3 models with
    accuracies 0.35 / 0.5 / 0.65, coupled answers from one shared uniform), imported like them."""
    import csv

    import pandas as pd

    from engine.tasks.importers import PAPER_COUPLED_SEED, import_paper_mmlu

    rng = np.random.default_rng(0)
    root = Path(tempfile.mkdtemp(prefix="race_mmlu_smoke_"))
    qdir, rdir, n = root / "questions", root / "responses", 200
    qdir.mkdir()
    golds = rng.integers(0, 4, n)
    with open(qdir / "smoke_subject_test.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(
            [[f"question {i}?", "w", "x", "y", "z", "ABCD"[g]] for i, g in enumerate(golds)]
        )
    shared = rng.random((n, 10))
    for m, (acc, seed) in {"small": (0.35, 1), "mid": (0.5, 2), "large": (0.65, 3)}.items():
        (rdir / m).mkdir(parents=True)
        for s, u in ((PAPER_COUPLED_SEED, shared), (seed, rng.random((n, 10)))):
            right = u < acc
            letters = np.where(right, golds[:, None], (golds[:, None] + 1) % 4)
            texts = ["ABCD"[v] for v in letters.reshape(-1)]  # row r = question r // 10, repeat r % 10
            pd.DataFrame({"0": texts}).to_csv(rdir / m / f"responses_0_{n}_seed{s}.csv", index=False)
    db = str(root / "smoke.duckdb")
    import_paper_mmlu(db, rdir, qdir)
    return db, "paper-mmlu"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--db", default=None, help="a database with the paper's run (engine import paper-mmlu)"
    )
    ap.add_argument("--run", default="paper-mmlu")
    ap.add_argument("--k", type=int, default=20, help="checkpoints of the synthetic run")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--skip-paper", action="store_true", help="only the synthetic checkpoints")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    if a.smoke:
        a.db, a.run = smoke_db()
        a.k, a.seeds = 6, 2
    if a.db is None:
        ap.error("--db is required (a database with `engine import paper-mmlu`), or --smoke")
    seeds = list(range(a.seeds))
    t0 = time.perf_counter()
    print(
        "| population | mode | race: median generations [quartiles] | 8.3 joint stop (k · n_stop) | "
        "fixed (k · N) | race / joint stop | race / fixed | decided | answer = the full-run best |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    paper = [] if a.skip_paper else paper_rows(a.db, a.run, seeds)
    for r in paper + synthetic_rows(a.db, a.run, a.k, seeds):
        print(r, flush=True)
    print(
        f"\n{time.perf_counter() - t0:.0f} s; {len(seeds)} orders; goal best, alpha 0.05, default rounds"
    )


if __name__ == "__main__":
    main()
