"""Max-t simultaneous rank-sets (docs/METHODS.md 7.3) vs the paper's Algorithm 2, on the same draws.

A. Paper's synthetic experiment (Chatzi et al. App. E): k = 8, theta ~ U(0, 1/2), judge noise
   u in {0.05, 0.1, 0.3}, N + n = 50,000 balanced comparisons, alpha in {0.05, 0.1}; methods
   HUMAN ONLY (n) and PPR (per u); simultaneous coverage of the true rank-sets and mean size.
B. Clustered judge design (engine.stats.simulate, 100 prompts x 5 repeats, both orders, 4 models,
   coupled): one-source theta_hat with the prompt-clustered covariance (and, for contrast, the
   row-level one).
C. Chatbot Arena (12 models of the paper, balanced draws of N + n = 6,336, n = 990): paper's
   Figure 1 metrics (mean size, baseline intersection, baseline coverage) per method and judge,
   both procedures. Skipped cleanly without ../shared/data/arena.
D. Least-favourable configuration (all 8 models equal): coverage should be close to 1 - alpha.
E. Few prompts (docs/REPRODUCTION.md, small-sample choices): 5 tied models, 40 / 60 prompts x 4 repeats, prompt-clustered
   covariance: the normal calibration vs the wild cluster bootstrap-t (the default at <= 2,000 prompts).
MC SE of a proportion p over R reps: sqrt(p (1 - p) / R); of a mean size: sd / sqrt(R).

    .venv/bin/python bench/maxt_ranksets.py --reps 300 --arena-reps 150
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats import ranking as R  # noqa: E402
from engine.stats import simulate as S  # noqa: E402

ALPHAS = (0.05, 0.1)


def both(theta, sigma, alpha, rng, n_draws):
    m = R.ranksets_maxt(theta, sigma, alpha, rng, n_draws=n_draws)
    lo, up = R.ranksets(theta, sigma, alpha)
    return {"maxt": (m["lower"], m["upper"]), "chi2": (lo, up)}


def summary(rows, reps):
    """rows: list of (covered bool, size float) -> 'cov ± se | size ± se'."""
    c = np.array([r[0] for r in rows], float)
    s = np.array([r[1] for r in rows], float)
    return f"{c.mean():.3f} ± {np.sqrt(c.mean() * (1 - c.mean()) / len(c)):.3f} | {s.mean():.2f} ± {s.std(ddof=1) / np.sqrt(len(s)):.2f}"


def synthetic(reps, n_values, seed, n_draws):
    k, total, us = 8, 50_000, (0.05, 0.1, 0.3)
    rng = np.random.default_rng(seed)
    first, second = R.balanced_design(k, total // (k * (k - 1)))
    T = first.size
    z = np.zeros(T)
    acc = {}
    for _ in range(reps):
        theta = rng.uniform(0, 0.5, k)
        judges = {u: np.clip(theta + rng.uniform(-u, u, k), 0, 0.5) for u in us}
        x = rng.random(T)
        w = (x < 2 * theta[first]).astype(float)
        tl, tu = R.true_ranksets(theta)
        for n in n_values:
            lab = np.zeros(T, bool)
            lab[rng.choice(T, n, replace=False)] = True
            ests = {"HUMAN ONLY": R.onesource_theta_sigma(first[lab], second[lab], w[lab], z[lab], k)}
            for u, th_j in judges.items():
                wh = (x < 2 * th_j[first]).astype(float)
                t, sg, _ = R.ppr_theta_sigma(
                    first[~lab],
                    second[~lab],
                    wh[~lab],
                    z[~lab],
                    first[lab],
                    second[lab],
                    w[lab],
                    z[lab],
                    wh[lab],
                    z[lab],
                    k,
                )
                ests[f"PPR u={u}"] = (t, sg)
            for name, (t, sg) in ests.items():
                for a in ALPHAS:
                    for proc, (lo, up) in both(t, sg, a, rng, n_draws).items():
                        acc.setdefault((name, n, a, proc), []).append(
                            (bool(R.rankset_covers(lo, up, tl, tu)), float(R.rankset_size(lo, up)))
                        )
    print(
        f"### A. Synthetic (k = 8, N + n = 50,000 balanced, {reps} reps): coverage ± MC SE | mean size ± MC SE\n"
    )
    print("| method | n | alpha | max-t step-down | Algorithm 2 (chi2_k) |")
    print("|---|---|---|---|---|")
    for name, n, a, proc in acc:
        if proc == "maxt":
            print(
                f"| {name} | {n} | {a} | {summary(acc[name, n, a, 'maxt'], reps)} | {summary(acc[name, n, a, 'chi2'], reps)} |"
            )


def least_favourable(reps, seed, n_draws):
    """All k = 8 models equal (theta = 1/4): every pair is at its null boundary, so a valid
    simultaneous procedure should cover close to 1 - alpha here (and more elsewhere)."""
    k, n = 8, 4480
    theta = np.full(k, 0.25)
    tl, tu = R.true_ranksets(theta)  # [1, 8] for everyone: covered iff no order is established
    rng = np.random.default_rng(seed)
    first, second = R.balanced_design(k, n // (k * (k - 1)))
    z = np.zeros(first.size)
    acc = {}
    for _ in range(reps):
        w, _ = R.synthetic_outcomes(first, theta, theta, rng)
        t, sg = R.onesource_theta_sigma(first, second, w, z, k)
        for a in ALPHAS:
            for proc, (lo, up) in both(t, sg, a, rng, n_draws).items():
                acc.setdefault((a, proc), []).append(
                    (bool(R.rankset_covers(lo, up, tl, tu)), float(R.rankset_size(lo, up)))
                )
            m = R.ranksets_marginal(t, sg, a, rng, n_draws=n_draws)
            acc.setdefault((a, "marginal"), []).append(
                (
                    bool(R.rankset_covers(m["lower"], m["upper"], tl, tu)),
                    float(R.rankset_size(m["lower"], m["upper"])),
                )
            )
    # the same configuration with theta_hat ~ N(theta, Sigma) exactly and Sigma known: the
    # procedure alone, without the (conservative, see REPRODUCTION) delta covariance
    _, sg_true = R.onesource_theta_sigma(
        first, second, (rng.random(first.size) < 0.5).astype(float), z, k
    )
    lam, V = np.linalg.eigh(sg_true)
    Lt = V * np.sqrt(np.maximum(lam, 0))
    for _ in range(reps):
        t = theta + Lt @ rng.standard_normal(k)
        for a in ALPHAS:
            for proc, (lo, up) in both(t, sg_true, a, rng, n_draws).items():
                acc.setdefault((a, proc + "_gauss"), []).append(
                    (bool(R.rankset_covers(lo, up, tl, tu)), float(R.rankset_size(lo, up)))
                )
    print(
        f"\n### D. Least-favourable configuration (k = 8 equal models, n = {n} human comparisons, {reps} reps): "
        "simultaneous coverage ± MC SE | mean size\n"
    )
    print("| alpha | max-t step-down | Algorithm 2 (chi2_k) | marginal max-t (not simultaneous) |")
    print("|---|---|---|---|")
    for a in ALPHAS:
        print(
            f"| {a} | {summary(acc[a, 'maxt'], reps)} | {summary(acc[a, 'chi2'], reps)} | {summary(acc[a, 'marginal'], reps)} |"
        )
    print(
        "\nSame configuration, theta_hat ~ N(theta, Sigma) exactly with Sigma known (the procedure alone):\n"
    )
    print("| alpha | max-t step-down | Algorithm 2 (chi2_k) |")
    print("|---|---|---|")
    for a in ALPHAS:
        print(f"| {a} | {summary(acc[a, 'maxt_gauss'], reps)} | {summary(acc[a, 'chi2_gauss'], reps)} |")


def few_prompts(reps, seed, n_draws, prompts=(40, 60)):
    """E. The few-prompts least-favourable design: 5 tied models, C prompts x 4 repeats, both orders,
    prompt-clustered covariance; simultaneous coverage of the normal calibration (Sigma_hat treated as
    known) and the wild cluster bootstrap-t (Sigma re-estimated per draw), same data and draws."""
    k = 5
    tl, tu = R.true_ranksets(np.zeros(k))
    rng = np.random.default_rng(seed)
    acc = {}
    for C in prompts:
        d = S.JudgeDesign(n_prompts=C, n_repeats=4, quality=(0.0,) * k, modes=("coupled",))
        for _ in range(reps):
            r = S.simulate_judge_design(d, rng, shuffle=False)
            w, w2 = (r["outcome"] == 0).astype(float), (r["outcome"] == 1).astype(float)
            t, sg = R.onesource_theta_sigma(r["a"], r["b"], w, w2, k, cluster=r["prompt"])
            nd = R.wild_draws_onesource(r["a"], r["b"], w, w2, k, r["prompt"], rng, n_draws)
            normals = R.maxt_normals(k, n_draws, rng)
            for a in ALPHAS:
                for cal, kw in (("normal", {"normals": normals}), ("wild", {"null_draws": nd})):
                    m = R.ranksets_maxt(t, sg, a, **kw)
                    acc.setdefault((C, a, cal), []).append(
                        (
                            bool(R.rankset_covers(m["lower"], m["upper"], tl, tu)),
                            float(R.rankset_size(m["lower"], m["upper"])),
                        )
                    )
    print(
        f"\n### E. Few prompts, least favourable (5 tied models, C prompts x 4 repeats, both orders), {reps} reps: "
        "simultaneous coverage ± MC SE | mean size\n"
    )
    print("| prompts | alpha | normal: coverage | size | wild bootstrap-t (default): coverage | size |")
    print("|---|---|---|---|---|---|")
    for C in prompts:
        for a in ALPHAS:
            print(
                f"| {C} | {a} | {summary(acc[C, a, 'normal'], reps)} | {summary(acc[C, a, 'wild'], reps)} |"
            )


def clustered(reps, seed, n_draws):
    d = S.JudgeDesign(modes=("coupled",))
    truth = S.judge_design_truth(d, "coupled")["avg"]
    tl, tu = R.true_ranksets(truth)
    k = len(d.quality)
    rng = np.random.default_rng(seed)
    acc = {}
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        w, w2 = (r["outcome"] == 0).astype(float), (r["outcome"] == 1).astype(float)
        for cname, cl in (("prompt-clustered", r["prompt"]), ("rows independent", None)):
            t, sg = R.onesource_theta_sigma(r["a"], r["b"], w, w2, k, cluster=cl)
            for a in ALPHAS:
                for proc, (lo, up) in both(t, sg, a, rng, n_draws).items():
                    acc.setdefault((cname, a, proc), []).append(
                        (bool(R.rankset_covers(lo, up, tl, tu)), float(R.rankset_size(lo, up)))
                    )
    print(
        f"\n### B. Clustered judge design (100 prompts x 5 repeats, both orders, 4 models; true theta "
        f"{np.round(truth, 3).tolist()}), {reps} reps: coverage ± MC SE | mean size ± MC SE\n"
    )
    print("| covariance | alpha | max-t step-down | Algorithm 2 (chi2_k) |")
    print("|---|---|---|---|")
    for cname, a, proc in acc:
        if proc == "maxt":
            print(
                f"| {cname} | {a} | {summary(acc[cname, a, 'maxt'], reps)} | {summary(acc[cname, a, 'chi2'], reps)} |"
            )


def arena(reps, seed, n_draws, arena_dir: Path):
    if not (arena_dir / "human.json").exists():
        print(f"\n### C. Chatbot Arena: skipped ({arena_dir} not found)")
        return
    from ppr_arena import load  # bench/ppr_arena.py

    from engine.analysis import (
        ranksets as ranking_io,
    )  # was engine.ranking_io (moved in the layout refactor)

    first, second, human, judges, _ = load(arena_dir)
    k = 12
    n = 990
    rng = np.random.default_rng(seed)
    pairs = ranking_io.pair_ids(first, second, k)
    idx, lab = ranking_io.balanced_draws(pairs, 96, max(1, round(n / 66)), reps, rng)
    sets = {}
    for r in range(reps):
        sel = idx[r]
        f, s = first[sel], second[sel]
        hw, hw2 = human[0][sel], human[1][sel]
        ests = {
            "BASELINE": R.onesource_theta_sigma(f, s, hw, hw2, k),
            "HUMAN ONLY": R.onesource_theta_sigma(f[lab], s[lab], hw[lab], hw2[lab], k),
        }
        for name, (jw, jw2) in judges.items():
            jw_s, jw2_s = jw[sel], jw2[sel]
            ests[f"LLM {name}"] = R.onesource_theta_sigma(f, s, jw_s, jw2_s, k)
            t, sg, _ = R.ppr_theta_sigma(
                f[~lab],
                s[~lab],
                jw_s[~lab],
                jw2_s[~lab],
                f[lab],
                s[lab],
                hw[lab],
                hw2[lab],
                jw_s[lab],
                jw2_s[lab],
                k,
            )
            ests[f"PPR {name}"] = (t, sg)
        for name, (t, sg) in ests.items():
            for a in ALPHAS:
                for proc, lu in both(t, sg, a, rng, n_draws).items():
                    sets.setdefault((name, a, proc), []).append(lu)
    print(
        f"\n### C. Chatbot Arena (12 models, N + n = 6,336 balanced, n = 990 human-labelled, {reps} draws): "
        "mean size / baseline intersection / baseline coverage (baseline = same procedure on all 6,336 human labels)\n"
    )
    print("| method | alpha | max-t step-down | Algorithm 2 (chi2_k) |")
    print("|---|---|---|---|")
    for name, a, proc in sets:
        if proc != "maxt" or name == "BASELINE":
            continue
        cells = []
        for p in ("maxt", "chi2"):
            lo = np.array([x[0] for x in sets[name, a, p]])
            up = np.array([x[1] for x in sets[name, a, p]])
            bl = np.array([x[0] for x in sets["BASELINE", a, p]])
            bu = np.array([x[1] for x in sets["BASELINE", a, p]])
            cells.append(
                f"{R.rankset_size(lo, up).mean():.2f} / {R.rankset_intersects(lo, up, bl, bu).mean():.3f} / "
                f"{R.rankset_covers(lo, up, bl, bu).mean():.3f}"
            )
        print(f"| {name} | {a} | {cells[0]} | {cells[1]} |")
    for a in ALPHAS:
        print(
            f"\nBASELINE mean size at alpha {a}: max-t "
            f"{np.mean([R.rankset_size(*x) for x in sets['BASELINE', a, 'maxt']]):.2f}, Algorithm 2 "
            f"{np.mean([R.rankset_size(*x) for x in sets['BASELINE', a, 'chi2']]):.2f}"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--arena-reps", type=int, default=150)
    ap.add_argument("--n", default="1120,4480")
    ap.add_argument("--draws", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arena", default=str(ROOT.parent / "shared" / "data" / "arena"))
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument("--parts", default="ABDEC")
    args = ap.parse_args(argv)
    if args.smoke:  # a few repetitions and draws on every part, synthetic Arena-layout data
        from _smoke import synthetic_arena

        args.reps, args.arena_reps, args.n, args.draws, args.arena = (
            3,
            2,
            "1120",
            1000,
            str(synthetic_arena(n=8000)),
        )
    t0 = time.time()
    if "A" in args.parts:
        synthetic(args.reps, [int(x) for x in args.n.split(",")], args.seed, args.draws)
    if "B" in args.parts:
        clustered(args.reps, args.seed + 1, args.draws)
    if "D" in args.parts:
        least_favourable(args.reps, args.seed + 3, args.draws)
    if "E" in args.parts:
        few_prompts(args.reps, args.seed + 5, args.draws)
    if "C" in args.parts:
        arena(args.arena_reps, args.seed + 2, args.draws, Path(args.arena))
    print(f"\n({time.time() - t0:.0f} s, max-t with {args.draws} normal / wild draws)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
