"""Test tool (run by the clients' venv, not collected): every lm-eval command line of the real-client
tests, through lm-eval's own CLI entry, in one process.

Usage: ``python tests/clients/lm_eval_driver.py SPEC.json`` from the project root (the tasks' data
paths are relative to it). SPEC: ``{"include_path": DIR, "timings": FILE, "first": [RUN, ...],
"lanes": [[RUN, ...], ...]}`` with RUN ``{"name": ..., "argv": [...], "wait_for": URL or null}``:
``argv`` is what follows ``lm_eval`` on a command line (docs/SERVE.md's recipe). The ``first`` runs run
in order (those that need no server: this process's imports and lm-eval's own ``hf`` model overlap the
servers' model loading), then each lane runs its runs in order, the lanes side by side (threads: a
lane per server, so that both servers work at once); a run with ``wait_for`` first waits until that
server answers ``GET /models``.
Each run's wall time and its thread's CPU time go to the timings file (one JSON line per run); a failed run fails the process.

Why not one ``lm_eval`` process per command: each would first index the ~14,000 YAML files of
lm-eval's built-in tasks (about 10 s of CPU; the tests use none of them) and import torch and the
harness again. Here the CLI code runs unchanged (argument parsing, ``EvaluatorConfig``,
``simple_evaluate``, the result and sample files), except that its task index holds only
``--include_path``.

Why the ``hf`` model runs before the lanes start: importing transformers (its model classes are
resolved lazily, on first attribute access) in one thread while another thread's ``datasets`` hashes
a task through ``transformers.PreTrainedTokenizerBase`` fails with an AttributeError (seen).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path

SERVER_WAIT_S = 300


def _own_tasks_only(include_path: str) -> None:
    """lm-eval's TaskManager without its built-in tasks, and building tasks (which loads their datasets
    into the shared Hugging Face cache) one thread at a time."""
    import lm_eval.tasks
    from lm_eval.tasks.manager import TaskManager

    lock = threading.Lock()

    class OwnTasks(TaskManager):
        def __init__(self, *args, include_defaults: bool = True, **kwargs):
            super().__init__(*args, include_defaults=False, **kwargs)

        def load(self, *args, **kwargs):
            with lock:
                return super().load(*args, **kwargs)

    lm_eval.tasks.TaskManager = OwnTasks  # the CLI imports it from there when it runs


def _wait(url: str) -> None:
    deadline = time.time() + SERVER_WAIT_S
    while True:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            if time.time() > deadline:
                raise
        time.sleep(0.5)


_ARGV = threading.Lock()


def _cli(argv: list[str]) -> None:
    """``lm_eval ARGV``, as lm_eval.__main__.cli_evaluate runs it (sys.argv is read under a lock: the
    lanes share it)."""
    from lm_eval._cli import HarnessCLI
    from lm_eval.utils import setup_logging

    setup_logging()
    parser = HarnessCLI()
    with _ARGV:
        sys.argv = ["lm_eval", *argv]
        args = parser.parse_args()
    parser.execute(args)


def _lane(runs: list[dict], timings: Path, t0: float, failed: list[str]) -> None:
    for run in runs:
        try:
            if run.get("wait_for"):
                _wait(run["wait_for"])
            start, cpu = time.perf_counter(), time.thread_time()
            _cli(run["argv"])
            end, cpu = time.perf_counter(), time.thread_time() - cpu
        except BaseException:  # a failed run ends its lane; the others go on
            failed.append(f"{run['name']}:\n{traceback.format_exc()}")
            return
        line = {"name": run["name"], "start_s": start - t0, "wall_s": end - start, "cpu_s": cpu}
        with open(timings, "a") as fh:
            fh.write(json.dumps(line) + "\n")


def main(spec_path: str) -> int:
    t0 = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    timings = Path(spec["timings"])
    _own_tasks_only(spec["include_path"])
    import lm_eval.evaluator  # noqa: F401  (imported once, before the lanes start)

    with open(timings, "a") as fh:
        line = {"name": "imports", "start_s": 0.0, "wall_s": time.perf_counter() - t0}
        fh.write(json.dumps({**line, "cpu_s": time.thread_time()}) + "\n")
    failed: list[str] = []
    _lane(spec.get("first", []), timings, t0, failed)
    if failed:
        print(f"lm-eval run failed: {failed[0]}", file=sys.stderr)
        return 1
    lanes = [
        threading.Thread(target=_lane, args=(runs, timings, t0, failed), name=f"lane-{i}")
        for i, runs in enumerate(spec["lanes"])
    ]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    for f in failed:
        print(f"lm-eval run failed: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
