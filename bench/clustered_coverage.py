"""Coverage / size of the prompt-clustered intervals and tests with known truth (METHODS.md 7.1, 7.2).

Clustered judge design (engine.stats.simulate.JudgeDesign defaults: 100 prompts x 5 repeats, 4
models, both orders, judge consistent across orders ~86% of the time, position bias), coupled mode:
coverage of the 95% cluster-bootstrap intervals of every pairwise win-rate, every average
win-rate, every BT contrast beta_i - beta_3 and every Elo rating (truth: exact probabilities,
the Davidson fit to them, Elo's fixed point), against the row-level Wilson interval; size of the
coupled-vs-independent test paired by prompt under a true null (coupling = 0) against the
two-proportion z test; size and power of the paired benchmark t test at the planner's design.
Monte Carlo SE = sqrt(p (1 - p) / reps).

    .venv/bin/python bench/clustered_coverage.py --reps 400 --resamples 1000
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

from engine.stats import benchmark as bm  # noqa: E402
from engine.stats import clustered as CL  # noqa: E402
from engine.stats import simulate as S  # noqa: E402
from engine.stats import winrates as wr  # noqa: E402


def fmt(p, reps):
    return f"{p:.3f} ± {np.sqrt(p * (1 - p) / reps):.3f}"


def judge_coverage(reps: int, B: int, seed: int, elo: bool) -> dict:
    d = S.JudgeDesign(modes=("coupled",))
    tr = S.judge_design_truth(d, "coupled")
    k = len(d.quality)
    off = ~np.eye(k, dtype=bool)
    bt_true, _ = CL.davidson_fit_counts(np.nan_to_num(tr["W"]) * 1e4, np.nan_to_num(tr["T"]) * 1e4)
    elo_true = CL.elo_fixed_point(tr["W"], tr["T"], np.ones((k, k)))
    rng = np.random.default_rng(seed)
    acc = {key: [] for key in ("W", "avg", "bt", "elo", "wilson", "row_boot_avg", "sandwich")}
    cons = []
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        a, b, o, p = r["a"], r["b"], r["outcome"], r["prompt"]
        cons.append(r["consistency"])
        w = CL.winrate_cluster_bootstrap(a, b, o, k, rng, cluster=p, n_resamples=B)
        acc["W"].append(((w["W_low"] <= tr["W"]) & (tr["W"] <= w["W_high"]))[off])
        acc["avg"].append((w["avg_low"] <= tr["avg"]) & (tr["avg"] <= w["avg_high"]))
        wrow = CL.winrate_cluster_bootstrap(a, b, o, k, rng, cluster=None, n_resamples=B)
        acc["row_boot_avg"].append((wrow["avg_low"] <= tr["avg"]) & (tr["avg"] <= wrow["avg_high"]))
        se = CL.winrate_cluster_se(a, b, o, k, cluster=p)
        acc["sandwich"].append(((se["low"] <= tr["W"]) & (tr["W"] <= se["high"]))[off])
        wins, _, n = wr.pairwise_counts(a, b, o, k)
        lo, hi = wr.wilson_interval(wins, n)
        acc["wilson"].append(((lo <= tr["W"]) & (tr["W"] <= hi))[off])
        bt = CL.davidson_cluster_bootstrap(a, b, o, k, rng, cluster=p, n_resamples=B)
        con = bt["draws"][:, :k - 1] - bt["draws"][:, [k - 1]]
        lo, hi = np.quantile(con, [0.025, 0.975], axis=0)
        true_con = bt_true[:k - 1] - bt_true[k - 1]
        acc["bt"].append((lo <= true_con) & (true_con <= hi))
        if elo:
            e = CL.elo_cluster_bootstrap(a, b, o, k, rng, cluster=p, n_resamples=B)
            acc["elo"].append((e["low"] <= elo_true) & (elo_true <= e["high"]))
    return {key: np.asarray(v, float) for key, v in acc.items() if v} | {"consistency": float(np.mean(cons))}


def mode_test_size(reps: int, seed: int) -> dict:
    d = S.JudgeDesign(coupling=0.0)
    k = len(d.quality)
    iu = np.triu_indices(k, 1)
    rng = np.random.default_rng(seed)
    rej, rej_z, rej_holm_any = [], [], []
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        t = CL.mode_diff_paired_test(r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], k)
        rej.append(t["p_value"][iu] < 0.05)
        rej_holm_any.append(np.any(t["p_holm"][~np.eye(k, dtype=bool)] < 0.05))
        c = [wr.pairwise_counts(r["a"][r["mode"] == m], r["b"][r["mode"] == m], r["outcome"][r["mode"] == m], k)
             for m in (0, 1)]
        _, pz = wr.two_proportion_ztest(c[0][0], c[0][2], c[1][0], c[1][2])
        rej_z.append(pz[iu] < 0.05)
    return {"paired": np.asarray(rej, float), "z": np.asarray(rej_z, float), "holm_any": np.asarray(rej_holm_any, float)}


def benchmark_size_power(reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    null = S.BenchmarkDesign(n_questions=100, n_repeats=5, a=(0.2, 0.2), model_sd=0.7)
    rej0, rej_mc = [], []
    for _ in range(reps):
        A, B = S.simulate_benchmark(null, rng)
        rej0.append(bm.paired_diff_ci(A, B)["p_value"] < 0.05)
        rej_mc.append(bm.mcnemar(A, B)["p_value"] < 0.05)
    base = dict(a=(0.25, 0.0), question_sd=1.0, model_sd=0.5, coupled=True)
    pilot = S.simulate_benchmark(S.BenchmarkDesign(n_questions=20000, n_repeats=4, **base), rng)
    comp = bm.variance_components_diff(*pilot)
    delta = S.benchmark_truth(S.BenchmarkDesign(**base))
    plan = bm.plan_mde({"coupled": comp}, delta, repeats=(3,))[0]
    d = S.BenchmarkDesign(n_questions=plan["questions"], n_repeats=3, **base)
    rej1 = [bm.paired_diff_ci(*S.simulate_benchmark(d, rng))["p_value"] < 0.05 for _ in range(reps)]
    return {"size": np.asarray(rej0, float), "mcnemar_pairs": np.asarray(rej_mc, float),
            "power": np.asarray(rej1, float), "plan": plan, "delta": delta}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-elo", action="store_true")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:  # a few data sets, few resamples
        args.reps, args.resamples = 4, 30
    t0 = time.time()
    R = args.reps
    cov = judge_coverage(R, args.resamples, args.seed, not args.no_elo)
    print(f"## Clustered judge design, coupled mode: {R} data sets, B = {args.resamples} cluster resamples; "
          f"judge consistency across orders {cov['consistency']:.3f}\n")
    print("| interval (95%) | coverage, pooled over its parameters (± MC SE of one parameter) | per parameter |")
    print("|---|---|---|")
    names = {"W": "pairwise win-rate, cluster bootstrap", "sandwich": "pairwise win-rate, cluster sandwich (Wald)",
             "wilson": "pairwise win-rate, Wilson (rows independent)", "avg": "average win-rate, cluster bootstrap",
             "row_boot_avg": "average win-rate, row bootstrap", "bt": "BT/Davidson beta_i - beta_4, cluster bootstrap",
             "elo": "Elo rating, cluster bootstrap (truth: fixed point)"}
    for key, name in names.items():
        if key in cov:
            m = cov[key]
            print(f"| {name} | {fmt(m.mean(), R)} | {', '.join(f'{x:.3f}' for x in m.mean(axis=0))} |")
    mt = mode_test_size(R, args.seed + 1)
    print(f"\n## Coupled vs independent under a true null (coupling = 0), {R} data sets, 6 pairs\n")
    print(f"- paired-by-prompt t test, size at 5%: {fmt(mt['paired'].mean(), R)} (per pair "
          f"{', '.join(f'{x:.3f}' for x in mt['paired'].mean(0))})")
    print(f"- Holm over all 12 cells, P(any rejection) (FWER): {fmt(mt['holm_any'].mean(), R)}")
    print(f"- two-proportion z test (modes as independent samples): {fmt(mt['z'].mean(), R)}")
    bs = benchmark_size_power(R, args.seed + 2)
    print(f"\n## Paired benchmark t test (100 questions x 5 repeats, clustered), {R} data sets\n")
    print(f"- size at 5% under Delta = 0: {fmt(bs['size'].mean(), R)}; McNemar over (question, repeat) pairs: "
          f"{fmt(bs['mcnemar_pairs'].mean(), R)}")
    pl = bs["plan"]
    print(f"- planner: Delta = {bs['delta']:.4f}, k = 3 repeats -> n = {pl['questions']} questions for power 0.8 "
          f"(predicted {pl['power']:.3f}); simulated power {fmt(bs['power'].mean(), R)}")
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
