"""PPR synthetic coverage experiment (Chatzi et al. 2024, Appendix E; docs/METHODS.md section 4).

k = 8 models, a fresh random true theta ~ U(0, 1/2)^8 per repetition, judges with
theta_judge = clip(theta + U(-u, u), 0, 1/2) for u in {0.05, 0.1, 0.3}, N + n comparisons with an
equal count per ordered pair (so per pair, and first/second position), outcome rule "first wins
iff x < 2 theta[first]" with one shared x for humans and judges, alpha = 0.1.
For every n, method (human-only on n, judge-only on N + n, PPR) and covariance (delta, paper):
empirical coverage of the true rank-sets, mean rank-set size and RBO (p = 0.6) of the theta_hat
order vs the truth.

    .venv/bin/python bench/ppr_synthetic.py --reps 300 --out docs/figures/ppr_synthetic.json

``--design random`` draws each comparison's ordered pair uniformly at random instead (the i.i.d.
sampling the paper's theory assumes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats import ranking as R  # noqa: E402


def run(
    reps: int = 300,
    k: int = 8,
    total: int = 50_000,
    n_values=(280, 560, 1120, 2240, 4480),
    us=(0.05, 0.1, 0.3),
    alpha: float = 0.1,
    p_rbo: float = 0.6,
    seed: int = 0,
    design: str = "balanced",
) -> dict:
    rng = np.random.default_rng(seed)
    n_ord = k * (k - 1)
    per = total // n_ord
    first, second = R.balanced_design(k, per)  # (T,) block per ordered pair
    T = len(first)
    z = np.zeros(T)
    covs = R.COVARIANCES
    # acc[(method, n, cov)] = lists of (covered, size); rbo[(method, n)] = list
    acc: dict = {}
    rbos: dict = {}
    lams: dict = {}

    def record(key, theta_hat, sigma, tl, tu, cov):
        lo, up = R.ranksets(theta_hat, sigma, alpha)
        acc.setdefault(key + (cov,), []).append(
            (bool(R.rankset_covers(lo, up, tl, tu)), float(R.rankset_size(lo, up)))
        )

    t0 = time.time()
    for r in range(reps):
        theta = rng.uniform(0.0, 0.5, size=k)
        judges = {u: np.clip(theta + rng.uniform(-u, u, size=k), 0.0, 0.5) for u in us}
        if design == "random":
            first = rng.integers(0, k, T)
            second = (first + rng.integers(1, k, T)) % k
        x = rng.random(T)  # one shared uniform per comparison (human and every judge)
        w = (x < 2 * theta[first]).astype(float)
        wh = {u: (x < 2 * j[first]).astype(float) for u, j in judges.items()}
        tl, tu = R.true_ranksets(theta)
        order_true = np.argsort(-theta)
        for u in us:  # judge-only on all N + n: independent of n
            for cov in covs:
                th, sg = R.onesource_theta_sigma(first, second, wh[u], z, k, cov)
                record((f"judge u={u}", 0), th, sg, tl, tu, cov)
            rbos.setdefault((f"judge u={u}", 0), []).append(R.rbo(order_true, np.argsort(-th), p_rbo))
        for n in n_values:
            if design == "balanced":
                lab = (np.arange(T) % per) < (n // n_ord)  # equal labelled count per ordered pair
            else:
                lab = np.arange(T) < n
            for cov in covs:
                th, sg = R.onesource_theta_sigma(first[lab], second[lab], w[lab], z[lab], k, cov)
                record(("human", n), th, sg, tl, tu, cov)
            rbos.setdefault(("human", n), []).append(R.rbo(order_true, np.argsort(-th), p_rbo))
            for u in us:
                for cov in covs:
                    th, sg, lam = R.ppr_theta_sigma(
                        first[~lab],
                        second[~lab],
                        wh[u][~lab],
                        z[~lab],
                        first[lab],
                        second[lab],
                        w[lab],
                        z[lab],
                        wh[u][lab],
                        z[lab],
                        k,
                        covariance=cov,
                    )
                    record((f"ppr u={u}", n), th, sg, tl, tu, cov)
                lams.setdefault((f"ppr u={u}", n), []).append(lam)
                rbos.setdefault((f"ppr u={u}", n), []).append(R.rbo(order_true, np.argsort(-th), p_rbo))
        if (r + 1) % 50 == 0:
            print(f"  {r + 1}/{reps} reps, {time.time() - t0:.0f} s", file=sys.stderr)
    rows = []
    for (method, n, cov), v in sorted(acc.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2])):
        a = np.array(v)
        cover = a[:, 0].mean()
        rows.append(
            {
                "method": method,
                "n": n if n else None,
                "N": (T - n) if n else T,
                "covariance": cov,
                "coverage": float(cover),
                "coverage_se": float(np.sqrt(cover * (1 - cover) / len(a))),
                "size": float(a[:, 1].mean()),
                "rbo": float(np.mean(rbos[(method, n)])),
                "lambda": float(np.mean(lams[(method, n)])) if (method, n) in lams else None,
            }
        )
    return {
        "k": k,
        "total": T,
        "alpha": alpha,
        "reps": reps,
        "seed": seed,
        "design": design,
        "p_rbo": p_rbo,
        "seconds": round(time.time() - t0, 1),
        "rows": rows,
    }


def markdown(res: dict) -> str:
    """A table: one line per (method, n) with both covariances side by side."""
    by = {}
    for r in res["rows"]:
        by.setdefault((r["method"], r["n"]), {})[r["covariance"]] = r
    lines = [
        f"k = {res['k']}, N + n = {res['total']}, alpha = {res['alpha']} (target coverage "
        f"{1 - res['alpha']:.2f}), {res['reps']} repetitions, design = {res['design']}, seed {res['seed']}",
        "",
        "| method | n | coverage delta | coverage paper | size delta | size paper | RBO (p=0.6) | mean lambda |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def key(item):
        (m, n), _ = item
        return (0 if m == "human" else 1 if m.startswith("ppr") else 2, m, n or 0)

    for (m, n), d in sorted(by.items(), key=key):
        dl, pp = d["delta"], d["paper"]
        lam = f"{dl['lambda']:.2f}" if dl["lambda"] is not None else ""
        lines.append(
            f"| {m} | {n if n else 'N+n (all)'} | {dl['coverage']:.3f} ± {dl['coverage_se']:.3f} | "
            f"{pp['coverage']:.3f} ± {pp['coverage_se']:.3f} | {dl['size']:.2f} | {pp['size']:.2f} | "
            f"{dl['rbo']:.3f} | {lam} |"
        )
    return "\n".join(lines)


def figure(res: dict, out_png: str) -> None:
    """Coverage vs n (paper Fig. 11) for both covariances, with the 1 - alpha target."""
    import plotly.colors
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=[f"covariance: {c}" for c in ("delta", "paper")],
        shared_yaxes=True,
    )
    methods = sorted({r["method"] for r in res["rows"] if r["n"]})
    palette = plotly.colors.qualitative.D3
    for ci, cov in enumerate(("delta", "paper"), 1):
        for i, m in enumerate(methods):
            rows = sorted(
                (r for r in res["rows"] if r["method"] == m and r["covariance"] == cov),
                key=lambda r: r["n"],
            )
            fig.add_trace(
                go.Scatter(
                    x=[r["n"] for r in rows],
                    y=[r["coverage"] for r in rows],
                    mode="lines+markers",
                    name=m,
                    legendgroup=m,
                    showlegend=ci == 1,
                    line={"color": palette[i]},
                    error_y={"type": "data", "array": [1.96 * r["coverage_se"] for r in rows]},
                ),
                row=1,
                col=ci,
            )
        fig.add_hline(y=1 - res["alpha"], line_dash="dash", row=1, col=ci)
        fig.update_xaxes(title_text="n (human comparisons)", type="log", row=1, col=ci)
    fig.update_yaxes(title_text="empirical coverage", row=1, col=1)
    fig.update_layout(
        title=f"Synthetic PPR (k = {res['k']}, N + n = {res['total']}, {res['reps']} reps, "
        f"{res['design']} design): coverage vs n",
        width=1100,
        height=450,
    )
    fig.write_image(out_png)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--total", type=int, default=50_000)
    ap.add_argument(
        "--n", default="280,560,1120,2240,4480", help="comma-separated n values (multiples of 56)"
    )
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--design", choices=("balanced", "random"), default="balanced")
    ap.add_argument("--out", help="write the JSON results here")
    ap.add_argument("--png", help="also plot coverage vs n to this PNG (needs kaleido + BROWSER_PATH)")
    ap.add_argument("--from-json", help="re-print / re-plot saved results instead of running")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args(argv)
    if args.smoke:  # a few repetitions at two small n
        args.reps, args.total, args.n = 3, 2_000, "280,560"
    if args.from_json:
        res = json.loads(Path(args.from_json).read_text())
        if args.png:
            figure(res, args.png)
        print(markdown(res))
        return 0
    res = run(
        reps=args.reps,
        total=args.total,
        n_values=tuple(int(x) for x in args.n.split(",")),
        alpha=args.alpha,
        seed=args.seed,
        design=args.design,
    )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1))
    if args.png:
        figure(res, args.png)
    print(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
