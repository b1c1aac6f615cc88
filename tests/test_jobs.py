"""The background job runner: real detached processes, progress files, cancel, resume, killed jobs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest

from dashboard import jobs
from engine import store
from engine.errors import UserError

# A stand-in for `python -m engine ...`: it counts to --units, writes progress in
# engine.progress's format, and sleeps --sleep seconds per unit. Invoked as
# `<fake python> -m engine fake --units N --sleep S --progress-file P`.
FAKE_ENGINE = r"""
import sys, time, json, os
sys.path.insert(0, {root!r})
from engine.progress import Progress
argv = sys.argv[1:]
assert argv[:2] == ["-m", "engine"], argv
args = dict(zip(argv[3::2], argv[4::2]))
units, sleep = int(args.get("--units", 3)), float(args.get("--sleep", 0.0))
start = 0
state = args.get("--state")
if state and os.path.exists(state):
    start = int(open(state).read())      # resumable: continue where it stopped
p = Progress(units, kind="fake", path=args.get("--progress-file"), done=start, show_bar=False,
             min_interval_s=0.0)
for i in range(start, units):
    time.sleep(sleep)
    if state:  # atomic, like the engine's chunked commits
        open(state + ".tmp", "w").write(str(i + 1))
        os.replace(state + ".tmp", state)
    # reported after its commit, as engine.generation.run.drive does: a unit the progress file counts
    # is stored (the other order let a cancel land between the two and resume from one unit fewer)
    p.update(1, tokens=10)
if args.get("--fail") == "1":
    print("boom: failing on purpose", file=sys.stderr)
    sys.exit(3)
