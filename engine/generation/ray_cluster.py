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
(``RAY_RAYLET_PID``) and that started after it (and before any later process reusing its pid) are
that cluster's.

What the reaper trusts. It signals only what it recorded itself: the records live in a folder
owned by this user with mode 0700 and are files owned by this user (:func:`checked_records_dir`;
another owner or a group / world-accessible mode is refused in one line, since anyone who can
write a record there could make the reaper kill this user's processes); a process is killed only
when its start time matches the recorded one; an entry without a start time (a driver, process or
raylet that was already gone when recorded, or a record written by hand) is never acted on.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLL_S = 0.5

try:  # run as the watchdog script (python -I -S): no engine package on the path
    from engine.errors import UserError
except ImportError:  # pragma: no cover - the watchdog only catches it
    UserError = RuntimeError  # type: ignore[misc,assignment]


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


def checked_records_dir(create: bool = False) -> Path | None:
    """:func:`records_dir`, made (mode 0700) when ``create``; None when it does not exist.

    Raises UserError when it is not a real folder owned by this user with no group / world access
    (a folder in the shared temporary folder that someone else made or opened up: records there
    cannot be trusted)."""
    folder = records_dir()
    if create:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = os.lstat(folder)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise UserError(
            f"the Ray cluster records folder {folder} must be a folder owned by uid {os.getuid()} "
            f"with mode 0700; it is {'a folder' if stat.S_ISDIR(st.st_mode) else 'not a folder'} "
            f"owned by uid {st.st_uid} with mode {oct(stat.S_IMODE(st.st_mode))}: remove it (or make "
            f"it yours, mode 0700) and retry"
        )
    return folder


def _own_record(path: Path) -> dict | None:
    """The record's contents when it is a regular file owned by this user, else None (not trusted)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) else None


def _entry(item: object) -> tuple[int, int] | None:
    """A recorded [pid, start time] pair; None when the start time is missing (never acted on)."""
    if not isinstance(item, (list, tuple)) or len(item) != 2:
        return None
    pid, started = item
    if (
        isinstance(pid, bool)
        or not isinstance(pid, int)
        or isinstance(started, bool)
        or not isinstance(started, int)
    ):
        return None
    return pid, started


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22); None when it is
    gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def alive(pid: int, started: int | None) -> bool:
    """``pid`` is the same process that was recorded (not gone, not a reused pid, not a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and (started is None or start_time(pid) == started)


def descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` that /proc/P/task/P/children lists, recursively (Linux; empty
    elsewhere). Not every descendant: that file names only the children forked by each process's
    main thread, and a process re-parented to init after its parent died is no longer below ``pid``."""
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


def _raylet_children(raylets: dict[int, int]) -> set[int]:
    """Processes whose environment names one of these raylets (pid -> recorded start time) and that
    started after it, and before a later process that took its pid (its agents and workers)."""
    window = {}
    for pid, started in raylets.items():
        now = start_time(pid)
        window[f"RAY_RAYLET_PID={pid}".encode()] = (
            started,
            now if now is not None and now != started else None,
        )
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = set((d / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        for key in env & window.keys():
            lo, hi = window[key]
            t = start_time(int(d.name))
            if t is not None and t >= lo and (hi is None or t < hi):
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
    raylets = [
        [p, start_time(p)] for p in procs if Path(f"/proc/{p}/comm").exists() and _comm(p) == "raylet"
    ]
    rec = {
        "driver": [driver, start_time(driver)],
        "procs": [[p, start_time(p)] for p in procs],
        "raylets": raylets,
    }
    folder = checked_records_dir(create=True)
    assert folder is not None  # just made
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
    remove the record. Returns the pids signalled.

    Only entries with a start time count, and a pid only while that start time matches; a record
    that is not a regular file owned by this user is left alone (and nothing is signalled)."""
    rec = _own_record(path)
    if rec is None:
        return []
    procs = [e for e in map(_entry, rec.get("procs", [])) if e is not None]
    targets = {p for p, st in procs if alive(p, st)}
    targets |= _raylet_children(dict(e for e in map(_entry, rec.get("raylets", [])) if e is not None))
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
    """Reap the clusters of every recorded driver that is no longer alive (a driver recorded without
    its start time is never taken for dead). UserError when the records folder is not safely ours."""
    killed: list[int] = []
    folder = checked_records_dir()
    if folder is None:
        return killed
    for path in folder.glob("*.json"):
        rec = _own_record(path)
        driver = _entry(rec.get("driver")) if rec is not None else None
        if driver is not None and not alive(*driver):
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
    return subprocess.Popen(
        [sys.executable, "-I", "-S", str(Path(__file__).resolve()), "watch", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def watch(path: Path) -> None:
    """Wait until the record is gone (normal close) or its driver is dead (then reap). A record that
    is not this user's, or names its driver without a start time, is never acted on."""
    rec = _own_record(path)
    driver = _entry(rec.get("driver")) if rec is not None else None
    if driver is None:
        return
    pid, started = driver
    while path.exists():
        if not alive(pid, started):
            reap(path)
            return
        time.sleep(POLL_S)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "watch":
    watch(Path(sys.argv[2]))
