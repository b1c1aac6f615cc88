"""Checks before the dashboard starts a judge job (:func:`dashboard.jobs.start_job` calls
:func:`judge_job_problem` before it writes anything): the API key variable must be set in the
dashboard's environment (the job inherits it) and must be a variable's NAME, never a key typed in
its place (a key in the arguments would reach the job's files, its log and the process list); and
one judge job per (database, run, judge) at a time, as the CLI's own lock enforces."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence

from engine.tasks.judge_api import DEFAULT_KEY_ENV, key_env_problem


def _value(args: Sequence[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


def judge_identity(args: Sequence[str]) -> tuple[str | None, str | None]:
    """(run, judge name) of a ``judge`` command line: ``--judge-name`` if given, else ``--judge``."""
    return _value(args, "--run"), _value(args, "--judge-name") or _value(args, "--judge")


def judge_job_problem(
    args: Sequence[str],
    running: Iterable[tuple[str, Sequence[str]]] = (),
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Why this judge job must not start (one line, never echoing a key), or None.

    Args:
        args: the ``judge`` command line the dashboard would start.
        running: (job id, command line) of each judge job running on the same database
            (:func:`dashboard.jobs.start_job` passes them; this module never reads the job files).
        environ: the environment the job would inherit (default: this process's).
    """
    environ = os.environ if environ is None else environ
    judge = _value(args, "--judge") or ""
    if judge.startswith("openai:") and "--judge-command" not in args and "--dry-run" not in args:
        problem = key_env_problem(_value(args, "--api-key-env") or DEFAULT_KEY_ENV, environ)
        if problem:
            return f"{problem} in the dashboard's environment (the job would inherit it)"
    ident = judge_identity(args)
    for job_id, job_args in running:
        if judge_identity(job_args) == ident:
            return (
                f"judge job {job_id} is already judging run {ident[0]!r} with {ident[1]!r}; "
                "wait for it or cancel it"
            )
    return None
