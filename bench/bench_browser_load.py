"""What one page load of the dashboard costs a real browser, by how the tab is opened: the browser
tests' page fixture (tests/test_browser.py) reuses one tab per module because of this figure
(docs/BENCHMARKS.md, "The test suite").

Starts ``streamlit run app.py`` on a small database (tests/test_app.py's), drives Debian's Chromium
through Playwright, loads the Home, Benchmark, Win-rates and Rank-sets pages twice each (after one
load not counted) and prints, per load, the CPU seconds of Chromium and Playwright's driver (the
process tree under this script, reaped children included, less the server), of the Streamlit server
(bench/bench_dashboard_watch.py's), and the wall time. Modes:

  new-tab        a new browser context and page per load (what a fresh page per test did)
  new-page       one context, a new page per load
  open-tab       one page, a ``goto`` per load (a new Streamlit session each time)
  sidebar        one page, a click on the page's link in the app's sidebar per load (one Streamlit
                 session throughout: the page's script runs again over the open connection)

  .venv/bin/python bench/bench_browser_load.py --mode new-tab
  .venv/bin/python bench/bench_browser_load.py --mode open-tab --json
  .venv/bin/python bench/bench_browser_load.py --mode open-tab --arg=--disable-gpu-compositing
  .venv/bin/python bench/bench_browser_load.py --smoke    # one load of Home, nothing warmed
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402
from bench_dashboard_watch import _serve  # noqa: E402

from tests.system_packages import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

MODES = ("new-tab", "new-page", "open-tab", "sidebar")
LOADS = ("home", "benchmark", "winrates", "ranksets")
VIEWPORT = {"width": 1400, "height": 2400}


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants, reaped children included."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mode", choices=MODES, default="new-tab")
    ap.add_argument("--chromium", default=CHROMIUM)
    ap.add_argument("--arg", action="append", default=[], help="one more Chromium flag (repeatable)")
    ap.add_argument("--json", action="store_true", help="one JSON line")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if not Path(args.chromium).exists():
        print(f"bench_browser_load: needs Chromium at {args.chromium}; nothing measured")
        return

    import psutil
    from playwright.sync_api import sync_playwright

    from dashboard import navigation
    from tests.test_app import build_small_db
    from tests.test_browser import _settle, _sidebar_link

    paths = {p.key: p.url_path for p in navigation.PAGES}
    tmp = Path(tempfile.mkdtemp(prefix="bench_browser_load_"))
    proc, url = _serve(build_small_db(tmp / "b.duckdb"), tmp / "streamlit.log")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS + args.arg)
            ctx = browser.new_context(viewport=VIEWPORT)
            tab = ctx.new_page()

            def load(key: str) -> None:
                if args.mode == "new-tab":
                    c = browser.new_context(viewport=VIEWPORT)
                    pg = c.new_page()
                elif args.mode == "new-page":
                    pg = ctx.new_page()
                else:
                    pg = tab
                if args.mode == "sidebar" and pg.url.startswith(url):
                    _sidebar_link(pg, f"{url}/{paths[key]}")  # as the browser tests open a page
                else:
                    pg.goto(f"{url}/{paths[key]}")
                    pg.wait_for_selector("[data-testid='stApp']", timeout=60_000)
                _settle(pg)
                if key != "home":
                    pg.locator(".js-plotly-plot >> visible=true").first.wait_for(timeout=90_000)
                    _settle(pg)
                if args.mode == "new-tab":
                    c.close()
                elif args.mode == "new-page":
                    pg.close()

            me = psutil.Process()

            def browser_cpu() -> float:  # the tree under this script less its own Python and the server
                return tree_cpu(me.pid) - sum(me.cpu_times()[:2]) - tree_cpu(proc.pid)

            keys = ("home",) if args.smoke else LOADS * 2
            if not args.smoke:
                load("benchmark")  # warm: the server's first run of a page and its caches
            c0, s0, t0 = browser_cpu(), tree_cpu(proc.pid), time.monotonic()
            for key in keys:
                load(key)
            c1, s1 = browser_cpu(), tree_cpu(proc.pid)
            row = {
                "mode": args.mode,
                "extra_args": args.arg,
                "loads": len(keys),
                "browser_cpu_s_per_load": round((c1 - c0) / len(keys), 2),
                "server_cpu_s_per_load": round((s1 - s0) / len(keys), 2),
                "wall_s_per_load": round((time.monotonic() - t0) / len(keys), 2),
            }
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    if args.json:
        print(json.dumps(row))
    else:
        for k, v in row.items():
            print(f"{k:24s} {v}")


if __name__ == "__main__":
    main()
