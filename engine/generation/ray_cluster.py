"""What is left of a local Ray cluster after its driver is killed, and who ends it (Linux; stdlib only).

``ray.init(address="local")`` starts gcs, raylet and Ray's helper processes as children of the
driver, and they die with it (Ray's kernel fate-sharing). The raylet's own children,
``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``, do not: after a SIGKILLed driver they are
re-parented to init and stay alive (seen with Ray 2.60 minutes later; Ray cannot run without the
runtime-env agent, and the dashboard agent starts even with ``include_dashboard=False``). So:

1. record  after the driver starts its local cluster, the cluster's processes (pid and start time,
           so that a reused pid is never taken for one of them) go to a record file, one per
           driver, in a per-user folder (:func:`record_cluster`);
2. watch   a small watchdog in its own session (this file run as a script: stdlib only, so it
           does not import torch) waits for the driver to end; if the driver ended while its
           record is still there (it was killed), it kills what is left and removes the record.
           A driver that closes normally (ray.shutdown) calls :func:`release` instead;
3. reap    every ``RayExecutor.prepare`` also reaps the records of dead drivers
           (:func:`reap_dead`), in case the watchdog was killed too.

Besides the recorded pids, the processes whose environment names a recorded raylet
(``RAY_RAYLET_PID``) are that cluster's, whenever they started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLL_S = 0.5


def ray_installed() -> bool:
    """Whether the ``ray`` package is importable here (without importing it: a broken or
    half-imported ray counts as absent). The CLI and the Generate page both refuse workers on it."""
    import importlib.util

    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def records_dir() -> Path:
    """The per-user folder of cluster records."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"coupled-eval-ray-{uid}"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2:].split()[19])


def alive(pid: int, started: int | None) -> bool:
    """``pid`` is the same process that was recorded (not gone, not a reused pid, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and (started is None or start_time(pid) == started)


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (Linux /proc; empty elsewhere)."""
    out, frontier = set(), [pid]
    while frontier:
        p = frontier.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        for k in map(int, kids):
            if k not in out:
                out.add(k)
                frontier.append(k)
    return out


def _raylet_children(raylet_pids: set[int]) -> set[int]:
    """Processes whose environment names one of these raylets (its agents and workers)."""
    want = {f"RAY_RAYLET_PID={p}".encode() for p in raylet_pids}
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = set((d / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if env & want:
            out.add(int(d.name))
    return out


def _is_ray(pid: int) -> bool:
    """A Ray process: its command runs from a ``ray`` folder (gcs_server, raylet, dashboard, monitors)
    or its title is ``ray::...`` (agents, workers)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return cmd.startswith(b"ray::") or b"/ray/" in cmd


def record_cluster(driver: int | None = None) -> Path | None:
    """Record the driver's cluster processes (its live Ray descendants); None off Linux."""
    if not Path("/proc/self/stat").exists():
        return None
    driver = driver or os.getpid()
    procs = sorted(p for p in descendants(driver) if _is_ray(p))
    raylets = [p for p in procs if Path(f"/proc/{p}/comm").exists() and _comm(p) == "raylet"]
    rec = {"driver": [driver, start_time(driver)], "procs": [[p, start_time(p)] for p in procs], "raylets": raylets}
    folder = records_dir()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"{driver}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec))
    os.replace(tmp, path)
    return path


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def reap(path: Path) -> list[int]:
    """Kill what is left of the recorded cluster (its recorded processes and the raylets' children);
    remove the record. Returns the pids signalled."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        path.unlink(missing_ok=True)
        return []
    targets = {int(p) for p, st in rec.get("procs", []) if alive(int(p), st)}
    targets |= _raylet_children({int(p) for p in rec.get("raylets", [])})
    targets.discard(os.getpid())
    killed = []
    for pid in sorted(targets):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    path.unlink(missing_ok=True)
    return killed


def reap_dead() -> list[int]:
    """Reap the clusters of every recorded driver that is no longer alive."""
    killed: list[int] = []
    folder = records_dir()
    if not folder.is_dir():
        return killed
    for path in folder.glob("*.json"):
        try:
            pid, started = json.loads(path.read_text())["driver"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not alive(int(pid), started):
            killed += reap(path)
    return killed


def release(path: Path | None) -> list[int]:
    """The driver's own cleanup after ray.shutdown: kill anything of its cluster still alive, drop
    the record (its watchdog then exits)."""
    return reap(path) if path is not None else []


def start_watchdog(path: Path | None) -> subprocess.Popen | None:
    """A watchdog for this driver's record (its own session: it outlives a killed driver)."""
    if path is None:
        return None
    return subprocess.Popen([sys.executable, "-I", "-S", str(Path(__file__).resolve()), "watch", str(path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def watch(path: Path) -> None:
    """Wait until the record is gone (normal close) or its driver is dead (then reap)."""
    try:
        pid, started = json.loads(path.read_text())["driver"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    while path.exists():
        if not alive(int(pid), started):
            reap(path)
            return
        time.sleep(POLL_S)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "watch":
    watch(Path(sys.argv[2]))
