"""How long each dashboard page takes to draw on a database with 1M token-trace rows, and the first
load of a page in a fresh server process.

    .venv/bin/python bench/bench_dashboard.py [--db /tmp/bench_dash.duckdb] [--traces 1000000]
    .venv/bin/python bench/bench_dashboard.py --first-load home generate [--json]

1. Build (once; reused when the file exists) a database of one run: 4 models x 500 prompts x
   5 repeats x 2 modes = 20,000 generations x 50 steps = 1,000,000 token traces (with top-5
   alternatives), plus scores, LLM-judge verdicts (60,000) and a 5,000-row comparison set. Built
   with DuckDB's range() in a few INSERT ... SELECT statements (seconds, no Python loop).
2. Draw every page with streamlit.testing.v1.AppTest: the first draw (cold: st.cache_data cleared,
   every query runs) and the second (warm: a rerun, as after a widget change that hits the cache),
   and report wall-clock seconds per page (server side: script run incl. queries and figure
   building; the browser's Plotly rendering is not included). Modules are imported once per
   process, so the first page pays for importing torch etc. only when it is first.
3. ``--first-load PAGE ...``: each page drawn once in its own fresh Python process, opened at its own
   URL (the page is the navigation's default, as a deep link or a reload opens it): the wall-clock
   and CPU seconds of that first script run, timed inside it (imports of the dashboard and engine,
   the page's queries and figures; not the import of Streamlit and pandas nor the runtime's start-up,
   which a running server has done before its first page), and which heavy
   modules (torch, transformers, the model backends) it imported. CPU seconds are the figure to
   read on a shared machine: wall time there mostly measures the other processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from dashboard import navigation  # noqa: E402
from engine import store  # noqa: E402

PAGES = [p.path for p in navigation.PAGES]
# modules whose import a first page load must not pay for (generation and model loading only)
HEAVY = ("torch", "transformers", "engine.generation.hf", "engine.models.loading", "vllm", "ray")
# the entry script of a first load: the navigation with PAGE as its default (its own URL)
# (timed inside the script run, in its own thread: AppTest's own start-up per run is not counted)
ENTRY = """
import json, sys, time
t0, c0 = time.perf_counter(), time.thread_time()
sys.path.insert(0, {root!r})
import streamlit as st
from dashboard import navigation
st.set_page_config(layout="wide")
st.navigation([
    st.Page(p.path, title=p.title, default=p.key == {page!r}, url_path=p.url_path or "home")
    for p in navigation.PAGES
]).run()
with open({out!r}, "w") as f:
    json.dump([time.perf_counter() - t0, time.thread_time() - c0], f)
