"""Checks before the dashboard starts a judge job (:func:`dashboard.jobs.start_job` calls
:func:`judge_job_problem` before it writes anything): the API key variable must be set in the
dashboard's environment (the job inherits it) and must be a variable's NAME, never a key typed in
its place (a key in the arguments would reach the job's files, its log and the process list); and
one judge job per (database, run, judge) at a time, as the CLI's own lock enforces."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from engine.tasks.judge_api import DEFAULT_KEY_ENV, key_env_problem


def _value(args: Sequence[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def judge_identity(args: Sequence[str]) -> tuple[str | None, str | None]:
    """(run, judge name) of a ``judge`` command line: ``--judge-name`` if given, else ``--judge``."""
    return _value(args, "--run"), _value(args, "--judge-name") or _value(args, "--judge")


def judge_job_problem(args: Sequence[str], db, environ: Mapping[str, str] | None = None) -> str | None:
    """Why this judge job must not start (one line, never echoing a key), or None."""
    from dashboard import jobs

    environ = os.environ if environ is None else environ
    judge = _value(args, "--judge") or ""
    if judge.startswith("openai:") and "--judge-command" not in args and "--dry-run" not in args:
        problem = key_env_problem(_value(args, "--api-key-env") or DEFAULT_KEY_ENV, environ)
        if problem:
            return f"{problem} in the dashboard's environment (the job would inherit it)"
    ident = judge_identity(args)
    for j in jobs.list_jobs(db, kind="judge"):
        if j.status == "running" and judge_identity(j.args) == ident:
            return (f"judge job {j.job_id} is already judging run {ident[0]!r} with {ident[1]!r}; "
                    "wait for it or cancel it")
    return None
