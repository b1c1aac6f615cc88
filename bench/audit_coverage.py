"""Coverage of the judge audit's intervals with known truth (docs/METHODS.md 9.2, 7.2; docs/REPRODUCTION.md
"Judge audit: interval coverage").

Design: engine.analysis.audit_sim.simulated_run (k models, every pair on P prompts judged in both
orders, a prompt effect shared by the prompt's units, a judge with a per-model bias and a position
bias, a uniform random sample of units labelled by a human, a share of them by a second human).
The truth of each figure is its value on one very large run (``--truth-prompts`` prompts, every unit
labelled twice). Per replication, engine.analysis.judge_audit.audit_units runs twice on the same
resamples: with the plain percentile interval (``percentile``) and with the interval the product
reports (``expanded``, engine.stats.judge_audit.interval). Reported per figure: the share of
replications whose interval holds the truth (MC SE = sqrt(p (1 - p) / reps)); bias: averaged over
the models.

    .venv/bin/python bench/audit_coverage.py --reps 1000 --prompts 40 80 --labels 0.5
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.analysis import judge_audit as AU  # noqa: E402
from engine.analysis.audit_sim import simulated_run  # noqa: E402
from engine.stats import judge_audit as JA  # noqa: E402

FIGURES = (
    "agreement",
    "kappa",
    "bias",
    "position_consistency",
    "first_position_preference",
    "human_agreement",
    "human_kappa",
)


def _values(res: AU.JudgeAudit, part: str) -> dict[str, np.ndarray]:
    """figure -> (m,) values of ``part`` (estimate, lower or upper); bias: one per model."""
    out = {}
    for f in FIGURES:
        e = getattr(res, f)
        es = [e[m] for m in sorted(e)] if isinstance(e, dict) else [e]
        out[f] = np.array([np.nan if getattr(x, part) is None else getattr(x, part) for x in es], float)
    return out


def truth(k: int, prompts: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    units, labels = simulated_run(prompts, k, 10**9, rng, doubled=1.0)
    return _values(AU.audit_units("sim", "j", units, labels, n_boot=1), "estimate")


def one_rep(
    k: int, prompts: int, share: float, boot: int, rng: np.random.Generator, tr: dict[str, np.ndarray]
) -> dict[str, dict[str, np.ndarray]]:
    """method -> figure -> (m,) covered (float: 1, 0, or NaN where the interval is undefined)."""
    n_units = prompts * k * (k - 1) // 2
    units, labels = simulated_run(prompts, k, int(round(share * n_units)), rng)
    seed = int(rng.integers(2**31))
    out = {}
    for method in ("percentile", "expanded"):
        real = JA.interval
        JA.interval = functools.partial(real, method=method)  # type: ignore[assignment]
        try:
            res = AU.audit_units("sim", "j", units, labels, n_boot=boot, seed=seed)
        finally:
            JA.interval = real  # type: ignore[assignment]
        lo, hi = _values(res, "lower"), _values(res, "upper")
        out[method] = {
            f: np.where(np.isfinite(lo[f]), (lo[f] <= tr[f]) & (tr[f] <= hi[f]), np.nan) for f in FIGURES
        }
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--prompts", type=int, nargs="+", default=[40, 80])
    ap.add_argument("--models", type=int, default=4)
    ap.add_argument(
        "--labels", type=float, default=0.5, help="share of the run's units labelled by the human"
    )
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--truth-prompts", type=int, default=40_000)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--every", type=int, default=0, help="print a progress line every N replications")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    if a.smoke:
        a.reps, a.prompts, a.boot, a.truth_prompts = 3, [12], 50, 400
    rng = np.random.default_rng(a.seed)
    t0 = time.perf_counter()
    tr = truth(a.models, a.truth_prompts, rng)
    print(
        f"truth from {a.truth_prompts:,} prompts: "
        + ", ".join(f"{f} {np.round(v, 3).tolist()}" for f, v in tr.items())
    )
    print("| prompts | figure | percentile | expanded (product) | replications |")
    print("|---|---|---|---|---|")
    for P in a.prompts:
        cov: dict[str, dict[str, list]] = {
            m: {f: [] for f in FIGURES} for m in ("percentile", "expanded")
        }
        for r in range(a.reps):
            for m, d in one_rep(a.models, P, a.labels, a.boot, rng, tr).items():
                for f, c in d.items():
                    cov[m][f].append(c)
            if a.every and (r + 1) % a.every == 0:
                print(
                    f"  {P} prompts: {r + 1} replications, {time.perf_counter() - t0:.0f} s",
                    file=sys.stderr,
                )
        for f in FIGURES:
            p, e = (np.nanmean(np.concatenate(cov[m][f])) for m in ("percentile", "expanded"))
            n = int(np.isfinite(np.concatenate(cov["expanded"][f])).sum())
            print(f"| {P} | {f} | {p:.3f} | {e:.3f} | {n} |")
    print(
        f"MC SE at 0.95: {np.sqrt(0.95 * 0.05 / max(a.reps, 1)):.3f} per figure (bias: per model, entries "
        f"move together); {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
