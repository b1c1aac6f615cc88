"""``benchmark-compare``, ``multigen`` and ``import paper-mmlu``: JSON to stdout, errors to stderr."""

from __future__ import annotations

import json
import math
import sys

from engine import store
from engine.commands._groups import get_group
from engine.errors import UserError


def _json_default(o):
    try:
        import numpy as np
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o):
    """NaN/inf -> null so the output is strict JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _print(obj) -> None:
    try:
        print(json.dumps(_clean(obj), default=_json_default, indent=1))
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has gone, nothing to report
        sys.stdout = None


def register(sub) -> None:
    p = sub.add_parser("benchmark-compare",
                       help="coupled vs independent comparison of two models on stored benchmark scores")
    p.add_argument("--db", default=str(store.DEFAULT_DB))
    p.add_argument("--model-a", required=True)
    p.add_argument("--model-b", required=True)
    p.add_argument("--subject", default=None, help="restrict to one subject (prompts.subject)")
    p.add_argument("--run", default=None, help="run id (default: the latest run scoring both models)")
    p.add_argument("--rule", default="paper", help="scoring rule (default: paper)")
    p.add_argument("--target-error", type=float, default=None,
                   help="error level for the sample saving (default: the coupled error at n=120)")
    p.add_argument("--resamples", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--saving-n", type=int, default=120,
                   help="also report the saving at the error the coupled curve reaches at this n (default 120)")
    p.add_argument("--max-n", type=int, default=10_000, help="largest sample size of the error curve")
    p.add_argument("--no-kde", action="store_true", help="leave the KDE curves out of the JSON")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="also write the Fig-2-style plots (covariance KDE, var-of-diff KDEs, error curve) "
                        "as PNG files into DIR (plotly + kaleido; needs Chromium, BROWSER_PATH)")
    p.set_defaults(func=run_compare)

    p = sub.add_parser("multigen", help="multiple-generation analysis of one model (P(correct), CI, data map)")
    p.add_argument("--db", default=str(store.DEFAULT_DB))
    p.add_argument("--run", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--mode", default="coupled", choices=list(store.MODES))
    p.add_argument("--rule", default="paper")
    p.add_argument("--method", default="answer", help="clustering method: answer | llm | embedding")
    p.add_argument("--subject", default=None)
    p.add_argument("--p-max", type=float, default=0.1, help="data-map flag: P(correct) <= this")
    p.add_argument("--s-min", type=float, default=-0.8, help="data-map flag: consistency >= this")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap over prompts")
    p.add_argument("--no-prompts", action="store_true", help="leave the per-prompt list out of the JSON")
    p.set_defaults(func=run_multigen)

    imp = get_group(sub, "import", "import external data into the database")
    p = imp.add_parser("paper-mmlu", help="the coupled-generation paper's MMLU responses (+ MMLU answers)")
    p.add_argument("--responses", required=True, help="folder with one sub-folder per model")
    p.add_argument("--questions", required=True, help="folder with <subject>_test.csv files")
    p.add_argument("--db", default=str(store.DEFAULT_DB))
    p.add_argument("--models", default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--subjects", default=None, help="comma-separated subjects (default: all)")
    p.add_argument("--run-id", default="paper-mmlu")
    p.set_defaults(func=run_import)


def _csv(s: str | None) -> list[str] | None:
    if s is None:
        return None
    items = [x.strip() for x in s.split(",") if x.strip()]
    if not items:
        raise UserError(f"empty list {s!r}")
    return items


def run_compare(args) -> int:
    from engine.stats_io import benchmark_compare
    out = benchmark_compare(args.db, args.model_a, args.model_b, subject=args.subject,
                            target_error=args.target_error, n_resamples=args.resamples, seed=args.seed,
                            run=args.run, rule=args.rule, max_n=args.max_n, saving_n=args.saving_n)
    if args.figures:
        out["figures"] = write_figures(out, args.figures)
    if args.no_kde:
        out.pop("kde", None)
    _print(out)
    return 0


def write_figures(res: dict, folder: str) -> list[str]:
    """The paper's Fig. 2 panels for one benchmark-compare result, as PNG files in ``folder``.

    (a) KDE of the per-question covariance (coupled; dashed line at the mean), (b) KDEs of the
    per-question variance of the difference (coupled vs independent; dashed lines at the medians),
    (c) mean estimation error vs number of samples with the 2.5/97.5 percentile band.
    """
    import os
    from pathlib import Path

    import plotly.graph_objects as go

    os.environ.setdefault("BROWSER_PATH", "/usr/bin/chromium")
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    a, b = res["models"]
    tag = "_".join(x for x in (res.get("subject") or "all", a, "vs", b) if x).replace("/", "-")
    title = f"{a} vs {b} ({res.get('subject') or 'all subjects'})"
    colors = {"coupled": "#1f77b4", "independent": "#ff7f0e"}
    paths = []

    k = res["kde"]["covariance_coupled"]
    fig = go.Figure(go.Scatter(x=k["x"], y=k["density"], mode="lines", name="coupled",
                               line=dict(color=colors["coupled"])))
    fig.add_vline(x=res["mean_covariance_coupled"], line_dash="dash",
                  annotation_text=f"mean {res['mean_covariance_coupled']:.3f}")
    fig.update_layout(title=f"(a) Score covariance per question<br><sub>{title}</sub>",
                      xaxis_title="covariance", yaxis_title="density")
    paths.append(d / f"{tag}_covariance.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    for mode in ("coupled", "independent"):
        k = res["kde"].get(f"var_diff_{mode}")
        med = res.get(f"median_var_diff_{mode}")
        if k is None or med is None:
            continue
        fig.add_trace(go.Scatter(x=k["x"], y=k["density"], mode="lines", name=mode, line=dict(color=colors[mode])))
        fig.add_vline(x=med, line_dash="dash", line_color=colors[mode], annotation_text=f"median {med:.3f}",
                      annotation_position="top left" if mode == "coupled" else "top right")
    fig.update_layout(title=f"(b) Variance of the score difference per question<br><sub>{title}</sub>",
                      xaxis_title="variance of the difference", yaxis_title="density")
    paths.append(d / f"{tag}_var_diff.png")
    fig.write_image(paths[-1], width=700, height=450)

    fig = go.Figure()
    n = [r["n"] for r in res["error_curve"]]
    for mode in ("coupled", "independent"):
        if res["error_curve"][0].get(mode) is None:
            continue
        fig.add_trace(go.Scatter(x=n + n[::-1], y=[r[f"{mode}_high"] for r in res["error_curve"]]
                                 + [r[f"{mode}_low"] for r in res["error_curve"]][::-1],
                                 fill="toself", opacity=0.2, line=dict(width=0), showlegend=False,
                                 fillcolor=colors[mode], hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=n, y=[r[mode] for r in res["error_curve"]], mode="lines", name=mode,
                                 line=dict(color=colors[mode])))
    sd = res.get("saving_detail") or {}
    if sd.get("saving") is not None:
        fig.add_hline(y=sd["error"], line_dash="dot",
                      annotation_text=f"error {sd['error']:.3f}: {100 * sd['saving']:.0f}% fewer samples")
    fig.update_layout(title=f"(c) Estimation error vs number of samples (band: 2.5-97.5%)<br><sub>{title}</sub>",
                      xaxis_title="number of samples", yaxis_title="absolute error")
    paths.append(d / f"{tag}_error_curve.png")
    fig.write_image(paths[-1], width=700, height=450)
    return [str(p) for p in paths]


def run_multigen(args) -> int:
    from engine.stats_io import multigen_summary
    out = multigen_summary(args.db, args.run, args.model, mode=args.mode, rule=args.rule, method=args.method,
                           subject=args.subject, p_max=args.p_max, s_min=args.s_min, seed=args.seed)
    if args.no_prompts:
        out.pop("prompts", None)
    _print(out)
    return 0


def run_import(args) -> int:
    import time

    from engine.tasks.importers import import_paper_mmlu
    t0 = time.perf_counter()
    out = import_paper_mmlu(args.db, args.responses, args.questions, models=_csv(args.models),
                            subjects=_csv(args.subjects), run_id=args.run_id)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    print(f"imported {out['n_generations']} generations of {len(out['models'])} models "
          f"({out['n_prompts']} prompts) into {args.db} as run {out['run_id']}", file=sys.stderr)
    _print(out)
    return 0
