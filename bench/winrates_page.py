"""Loader time of the Win-rates and Rank-sets pages on the Chatbot Arena files (cold: no cache).

    .venv/bin/python bench/winrates_page.py [--repeats 3]

Times engine.analysis.winrates.winrates_view (what dashboard.loaders.winrates calls on a cache miss)
for the built-in Arena source (human labels, judge gpt-4-0125-preview file, 26,919 comparisons,
20 models), 1,000 prompt-cluster resamples, without and with Elo; and ranksets_view (PPR vs
human-only on the same 990 labels, the paper's 12 models, max-t). Medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from engine.analysis import ranksets as RS  # noqa: E402
from engine.analysis import winrates as WRV  # noqa: E402
from engine.analysis.comparisons import ARENA_PAPER_MODELS, _read_arena_cached, arena_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.smoke:  # synthetic Arena-layout data (COUPLED_EVAL_SHARED points at it), one repeat
        import tempfile

        from _smoke import synthetic_arena

        shared = Path(tempfile.mkdtemp(prefix="bench_smoke_shared_"))
        synthetic_arena(shared / "data" / "arena", n=3000)
        os.environ["COUPLED_EVAL_SHARED"] = str(shared)
        args.repeats = 1
    if arena_dir() is None:
        sys.exit("needs ../shared/data/arena")
    cases = {
        "winrates_view, arena, 1000 resamples, no Elo": lambda: WRV.winrates_view(
            None, "arena", "gpt-4-0125-preview", reps=1000, elo=False
        ),
        "winrates_view, arena, 1000 resamples, with Elo": lambda: WRV.winrates_view(
            None, "arena", "gpt-4-0125-preview", reps=1000
        ),
        "ranksets_view, arena 12 models, PPR + human-only, max-t": lambda: RS.ranksets_view(
            None,
            "arena",
            "gpt-4-0125-preview",
            "ppr",
            0.05,
            models=tuple(ARENA_PAPER_MODELS),
            n_human=990,
        ),
    }

    def cold():
        WRV._BOOT_CACHE.clear()
        _read_arena_cached.cache_clear()

    print(
        f"{platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    for name, fn in cases.items():
        ts = []
        for _ in range(args.repeats):
            cold()
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        print(
            f"{name} (cold): median {statistics.median(ts):.2f} s (runs: {', '.join(f'{x:.2f}' for x in ts)})"
        )
    # a widget change after a cold load (the page's st.cache_data misses, the process memo hits)
    cold()
    WRV.winrates_view(None, "arena", "gpt-4-0125-preview", reps=1000, elo=False)
    for name, kw in {
        "procedure -> chi2": dict(procedure="chi2", elo=False),
        "alpha -> 0.1": dict(alpha=0.1, elo=False),
        "Elo on": dict(elo=True),
    }.items():
        t = time.perf_counter()
        WRV.winrates_view(None, "arena", "gpt-4-0125-preview", reps=1000, **kw)
        print(f"winrates_view after a cold load, {name}: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
