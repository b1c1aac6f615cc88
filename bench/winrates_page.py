"""Loader time of the Win-rates and Rank-sets pages on the Chatbot Arena files (cold: no cache).

    .venv/bin/python bench/winrates_page.py [--repeats 3]

Times engine.analysis.winrates.winrates_view (what dashboard.loaders.winrates calls on a cache miss)
for the built-in Arena source (human labels, judge gpt-4-0125-preview file, 26,919 comparisons,
20 models), 1,000 prompt-cluster resamples, without and with Elo; and ranksets_view (PPR vs
human-only on the same 990 labels, the paper's 12 models, max-t). Medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.analysis import ranksets as RS  # noqa: E402
from engine.analysis import winrates as WRV  # noqa: E402
from engine.analysis.comparisons import ARENA_PAPER_MODELS, arena_dir  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if arena_dir() is None:
        sys.exit("needs ../shared/data/arena")
    cases = {
        "winrates_view, arena, 1000 resamples, no Elo": lambda: WRV.winrates_view(None, "arena", "gpt-4-0125-preview",
                                                                                   reps=1000, elo=False),
        "winrates_view, arena, 1000 resamples, with Elo": lambda: WRV.winrates_view(None, "arena",
                                                                                     "gpt-4-0125-preview", reps=1000),
        "ranksets_view, arena 12 models, PPR + human-only, max-t": lambda: RS.ranksets_view(
            None, "arena", "gpt-4-0125-preview", "ppr", 0.05, models=tuple(ARENA_PAPER_MODELS), n_human=990),
    }
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    for name, fn in cases.items():
        ts = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        print(f"{name}: median {statistics.median(ts):.2f} s (runs: {', '.join(f'{x:.2f}' for x in ts)})")


if __name__ == "__main__":
    main()
