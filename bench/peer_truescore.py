"""Side by side with a peer library, truescore 0.7.4 (PyPI; not a dependency: install it in a throwaway
venv), on identical inputs: docs/REPRODUCTION.md, "Measured against the peer: truescore".

Two steps, because the peer and the product live in different environments:

    # 1. the paper's MMLU outputs -> per-question paired differences (the product's venv)
    COUPLED_EVAL_SHARED=../shared .venv/bin/python bench/peer_truescore.py dump --out /tmp/peer/mmlu_d.npz
    # 2. both tools on the same orders and simulations (the peer's venv; the product's pure statistics
    #    modules import with numpy and scipy only)
    python3 -m venv /tmp/ts-venv && /tmp/ts-venv/bin/pip install truescore==0.7.4 "numpy<2.3" scipy
    PYTHONPATH=. /tmp/ts-venv/bin/python bench/peer_truescore.py compare --data /tmp/peer/mmlu_d.npz

``compare`` prints three tables: (1) stopping times on the paper's MMLU outputs (Llama-3.1-8B vs
Llama-3.2-1B, coupled; the product's betting CS for sampling without replacement vs truescore's
empirical-Bernstein CS, both two-sided at alpha 0.05, on the same seeded question orders; stop = the
first question at which the sequence excludes 0); (2) whole-path miss rates on a 400-question
population drawn from those differences (every order a uniformly random permutation; a miss: the
running interval excludes the population's mean at some question); (3) Cohen's kappa interval coverage
under prompt clustering (the product's prompt-cluster bootstrap vs truescore's row bootstrap of
``judge_agreement``).

``--smoke`` runs the three tables on a small synthetic population in seconds (CI's bench smoke test);
without truescore installed, its columns print as "-".
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

A_MODEL, B_MODEL = "Llama-3.1-8B-Instruct", "Llama-3.2-1B-Instruct"


def _peer():
    """truescore, or None where it is not installed (it is not a dependency)."""
    try:
        import truescore
    except ImportError:
        return None
    return truescore


def _quartiles(x: np.ndarray) -> str:
    return f"{np.nanmedian(x):g} [{np.nanpercentile(x, 25):g}, {np.nanpercentile(x, 75):g}]"


def _pct(x: float) -> str:
    return "-" if np.isnan(x) else f"{x:.3f}"


def dump(out: str, db: str) -> None:
    """Import the two models' responses (engine import paper-mmlu) and save d per question, coupled and
    independent, as the mean over the 10 repeats ("mean10") and repeat 0 alone ("rep0")."""
    from engine import store
    from engine.analysis.benchmark import score_matrices
    from engine.tasks.importers import import_paper_mmlu

    shared = Path(os.environ.get("COUPLED_EVAL_SHARED", store.PROJECT_ROOT.parent / "shared")) / "data"
    if not (shared / "coupled-mmlu").exists():
        raise SystemExit(
            f"needs {shared / 'coupled-mmlu'} (set COUPLED_EVAL_SHARED to the shared folder)"
        )
    if not Path(db).exists():
        import_paper_mmlu(db, shared / "coupled-mmlu", shared / "mmlu", models=[A_MODEL, B_MODEL])
    mats = score_matrices(db, A_MODEL, B_MODEL, run="paper-mmlu", rule="paper")
    arrays = {}
    for mode, (A, B) in mats.items():
        arrays[f"{mode}_mean10"] = (A - B).mean(axis=1)
        arrays[f"{mode}_rep0"] = A[:, 0] - B[:, 0]
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    print(
        f"wrote {out}: "
        + ", ".join(f"{k} ({v.size} questions, mean {v.mean():+.4f})" for k, v in arrays.items())
    )


def _ours_stop(d: np.ndarray, N: int, alpha: float, upto: int) -> int | None:
    from engine.stats.sequential import SequentialCS

    lo, up = SequentialCS(N, alpha).update(d[:upto])
    hit = np.flatnonzero((lo > 0) | (up < 0))
    return int(hit[0]) + 1 if hit.size else None


def _peer_stop(d: np.ndarray, alpha: float, upto: int) -> int | None:
    truescore = _peer()
    if truescore is None:
        return None
    t = truescore.first_exclusion((d[:upto] + 1) / 2, 0.5, alpha=alpha, direction="two-sided")
    return None if t is None else int(t)


def stopping_table(data, alpha: float, orders: int, upto: int) -> None:
    from engine.stats.sequential import question_order

    print(
        f"\n(1) stop = first question whose CS excludes 0; {orders} seeded orders (question_order(N, seed)); alpha {alpha}"
    )
    print(
        "| d per question | N | Δ_N | ours: median [q1, q3] | truescore: median [q1, q3] | ratio of medians |"
    )
    print("|---|---|---|---|---|---|")
    for key in ("coupled_rep0", "coupled_mean10", "independent_rep0", "independent_mean10"):
        if key not in data:
            continue
        d_all = data[key]
        N = d_all.size
        ours, peer = [], []
        for seed in range(orders):
            d = d_all[question_order(N, seed)]
            ours.append(_ours_stop(d, N, alpha, upto) or np.nan)
            peer.append(_peer_stop(d, alpha, upto) or np.nan)
        o, p = np.array(ours, float), np.array(peer, float)
        if np.isnan(p).all():  # truescore not installed (or never stopped)
            print(f"| {key} | {N:,} | {d_all.mean():+.4f} | {_quartiles(o)} | - | - |")
            continue
        print(
            f"| {key} | {N:,} | {d_all.mean():+.4f} | {_quartiles(o)} | {_quartiles(p)} | {np.nanmedian(p) / np.nanmedian(o):.2f} |"
        )


def miss_table(data, alpha: float, orders: int, N: int = 400) -> None:
    truescore = _peer()
    from engine.stats.sequential import SequentialCS

    rng = np.random.default_rng(2026)
    print(
        f"\n(2) whole-path miss rate of Δ_N, N = {N} questions drawn (seeded) from the MMLU d, {orders} random orders, alpha {alpha}"
    )
    print(
        "| population | Δ_N | ours: miss rate (MC s.e.) | truescore: miss rate (MC s.e.) | ours: mean final width | truescore: mean final width |"
    )
    print("|---|---|---|---|---|---|")
    for key in ("coupled_rep0", "coupled_mean10"):
        pop = data[key][rng.choice(data[key].size, N, replace=False)]
        mu = pop.mean()
        miss_o = miss_p = 0
        w_o, w_p = [], []
        for _ in range(orders):
            d = pop[rng.permutation(N)]
            lo, up = SequentialCS(N, alpha).update(
                d[: N - 1]
            )  # before the last question: no sampling left at N
            miss_o += bool(np.any((lo > mu + 1e-12) | (up < mu - 1e-12)))
            w_o.append(up[-1] - lo[-1])
            if truescore is None:
                continue
            cs = truescore.confidence_sequence((d[: N - 1] + 1) / 2, alpha=alpha)
            lp, upp = 2 * np.asarray(cs.lower_bounds) - 1, 2 * np.asarray(cs.upper_bounds) - 1
            miss_p += bool(np.any((lp > mu + 1e-12) | (upp < mu - 1e-12)))
            w_p.append(upp[-1] - lp[-1])
        se = (
            lambda k: f"{k / orders:.4f} ({np.sqrt(max(k, 1) / orders * (1 - k / orders) / orders):.4f})"
        )  # noqa: E731
        peer = "-" if truescore is None else se(miss_p)
        w_peer = _pct(np.mean(w_p) if w_p else np.nan)
        print(f"| {key} | {mu:+.4f} | {se(miss_o)} | {peer} | {np.mean(w_o):.3f} | {w_peer} |")


def kappa_table(reps: int, alpha: float) -> None:
    truescore = _peer()
    from engine.stats import judge_audit as JA

    rng = np.random.default_rng(7)
    conf = 1 - alpha
    print(
        f"\n(3) Cohen's kappa {conf:.0%} interval coverage, binary labels clustered by prompt, {reps} replications"
    )
    print(
        "| prompts x units | ours: prompt-cluster bootstrap (MC s.e.) | truescore judge_agreement: row bootstrap (MC s.e.) |"
    )
    print("|---|---|---|")
    for C, per in ((40, 5), (80, 5)):
        # per prompt: prevalence of "a" p_c ~ Beta(2, 2) and agreement a_c ~ Beta(8, 2): both shared by its units
        big = rng.beta(2, 2, 400_000), rng.beta(8, 2, 400_000)
        ph, ag = big
        pj_a = ag * ph + (1 - ag) * (1 - ph)  # P(judge a) given the prompt: agree with h or flip
        po = ag.mean()
        pe = np.mean(ph) * np.mean(pj_a) + np.mean(1 - ph) * np.mean(1 - pj_a)
        truth = (po - pe) / (1 - pe)
        cov_o = cov_p = 0
        for _ in range(reps):
            p = rng.beta(2, 2, C).repeat(per)
            a = rng.beta(8, 2, C).repeat(per)
            h = (rng.random(C * per) < p).astype(int)
            j = np.where(rng.random(C * per) < a, h, 1 - h)
            cl = np.repeat(np.arange(C), per)
            S = JA.cluster_sums(JA.agreement_features(j, h), cl, C)
            iv = JA.interval(S, JA.bootstrap_weights(C, 1000, rng), JA.agreement_kappa_of_sums, conf)
            cov_o += iv.lower[1] <= truth <= iv.upper[1]
            if truescore is None:
                continue
            r = truescore.judge_agreement(
                j, h, alpha=alpha, n_bootstrap=1000, seed=int(rng.integers(1 << 30))
            )
            cov_p += r.cohen_kappa.low <= truth <= r.cohen_kappa.high
        se = lambda k: f"{k / reps:.3f} ({np.sqrt(k / reps * (1 - k / reps) / reps):.3f})"  # noqa: E731
        print(f"| {C} x {per} | {se(cov_o)} | {'-' if truescore is None else se(cov_p)} |")


def smoke() -> None:
    """The three tables on a synthetic population of paired differences (seconds)."""
    rng = np.random.default_rng(0)
    a, b = rng.random((2, 300)) < np.array([[0.65], [0.35]])
    data = {"coupled_rep0": (a.astype(float) - b), "coupled_mean10": (a.astype(float) - b) * 0.9}
    stopping_table(data, 0.05, 2, 300)
    miss_table(data, 0.05, 3, N=100)
    kappa_table(2, 0.05)


def main() -> None:
    if sys.argv[1:] == ["--smoke"]:
        smoke()
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("--out", required=True)
    d.add_argument("--db", default="/tmp/peer/paper.duckdb")
    c = sub.add_parser("compare")
    c.add_argument("--data", required=True)
    c.add_argument("--orders", type=int, default=20)
    c.add_argument("--miss-orders", type=int, default=800)
    c.add_argument("--kappa-reps", type=int, default=400)
    c.add_argument("--alpha", type=float, default=0.05)
    c.add_argument("--upto", type=int, default=3000, help="questions read per order for a stop")
    args = ap.parse_args()
    t0 = time.perf_counter()
    if args.cmd == "dump":
        dump(args.out, args.db)
    else:
        data = dict(np.load(args.data))
        stopping_table(data, args.alpha, args.orders, args.upto)
        miss_table(data, args.alpha, args.miss_orders)
        kappa_table(args.kappa_reps, args.alpha)
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
