"""Coverage of the win-rate, average win-rate, BT and Elo intervals, and of max-t rank-sets, with known
truth (docs/METHODS.md 7.2, 7.3; docs/REPRODUCTION.md "Honest intervals").

Clustered judge design (engine.stats.simulate.JudgeDesign: 4 models, P prompts x 5 repeats, a prompt
effect shared by the repeats, both orders, coupled mode). Per replication, the product's cluster
bootstraps (engine.stats.clustered) are run twice: clustered by prompt (docs/METHODS.md 7.2) and by
prompt x repeat (what `comparisons from-judge` stored as the prompt id before the repeat got its own
column). Reported per statistic, averaged over its entries (MC SE = sqrt(p (1 - p) / reps), an
under-statement for entries that move together):

* ``percentile``: the plain percentile interval of the draws (the product before);
* ``expanded``: the expanded percentile interval the product now reports (engine.stats.clusters);

and the simultaneous coverage of the wild max-t rank-sets (engine.stats.maxt, 95%) when 5 models are
tied (truth: every rank-set is [1, 5], i.e. no pair may be established).

    .venv/bin/python bench/intervals_coverage.py --reps 1000 --prompts 40 80 --every 100
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats import clustered as CL  # noqa: E402
from engine.stats import maxt as MT  # noqa: E402
from engine.stats import ranking as RK  # noqa: E402
from engine.stats import simulate as S  # noqa: E402
from engine.stats.clusters import percentile  # noqa: E402

STATS = ("W", "avg", "bt", "elo")


def truths(d: S.JudgeDesign) -> dict:
    tr = S.judge_design_truth(d, "coupled")
    k = len(d.quality)
    bt, _ = CL.davidson_fit_counts(np.nan_to_num(tr["W"]) * 1e4, np.nan_to_num(tr["T"]) * 1e4)
    return {
        "W": tr["W"][~np.eye(k, dtype=bool)],
        "avg": tr["avg"],
        "bt": bt,
        "elo": CL.elo_fixed_point(tr["W"], tr["T"], np.ones((k, k))),
    }


def one_rep(r: dict, k: int, cluster, B: int, rng: np.random.Generator, truth: dict) -> dict:
    """Covered (bool arrays) per statistic, for the product's interval and the plain percentile one."""
    a, b, o = r["a"], r["b"], r["outcome"]
    off = ~np.eye(k, dtype=bool)
    w = CL.winrate_cluster_bootstrap(a, b, o, k, rng, cluster=cluster, n_resamples=B)
    bt = CL.davidson_cluster_bootstrap(a, b, o, k, rng, cluster=cluster, n_resamples=B)
    el = CL.elo_cluster_bootstrap(a, b, o, k, rng, cluster=cluster, n_resamples=B)
    new = {
        "W": (w["W_low"][off], w["W_high"][off]),
        "avg": (w["avg_low"], w["avg_high"]),
        "bt": (bt["beta_low"], bt["beta_high"]),
        "elo": (el["low"], el["high"]),
    }
    draws = {"W": w["W_draws"][:, off], "avg": w["avg_draws"], "bt": bt["draws"], "elo": el["draws"]}
    out = {}
    for s in STATS:
        lo, hi = percentile(draws[s], 0.95)
        out[("percentile", s)] = (lo <= truth[s]) & (truth[s] <= hi)
        out[("expanded", s)] = (new[s][0] <= truth[s]) & (truth[s] <= new[s][1])
    return out


def coverage(P: int, reps: int, B: int, seed: int, clusterings: tuple[str, ...], every: int = 0):
    """Yields (replications so far, {(clustering, interval, statistic): (reps, entries) covered}) every
    ``every`` replications (0: once, at the end), so a long run reports as it goes."""
    d = S.JudgeDesign(n_prompts=P, n_repeats=5, modes=("coupled",))
    k, truth = len(d.quality), truths(d)
    rng = np.random.default_rng(seed)
    acc: dict = {}
    for rep in range(1, reps + 1):
        r = S.simulate_judge_design(d, rng)
        cls = {"prompt": r["prompt"], "prompt x repeat": r["prompt"] * 1000 + r["repeat"]}
        for name in clusterings:
            for key, v in one_rep(r, k, cls[name], B, rng, truth).items():
                acc.setdefault((name, *key), []).append(v)
        if rep == reps or (every and rep % every == 0):
            yield rep, {key: np.asarray(v, float) for key, v in acc.items()}


def rankset_coverage(P: int, reps: int, draws: int, seed: int) -> dict:
    """Simultaneous coverage of wild max-t rank-sets (95%) with 5 tied models, by clustering."""
    d = S.JudgeDesign(n_prompts=P, n_repeats=5, modes=("coupled",), quality=(0.0,) * 5)
    k = len(d.quality)
    rng = np.random.default_rng(seed)
    hits: dict = {"prompt": [], "prompt x repeat": []}
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        w, w2 = (r["outcome"] == S.A_WINS).astype(float), (r["outcome"] == S.B_WINS).astype(float)
        for name, cl in (("prompt", r["prompt"]), ("prompt x repeat", r["prompt"] * 1000 + r["repeat"])):
            theta, sigma = RK.onesource_theta_sigma(r["a"], r["b"], w, w2, k, cluster=cl)
            null = RK.wild_draws_onesource(r["a"], r["b"], w, w2, k, cl, rng, n_draws=draws)
            rs = MT.ranksets_maxt(theta, sigma, 0.05, null_draws=null)
            hits[name].append(bool(np.all(rs["lower"] == 1) and np.all(rs["upper"] == k)))
    return {key: np.asarray(v, float) for key, v in hits.items()}


def fmt(x: np.ndarray) -> str:
    if x.size == 0:
        return "n/a"
    p = float(x.mean())
    return f"{p:.3f} ± {np.sqrt(p * (1 - p) / x.shape[0]):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--prompts", type=int, nargs="+", default=[40, 80])
    ap.add_argument(
        "--clusterings",
        nargs="+",
        default=["prompt x repeat", "prompt"],
        choices=["prompt x repeat", "prompt"],
    )
    ap.add_argument("--every", type=int, default=0, help="print the table every this many replications")
    ap.add_argument("--rank-reps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:
        args.reps, args.resamples, args.prompts, args.rank_reps = 2, 50, [12], 2
    t0 = time.time()
    print(f"coverage at nominal 0.95; {args.resamples} cluster-bootstrap resamples")
    for P in args.prompts if args.reps else []:
        for done, acc in coverage(
            P, args.reps, args.resamples, args.seed + P, tuple(args.clusterings), args.every
        ):
            print(f"\n{P} prompts x 5 repeats, {done} replications ({time.time() - t0:.0f} s)")
            print(
                "| prompts | clustered by | interval | pairwise win-rate | average win-rate | BT | Elo |"
            )
            print("|---|---|---|---|---|---|---|")
            for name in args.clusterings:
                for cal in ("percentile", "expanded"):
                    cells = " | ".join(fmt(acc[(name, cal, s)]) for s in STATS)
                    print(f"| {P} | {name} | {cal} | {cells} |", flush=True)
    for P in args.prompts[:1] if args.rank_reps else []:
        rk = rankset_coverage(P, args.rank_reps, 2000 if not args.smoke else 200, args.seed + 7)
        print(
            f"\nmax-t rank-sets (wild, 95%), 5 tied models, {P} prompts x 5 repeats, {args.rank_reps} reps: "
            + "; ".join(f"clustered by {n}: {fmt(v)}" for n, v in rk.items())
        )
    print(f"\n({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
