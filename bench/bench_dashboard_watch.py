"""What the dashboard itself costs while a page watches a running job: the CPU seconds of its Streamlit
server and of the browser (headless Chromium and Playwright's driver) over a fixed time, the job's own
process excluded. The live views re-run on a timer (dashboard/refresh.py), and that CPU is taken from
the same machine as the job being watched.

    .venv/bin/python bench/bench_dashboard_watch.py [--page generate] [--seconds 60] [--no-job]

1. Build the tests' small database (tests/test_app.build_small_db) in a temporary folder and start
   ``streamlit run app.py`` on it (a free localhost port, as the browser tests do).
2. Open the page in Chromium (1400 x 2400, as the browser tests) and let it settle (8 s).
3. Start a job through the dashboard's own runner (dashboard.jobs.start_job): ``engine generate`` of
   SmolLM2 and its int8 variant on demo-numbers, 20 repeats, long enough to outlast the measurement;
   ``--no-job`` measures the idle page instead.
4. Read the CPU times of the server and the browser's processes from /proc before and after
   ``--seconds`` seconds; print one line (``--json``: a JSON object).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402

from tests.system_packages import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

JOB_ARGS = [
    "generate",
    "--models",
    "smollm2-135m",
    "smollm2-135m-int8",
    "--dataset",
    "demo-numbers",
    "--repeats",
    "20",
    "--max-new-tokens",
    "12",
]


TICK = os.sysconf("SC_CLK_TCK")
FIRST_RUNS_S = 8.0  # after the first page load, before the measured window: the page's first runs end


def _procs() -> dict[int, tuple[int, float, str]]:
    """Every process now: pid -> (parent pid, CPU seconds so far (utime + stime), command line)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            rest = stat[stat.rindex(")") + 2 :].split()  # fields after "pid (comm) "
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            out[int(d)] = (int(rest[1]), (int(rest[11]) + int(rest[12])) / TICK, cmd)
        except (OSError, ValueError, IndexError):
            continue  # it ended between listdir and read
    return out


def _tree(roots: set[int], procs: dict) -> set[int]:
    """``roots`` and all their descendants, except the dashboard's jobs (``python -m engine ...``)."""
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen or pid not in procs or " -m engine " in procs[pid][2]:
            continue
        seen.add(pid)
        todo += kids.get(pid, [])
    return seen


def _cpu_s(pids: set[int]) -> float:
    procs = _procs()
    return sum(procs[p][1] for p in pids if p in procs)


def _serve(db: Path, log: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    cmd += ["--server.headless", "true", "--server.address", "127.0.0.1"]
    cmd += ["--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    env = dict(os.environ, COUPLED_EVAL_DB=str(db), HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    raise SystemExit(f"streamlit did not start: {log.read_text()[-2000:]}")


def measure(page: str, seconds: float, with_job: bool, settle: float = FIRST_RUNS_S) -> dict:
    """The CPU seconds of the server and of server + browser while ``page`` is open for ``seconds``,
    after ``settle`` seconds for its first runs to end."""
    from playwright.sync_api import sync_playwright

    from dashboard import jobs
    from tests.test_app import build_small_db

    tmp = Path(tempfile.mkdtemp(prefix="bench_watch_"))
    db = build_small_db(tmp / "watch.duckdb")
    proc, url = _serve(db, tmp / "streamlit.log")
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=CHROMIUM_ARGS,
            )
            ctx = browser.new_context(viewport={"width": 1400, "height": 2400})
            pg = ctx.new_page()
            pg.goto(f"{url}/{'' if page == 'home' else page}")
            pg.wait_for_selector("[data-testid='stApp']", timeout=120_000)
            time.sleep(settle)
            if with_job:
                jobs.start_job(JOB_ARGS + ["--db", str(tmp / "job.duckdb")], kind="generate", db=db)
                time.sleep(5)  # the job has started; the views poll at their running period

            # the server, the browser and Playwright's driver (children of this process); never the job
            pids = _tree({proc.pid}, _procs()) | (_tree({os.getpid()}, _procs()) - {os.getpid()})
            s0, a0 = _cpu_s({proc.pid}), _cpu_s(pids)
            time.sleep(seconds)
            s1, a1 = _cpu_s({proc.pid}), _cpu_s(pids)
            running = any(j.status == "running" for j in jobs.list_jobs(db))
            browser.close()
    finally:
        for j in jobs.list_jobs(db):
            if j.status == "running":
                jobs.cancel_job(j.job_id, db)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    return {
        "page": page,
        "seconds": seconds,
        "job_running": running,
        "server_cpu_s": round(s1 - s0, 2),
        "server_and_browser_cpu_s": round(a1 - a0, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--page", default="home", help="home, generate, ... (dashboard.navigation)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--no-job", action="store_true", help="the idle page: no job started")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args()
    if not Path(CHROMIUM).exists():
        print(f"bench_dashboard_watch: needs Chromium at {CHROMIUM}; nothing measured")
        return
    settle = FIRST_RUNS_S
    if a.smoke:  # the idle Home for 2 s after 1 s: no model, no job
        a.page, a.seconds, a.no_job, settle = "home", 2.0, True, 1.0
    r = measure(a.page, a.seconds, not a.no_job, settle)
    if a.json:
        print(json.dumps(r))
    else:
        what = "a job running" if r["job_running"] else "no job running"
        print(
            f"/{r['page']} open {r['seconds']:g} s, {what}: Streamlit server {r['server_cpu_s']:.1f} "
            f"CPU-s, server + browser {r['server_and_browser_cpu_s']:.1f} CPU-s"
        )


if __name__ == "__main__":
    main()
