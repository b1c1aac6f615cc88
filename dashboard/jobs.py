"""Background jobs: every database write the dashboard starts runs as a detached CLI process.

A job is ``python -m engine <args> --progress-file <jobs>/<job_id>.json``, started in its own
session (so it outlives the Streamlit script run, the browser tab and even the Streamlit
server), with stdout/stderr in ``<jobs>/<job_id>.log`` and its metadata in
``<jobs>/<job_id>.meta.json``; a small ``sh`` wrapper writes the exit code to
``<jobs>/<job_id>.rc`` when the command ends. Everything about a job is a file, so any number of
tabs (or the CLI) see the same progress, and a page reload or a dashboard restart loses nothing.

Status of a job (:func:`job_status`), from the files and the pid:

* ``running``   -- the process is alive;
* ``done``      -- it exited with code 0, or a signal ended it (or it vanished) after its progress
  file counted every unit done (killed after its last commit: the work is finished);
* ``failed``    -- it exited with a non-zero code (the log says why);
* ``cancelled`` -- :func:`cancel_job` sent SIGTERM to its process group;
* ``killed``    -- it disappeared without an exit code and without finishing (e.g. the machine
  or the process was killed from outside); generation jobs are resumable with :func:`resume_job`.

``<jobs>`` is the ``jobs/`` folder next to the database (:func:`jobs_dir`): ``data/jobs`` for the
default database, ``/x/jobs`` for ``--db /x/my.duckdb``, so each database sees its own jobs.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from engine import config
from engine.errors import UserError
from engine.progress import read_progress, write_json_atomic

STATUSES = ("running", "done", "failed", "cancelled", "killed")
# Engine commands that accept --progress-file (follow-up jobs get one only if they do).
PROGRESS_COMMANDS = ("generate", "judge", "cluster", "race", "serve")
SERVE_FIGURES = ("address", "run", "requests", "in_flight", "failed", "queued", "tokens", "stored")
# Job kinds whose command continues where it stopped when run again.
RESUMABLE_KINDS = ("generate", "score", "judge", "cluster", "race")
_KIND_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


@dataclass(frozen=True)
class JobStatus:
    """What is known about one job, read from its files."""

    job_id: str
    kind: str
    status: str  # one of STATUSES
    args: tuple[str, ...]  # the engine CLI arguments (without --progress-file)
    pid: int
    started_at: float
    done: int = 0
    total: int = 0
    tokens: int = 0
    tokens_per_s: float = 0.0
    eta_s: float | None = None
    message: str = ""
    returncode: int | None = None
    resumed_from: str | None = None
    log_tail: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def fraction(self) -> float:
        """Fraction of units done in [0, 1] (0 when the total is unknown)."""
        return min(max(self.done / self.total, 0.0), 1.0) if self.total > 0 else 0.0

    @property
    def finished(self) -> bool:
        return self.status != "running"


def jobs_dir(db: str | os.PathLike | None = None) -> Path:
    """The folder holding job files: ``jobs/`` next to the database (``data/jobs`` by default)."""
    return Path(db if db is not None else config.DEFAULT_DB).resolve().parent / "jobs"


def _paths(job_id: str, jdir: Path) -> dict[str, Path]:
    return {
        "meta": jdir / f"{job_id}.meta.json",
        "progress": jdir / f"{job_id}.json",
        "log": jdir / f"{job_id}.log",
        "rc": jdir / f"{job_id}.rc",
    }


def _check_job_id(job_id: str) -> str:
    # Job ids become file names: refuse anything that is not one of ours.
    if not job_id or not set(job_id) <= _KIND_CHARS or len(job_id) > 80:
        raise UserError(f"unknown job id {job_id!r}")
    return job_id


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _pid_alive(pid: int) -> bool:
    """True when ``pid`` runs and is not a zombie (an exited child nobody has reaped yet)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # Linux: a zombie still answers kill(0); its state letter in /proc is 'Z'.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# $1 = the exit-code file, $2 = the Python that runs follow-ups, $3 = the job id ("" = no follow-up),