"""


def build(db: Path, n_traces: int) -> None:
    models, repeats, modes, steps = 4, 5, 2, 50
    prompts = max(n_traces // (models * repeats * modes * steps), 2)
    run = "run-bench"
    with store.writer(db) as con:
        con.begin()
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, code_version, key_mode, warnings, status, n_units) "
            "VALUES (?, 'bench', ?, 'bench', 'token_id', '[]', 'done', ?)",
            [
                run,
                '{"repeats": 5, "temperature": 0.7, "max_new_tokens": 50, "seed": 1}',
                models * prompts * repeats * modes,
            ],
        )
        con.execute(
            "INSERT INTO models SELECT 'model-' || i, 'bench', 'v' || i, 'vocab', 50000, NULL FROM range(?) t(i)",
            [models],
        )
        con.execute(
            "INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES ('bench', 'bench', 'multiple_choice', ?)",
            [prompts],
        )
        con.execute(
            """INSERT INTO prompts SELECT 'bench', 'q' || i, i, 'subject-' || (i % 5),
                         'Question ' || i || '?', '{"A":"a","B":"b","C":"c","D":"d"}', chr(65 + (i % 4)::INTEGER),
                         'Question ' || i FROM range(?) t(i)""",
            [prompts],
        )
        con.execute(
            """INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, token_ids,
                                                finish_reason, n_tokens)
                       SELECT ?, 'model-' || m, 'q' || p, r, md, CASE WHEN md = 'coupled' THEN 1 ELSE 100 + m END,
                              'generated text ' || p, NULL, 'length', ?
                       FROM range(?) a(m), range(?) b(p), range(?) c(r), (VALUES ('coupled'), ('independent')) d(md)""",
            [run, steps, models, prompts, repeats],
        )
        # Coupled models share their tokens until a per-unit divergence step; then they differ.
        con.execute(
            """INSERT INTO token_traces
                       SELECT ?, 'model-' || m, 'q' || p, r, md, s,
                              CASE WHEN md = 'coupled' AND s < (p * 7 + r * 3) % 50 THEN (p * 31 + r * 17 + s * 13) % 49000
                                   ELSE (p * 31 + r * 17 + s * 13 + m * 101 + 1) % 49000 END AS tok,
                              'tok', 0.5, [1, 2, 3, 4, 5], [0.5, 0.2, 0.1, 0.1, 0.1], [0.1, 0.2, 0.3, 0.4, 0.5]
                       FROM range(?) a(m), range(?) b(p), range(?) c(r), (VALUES ('coupled'), ('independent')) d(md),
                            range(?) e(s)""",
            [run, models, prompts, repeats, steps],
        )
        con.execute(
            """INSERT INTO scores SELECT ?, 'model-' || m, 'q' || p, r, md, 'paper', 'A',
                              CASE WHEN hash(m, p, r, md) % 100 < 70 - 10 * m THEN 1.0 ELSE 0.0 END
                       FROM range(?) a(m), range(?) b(p), range(?) c(r), (VALUES ('coupled'), ('independent')) d(md)""",
            [run, models, prompts, repeats],
        )
        con.execute(
            """INSERT INTO judgments (run_id, judge, prompt_id, repeat, mode, model_a, model_b, presented,
                                     judge_prompt_hash, raw, parsed, winner) SELECT ?, 'judge', 'q' || p, r, md, 'model-' || a, 'model-' || b, o, 'h', 'raw',
                              w, w
                       FROM (SELECT *, CASE hash(a, b, p, r, md, o) % 10 WHEN 0 THEN 'tie' WHEN 1 THEN 'b' WHEN 2 THEN 'b'
                                                                             WHEN 3 THEN 'b' ELSE 'a' END AS w
                             FROM range(?) x(a), range(?) y(b), range(?) z(p), range(?) c(r),
                                  (VALUES ('coupled'), ('independent')) d(md), (VALUES ('ab'), ('ba')) e(o) WHERE a < b)""",
            [run, models, models, prompts // 5, repeats],
        )
        con.execute(
            "INSERT INTO comparison_sets VALUES ('bench-set', 'bench', current_timestamp, 5000, '{}')"
        )
        con.execute("""INSERT INTO comparisons (set_name, row_idx, prompt_id, model_a, model_b, human_winner, judge_winner)
                       SELECT 'bench-set', i, 'p' || i, 'model-' || (i % 4), 'model-' || ((i + 1 + i // 4) % 4),
                              CASE WHEN i < 1000 THEN (CASE hash(i) % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'tie' END) END,
                              CASE hash(i + 7) % 3 WHEN 0 THEN 'a' WHEN 1 THEN 'b' ELSE 'tie' END
                       FROM range(5000) t(i) WHERE i % 4 <> (i + 1 + i // 4) % 4""")
        con.commit()


def time_pages(db: Path) -> list[tuple[str, float, float]]:
    os.environ["COUPLED_EVAL_DB"] = str(db)
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    out = []
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
        at.run()
        at.switch_page(page)
        st.cache_data.clear()  # cold: every query of the page runs
        t0 = time.perf_counter()
        at.run()
        cold = time.perf_counter() - t0
        if at.exception:
            raise RuntimeError(f"{page}: {[e.value for e in at.exception]}")
        t0 = time.perf_counter()
        at.run()
        warm = time.perf_counter() - t0
        out.append((page, cold, warm))
        print(f"{page:28s} cold {cold:6.2f} s   warm {warm:6.2f} s", flush=True)
    return out


def _first_load_here(page: str, db: Path) -> dict:
    """In this (fresh) process: draw ``page`` once at its own URL; seconds and heavy imports."""
    os.environ["COUPLED_EVAL_DB"] = str(db)
    import numpy  # noqa: F401  (a running server has imported these before any page)
    import pandas  # noqa: F401
    from streamlit.testing.v1 import AppTest

    tmp = Path(tempfile.mkdtemp(prefix="first_load_"))
    (tmp / "app_pages").symlink_to(ROOT / "app_pages")  # page paths resolve as in app.py
    (tmp / "entry.py").write_text(ENTRY.format(root=str(ROOT), page=page, out=str(tmp / "t.json")))
    at = AppTest.from_file(str(tmp / "entry.py"), default_timeout=600)
    at.run()
    wall, cpu = json.loads((tmp / "t.json").read_text())
    if at.exception:
        raise RuntimeError(f"{page}: {[e.value for e in at.exception]}")
    return {
        "page": page,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "title": [t.value for t in at.title][:1],
        "heavy_imports": [m for m in HEAVY if m in sys.modules],
    }


def first_load(page: str, db: Path) -> dict:
    """:func:`_first_load_here` in a fresh Python process (nothing imported or cached before)."""
    out = subprocess.run(
        [sys.executable, __file__, "--one-first-load", page, "--db", str(db)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    if out.returncode != 0:
        raise RuntimeError(f"first load of {page} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def time_first_loads(pages: list[str], db: Path, as_json: bool = False) -> list[dict]:
    rows = [first_load(p, db) for p in pages]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    for r in rows:
        if as_json:
            print(json.dumps({**r, "load_avg_1min": load}), flush=True)
        else:
            print(
                f"first load {r['page']:14s} wall {r['wall_s']:6.2f} s   cpu {r['cpu_s']:6.2f} s   "
                f"heavy imports: {', '.join(r['heavy_imports']) or 'none'}   (load average {load:.1f})",
                flush=True,
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", default="/tmp/bench_dashboard.duckdb")
    ap.add_argument("--traces", type=int, default=1_000_000)
    ap.add_argument(
        "--first-load",
        nargs="*",
        metavar="PAGE",
        help="only the first load of these pages (keys: home, generate, ...), each in a fresh process",
    )
    ap.add_argument("--json", action="store_true", help="--first-load rows as JSON lines")
    ap.add_argument("--one-first-load", help=argparse.SUPPRESS)  # the child process of --first-load
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = ap.parse_args()
    if args.one_first_load:
        print(json.dumps(_first_load_here(args.one_first_load, Path(args.db))), flush=True)
        return
    if args.smoke:  # a small database in a fresh folder: the Home page, and Generate's first load
        args.db, args.traces = str(Path(tempfile.mkdtemp(prefix="bench_dash_")) / "smoke.duckdb"), 2000
        PAGES[:] = PAGES[:1]
    db = Path(args.db)
    if not db.exists():
        t0 = time.perf_counter()
        build(db, args.traces)
        print(f"built {db} in {time.perf_counter() - t0:.1f} s", flush=True)
    if args.first_load:
        time_first_loads(args.first_load, db, args.json)
        return
    counts = store.table_counts(db)
    print({k: v for k, v in counts.items() if v}, flush=True)
    time_first_loads(["generate"] if args.smoke else ["home", "generate"], db)
    time_pages(db)


if __name__ == "__main__":
    main()