p.finish("done")
print("finished", units)
"""


@pytest.fixture
def fake_python(tmp_path) -> str:
    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE.format(root=str(store.PROJECT_ROOT)))
    exe = tmp_path / "fakepython"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def test_job_runs_to_done_with_progress_and_log(tmp_db, fake_python):
    job = jobs.start_job(
        ["fake", "--units", "4", "--sleep", "0"], kind="fake", db=tmp_db, python=fake_python
    )
    st = jobs.wait_job(job, tmp_db, timeout_s=60)
    assert st.status == "done" and st.returncode == 0
    assert (st.done, st.total, st.tokens) == (4, 4, 40)
    assert st.fraction == 1.0
    assert "finished 4" in st.log_tail
    jdir = jobs.jobs_dir(tmp_db)
    assert jdir == tmp_db.parent / "jobs"
    meta = json.loads((jdir / f"{job}.meta.json").read_text())
    assert meta["command"][-2] == "--progress-file" and meta["args"][0] == "fake"
    assert [j.job_id for j in jobs.list_jobs(tmp_db)] == [job]


def test_failed_job_reports_failed_and_log(tmp_db, fake_python):
    job = jobs.start_job(
        ["fake", "--units", "1", "--fail", "1"], kind="fake", db=tmp_db, python=fake_python
    )
    st = jobs.wait_job(job, tmp_db, timeout_s=60)
    assert st.status == "failed" and st.returncode == 3
    assert "boom" in st.log_tail


def test_cancel_then_resume_continues(tmp_db, fake_python, tmp_path):
    state = tmp_path / "state.txt"
    args = ["fake", "--units", "40", "--sleep", "0.1", "--state", str(state)]
    job = jobs.start_job(args, kind="fake", db=tmp_db, python=fake_python)
    deadline = time.monotonic() + 60
    while jobs.job_status(job, tmp_db).done < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert jobs.job_status(job, tmp_db).status == "running"
    with pytest.raises(UserError, match="still running"):
        jobs.resume_job(job, tmp_db)
    st = jobs.cancel_job(job, tmp_db)
    assert st.status == "cancelled"
    stopped_at = int(state.read_text())
    assert 2 <= stopped_at < 40
    job2 = jobs.resume_job(job, tmp_db)
    st2 = jobs.wait_job(job2, tmp_db, timeout_s=120)
    assert st2.status == "done" and st2.resumed_from == job
    assert st2.done == 40 and int(state.read_text()) == 40
    # newest first; both jobs listed with their own state
    listed = jobs.list_jobs(tmp_db)
    assert [j.job_id for j in listed] == [job2, job]
    assert [j.status for j in listed] == ["done", "cancelled"]


def test_killed_from_outside_without_exit_code_is_killed(tmp_db, fake_python):
    job = jobs.start_job(
        ["fake", "--units", "100", "--sleep", "0.1"], kind="fake", db=tmp_db, python=fake_python
    )
    st = jobs.job_status(job, tmp_db)
    os.killpg(st.pid, signal.SIGKILL)
    jobs.wait_job(job, tmp_db, timeout_s=30)
    # Simulate a dashboard restart: the reaper thread's exit-code file is gone.
    rc = jobs.jobs_dir(tmp_db) / f"{job}.rc"
    deadline = time.monotonic() + 10
    while not rc.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    rc.unlink()
    assert jobs.job_status(job, tmp_db).status == "killed"


def test_real_engine_command_runs_as_job(tmp_db):
    with store.writer(tmp_db) as con:
        con.execute("INSERT INTO models (name, variant) VALUES ('m1', 'base')")
    job = jobs.start_job(["info", "--db", str(tmp_db), "--json"], kind="info", db=tmp_db, progress=False)
    st = jobs.wait_job(job, tmp_db, timeout_s=120)
    assert st.status == "done", st.log_tail
    assert '"models": 1' in st.log_tail


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "X" * 100])
def test_bad_job_ids_and_kinds_are_user_errors(tmp_db, bad):
    with pytest.raises(UserError):
        jobs.job_status(bad, tmp_db)
    with pytest.raises(UserError):
        jobs.start_job(["info"], kind=bad or "A B", db=tmp_db)


def test_unknown_job_and_empty_dir(tmp_db):
    assert jobs.list_jobs(tmp_db) == []
    with pytest.raises(UserError, match="unknown job"):
        jobs.job_status("generate-20200101-000000-abcdef", tmp_db)


def test_followup_starts_exactly_once_after_success(tmp_db, fake_python):
    job = jobs.start_job(
        ["fake", "--units", "2"],
        kind="fake",
        db=tmp_db,
        python=fake_python,
        then=[["fake", "--units", "3"]],
    )
    st = jobs.wait_job(job, tmp_db, timeout_s=60)
    assert st.status == "done"
    nxt = st.extra["followup"]
    # several observers (tabs) look at the finished job: still one follow-up
    assert {jobs.job_status(job, tmp_db).extra["followup"] for _ in range(3)} == {nxt}
    st2 = jobs.wait_job(nxt, tmp_db, timeout_s=60)
    assert st2.status == "done" and "finished 3" in st2.log_tail
    assert len(jobs.list_jobs(tmp_db)) == 2
    # a failing job starts no follow-up
    bad = jobs.start_job(
        ["fake", "--units", "1", "--fail", "1"],
        kind="fake",
        db=tmp_db,
        python=fake_python,
        then=[["fake", "--units", "3"]],
    )
    assert jobs.wait_job(bad, tmp_db, timeout_s=60).extra == {}
    assert len(jobs.list_jobs(tmp_db)) == 3


def test_observer_that_loses_the_followup_race_waits_for_the_id(tmp_db, fake_python):
    """Several observers (the job's own wrapper, a dashboard tab, the CLI) may see a job finish at
    once: one claims the marker and starts the follow-up; the others must report the id it writes,
    not None, even while the winner is still starting it (the marker still empty)."""
    import os
    import threading
    import time

    jdir = jobs.jobs_dir(tmp_db)
    job = jobs.start_job(
        ["fake", "--units", "1", "--sleep", "0.5"],
        kind="fake",
        db=tmp_db,
        python=fake_python,
        then=[["fake", "--units", "1"]],
    )
    fd = os.open(
        jdir / f"{job}.then", os.O_CREAT | os.O_EXCL | os.O_WRONLY
    )  # this test: the slow winner
    seen: dict = {}
    observer = threading.Thread(target=lambda: seen.update(st=jobs.wait_job(job, tmp_db, timeout_s=60)))
    observer.start()
    deadline = time.monotonic() + 60
    while not (jdir / f"{job}.rc").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the job is done: the observer (and the job's own wrapper) wait on the empty marker
    nxt = jobs.start_job(["fake", "--units", "1"], kind="fake", db=tmp_db, python=fake_python)
    os.write(fd, nxt.encode())
    os.close(fd)
    observer.join(30)
    assert seen["st"].status == "done" and seen["st"].extra.get("followup") == nxt
    assert jobs.wait_job(nxt, tmp_db, timeout_s=60).status == "done"
    assert len(jobs.list_jobs(tmp_db)) == 2  # the job's own wrapper lost the race too: no third job


@pytest.mark.parametrize("fail", ["0", "1"])
def test_status_survives_the_death_of_the_starting_process(tmp_db, fake_python, fail):
    """The dashboard server may restart while a job runs: the exit code still reaches job_status."""
    import subprocess

    code = (
        f"import sys; sys.path.insert(0, {str(store.PROJECT_ROOT)!r}); from dashboard import jobs; "
        f"print(jobs.start_job(['fake', '--units', '3', '--sleep', '0.2', '--fail', {fail!r}], kind='fake', "
        f"db={str(tmp_db)!r}, python={fake_python!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    job = out.stdout.strip()  # the starting process has exited: its reaper thread is gone
    st = jobs.wait_job(job, tmp_db, timeout_s=60)
    assert st.status == ("done" if fail == "0" else "failed")
    assert st.returncode == (0 if fail == "0" else 3)


def test_progress_track_records_done_cancelled_and_failed(tmp_path):
    from engine.progress import Progress, read_progress

    for exc, status in (
        (None, "done"),
        (KeyboardInterrupt(), "cancelled"),
        (RuntimeError("disk full"), "failed"),
    ):
        path = tmp_path / f"{status}.json"
        prog = Progress(3, kind="judge", job="j", path=path, show_bar=False)
        try:
            with prog.track("interrupted; completed batches are stored"):
                prog.update(2)
                if exc is not None:
                    raise exc
        except (KeyboardInterrupt, RuntimeError) as got:
            assert got is exc  # re-raised unchanged
        rec = read_progress(path)
        assert (rec["status"], rec["done"], rec["total"]) == (status, 2, 3)
        assert (
            rec["message"]
            == {
                "done": "",
                "cancelled": "interrupted; completed batches are stored",
                "failed": "disk full",
            }[status]
        )


def test_followup_starts_with_no_observer(tmp_db, fake_python):
    """Chained work does not need a page: the job's wrapper starts the follow-up itself. Nothing
    calls job_status/wait_job until both steps have finished (only the files are watched)."""
    job = jobs.start_job(
        ["fake", "--units", "2"],
        kind="fake",
        db=tmp_db,
        python=fake_python,
        then=[["fake", "--units", "3"], ["fake", "--units", "1"]],
    )
    jdir = jobs.jobs_dir(tmp_db)
    deadline = time.monotonic() + 60
    chain = [job]
    while len(chain) < 3 and time.monotonic() < deadline:  # follow each marker as it appears
        marker = jdir / f"{chain[-1]}.then"
        if marker.exists() and marker.read_text().strip():
            chain.append(marker.read_text().strip())
        time.sleep(0.05)
    assert len(chain) == 3, f"follow-ups were not started by the jobs themselves: {chain}"
    last_rc = jdir / f"{chain[-1]}.rc"
    while not last_rc.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [jobs.job_status(j, tmp_db).status for j in chain] == ["done"] * 3
    assert "finished 3" in jobs.job_status(chain[1], tmp_db).log_tail
    assert len(jobs.list_jobs(tmp_db)) == 3  # exactly once: observers now add nothing


def test_followup_runner_cli(tmp_db, fake_python):
    job = jobs.start_job(["fake", "--units", "1"], kind="fake", db=tmp_db, python=fake_python)
    assert jobs.wait_job(job, tmp_db, timeout_s=60).status == "done"
    assert jobs.run_followup(job, tmp_db) is None  # no follow-up: nothing started
    assert jobs.main(["followup", "nope/../x", "--db", str(tmp_db)]) == 2


def test_smoothed_eta_is_the_average_pace():
    assert jobs.smoothed_eta(0, 100, 10.0, 42.0) == 42.0  # nothing done yet: the engine's estimate
    assert jobs.smoothed_eta(25, 100, 10.0, 1.0) == pytest.approx(30.0)
    assert jobs.smoothed_eta(100, 100, 10.0) == 0.0
    assert jobs.smoothed_eta(5, 0, 10.0) is None


def test_eta_does_not_grow_during_a_chunk(monkeypatch):
    """While a chunk runs (no unit finishes, time passes) the ETA counts down
    from the estimate made at the last progress update; it never grows."""
    # 25 of 100 units done at t = 10 s: 30 s left then; 4 s later, still 25 done: 26 s
    etas = [
        jobs.smoothed_eta(25, 100, 10.0 + dt, since_update_s=dt) for dt in (0.0, 1.0, 4.0, 29.0, 60.0)
    ]
    assert etas == pytest.approx([30.0, 29.0, 26.0, 1.0, 0.0])
    assert all(b <= a for a, b in zip(etas, etas[1:]))
    # the old formula (average pace until now) grew: 75 * 14 / 25 = 42 > 30
    assert 75 * 14.0 / 25 > etas[0]
    assert (
        jobs.smoothed_eta(0, 100, 20.0, 42.0, since_update_s=2.0) == 40.0
    )  # the engine's estimate, counted down
    # through a job's files: the progress file's updated_at is the update time
    prog = {"done": 25, "total": 100, "updated_at": 1000.0}
    meta = {"started_at": 990.0}
    monkeypatch.setattr(jobs.time, "time", lambda: 1004.0)
    assert jobs._eta(prog, meta) == pytest.approx(26.0)


def test_demo_running_covers_the_chain(tmp_db, fake_python):
    assert not jobs.demo_running(tmp_db)
    job = jobs.start_job(
        ["fake", "--units", "4", "--sleep", "0.3", "--run-id", jobs.DEMO_RUN],
        kind="generate",
        db=tmp_db,
        python=fake_python,
    )
    assert jobs.demo_running(tmp_db)
    assert jobs.wait_job(job, tmp_db, timeout_s=60).status == "done"
    assert not jobs.demo_running(tmp_db)
    assert jobs.DEMO_ARGS[jobs.DEMO_ARGS.index("--dataset") + 1] == "demo-numbers"
    assert jobs.score_args("r", tmp_db) == [
        "score",
        "--db",
        str(tmp_db),
        "--run",
        "r",
    ]  # rule: fits the dataset


def _fake_job(
    tmp_db,
    job_id: str,
    *,
    kind: str = "judge",
    done: int,
    total: int,
    rc: int | None,
    log: str = "",
    status: str = "running",
) -> jobs.JobStatus:
    """The files a job leaves behind after its process is gone (pid of no process)."""
    jdir = jobs.jobs_dir(tmp_db)
    jdir.mkdir(parents=True, exist_ok=True)
    (jdir / f"{job_id}.meta.json").write_text(
        json.dumps(
            {
                "job_id": job_id,
                "kind": kind,
                "args": [kind],
                "pid": 2**22 + 12345,
                "started_at": time.time(),
            }
        )
    )
    (jdir / f"{job_id}.json").write_text(json.dumps({"status": status, "done": done, "total": total}))
    (jdir / f"{job_id}.log").write_text(log)
    if rc is not None:
        (jdir / f"{job_id}.rc").write_text(str(rc))
    return jobs.job_status(job_id, tmp_db)


@pytest.mark.parametrize("rc", [-9, 137, None])
def test_a_job_killed_after_its_last_commit_is_done(tmp_db, rc):
    """A judge killed by SIGKILL after its last commit: its progress file still says "running" at 40/40.
    The job is done (not "failed (rc -9)"); killed before the end it is not, and a job that exited with
    an error of its own after the last unit stays failed."""
    assert _fake_job(tmp_db, "judge-1", done=40, total=40, rc=rc).status == "done"
    assert _fake_job(tmp_db, "judge-2", done=39, total=40, rc=rc).status == (
        "killed" if rc is None else "failed"
    )
    assert _fake_job(tmp_db, "judge-3", done=40, total=40, rc=1).status == "failed"
    assert _fake_job(tmp_db, "judge-4", done=40, total=40, rc=rc, status="failed").status != "done"


def test_a_failed_job_says_why_and_offers_resume_only_where_it_helps(tmp_db):
    """The job card's reason is the CLI's last ``error:`` line; a bad-input refusal (exit 2) is not
    resumable (the same command fails the same way); a crash, a kill or a cancel is."""
    log = "loading\nerror: unknown dataset 'nope'; allowed: demo, demo-chat, a file path or hf:REPO\n"
    bad = _fake_job(tmp_db, "generate-1", kind="generate", done=0, total=0, rc=2, log=log)
    assert bad.status == "failed" and jobs.error_line(bad).startswith("error: unknown dataset 'nope'")
    assert not jobs.resumable(bad)
    crash = _fake_job(
        tmp_db,
        "generate-2",
        kind="generate",
        done=3,
        total=9,
        rc=-9,
        log="Traceback (most recent call last):\n  ...\nMemoryError\n",
    )
    assert jobs.error_line(crash) == "MemoryError" and jobs.resumable(crash)
    assert jobs.resumable(_fake_job(tmp_db, "generate-3", kind="generate", done=3, total=9, rc=None))
    assert not jobs.resumable(
        _fake_job(tmp_db, "import-1", kind="import", done=0, total=0, rc=1, log="x")
    )
