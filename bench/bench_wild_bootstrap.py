"""The wild cluster bootstrap-t's null draws (engine.stats.maxt.wild_maxt_draws, the default
calibration of rank-sets at <= 2,000 prompts and <= 30 models): the engine's expanded form (two
GEMMs over the prompts per chunk of draws) against the direct form it replaced (each draw's (C, k)
residuals re-formed, then a batched U*^T U*), on the same Rademacher draws. Prints CPU seconds per
call (one thread, as the dashboard's server runs), the speed-up and the largest difference.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_wild_bootstrap.py
    .venv/bin/python bench/bench_wild_bootstrap.py --smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.stats.maxt import wild_maxt_draws  # noqa: E402

# (models k, prompts C, sources S): S = 1 for human-only or judge-only sets, 2 for PPR
SIZES = [(4, 300, 1), (4, 300, 2), (8, 500, 2), (12, 1000, 2), (30, 2000, 1)]


def direct_draws(sources, rng: np.random.Generator, n_draws: int, chunk_elems: int = 4_000_000):
    """The direct form: U*_b = v_b Ubar - sum_s lam_s delta_bs En_s, (b, C, k), then U*^T U*."""
    Ubar, E, lams, us, cs = None, [], [], [], []
    for lam, Y, N in sources:
        c = N.sum(axis=0)
        u = Y - Y.sum(axis=0) / c * N
        Ubar = lam * u / c if Ubar is None else Ubar + lam * u / c
        E.append(N / c)
        lams.append(lam)
        us.append(u)
        cs.append(c)
    C, k = Ubar.shape
    out = np.empty((n_draws, k, k))
    step = max(1, chunk_elems // (C * k))
    for s in range(0, n_draws, step):
        b = min(step, n_draws - s)
        v = rng.integers(0, 2, size=(b, C)) * 2.0 - 1.0  # (b, C)
        dtheta = np.zeros((b, k))
        Ustar = v[:, :, None] * Ubar[None]  # (b, C, k)
        for lam, u, c, En in zip(lams, us, cs, E):
            delta = (v @ u) / c
            dtheta += lam * delta
            Ustar -= lam * delta[:, None, :] * En[None]
        sig = Ustar.transpose(0, 2, 1) @ Ustar  # (b, k, k)
        d = np.diagonal(sig, axis1=1, axis2=2)
        sc = np.sqrt(np.maximum(d[:, :, None] + d[:, None, :] - 2 * sig, 0.0))
        gap = dtheta[:, :, None] - dtheta[:, None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[s : s + b] = np.where(sc > 0, gap / np.where(sc > 0, sc, 1.0), 0.0)
    return out


def sources_of(k: int, C: int, S: int, rng: np.random.Generator):
    """S sources of per-prompt sums (Y, N) (C, k): up to 3 comparisons of a model per prompt."""
    out = []
    for s in range(S):
        N = rng.integers(0, 4, size=(C, k)).astype(float)
        N[0] += 1  # every model compared at least once in every source
        out.append((0.8 if s == 0 else -1.0, rng.random((C, k)) * N, N))
    return out


def cpu_per_call(fn, sources, n_draws: int, calls: int) -> tuple[float, np.ndarray]:
    t = time.process_time()
    for _ in range(calls):
        out = fn(sources, np.random.default_rng(5), n_draws)
    return (time.process_time() - t) / calls, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--draws", type=int, default=10_000, help="bootstrap draws per call (default 10,000)"
    )
    ap.add_argument("--calls", type=int, default=3, help="calls timed per size and form")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    sizes, draws, calls = (SIZES[:2], 50, 1) if a.smoke else (SIZES, a.draws, a.calls)
    print(
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {draws} draws, {calls} calls each"
    )
    print(
        "| models k | prompts C | sources | direct CPU-s | engine CPU-s | speed-up | largest difference |"
    )
    print("|---|---|---|---|---|---|---|")
    for k, C, S in sizes:
        src = sources_of(k, C, S, np.random.default_rng(k * C + S))
        t_direct, want = cpu_per_call(direct_draws, src, draws, calls)
        t_engine, got = cpu_per_call(wild_maxt_draws, src, draws, calls)
        diff = float(np.max(np.abs(got - want)))
        if diff > 1e-8:
            raise SystemExit(f"the two forms disagree by {diff:g} at k={k}, C={C}, S={S}")
        speed = t_direct / t_engine if t_engine > 0 else float("inf")
        print(f"| {k} | {C} | {S} | {t_direct:.3f} | {t_engine:.3f} | {speed:.1f}x | {diff:.1e} |")


if __name__ == "__main__":
    main()
