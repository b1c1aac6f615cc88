"""Coverage / size of the prompt-clustered intervals and tests with known truth (docs/METHODS.md 7.1, 7.2).

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

from engine.stats import clustered as CL  # noqa: E402
from engine.stats import paired_difference as pdiff  # noqa: E402
from engine.stats import planning  # noqa: E402
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
        con = bt["draws"][:, : k - 1] - bt["draws"][:, [k - 1]]
        lo, hi = np.quantile(con, [0.025, 0.975], axis=0)
        true_con = bt_true[: k - 1] - bt_true[k - 1]
        acc["bt"].append((lo <= true_con) & (true_con <= hi))
        if elo:
            e = CL.elo_cluster_bootstrap(a, b, o, k, rng, cluster=p, n_resamples=B)
            acc["elo"].append((e["low"] <= elo_true) & (elo_true <= e["high"]))
    return {key: np.asarray(v, float) for key, v in acc.items() if v} | {
        "consistency": float(np.mean(cons))
    }


def mode_test_size(reps: int, seed: int) -> dict:
    d = S.JudgeDesign(coupling=0.0)
    k = len(d.quality)
    iu = np.triu_indices(k, 1)
    rng = np.random.default_rng(seed)
    rej, rej_z, rej_holm_any, rej_maxt_any = [], [], [], []
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        t = CL.mode_diff_paired_test(
            r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], k, rng=rng, n_resamples=500
        )
        rej.append(t["p_value"][iu] < 0.05)
        rej_holm_any.append(np.any(t["p_holm"][~np.eye(k, dtype=bool)] < 0.05))
        rej_maxt_any.append(np.any(t["p_maxt"][~np.eye(k, dtype=bool)] < 0.05))
        c = [
            wr.pairwise_counts(
                r["a"][r["mode"] == m], r["b"][r["mode"] == m], r["outcome"][r["mode"] == m], k
            )
            for m in (0, 1)
        ]
        _, pz = wr.two_proportion_ztest(c[0][0], c[0][2], c[1][0], c[1][2])
        rej_z.append(pz[iu] < 0.05)
    return {
        "paired": np.asarray(rej, float),
        "z": np.asarray(rej_z, float),
        "holm_any": np.asarray(rej_holm_any, float),
        "maxt_any": np.asarray(rej_maxt_any, float),
    }


def multiplicity_power(reps: int, seed: int, n_prompts: int = 60) -> dict:
    """Coupled vs independent with a real shift (coupling 0.9, gen_sd 1, spread qualities): per-cell
    rejection rate at 5% of the raw paired test, Holm and Westfall-Young max-T (12 cells)."""
    d = S.JudgeDesign(
        n_prompts=n_prompts, n_repeats=3, coupling=0.9, gen_sd=1.0, quality=(0.6, 0.2, 0.0, -0.4)
    )
    k = len(d.quality)
    off = ~np.eye(k, dtype=bool)
    rng = np.random.default_rng(seed)
    out: dict = {"raw": [], "holm": [], "maxt": []}
    for _ in range(reps):
        r = S.simulate_judge_design(d, rng)
        t = CL.mode_diff_paired_test(
            r["a"], r["b"], r["outcome"], r["mode"], r["prompt"], k, rng=rng, n_resamples=500
        )
        for key, col in (("raw", "p_value"), ("holm", "p_holm"), ("maxt", "p_maxt")):
            out[key].append(np.nan_to_num(t[col][off], nan=1.0) < 0.05)
    tr = S.judge_design_truth(d, "coupled")["W"] - S.judge_design_truth(d, "independent")["W"]
    return {key: np.asarray(v, float) for key, v in out.items()} | {"shift": tr[off]}


def saving_coverage(reps: int, seed: int, Q: int = 40, eps: float = 0.05) -> dict:
    """Coverage of the two saving intervals (studentised, and the old percentile bootstrap) at Q questions."""
    from engine.stats import saving as SV

    rng = np.random.default_rng(seed)
    base = dict(n_repeats=5, a=(0.3, 0.0))
    big = [
        S.simulate_benchmark(S.BenchmarkDesign(n_questions=400_000, coupled=c, **base), rng)
        for c in (True, False)
    ]
    Dc, Di = (A - B for A, B in big)
    tv = 1 - Dc.mean(1).var() / Di.mean(1).var()
    N = Q * base["n_repeats"]
    tp = 1 - SV.samples_for_error_fpc(Dc.var(), N, eps) / SV.samples_for_error_fpc(Di.var(), N, eps)
    acc: dict = {"headline": [], "predicted": [], "predicted_percentile": []}
    for _ in range(reps):
        (Ac, Bc), (Ai, Bi) = (
            S.simulate_benchmark(S.BenchmarkDesign(n_questions=Q, coupled=c, **base), rng)
            for c in (True, False)
        )
        v = SV.variance_saving(Ac - Bc, Ai - Bi)
        p = SV.saving_predicted(Ac - Bc, Ai - Bi, eps, rng=rng, n_resamples=1000)
        acc["headline"].append(v["ci_low"] <= tv <= v["ci_high"])
        acc["predicted"].append(p["ci_low"] <= tp <= p["ci_high"])
        # the percentile interval the product used before (same bootstrap, n_valid replicates)
        idx = rng.integers(0, Q, size=(1000, Q))
        Dcb, Dib = (Ac - Bc)[idx].reshape(1000, -1), (Ai - Bi)[idx].reshape(1000, -1)
        nc = SV.samples_for_error_fpc(Dcb.var(axis=1, ddof=1), N, eps)
        ni = SV.samples_for_error_fpc(Dib.var(axis=1, ddof=1), N, eps)
        lo, hi = np.quantile(1 - nc / ni, [0.025, 0.975])
        acc["predicted_percentile"].append(lo <= tp <= hi)
    return {key: np.asarray(v, float) for key, v in acc.items()} | {
        "truth_headline": tv,
        "truth_predicted": tp,
    }


def benchmark_size_power(reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    null = S.BenchmarkDesign(n_questions=100, n_repeats=5, a=(0.2, 0.2), model_sd=0.7)
    rej0, rej_mc = [], []
    for _ in range(reps):
        A, B = S.simulate_benchmark(null, rng)
        rej0.append(pdiff.paired_diff_ci(A, B)["p_value"] < 0.05)
        rej_mc.append(pdiff.mcnemar(A, B)["p_value"] < 0.05)
    base = dict(a=(0.25, 0.0), question_sd=1.0, model_sd=0.5, coupled=True)
    pilot = S.simulate_benchmark(S.BenchmarkDesign(n_questions=20000, n_repeats=4, **base), rng)
    comp = pdiff.variance_components_diff(*pilot)
    delta = S.benchmark_truth(S.BenchmarkDesign(**base))
    plan = planning.plan_mde({"coupled": comp}, delta, repeats=(3,))[0]
    d = S.BenchmarkDesign(n_questions=plan["questions"], n_repeats=3, **base)
    rej1 = [pdiff.paired_diff_ci(*S.simulate_benchmark(d, rng))["p_value"] < 0.05 for _ in range(reps)]
    return {
        "size": np.asarray(rej0, float),
        "mcnemar_pairs": np.asarray(rej_mc, float),
        "power": np.asarray(rej1, float),
        "plan": plan,
        "delta": delta,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-elo", action="store_true")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    ap.add_argument(
        "--parts",
        default="JMBWS",
        help="J judge intervals, M mode-test size, B benchmark test, "
        "W Westfall-Young power, S saving intervals",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # a few data sets, few resamples
        args.reps, args.resamples = 4, 30
    t0 = time.time()
    R = args.reps
    if "W" in args.parts:
        mp = multiplicity_power(R, args.seed + 4)
        print(
            f"## Pairwise coupled-vs-independent tests with a real shift, {R} data sets (60 prompts x 3 repeats, "
            f"12 cells, |shift| {np.abs(mp['shift']).min():.3f}-{np.abs(mp['shift']).max():.3f})\n"
        )
        for key in ("raw", "holm", "maxt"):
            print(
                f"- {key}: per-cell power {fmt(mp[key].mean(), R)}, P(any rejection) {fmt(mp[key].any(1).mean(), R)}"
            )
    if "S" in args.parts:
        sc = saving_coverage(R, args.seed + 5)
        print(f"\n## Saving intervals at 40 questions x 5 repeats, {R} data sets (95%)\n")
        for key, v in sc.items():
            if not key.startswith("truth"):
                print(f"- {key}: coverage {fmt(v.mean(), R)}")
    if "J" in args.parts:
        _judge_part(R, args)
    if "M" in args.parts:
        _mode_part(R, args)
    if "B" in args.parts:
        _bench_part(R, args)
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


def _judge_part(R, args):
    cov = judge_coverage(R, args.resamples, args.seed, not args.no_elo)
    print(
        f"## Clustered judge design, coupled mode: {R} data sets, B = {args.resamples} cluster resamples; "
        f"judge consistency across orders {cov['consistency']:.3f}\n"
    )
    print(
        "| interval (95%) | coverage, pooled over its parameters (± MC SE of one parameter) | per parameter |"
    )
    print("|---|---|---|")
    names = {
        "W": "pairwise win-rate, cluster bootstrap",
        "sandwich": "pairwise win-rate, cluster sandwich (Wald)",
        "wilson": "pairwise win-rate, Wilson (rows independent)",
        "avg": "average win-rate, cluster bootstrap",
        "row_boot_avg": "average win-rate, row bootstrap",
        "bt": "BT/Davidson beta_i - beta_4, cluster bootstrap",
        "elo": "Elo rating (Elo-scale MLE), cluster bootstrap (truth: fixed point)",
    }
    for key, name in names.items():
        if key in cov:
            m = cov[key]
            print(f"| {name} | {fmt(m.mean(), R)} | {', '.join(f'{x:.3f}' for x in m.mean(axis=0))} |")


def _mode_part(R, args):
    mt = mode_test_size(R, args.seed + 1)
    print(f"\n## Coupled vs independent under a true null (coupling = 0), {R} data sets, 6 pairs\n")
    print(
        f"- paired-by-prompt t test, size at 5%: {fmt(mt['paired'].mean(), R)} (per pair "
        f"{', '.join(f'{x:.3f}' for x in mt['paired'].mean(0))})"
    )
    print(f"- Holm over all 12 cells, P(any rejection) (FWER): {fmt(mt['holm_any'].mean(), R)}")
    print(
        f"- Westfall-Young max-T over all 12 cells (500 cluster resamples), FWER: {fmt(mt['maxt_any'].mean(), R)}"
    )
    print(f"- two-proportion z test (modes as independent samples): {fmt(mt['z'].mean(), R)}")


def _bench_part(R, args):
    bs = benchmark_size_power(R, args.seed + 2)
    print(f"\n## Paired benchmark t test (100 questions x 5 repeats, clustered), {R} data sets\n")
    print(
        f"- size at 5% under Delta = 0: {fmt(bs['size'].mean(), R)}; McNemar over (question, repeat) pairs: "
        f"{fmt(bs['mcnemar_pairs'].mean(), R)}"
    )
    pl = bs["plan"]
    print(
        f"- planner: Delta = {bs['delta']:.4f}, k = 3 repeats -> n = {pl['questions']} questions for power 0.8 "
        f"(predicted {pl['power']:.3f}); simulated power {fmt(bs['power'].mean(), R)}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