# $4 = the database ("" = default), then the command. The wrapper records the exit code, then (exit 0
# only) starts the job's follow-ups itself through `python -m dashboard.jobs followup`, so chained
# work (score after generate) never waits for a page to be opened. It exits with the command's code.
_WRAPPER = (
    'rc_file="$1"; py="$2"; job="$3"; db="$4"; shift 4; "$@"; rc=$?; '
    'echo "$rc" > "$rc_file.tmp" && mv "$rc_file.tmp" "$rc_file"; '
    'if [ "$rc" -eq 0 ] && [ -n "$job" ]; then "$py" -m dashboard.jobs followup "$job" --db "$db"; fi; '
    'exit "$rc"'
)


def _reap(proc: subprocess.Popen, rc_path: Path) -> None:
    # Runs in a daemon thread of the process that started the job: waits for the child (so it
    # never lingers as a zombie) and records its exit code for job_status() when the wrapper
    # could not (killed by a signal).
    rc = proc.wait()
    if rc_path.exists():
        return
    try:
        rc_path.write_text(str(rc))
    except OSError:
        pass


def start_job(
    args: list[str],
    *,
    kind: str,
    db: str | os.PathLike | None = None,
    progress: bool = True,
    python: str | None = None,
    env: dict | None = None,
    resumed_from: str | None = None,
    then: list[list[str]] | None = None,
    secret_env: dict | None = None,
) -> str:
    """Start ``python -m engine ARGS`` as a detached background job and return its job id.

    Args:
        args: the CLI arguments after ``python -m engine`` (e.g. ``["generate", "--models", ...]``).
        kind: a short label (``generate``, ``score``, ``import``, ``delete``...), letters/digits/-.
        db: the database the job works on; job files go to :func:`jobs_dir` of it.
        progress: append ``--progress-file`` (only for commands that accept it).
        python: the interpreter (default: the current one).
        env: extra environment variables for the child (recorded in the job's meta file, so a resume
            gets them again).
        secret_env: variables for the child's environment only (an API key typed on the judge form for
            this session): never written to the job's files, its log or its arguments, so not in the
            process list's command lines either; a resumed job does not get them back.
        then: follow-up argument lists, started one after the other when this job ends with
            exit code 0 (e.g. ``score`` after ``generate``): the job's own wrapper starts the next
            one when its command exits (no browser or page needed); an observer
            (:func:`job_status`) starts it only if the wrapper could not. Exactly once either way
            (a marker file ``<job_id>.then`` holds the follow-up's job id).
    Returns:
        The job id (``<kind>-<YYYYmmdd-HHMMSS>-<hex>``).
    """
    kind = str(kind)
    if not kind or not set(kind) <= _KIND_CHARS or len(kind) > 40:
        raise UserError(f"job kind {kind!r} must be 1-40 lowercase letters, digits or '-'")
    if not args or not all(isinstance(a, str) for a in args):
        raise UserError(
            "job arguments must be a non-empty list of strings"
        )  # never echoed: may hold a key
    if args[0] == "judge":  # before anything is written: key variable set, no second job on (run, judge)
        from dashboard.judge_jobs import judge_job_problem

        running = [(j.job_id, j.args) for j in list_jobs(db, kind="judge") if j.status == "running"]
        environ = {**os.environ, **(env or {}), **(secret_env or {})}
        if problem := judge_job_problem(args, running, environ):
            raise UserError(problem)
    jdir = jobs_dir(db)
    jdir.mkdir(parents=True, exist_ok=True)
    job_id = f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    paths = _paths(job_id, jdir)
    command = [python or sys.executable, "-m", "engine", *args]
    if progress:
        command += ["--progress-file", str(paths["progress"])]
    child_env = dict(os.environ)
    child_env.setdefault("HF_HUB_OFFLINE", "1")
    child_env.update(env or {})
    child_env.update(secret_env or {})  # the process environment only: never in `meta` below
    # A tiny sh wrapper records the exit code next to the job files, so the status survives a
    # restart of the process that started the job (its reaper thread would be gone).
    wrapped = (
        [
            "/bin/sh",
            "-c",
            _WRAPPER,
            "job",
            str(paths["rc"]),
            sys.executable,
            job_id if then else "",
            "" if db is None else str(db),
            *command,
        ]
        if os.path.exists("/bin/sh")
        else command
    )
    with open(paths["log"], "ab") as log:
        proc = subprocess.Popen(
            wrapped,
            cwd=str(config.PROJECT_ROOT),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env,
            start_new_session=True,
        )  # own process group: survives the page
    meta = {
        "job_id": job_id,
        "kind": kind,
        "args": list(args),
        "command": command,
        "pid": proc.pid,
        "started_at": time.time(),
        "progress": progress,
        "db": str(db) if db is not None else None,
        "resumed_from": resumed_from,
        "then": [list(a) for a in (then or [])],
        "env": dict(env or {}),
    }
    write_json_atomic(paths["meta"], meta)
    threading.Thread(target=_reap, args=(proc, paths["rc"]), daemon=True).start()
    return job_id


