"""PPR on Chatbot Arena (Chatzi et al. 2024, Section 5 / Fig. 1 / App. D; docs/METHODS.md section 4).

The 12 models of the paper (Table 1), 14,947 comparisons labelled by humans and by three LLM
judges (GPT-4, Claude 3 Opus, GPT-3.5). This script

1. computes full-data rank-sets (human-only on all 14,947; judge-only for each judge) for both
   covariances;
2. checks docs/METHODS.md's claim on the covariance: the bootstrap variance of theta_hat on the human
   data vs the paper's Sigma_hat and the count-normalised (delta) one;
3. repeats the paper's protocol: ``reps`` random balanced draws of N + n = 66 pairs x 96 = 6,336
   comparisons, n human-labelled (balanced too); methods BASELINE (humans on all N + n),
   HUMAN ONLY (humans on n), LLM J (judge J on all N + n), PPR J (judge J on the N unlabelled +
   humans and J on the n); metrics: average rank-set size, baseline intersection and baseline
   coverage probability, over the paper's alpha grid and n grid, for both covariances;
4. writes JSON and (if kaleido works) PNG figures to docs/figures/ and prints markdown tables.

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/ppr_arena.py --reps 1000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.analysis import comparisons as C  # noqa: E402
from engine.analysis import ranksets as RS
from engine.stats import ranking as R  # noqa: E402
from engine.tasks.comparisons import read_arena  # noqa: E402

ARENA_12 = list(C.ARENA_PAPER_MODELS)
JUDGES = {
    "GPT4": "gpt-4-0125-preview.json",
    "CL3": "claude-3-opus-20240229.json",
    "GPT3.5": "gpt-3.5-turbo.json",
}
N_GRID = (66, 132, 198, 462, 990, 1452, 1980, 2442, 2970)


def load(arena_dir: Path):
    """(first, second, human (w, w'), {judge: (w, w')}) over the 14,947 comparisons of the 12 models."""
    base = None
    judges = {}
    for name, fname in JUDGES.items():
        df = read_arena(arena_dir / "human.json", arena_dir / fname, models=ARENA_12)
        if base is None:
            base = df
        judges[name] = C.win_indicators(df.judge_winner)
    first, second = C.model_indices(base, ARENA_12)
    return first, second, C.win_indicators(base.human_winner), judges, len(base)


def full_data_ranksets(first, second, human, judges, alpha: float) -> dict:
    k = len(ARENA_12)
    out = {}
    for cov in R.COVARIANCES:
        srcs = {"HUMAN (all 14,947)": human} | {f"LLM {j}": v for j, v in judges.items()}
        for name, (w, w2) in srcs.items():
            th, sg = R.onesource_theta_sigma(first, second, w, w2, k, cov)
            lo, up = R.ranksets(th, sg, alpha)
            out.setdefault(cov, {})[name] = {
                "theta": th.tolist(),
                "lower": lo.tolist(),
                "upper": up.tolist(),
            }
    return out


def bootstrap_check(first, second, human, rng, reps: int, balanced: bool) -> dict:
    """Var_boot(theta_hat) / diag(Sigma_hat) per model, for the paper and the delta covariance."""
    k = len(ARENA_12)
    w, w2 = human
    if balanced:  # one balanced draw of 6,336, as in the paper's experiments
        idx, _ = RS.balanced_draws(RS.pair_ids(first, second, k), 96, 1, 1, rng)
        first, second, w, w2 = first[idx[0]], second[idx[0]], w[idx[0]], w2[idx[0]]
    n = len(first)
    draws = np.empty((reps, k))
    for r in range(reps):
        i = rng.integers(0, n, n)
        draws[r] = R.winrate_pointestimate(first[i], second[i], w[i], w2[i], k)
    vb = draws.var(axis=0, ddof=1)
    res = {"n": n, "reps": reps}
    for cov in R.COVARIANCES:
        _, sg = R.onesource_theta_sigma(first, second, w, w2, k, cov)
        ratio = vb / np.diag(sg)
        res[cov] = {
            "min": float(ratio.min()),
            "median": float(np.median(ratio)),
            "max": float(ratio.max()),
            "per_model": dict(zip(ARENA_12, ratio.round(3).tolist())),
        }
    return res


def draws(
    first,
    second,
    human,
    judges,
    reps: int,
    seed: int,
    n_grid,
    alphas,
    log=print,
    procedure: str = "chi2",
) -> dict:
    k = len(ARENA_12)
    out = {}
    pos = {}
    for cov in R.COVARIANCES:
        for n in n_grid:
            t0 = time.time()
            rng = np.random.default_rng([seed, n])  # same draws for both covariances
            res = RS.draws_experiment(
                first,
                second,
                human,
                judges,
                k,
                n,
                reps,
                alphas,
                cov,
                rng,
                total=66 * 96,
                procedure=procedure,
            )
            summ = RS.summarise_draws(res, alphas).to_dict()["curve"]
            lam = {m: float(v.mean()) for m, v in res.lam.items()}
            out.setdefault(cov, {})[n] = {"N": res.N, "n": res.n, "metrics": summ, "lambda_mean": lam}
            if n == 990:
                ai = list(alphas).index(0.05)
                pos[cov] = {
                    m: R.rank_position_probabilities(res.lower[m][ai], res.upper[m][ai])
                    .round(4)
                    .tolist()
                    for m in res.lower
                }
            log(f"  {cov} n={n}: {time.time() - t0:.1f} s")
    return {"metrics": out, "position_prob_n990_alpha005": pos}


def _pick(metrics, alpha):
    return [m for m in metrics if abs(m["alpha"] - alpha) < 1e-12][0]


def label(m: str) -> str:
    return {"baseline": "BASELINE", "human": "HUMAN ONLY"}.get(
        m, m.replace("judge:", "LLM ").replace("ppr:", "PPR ")
    )


def tables(res: dict) -> str:
    L = []
    L.append("### Full data (all 14,947 comparisons), alpha = 0.05\n")
    for cov, d in res["full"].items():
        L.append(f"Covariance `{cov}`:\n")
        L.append("| model | " + " | ".join(d) + " |")
        L.append("|---|" + "---|" * len(d))
        for i, m in enumerate(ARENA_12):
            L.append(
                f"| {m} | "
                + " | ".join(f"[{v['lower'][i]}, {v['upper'][i]}]" for v in d.values())
                + " |"
            )
        L.append("")
    L.append("### Bootstrap variance of theta_hat (human labels) / diagonal of Sigma_hat\n")
    L.append(
        "| data | bootstrap reps | paper Sigma: min / median / max | delta Sigma: min / median / max |"
    )
    L.append("|---|---|---|---|")
    for name, b in res["bootstrap"].items():
        L.append(
            f"| {name} (n = {b['n']}) | {b['reps']} | {b['paper']['min']:.1f} / {b['paper']['median']:.1f} / "
            f"{b['paper']['max']:.1f} | {b['delta']['min']:.2f} / {b['delta']['median']:.2f} / {b['delta']['max']:.2f} |"
        )
    L.append("")
    met = res["draws"]["metrics"]
    L.append(
        f"### Repeated draws ({res['reps']} per setting, N + n = 6,336, balanced), n = 990, alpha = 0.05\n"
    )
    L.append(
        "| method | size delta | intersection delta | coverage delta | size paper | intersection paper | coverage paper |"
    )
    L.append("|---|---|---|---|---|---|---|")
    d990 = {cov: met[cov][990]["metrics"] for cov in met}
    for m in d990["delta"]:
        a, b = _pick(d990["delta"][m], 0.05), _pick(d990["paper"][m], 0.05)
        L.append(
            f"| {label(m)} | {a['size']:.2f} | {a['intersection']:.3f} | {a['coverage']:.3f} | "
            f"{b['size']:.2f} | {b['intersection']:.3f} | {b['coverage']:.3f} |"
        )
    L.append("")
    L.append("### Repeated draws vs n, alpha = 0.05: size / baseline intersection (delta | paper)\n")
    methods = list(d990["delta"])
    L.append("| n | " + " | ".join(label(m) for m in methods if m != "baseline") + " |")
    L.append("|---|" + "---|" * (len(methods) - 1))
    for n in met["delta"]:
        cells = []
        for m in methods:
            if m == "baseline":
                continue
            a, b = _pick(met["delta"][n]["metrics"][m], 0.05), _pick(met["paper"][n]["metrics"][m], 0.05)
            cells.append(
                f"{a['size']:.2f} / {a['intersection']:.2f} \\| {b['size']:.2f} / {b['intersection']:.2f}"
            )
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L.append("")
    L.append(
        "Mean trace-optimal lambda (delta covariance): "
        + ", ".join(
            f"{label(m)} n={n}: {v:.2f}"
            for n in (66, 990, 2970)
            if n in met["delta"]
            for m, v in met["delta"][n]["lambda_mean"].items()
        )
    )
    return "\n".join(L)


def figures(res: dict, outdir: Path) -> list[str]:
    """Paper Fig. 1-like plots (size vs baseline intersection over alpha, n = 990; PPR GPT4 over n)."""
    import plotly.colors
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    met = res["draws"]["metrics"]
    written = []
    palette = plotly.colors.qualitative.D3  # one fixed colour per method / n in both panels
    methods = [m for m in met["delta"][990]["metrics"] if m != "baseline"]
    colour = {m: palette[i % len(palette)] for i, m in enumerate(methods)}
    fig = make_subplots(rows=1, cols=2, subplot_titles=[f"covariance: {c}" for c in ("delta", "paper")])
    for ci, cov in enumerate(("delta", "paper"), 1):
        for m, rows in met[cov][990]["metrics"].items():
            if m == "baseline":
                continue
            fig.add_trace(
                go.Scatter(
                    x=[r["intersection"] for r in rows],
                    y=[r["size"] for r in rows],
                    mode="lines+markers",
                    name=label(m),
                    legendgroup=m,
                    showlegend=ci == 1,
                    line={"color": colour[m]},
                ),
                row=1,
                col=ci,
            )
        fig.update_xaxes(title_text="baseline intersection probability", row=1, col=ci)
        fig.update_yaxes(title_text="average rank-set size", row=1, col=ci)
    fig.update_layout(
        title="Chatbot Arena, n = 990, N + n = 6,336, alpha in {0.4 ... 0.01}", width=1200, height=500
    )
    p = outdir / "ppr_arena_size_vs_intersection.png"
    fig.write_image(str(p))
    written.append(str(p))
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=[f"PPR GPT4, covariance: {c}" for c in ("delta", "paper")]
    )
    for ci, cov in enumerate(("delta", "paper"), 1):
        for i, (n, d) in enumerate(met[cov].items()):
            rows = d["metrics"]["ppr:GPT4"]
            fig.add_trace(
                go.Scatter(
                    x=[r["intersection"] for r in rows],
                    y=[r["size"] for r in rows],
                    mode="lines+markers",
                    name=f"n = {n}",
                    legendgroup=str(n),
                    showlegend=ci == 1,
                    line={"color": palette[i % len(palette)]},
                ),
                row=1,
                col=ci,
            )
        fig.update_xaxes(title_text="baseline intersection probability", row=1, col=ci)
        fig.update_yaxes(title_text="average rank-set size", row=1, col=ci)
    fig.update_layout(title="Chatbot Arena, PPR with GPT-4 judge, by n", width=1200, height=500)
    p = outdir / "ppr_arena_ppr_gpt4_by_n.png"
    fig.write_image(str(p))
    written.append(str(p))
    # paper Fig. 9: P(rank position in the rank-set) per model, dot size = probability
    pos = res["draws"]["position_prob_n990_alpha005"]
    shown = ["baseline", "human", "judge:GPT4", "ppr:GPT4"]
    for cov in ("delta", "paper"):
        fig = make_subplots(
            rows=1, cols=len(shown), subplot_titles=[label(m) for m in shown], shared_yaxes=True
        )
        for ci, m in enumerate(shown, 1):
            P = np.asarray(pos[cov][m])  # (k, k): model x rank position
            mm, rr = np.nonzero(P > 0)
            fig.add_trace(
                go.Scatter(
                    x=rr + 1,
                    y=[ARENA_12[i] for i in mm],
                    mode="markers",
                    showlegend=False,
                    marker={"size": 2 + 14 * P[mm, rr], "color": palette[ci - 1]},
                    hovertext=[f"{P[i, j]:.2f}" for i, j in zip(mm, rr)],
                ),
                row=1,
                col=ci,
            )
            fig.update_xaxes(title_text="rank", range=[0.5, len(ARENA_12) + 0.5], row=1, col=ci)
        fig.update_yaxes(autorange="reversed")
        fig.update_layout(
            title=f"Chatbot Arena: P(rank in rank-set), n = 990, alpha = 0.05, covariance {cov}",
            width=1400,
            height=480,
        )
        p = outdir / f"ppr_arena_rank_positions_{cov}.png"
        fig.write_image(str(p))
        written.append(str(p))
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arena", default=str(ROOT.parent / "shared" / "data" / "arena"))
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n", default=",".join(map(str, N_GRID)))
    ap.add_argument("--outdir", default=str(ROOT / "docs" / "figures"))
    ap.add_argument("--no-figures", action="store_true")
    ap.add_argument(
        "--procedure",
        default="chi2",
        choices=R.PROCEDURES,
        help="rank-set procedure of the draws: chi2 = the paper's Algorithm 2 (default: reproduction); "
        "maxt / marginal = the product's default sets (2,000 normal draws per repetition)",
    )
    ap.add_argument(
        "--from-json", action="store_true", help="re-plot / re-print the saved ppr_arena.json"
    )
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if (
        args.smoke
    ):  # synthetic Arena-layout data, a few repetitions, no figures, output in a fresh folder
        import tempfile

        from _smoke import synthetic_arena

        args.arena, args.reps, args.boot, args.n, args.no_figures = (
            str(synthetic_arena(n=8000)),
            3,
            20,
            "66,990",
            True,
        )
        args.outdir = tempfile.mkdtemp(prefix="bench_smoke_ppr_")
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    if args.from_json:
        res = json.loads((outdir / "ppr_arena.json").read_text())
        # JSON keys are strings: restore the integer n keys
        res["draws"]["metrics"] = {
            c: {int(n): v for n, v in d.items()} for c, d in res["draws"]["metrics"].items()
        }
        os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
        for p in figures(res, outdir):
            log(f"wrote {p}")
        print(tables(res))
        return 0
    t0 = time.time()
    first, second, human, judges, n_rows = load(Path(args.arena))
    log(f"loaded {n_rows} comparisons of the 12 models")
    rng = np.random.default_rng(args.seed)
    res = {
        "n_comparisons": n_rows,
        "reps": args.reps,
        "seed": args.seed,
        "procedure": args.procedure,
        "full": full_data_ranksets(first, second, human, judges, 0.05),
        "bootstrap": {
            "all human comparisons": bootstrap_check(first, second, human, rng, args.boot, False),
            "one balanced draw": bootstrap_check(first, second, human, rng, args.boot, True),
        },
    }
    res["draws"] = draws(
        first,
        second,
        human,
        judges,
        args.reps,
        args.seed,
        [int(x) for x in args.n.split(",")],
        RS.PAPER_ALPHAS,
        log,
        procedure=args.procedure,
    )
    res["seconds"] = round(time.time() - t0, 1)
    (outdir / "ppr_arena.json").write_text(json.dumps(res, indent=1, default=str))
    if not args.no_figures:
        os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
        try:
            for p in figures(res, outdir):
                log(f"wrote {p}")
        except Exception as exc:  # figures are optional: report, keep the tables
            log(f"figures skipped: {type(exc).__name__}: {exc}")
    print(tables(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
