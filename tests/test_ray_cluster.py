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
        (tmp_path / "1.json").write_text(
            json.dumps(
                {
                    "driver": list(driver),
                    "raylets": [[raylet.pid, ray_cluster.start_time(raylet.pid)]],
                    "procs": [
                        [raylet.pid, ray_cluster.start_time(raylet.pid)],
                        [reused.pid, ray_cluster.start_time(reused.pid) + 1],
                    ],
                }
            )
        )  # the pid now is another process
        live = tmp_path / "2.json"  # a live driver (this process): its cluster is left alone
        live.write_text(
            json.dumps(
                {
                    "driver": [os.getpid(), ray_cluster.start_time(os.getpid())],
                    "procs": [[other.pid, ray_cluster.start_time(other.pid)]],
                    "raylets": [],
                }
            )
        )
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
        rec.write_text(
            json.dumps(
                {
                    "driver": [driver.pid, ray_cluster.start_time(driver.pid)],
                    "procs": [[victim.pid, ray_cluster.start_time(victim.pid)]],
                    "raylets": [],
                }
            )
        )
        dog = ray_cluster.start_watchdog(rec)
        time.sleep(1)
        assert dog.poll() is None and victim.poll() is None  # driver alive: nothing happens
        driver.kill()
        driver.wait()
        assert dog.wait(timeout=30) == 0 and _gone(victim) and not rec.exists()
        # a normal close: the record goes, the watchdog exits without killing anything
        keep = _sleep()
        rec.write_text(
            json.dumps(
                {
                    "driver": [os.getpid(), ray_cluster.start_time(os.getpid())],
                    "procs": [[keep.pid, ray_cluster.start_time(keep.pid)]],
                    "raylets": [],
                }
            )
        )
        dog = ray_cluster.start_watchdog(rec)
        rec.unlink()
        assert dog.wait(timeout=30) == 0 and keep.poll() is None
        keep.kill()
        keep.wait()
    finally:
        for p in (victim, driver):
            p.kill()
            p.wait()


def _record(path: Path, driver, procs, raylets=()) -> None:
    path.write_text(
        json.dumps(
            {
                "driver": list(driver),
                "procs": [list(p) for p in procs],
                "raylets": [list(r) for r in raylets],
            }
        )
    )


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o777])
def test_records_folder_open_to_others_is_refused_and_nothing_is_killed(tmp_path, monkeypatch, mode):
    folder = tmp_path / "records"
    folder.mkdir()
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: folder)
    victim = _sleep()
    try:
        _record(folder / "1.json", _dead_pid(), [(victim.pid, ray_cluster.start_time(victim.pid))])
        folder.chmod(mode)
        with pytest.raises(ray_cluster.UserError, match="mode 0700"):
            ray_cluster.reap_dead()
        with pytest.raises(ray_cluster.UserError, match="mode 0700"):
            ray_cluster.record_cluster()
        assert victim.poll() is None and (folder / "1.json").exists()
    finally:
        victim.kill()
        victim.wait()


def test_records_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "records"
    folder.mkdir(mode=0o700)
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: folder)
    real = os.getuid()
    monkeypatch.setattr(ray_cluster.os, "getuid", lambda: real + 1)  # the folder is now someone else's
    with pytest.raises(ray_cluster.UserError, match=f"owned by uid {real} "):
        ray_cluster.reap_dead()


def test_records_folder_is_made_private(tmp_path, monkeypatch):
    folder = tmp_path / "new" / "records"
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: folder)
    path = ray_cluster.record_cluster()
    assert path is not None and path.parent == folder and (folder.stat().st_mode & 0o777) == 0o700
    path.unlink()


def test_entries_without_a_start_time_are_never_acted_on(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: tmp_path)
    unknown, listed, raylet = _sleep(), _sleep(), _sleep()
    agent = _sleep({"RAY_RAYLET_PID": str(raylet.pid)})
    try:
        # a dead driver whose cluster entries lack start times: nothing is signalled
        _record(
            tmp_path / "1.json",
            _dead_pid(),
            [(unknown.pid, None), (raylet.pid, None)],
            [(raylet.pid, None)],
        )
        # a driver recorded without its start time is never taken for dead, even when its pid is gone
        _record(
            tmp_path / "2.json",
            (_dead_pid()[0], None),
            [(listed.pid, ray_cluster.start_time(listed.pid))],
        )
        # the old record layout (raylets as bare pids): its raylet's agents are left alone
        (tmp_path / "3.json").write_text(
            json.dumps({"driver": list(_dead_pid()), "procs": [], "raylets": [raylet.pid]})
        )
        assert ray_cluster.reap_dead() == []
        assert all(p.poll() is None for p in (unknown, listed, raylet, agent))
        assert (tmp_path / "2.json").exists()
        # its watchdog exits at once without acting
        dog = ray_cluster.start_watchdog(tmp_path / "2.json")
        assert dog.wait(timeout=30) == 0 and listed.poll() is None
    finally:
        for p in (unknown, listed, raylet, agent):
            p.kill()
            p.wait()


def test_raylet_children_count_only_from_the_raylets_start(tmp_path, monkeypatch):
    monkeypatch.setattr(ray_cluster, "records_dir", lambda: tmp_path)
    raylet, raylet_started = _dead_pid()
    older = _sleep(
        {"RAY_RAYLET_PID": str(raylet)}
    )  # an earlier process's child that happens to name the pid
    time.sleep(0.1)  # start times are in clock ticks (10 ms)
    newer = _sleep({"RAY_RAYLET_PID": str(raylet)})
    try:
        t_old, t_new = ray_cluster.start_time(older.pid), ray_cluster.start_time(newer.pid)
        assert t_old is not None and t_new is not None and t_new > t_old
        _record(
            tmp_path / "1.json", _dead_pid(), [], [(raylet, t_old + 1)]
        )  # the raylet started between them
        assert ray_cluster.reap_dead() == [newer.pid]
        assert _gone(newer) and older.poll() is None
    finally:
        for p in (older, newer):
            p.kill()
            p.wait()