def _log_tail(path: Path, n_chars: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - n_chars, 0))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    # tqdm redraws with carriage returns: keep only the last state of each line.
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.splitlines())


def _eta(prog: dict, meta: dict) -> float | None:
    """:func:`smoothed_eta` of a job from its progress file and metadata."""
    now = time.time()
    updated = float(prog.get("updated_at") or now)
    return smoothed_eta(
        int(prog.get("done", 0) or 0),
        int(prog.get("total", 0) or 0),
        now - float(meta.get("started_at", now)),
        prog.get("eta_s"),
        since_update_s=now - updated,
    )


def ray_unavailable() -> str:
    """Why Ray workers cannot run here ("" when ``ray`` is installed): checked before a job starts."""
    from engine.generation.ray_cluster import ray_installed

    if not ray_installed():
        return (
            "Ray workers need the `ray` package, which is not installed here (pip install ray); "
            "use 0 workers"
        )
    return ""


def job_status(job_id: str, db: str | os.PathLike | None = None) -> JobStatus:
    """The current status of one job (see the module docstring for the states)."""
    _check_job_id(job_id)
    paths = _paths(job_id, jobs_dir(db))
    meta = _read_json(paths["meta"])
    if meta is None:
        raise UserError(f"unknown job id {job_id!r} (no {paths['meta'].name} in {paths['meta'].parent})")
    prog = read_progress(paths["progress"]) or {}
    pid = int(meta.get("pid", -1))
    rc_text = paths["rc"].read_text().strip() if paths["rc"].exists() else ""
    returncode = int(rc_text) if rc_text.lstrip("-").isdigit() else None
    if returncode is None and _pid_alive(pid):
        status = "running"
    elif meta.get("cancel_requested_at"):
        status = "cancelled" if returncode != 0 else "done"
    elif _work_finished(prog) and (returncode is None or _by_signal(returncode)):
        status = (
            "done"  # every unit committed: killed (e.g. SIGKILL) after its last commit is still done
        )
    elif returncode is not None:
        status = "done" if returncode == 0 else "failed"
    elif prog.get("status") in ("done", "failed", "cancelled"):
        status = prog["status"]
    else:
        status = "killed"
    followup = None
    if status == "done" and meta.get("then"):
        marker = paths["meta"].with_name(f"{job_id}.then")
        followup = (
            _read_followup(marker)
            if marker.exists()
            else _start_followup(job_id, meta, paths["meta"].parent, db)
        )
    return JobStatus(
        job_id=job_id,
        kind=meta.get("kind", ""),
        status=status,
        args=tuple(meta.get("args", ())),
        pid=pid,
        started_at=float(meta.get("started_at", 0.0)),
        done=int(prog.get("done", 0) or 0),
        total=int(prog.get("total", 0) or 0),
        tokens=int(prog.get("tokens", 0) or 0),
        tokens_per_s=float(prog.get("tokens_per_s", 0.0) or 0.0),
        eta_s=_eta(prog, meta),
        message=str(prog.get("message", "") or ""),
        returncode=returncode,
        resumed_from=meta.get("resumed_from"),
        log_tail=_log_tail(paths["log"]) if status != "running" else "",
        extra={
            **({"followup": followup} if followup else {}),
            **({"workers": prog["workers"]} if isinstance(prog.get("workers"), dict) else {}),
            **({"stats": prog["stats"]} if isinstance(prog.get("stats"), dict) else {}),
            # a server (engine serve): its address and live figures
            **(
                {"serve": {k: prog[k] for k in SERVE_FIGURES if k in prog}}
                if prog.get("kind") == "serve"
                else {}
            ),
        },
    )


def _work_finished(prog: dict) -> bool:
    """True when a job's progress file counts every unit done (``done >= total > 0``) and does not say
    it failed: the work is committed, whatever happened to the process afterwards."""
    total, done = int(prog.get("total", 0) or 0), int(prog.get("done", 0) or 0)
    return total > 0 and done >= total and prog.get("status") in ("running", "done")


