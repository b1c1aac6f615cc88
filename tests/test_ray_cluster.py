"""engine.generation.ray_cluster: what a killed Ray driver's local cluster leaves is reaped, and nothing else.

Fake clusters (plain `sleep` processes), no Ray: a record names a dead driver and its processes; the
reaper kills the recorded processes and those whose environment names a recorded raylet, never a
process whose pid was reused (another start time) or the cluster of a live driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.generation import ray_cluster

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")


def _sleep(env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "300"], env={**os.environ, **(env or {})})


def _dead_pid() -> tuple[int, int | None]:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    started = ray_cluster.start_time(p.pid)
    p.wait()
    return p.pid, started


def _gone(p: subprocess.Popen) -> bool:
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return True


def test_reap_dead_kills_a_dead_drivers_cluster_only(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: tmp_path)
    raylet, agent, reused, other = _sleep(), None, _sleep(), _sleep()
    agent = _sleep({"RAY_RAYLET_PID": str(raylet.pid)})  # started after the record was written
    try:
        driver = _dead_pid()
        (tmp_path / "1.json").write_text(json.dumps({
            "driver": list(driver), "raylets": [raylet.pid],
            "procs": [[raylet.pid, ray_cluster.start_time(raylet.pid)],
                      [reused.pid, ray_cluster.start_time(reused.pid) + 1]]}))  # the pid now is another process
        live = tmp_path / "2.json"  # a live driver (this process): its cluster is left alone
        live.write_text(json.dumps({"driver": [os.getpid(), ray_cluster.start_time(os.getpid())],
                                    "procs": [[other.pid, ray_cluster.start_time(other.pid)]], "raylets": []}))
        killed = ray_cluster.reap_dead()
        assert sorted(killed) == sorted([raylet.pid, agent.pid])
        assert _gone(raylet) and _gone(agent)
        assert reused.poll() is None and other.poll() is None
        assert not (tmp_path / "1.json").exists() and live.exists()
        # the driver's own cleanup (RayExecutor.close): its record's processes, then no record
        assert ray_cluster.release(live) == [other.pid] and _gone(other) and not live.exists()
    finally:
        for p in (raylet, agent, reused, other):
            p.kill()
            p.wait()


def test_watchdog_reaps_when_its_driver_dies_and_exits_when_the_record_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: tmp_path)
    victim = _sleep()
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        rec = tmp_path / "d.json"
        rec.write_text(json.dumps({"driver": [driver.pid, ray_cluster.start_time(driver.pid)],
                                   "procs": [[victim.pid, ray_cluster.start_time(victim.pid)]], "raylets": []}))
        dog = ray_cluster.start_watchdog(rec)
        time.sleep(1)
        assert dog.poll() is None and victim.poll() is None  # driver alive: nothing happens
        driver.kill()
        driver.wait()
        assert dog.wait(timeout=30) == 0 and _gone(victim) and not rec.exists()
        # a normal close: the record goes, the watchdog exits without killing anything
        keep = _sleep()
        rec.write_text(json.dumps({"driver": [os.getpid(), ray_cluster.start_time(os.getpid())],
                                   "procs": [[keep.pid, ray_cluster.start_time(keep.pid)]], "raylets": []}))
        dog = ray_cluster.start_watchdog(rec)
        rec.unlink()
        assert dog.wait(timeout=30) == 0 and keep.poll() is None
        keep.kill()
        keep.wait()
    finally:
        for p in (victim, driver):
            p.kill()
            p.wait()
