"""Where a command's CPU goes, by kind of process: the README's test command by default
(docs/BENCHMARKS.md, "The test suite").

``time bash scripts/test.sh`` counts only the processes its shell reaps. The suite also starts
processes that outlive their parents and are reparented to init (Ray's raylet, gcs and workers, the
dashboard's jobs, which run in sessions of their own), and ``time`` never sees their CPU. This script
runs the command and reads /proc every second: every process that started after the command, with its
CPU (user + system) at its last sample and its command line, summed by kind (test workers, Chromium,
Ray, Streamlit servers, each ``engine`` subcommand, vLLM's rank processes, pip, ...). It also prints
the machine's busy CPU over the run (/proc/stat), which counts everything: the sampled total is a
little below it (a process's last second, and processes shorter than a second, are not sampled); and
the same minute by minute, which shows where the command left cores idle.
Linux only; run it on a machine with nothing else busy.

  .venv/bin/python bench/bench_test_suite.py                       # bash scripts/test.sh
  .venv/bin/python bench/bench_test_suite.py -- bash scripts/test.sh --quick
  .venv/bin/python bench/bench_test_suite.py --smoke               # a two-second python command
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1

# (kind, pattern of the command line), first match wins: the specific ones first (a test's temporary
# paths contain "pytest", Ray's command lines "node")
KINDS = [
    ("chromium (Playwright, kaleido)", r"chrom"),
    ("ray: workers and replicas", r"default_worker\.py|^ray::(?!\w*Agent)"),
    ("ray: raylet, gcs, monitors, agents", r"raylet|gcs_server|site-packages/ray/|^ray::"),
    ("playwright driver (node)", r"playwright/driver"),
    ("vLLM rank / engine processes", r"\.venv-vllm/bin/python .*multiprocessing"),
    ("engine {sub}", r"-m engine (?P<sub>[\w-]+)"),
    ("streamlit servers", r"-m streamlit run"),
    ("pytest: tests/vllm", r"-m pytest tests/vllm"),
    ("pytest: tests/clients", r"-m pytest tests/clients"),
    ("lm-eval / Inspect AI", r"lm_eval|inspect_ai|bin/inspect "),
    ("pytest: main suite workers", r"exec\(eval\(sys\.stdin\.readline\(\)\)\)"),
    ("pytest: main process and child pytests", r"-m pytest|bin/pytest"),
    ("mypy", r"-m mypy"),
    ("pip and uv (installs)", r"-m pip|bin/pip|bin/uv "),
    ("ruff", r"ruff"),
    ("other python", r"python"),
]


def kind_of(cmdline: str) -> str:
    """The kind a command line belongs to (KINDS), else its program's name."""
    for name, pattern in KINDS:
        m = re.search(pattern, cmdline)
        if m:
            return name.format(**m.groupdict())
    return Path(cmdline.split(" ", 1)[0]).name or "<no command line>"


def busy_ticks() -> int:
    """The machine's busy CPU so far (all cores), in clock ticks: /proc/stat minus idle and iowait."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]


def sample(since: float, seen: dict, boot: float) -> None:
    """Record the CPU of every process that started after ``since`` (epoch seconds) into ``seen``."""
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            rest = stat[stat.rindex(")") + 2 :].split()  # fields after "pid (comm) "
            start = boot + int(rest[19]) / TICK
            if start < since:
                continue
            cpu = (int(rest[11]) + int(rest[12])) / TICK  # utime + stime
            key = (int(d), rest[19])
            if key not in seen:
                raw = Path(f"/proc/{d}/cmdline").read_bytes()
                seen[key] = [cpu, raw.replace(b"\0", b" ").decode(errors="replace").strip()]
            else:
                seen[key][0] = cpu
        except (OSError, ValueError, IndexError):
            continue  # it ended between listdir and read


def run(cmd: list[str], interval: float = 1.0) -> dict:
    """Run ``cmd`` from the project root, sampling /proc; returns wall, busy CPU and CPU by kind."""
    boot = float(
        next(
            line for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime")
        ).split()[1]
    )
    seen: dict = {}
    t0, b0 = time.time(), busy_ticks()
    marks = [(t0, b0)]  # (time, busy ticks) at each minute of the run: where the machine idled
    proc = subprocess.Popen(cmd, cwd=ROOT)
    while proc.poll() is None:
        sample(t0 - 1, seen, boot)
        time.sleep(interval)
        if time.time() - marks[-1][0] >= 60:
            marks.append((time.time(), busy_ticks()))
    sample(t0 - 1, seen, boot)
    marks.append((time.time(), busy_ticks()))
    wall, busy = marks[-1][0] - t0, (marks[-1][1] - b0) / TICK
    minutes = [  # the busy share of each minute (the last one shorter; a last second is left out)
        (b - a) / TICK / ((u - t) * CORES) for (t, a), (u, b) in zip(marks, marks[1:]) if u - t > 1
    ]
    by_kind: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for cpu, cmdline in seen.values():
        k = kind_of(cmdline)
        by_kind[k] += cpu
        count[k] += 1
    return {
        "rc": proc.returncode,
        "wall": wall,
        "busy": busy,
        "minutes": minutes,
        "by_kind": by_kind,
        "count": count,
        "processes": list(seen.values()),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="a two-second python command instead")
    ap.add_argument("--raw", help="also write each process (CPU-s, command line) as JSON lines here")
    ap.add_argument("cmd", nargs="*", help="the command (after --); default: bash scripts/test.sh")
    args = ap.parse_args()
    if sys.platform != "linux":
        print("bench_test_suite: needs Linux's /proc; nothing measured")
        return
    if args.smoke:
        cmd = [sys.executable, "-c", "import time; t = time.time()\nwhile time.time() - t < 2: pass"]
    else:
        cmd = args.cmd or ["bash", "scripts/test.sh"]
    r = run(cmd, interval=0.5 if args.smoke else 1.0)
    sampled = sum(r["by_kind"].values())
    if args.raw:
        with open(args.raw, "w") as f:
            for cpu, cmdline in r["processes"]:
                f.write(json.dumps([round(cpu, 2), cmdline]) + "\n")
    print(f"command: {' '.join(cmd)} (exit status {r['rc']})")
    print(
        f"wall {r['wall']:.0f} s ({r['wall'] / 60:.1f} min); machine busy {r['busy']:.0f} CPU-s "
        f"({r['busy'] / r['wall'] / CORES:.0%} of {CORES} cores); sampled {sampled:.0f} CPU-s "
        f"in {sum(r['count'].values())} processes"
    )
    print("the machine busy, minute by minute: " + " ".join(f"{m:.0%}" for m in r["minutes"]))
    print(f"{'CPU-s':>8} {'share':>6} {'procs':>6}  kind")
    for k, v in r["by_kind"].most_common():
        print(f"{v:8.0f} {v / max(sampled, 1e-9):6.1%} {r['count'][k]:6d}  {k}")
    if r["rc"]:
        sys.exit(r["rc"])


if __name__ == "__main__":
    main()