def _by_signal(returncode: int) -> bool:
    """An exit code that says a signal ended the process: negative (Python's view of its child) or
    128 + N (a shell's)."""
    return returncode < 0 or returncode > 128


def error_line(st: JobStatus) -> str:
    """The line of a failed job's log that says why: the CLI's last ``error: ...`` line, else the last
    line of a traceback or of the log ("" when the log is empty)."""
    lines = [ln.strip() for ln in st.log_tail.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    return errors[-1] if errors else (lines[-1] if lines else "")


def resumable(st: JobStatus) -> bool:
    """Whether running the same command again can help: a cancelled or killed job, or one that failed
    by a signal or a crash, continues where it stopped; one refused for bad input (exit code 2, a
    ``UserError`` such as an unknown dataset name) would fail the same way."""
    if st.kind not in RESUMABLE_KINDS or st.status not in ("cancelled", "killed", "failed"):
        return False
    return not (st.status == "failed" and st.returncode == 2)


def smoothed_eta(
    done: int, total: int, elapsed_s: float, raw_eta_s: float | None = None, since_update_s: float = 0.0
) -> float | None:
    """A stable ETA: remaining units at the job's average pace as of its last progress update,
    counted down since that update: (total - done) * t_u / done - (now - t_u) with t_u = the job's
    age at the update, never below 0.

    The average over the whole job so far includes model loading and short and long chunks, so it
    changes slowly; evaluating it at the last update (not now) keeps it from growing while a chunk
    runs and no unit finishes. Before the first unit the engine's estimate (or None) is used,
    counted down the same way.
    """
    since = max(float(since_update_s), 0.0)
    at_update = elapsed_s - since
    if total <= 0 or done <= 0 or at_update <= 0:
        return None if raw_eta_s is None else max(float(raw_eta_s) - since, 0.0)
    return max(max(total - done, 0) * at_update / done - since, 0.0)


def list_jobs(db: str | os.PathLike | None = None, kind: str | None = None) -> list[JobStatus]:
    """Every job of this database's jobs folder, newest first (optionally of one kind)."""
    jdir = jobs_dir(db)
    if not jdir.exists():
        return []
    out = []
    for meta_path in jdir.glob("*.meta.json"):
        job_id = meta_path.name[: -len(".meta.json")]
        try:
            st = job_status(job_id, db)
        except UserError:
            continue
        if kind is None or st.kind == kind:
            out.append(st)
    return sorted(out, key=lambda s: s.started_at, reverse=True)


def cancel_job(job_id: str, db: str | os.PathLike | None = None) -> JobStatus:
    """Stop a running job: SIGTERM to its whole process group. Completed work stays stored."""
    st = job_status(job_id, db)
    paths = _paths(job_id, jobs_dir(db))
    if st.status != "running":
        return st
    meta = _read_json(paths["meta"]) or {}
    meta["cancel_requested_at"] = time.time()
    write_json_atomic(paths["meta"], meta)
    try:
        os.killpg(st.pid, signal.SIGTERM)  # the job leads its own session/group (start_new_session)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + 5.0
    while _pid_alive(st.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return job_status(job_id, db)


def resume_job(job_id: str, db: str | os.PathLike | None = None) -> str:
    """Run the same command again as a new job (generation continues where it stopped)."""
    st = job_status(job_id, db)
    if st.status == "running":
        raise UserError(f"job {job_id} is still running; cancel it before resuming")
    meta = _read_json(_paths(job_id, jobs_dir(db))["meta"]) or {}
    python = (meta.get("command") or [None])[0]
    return start_job(
        list(st.args),
        kind=st.kind,
        db=db,
        progress=bool(meta.get("progress", True)),
        python=python,
        resumed_from=job_id,
        then=meta.get("then") or None,
        env=meta.get("env") or None,
    )


# The one-click demo (Home): the packaged default pair on a task it can partly do (everyday numeric
# questions, scored by the numeric rule), both modes, 3 repeats, 12 new tokens (the bare number or
# a short sentence ending in it). Under 3 minutes on 2 CPU cores from a cold model cache
# (docs/BENCHMARKS.md, "One-click demo").
DEMO_RUN = "demo-smollm2"
DEMO_ARGS = [
    "generate",
    "--models",
    "smollm2-135m",
    "smollm2-135m-int8",
    "--dataset",
    "demo-numbers",
    "--repeats",
    "3",
    "--max-new-tokens",
    "12",
    "--modes",
    "coupled",
    "independent",
    "--run-id",
    DEMO_RUN,
]


def score_args(run_id: str, db: str | os.PathLike, rule: str | None = None) -> list[str]:
    """``python -m engine score`` arguments; no rule = the rule that fits the run's dataset."""
    return ["score", "--db", str(db), "--run", run_id] + (["--rule", rule] if rule else [])


def start_demo(db: str | os.PathLike, python: str | None = None) -> str:
    """Start the demo chain (generate, then score, started by the job itself); return the generate job
    id."""
    return start_job(
        DEMO_ARGS + ["--db", str(db)],
        kind="generate",
        db=db,
        python=python,
        env={"COUPLED_EVAL_DB": str(db)},
        then=[score_args(DEMO_RUN, db)],
    )


def demo_running(db: str | os.PathLike | None = None) -> bool:
    """True while a demo step (its generate job or its scoring follow-up) runs."""
    for j in list_jobs(db):
        if j.status == "running" and "--run-id" in j.args and DEMO_RUN in j.args:
            return True
        if j.status == "running" and j.kind == "score" and DEMO_RUN in j.args:
            return True
    return False


def run_followup(job_id: str, db: str | os.PathLike | None = None) -> str | None:
    """Start the follow-up of a job that ended with exit code 0 (exactly once); return its job id.

    Called by the job's own wrapper when its command exits (``python -m dashboard.jobs followup``),
    so a chain runs to its end with no page open. None when the job has no follow-up.
    """
    _check_job_id(job_id)
    jdir = jobs_dir(db)
    meta = _read_json(_paths(job_id, jdir)["meta"])
    if meta is None:
        raise UserError(f"unknown job id {job_id!r} (no {job_id}.meta.json in {jdir})")
    if not meta.get("then"):
        return None
    marker = jdir / f"{job_id}.then"
    return _read_followup(marker) if marker.exists() else _start_followup(job_id, meta, jdir, db)


def _start_followup(job_id: str, meta: dict, jdir: Path, db) -> str | None:
    # Exactly once, even with several observers: the first to create the marker file wins.
    marker = jdir / f"{job_id}.then"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:  # another observer won the race: its job id follows
        return _read_followup(marker)
    first, *rest = meta["then"]
    kind = first[0] if first and set(first[0]) <= _KIND_CHARS else "job"
    python = (meta.get("command") or [None])[0]
    nxt = start_job(
        list(first),
        kind=kind,
        db=db,
        python=python,
        then=rest or None,
        env=meta.get("env") or None,
        progress=kind in PROGRESS_COMMANDS,
    )
    os.write(fd, nxt.encode())
    os.close(fd)
    return nxt


def _read_followup(marker: Path, timeout_s: float = 10.0) -> str | None:
    """The follow-up job id in a marker file. The observer that created the marker writes the id
    only after starting the job, so an empty marker means "starting": wait for it."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = marker.read_text().strip()
        if text or time.monotonic() > deadline:
            return text or None
        time.sleep(0.05)


def wait_job(
    job_id: str, db: str | os.PathLike | None = None, timeout_s: float = 600.0, poll_s: float = 0.2
) -> JobStatus:
    """Block until the job is no longer running (or the timeout passes); return its status."""
    deadline = time.monotonic() + timeout_s
    st = job_status(job_id, db)
    while st.status == "running" and time.monotonic() < deadline:
        time.sleep(poll_s)
        st = job_status(job_id, db)
    return st


def main(argv: list[str] | None = None) -> int:
    """``python -m dashboard.jobs followup JOB_ID [--db DB]``: start a finished job's follow-up;
    ``python -m dashboard.jobs demo [--db DB]``: start the demo chain (prints the job id)."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m dashboard.jobs")
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("followup", help="start the follow-up of a job that exited 0 (exactly once)")
    f.add_argument("job_id")
    f.add_argument("--db", default="")
    d = sub.add_parser(
        "demo", help="start the one-click demo chain (generate, then score) in the background"
    )
    d.add_argument("--db", default=str(config.DEFAULT_DB))
    args = p.parse_args(argv)
    try:
        if args.cmd == "demo":
            print(start_demo(args.db))
            return 0
        nxt = run_followup(args.job_id, args.db or None)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if nxt:
        print(f"follow-up job: {nxt}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
