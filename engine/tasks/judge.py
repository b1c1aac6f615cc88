"""Task layer of LLM judging: data -> stored labels.

LLM-as-judge pairwise comparisons of generations (docs/METHODS.md section 3).

For every unit (prompt, repeat), noise mode and pair of models of a run, a judge model sees the
prompt and the two responses and answers A, B or tie. By default both presentation orders are
judged (position bias cancels in aggregate); ``orders="random"`` judges one seeded random order.
Every raw output is stored with its parse ('A'|'B'|'tie'|NULL, in presentation terms), the
order shown ('ab' = model_a first), the winner in model terms ('a'|'b'|'tie'|NULL) and, for API
judges, the model the server reported, token usage, latency, attempts and any error; for batch
judges (local models, a command) the latency (the wall time of the batch the verdict came in) and,
for local models, the model ``--judge`` resolved to. Unparseable outputs and failed requests are
stored with NULL and counted, never dropped.

Phases of :func:`judge_run`: 1. plan the tasks  2. skip those already stored (resume)
3. build prompts  4. call the judge  5. parse + store verdicts in small transactions as they arrive.

The judge comes from the caller (dependency injection): a batch function
``complete_fn(messages_list) -> list[str]`` (a local transformers or vLLM model, built by
``engine.commands.judge``; :func:`command_complete_fn` wraps an external command), or an
:class:`~engine.tasks.judge_api.ApiJudge` (OpenAI-compatible server, concurrent, retried).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shlex
import string
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import combinations, islice

import pandas as pd

from engine import config, store
from engine.errors import UserError
from engine.progress import Progress
from engine.store import verdicts as vstore
from engine.store.runlock import judge_lock
from engine.store.verdicts import VerdictRow
from engine.tasks.judge_api import ApiJudge, Reply
from engine.tasks.judge_parse import (
    ARENA_HARD_HELP,
    ARENA_HARD_LABELS,
    FORMATS,
    parse_arena_hard,
    parse_verdict,
)
from engine.tasks.judge_prompts import ARENA_HARD_PROMPT, JUDGE_USER_TEMPLATE, PAPER_JUDGE_PROMPT
from engine.tasks.judge_summary import JudgeSummary, StoredUsage

__all__ = [
    "ARENA_HARD_HELP",
    "ARENA_HARD_LABELS",
    "FORMATS",
    "parse_arena_hard",
    "parse_verdict",
    "JudgeConfig",
    "judge_run",
    "plan_tasks",
    "build_messages",
    "winner_from_verdict",
    "random_order",
    "command_complete_fn",
    "judgments_to_comparisons",
    "judgments_to_set",
    "ARENA_HARD_PROMPT",
    "PAPER_JUDGE_PROMPT",
]

CompleteFn = Callable[[list[list[dict]]], list[str]]

USER_FIELDS = ("question", "answer_a", "answer_b")
ORDERS = config.JUDGE_ORDERS
VERDICTS = ("A", "B", "tie")
COMBINE = config.JUDGE_COMBINE


@dataclass(frozen=True)
class JudgeConfig:
    """How to judge. ``prompt_template`` is the system prompt; ``user_template`` the user message
    with ``{question}``, ``{answer_a}``, ``{answer_b}`` (answer_a = the response shown first)."""

    judge_model: str
    prompt_template: str = PAPER_JUDGE_PROMPT
    user_template: str = JUDGE_USER_TEMPLATE
    orders: str = "both"
    seed: int = 0
    max_new_tokens: int = 8
    batch_size: int = 8
    judge_format: str = "paper"

    def __post_init__(self):
        if not isinstance(self.judge_model, str) or not self.judge_model.strip():
            raise UserError("a judge needs a model name (--judge)")
        if self.judge_format not in FORMATS:
            raise UserError(f"unknown judge format {self.judge_format!r}; allowed: {', '.join(FORMATS)}")
        if self.orders not in ORDERS:
            raise UserError(f"unknown orders {self.orders!r}; allowed: {', '.join(ORDERS)}")
        if int(self.batch_size) < 1:
            raise UserError(f"batch_size must be >= 1, got {self.batch_size}")
        if int(self.max_new_tokens) < 1:
            raise UserError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.prompt_template.strip():
            raise UserError("the judge prompt is empty")
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.user_template) if f is not None}
        except ValueError as exc:
            raise UserError(
                f"the judge user template is not a valid template ({exc}); "
                "write literal braces as {{ and }}"
            ) from None
        if fields != set(USER_FIELDS):
            raise UserError(
                f"the judge user template must use exactly the fields {{question}}, {{answer_a}}, "
                f"{{answer_b}}; it uses {sorted(fields)}"
            )

    @property
    def prompt_hash(self) -> str:
        """First 16 hex digits of sha256(system prompt + NUL + user template [+ NUL + judge format]).

        The verdict format enters (a reply is read differently under another format) except for
        the default ``paper``, whose hash stays what verdicts stored before the format entered have."""
        fmt = "" if self.judge_format == "paper" else "\x00" + self.judge_format
        return hashlib.sha256(
            (self.prompt_template + "\x00" + self.user_template + fmt).encode()
        ).hexdigest()[:16]


# --------------------------------------------------------------------------------- parsing ---


def winner_from_verdict(parsed: str | None, presented: str) -> str | None:
    """Map a verdict in presentation terms to model terms: with 'ba' (model_b shown first as
    "A"), 'A' means model_b won. Returns 'a' | 'b' | 'tie' | None."""
    if presented not in ("ab", "ba"):
        raise UserError(f"unknown presented order {presented!r}; allowed: ab, ba")
    if parsed is None:
        return None
    if parsed == "tie":
        return "tie"
    if parsed not in ("A", "B"):
        raise UserError(f"unknown verdict {parsed!r}; allowed: A, B, tie")
    first_is_a = presented == "ab"
    return ("a" if parsed == "A" else "b") if first_is_a else ("b" if parsed == "A" else "a")


# ---------------------------------------------------------------------------- planning -------


@dataclass(frozen=True)
class JudgeTask:
    prompt_id: str
    repeat: int
    mode: str
    model_a: str
    model_b: str
    presented: str

    @property
    def key(self) -> tuple:
        return (self.prompt_id, self.repeat, self.mode, self.model_a, self.model_b, self.presented)


def random_order(seed: int, prompt_id: str, repeat: int, mode: str, model_a: str, model_b: str) -> str:
    """A seeded fair coin per (unit, pair): 'ab' or 'ba'. A pure function of its inputs, so a
    resumed or re-batched job draws the same orders. ``mode`` deliberately does not enter: the
    coupled and the independent generations of a unit are shown in the same order, so the two
    modes' win-rates differ by the generations only, not by position luck."""
    key = json.dumps([int(seed), str(prompt_id), int(repeat), str(model_a), str(model_b)])
    return "ab" if hashlib.sha256(key.encode()).digest()[0] & 1 == 0 else "ba"


def _run_models(db, run: str, present: list[str]) -> list[str]:
    """The run's models in its configured order (pairs are (earlier, later)), else sorted."""
    ranked = [m for m in vstore.configured_models(db, run) if m in present]
    return ranked + sorted(m for m in present if m not in ranked)


def plan_tasks(
    generations: pd.DataFrame, models: Sequence[str], orders: str, seed: int
) -> tuple[list[JudgeTask], int]:
    """Every (unit, mode, model pair, order) to judge, and the number of pairs skipped because a
    generation of one of the two models is missing.

    Args:
        generations: columns model, prompt_id, repeat, mode (one row per stored generation).
        models: the run's models in order; pairs are (models[i], models[j]) with i < j.
    """
    have = set(
        zip(
            generations["model"],
            generations["prompt_id"],
            generations["repeat"].astype(int),
            generations["mode"],
        )
    )
    units = sorted({(p, int(r), mo) for _, p, r, mo in have}, key=lambda u: (u[2], u[0], u[1]))
    tasks: list[JudgeTask] = []
    missing = 0
    for pid, rep, mode in units:
        for ma, mb in combinations(models, 2):
            if (ma, pid, rep, mode) not in have or (mb, pid, rep, mode) not in have:
                missing += 1
                continue
            pres = ("ab", "ba") if orders == "both" else (random_order(seed, pid, rep, mode, ma, mb),)
            tasks.extend(JudgeTask(pid, rep, mode, ma, mb, o) for o in pres)
    return tasks, missing


def build_messages(
    cfg: JudgeConfig, question: str, response_a: str, response_b: str, presented: str
) -> list[dict]:
    """The chat messages for one judgement; ``presented='ba'`` shows model_b's response first."""
    first, second = (response_a, response_b) if presented == "ab" else (response_b, response_a)
    user = cfg.user_template.format(question=question or "", answer_a=first or "", answer_b=second or "")
    return [{"role": "system", "content": cfg.prompt_template}, {"role": "user", "content": user}]


# ------------------------------------------------------------------------------ judges -------


def command_complete_fn(command: str, timeout_s: float = 600.0) -> CompleteFn:
    """Optional hook for an external judge: run ``command`` (no shell) once per batch, writing one
    JSON array of chat messages per line to its stdin and reading one JSON string (or plain text
    line) per input line from its stdout."""
    argv = shlex.split(command)
    if not argv:
        raise UserError("the external judge command is empty")

    def complete(messages_list: list[list[dict]]) -> list[str]:
        payload = "".join(json.dumps(m) + "\n" for m in messages_list)
        try:
            res = subprocess.run(
                argv, input=payload, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except FileNotFoundError:
            raise UserError(f"external judge command not found: {argv[0]!r}") from None
        except subprocess.TimeoutExpired:
            raise UserError(
                f"external judge command timed out after {timeout_s:.0f} s: {command!r}"
            ) from None
        if res.returncode != 0:
            raise UserError(
                f"external judge command failed (exit {res.returncode}): {res.stderr.strip()[:500]}"
            )
        lines = res.stdout.splitlines()
        out = []
        for line in lines:
            try:
                v = json.loads(line)
                out.append(v if isinstance(v, str) else json.dumps(v))
            except json.JSONDecodeError:
                out.append(line)
        return out

    return complete


# --------------------------------------------------------------------------------- run -------


@dataclass(frozen=True)
class JudgePlan:
    """What a judge run will do: every task, those still to send (after resume and --max-requests)."""

    run: str
    judge: str
    cfg: JudgeConfig
    models: list[str]
    tasks: list[JudgeTask]
    pending: list[JudgeTask]
    n_missing_generation: int
    n_capped: int  # pending tasks left for a later run by --max-requests
    n_retry_failed: int = 0  # pending tasks whose earlier request failed for good (sent again)

    @property
    def n_stored(self) -> int:
        return len(self.tasks) - len(self.pending) - self.n_capped


def plan_judging(
    db,
    run: str,
    judge: str,
    cfg: JudgeConfig,
    *,
    replace: bool = False,
    max_requests: int | None = None,
    retry_failed: bool = True,
) -> JudgePlan:
    """Phases 1-2: plan every (unit, mode, pair, order) with both generations present, then drop
    what is stored (all is to redo with ``replace``) and cap at ``max_requests``. Reads only.
    ``retry_failed``: a stored verdict whose request failed for good (``error`` set) is sent
    again; answered verdicts, parsed or unparseable, never are."""
    gens = vstore.generation_keys(db, run)
    if gens.empty:
        with store.reader(db) as con:
            known = store.known_runs(con)
        raise UserError(f"run {run!r} has no generations; known runs: {', '.join(known) or '(none)'}")
    models = _run_models(db, run, sorted(set(gens["model"])))
    if len(models) < 2:
        raise UserError(
            f"run {run!r} has generations of one model only ({models[0]}); judging needs two or more"
        )
    if vstore.prompt_hashes(db, run, judge) - {cfg.prompt_hash} and not replace:
        raise UserError(
            f"run {run!r} already has judgments by {judge!r} made with a different judge prompt or "
            "--judge-format; pass --replace to redo them, or judge under another --judge-name"
        )
    if max_requests is not None and int(max_requests) < 0:
        raise UserError(f"--max-requests must be >= 0, got {max_requests}")
    tasks, missing = plan_tasks(gens, models, cfg.orders, cfg.seed)
    done = set() if replace else vstore.stored_keys(db, run, judge, failed=not retry_failed)
    todo = [t for t in tasks if t.key not in done]
    pending = todo if max_requests is None else todo[: int(max_requests)]
    retried = 0
    if retry_failed and not replace and pending:
        stored = vstore.stored_keys(db, run, judge)
        retried = sum(t.key in stored for t in pending)
    return JudgePlan(run, judge, cfg, models, tasks, pending, missing, len(todo) - len(pending), retried)


def message_stream(
    db, plan: JudgePlan, chunk: int = 256, db_lock: threading.Lock | None = None
) -> Iterator[tuple[JudgeTask, list[dict]]]:
    """Phase 3: (task, chat messages) for every pending task, texts read a chunk at a time (a long
    run never sits in memory; an API judge pulls only as fast as it sends). ``db_lock``: held while
    reading (DuckDB refuses a read connection while this process's writer thread holds one)."""
    for start in range(0, len(plan.pending), chunk):
        part = plan.pending[start : start + chunk]
        keys = {(m, t.prompt_id, t.repeat, t.mode) for t in part for m in (t.model_a, t.model_b)}
        with db_lock or contextlib.nullcontext():
            texts, questions = vstore.texts_for(db, plan.run, keys, sorted({t.prompt_id for t in part}))
        for t in part:
            yield (
                t,
                build_messages(
                    plan.cfg,
                    questions.get(t.prompt_id, ""),
                    texts[(t.model_a, t.prompt_id, t.repeat, t.mode)],
                    texts[(t.model_b, t.prompt_id, t.repeat, t.mode)],
                    t.presented,
                ),
            )


class _Writer:
    """Phase 5: parse each reply and store verdicts in small transactions as they arrive. A batch
    judge flushes after each batch; an API judge's flushes run in a worker thread every 0.25 s
    (Ctrl-C stores what arrived): a SIGKILL loses the requests in flight and at most the last
    0.25 s of replies. Thread-safe: ``add`` from the event loop, ``flush`` from the worker."""

    def __init__(self, db, plan: JudgePlan, progress: Progress, api: ApiJudge | None):
        self.db, self.plan, self.progress, self.api = db, plan, progress, api
        self.buf: list[VerdictRow] = []
        self.verdicts: dict[str | None, int] = {"A": 0, "B": 0, "tie": 0, None: 0}
        self.judged = self.errors = 0
        self._buf_lock, self.db_lock = threading.Lock(), threading.Lock()

    def add(self, t: JudgeTask, r: Reply) -> None:
        p = self.plan
        parsed = parse_verdict(r.text, p.cfg.judge_format) if r.error is None else None
        row = VerdictRow(
            p.run,
            p.judge,
            t.prompt_id,
            t.repeat,
            t.mode,
            t.model_a,
            t.model_b,
            t.presented,
            p.cfg.prompt_hash,
            r.text,
            parsed,
            winner_from_verdict(parsed, t.presented),
            r.model,
            r.prompt_tokens,
            r.completion_tokens,
            r.latency_s,
            r.attempts,
            r.error,
        )
        with self._buf_lock:
            self.verdicts[parsed] += 1
            self.errors += r.error is not None
            self.buf.append(row)

    def flush(self) -> None:
        with (
            self.db_lock
        ):  # one connection at a time (the ticker's last flush may overlap the final one)
            with self._buf_lock:
                rows, self.buf = self.buf, []
            if not rows:
                return
            vstore.insert_verdicts(self.db, rows)
            if self.api is not None:
                self.progress.stats = self.api.stats.as_dict()
            self.judged += len(rows)
            self.progress.update(len(rows), tokens=sum((v.completion_tokens or 0) for v in rows))


def _judge_batches(
    complete_fn: CompleteFn,
    items: Iterator[tuple[JudgeTask, list[dict]]],
    batch_size: int,
    writer: _Writer,
) -> None:
    """Phase 4 for a batch judge: one call per ``batch_size`` prompts, each batch stored in one
    transaction.

    Each verdict's ``latency_s`` is the wall time of the call that returned its batch (every reply
    of a batch arrives at its end, so that is the time from asking to the answer, as for an API
    request; the judge's throughput is then batch size / latency). Its ``reported_model`` is
    ``complete_fn.reported_model`` when the function has one (a local model: the model ``--judge``
    resolved to, ``engine.commands._judges.LocalJudgeFn``), else NULL (a command, a test stub)."""
    reported = getattr(complete_fn, "reported_model", None)
    while batch := list(islice(items, batch_size)):
        t0 = time.perf_counter()
        raws = list(complete_fn([m for _, m in batch]))
        seconds = time.perf_counter() - t0
        if len(raws) != len(batch):
            raise UserError(f"the judge returned {len(raws)} outputs for {len(batch)} prompts")
        for (t, _), raw in zip(batch, raws):
            writer.add(t, Reply(raw, model=reported, latency_s=seconds))
        writer.flush()


def judge_run(
    db,
    run: str,
    judge_model: str | None = None,
    cfg: JudgeConfig | None = None,
    complete_fn: CompleteFn | None = None,
    *,
    api: ApiJudge | None = None,
    progress_file=None,
    replace: bool = False,
    show_bar: bool = True,
    max_requests: int | None = None,
    retry_failed: bool = True,
) -> JudgeSummary:
    """Judge every pair of models on every unit and mode of ``run``; resumable. One process per
    (database, run, judge): a second one is a UserError naming the first's pid (:func:`judge_lock`).

    Args:
        db: database path. run: the run id.
        judge_model: the judge's name (stored in ``judgments.judge``); defaults to cfg.judge_model.
        cfg: :class:`JudgeConfig` (default: the paper's prompt, both orders).
        complete_fn: a batch judge ``messages_list -> list[str]`` (a local model, a command; its
            verdicts store the batch's wall time and its ``reported_model``: :func:`_judge_batches`), or
        api: an :class:`ApiJudge` (concurrent requests; call its ``preflight()`` first).
        replace: delete this run's earlier judgments by this judge first (e.g. after editing the
            prompt); without it, judgments already stored are skipped (resume), and stored rows
            made with a different prompt are a UserError.
        max_requests: judge at most this many of the missing tasks now (the rest on a later run).
        retry_failed: send again the stored verdicts whose request failed for good (default);
            answered verdicts are never re-sent.

    Returns:
        A :class:`~engine.tasks.judge_summary.JudgeSummary` (``to_dict()`` for JSON): tasks
        planned, judged now, skipped (already stored), pairs without both generations, verdict
        counts, failed requests, token and attempt totals.
    """
    if cfg is None:
        if judge_model is None:
            raise UserError("give a judge model")
        cfg = JudgeConfig(judge_model=judge_model)
    judge = judge_model or cfg.judge_model
    with judge_lock(db, run, judge):
        return _judge_locked(
            db,
            run,
            judge,
            cfg,
            complete_fn,
            api,
            progress_file,
            replace,
            show_bar,
            max_requests,
            retry_failed,
        )


def _judge_locked(
    db, run, judge, cfg, complete_fn, api, progress_file, replace, show_bar, max_requests, retry_failed
) -> JudgeSummary:
    plan = plan_judging(
        db, run, judge, cfg, replace=replace, max_requests=max_requests, retry_failed=retry_failed
    )
    if plan.pending and complete_fn is None and api is None:
        raise UserError("no judge to call: pass a completion function or an API judge")
    if replace:
        vstore.delete_verdicts(db, run, judge)
    progress = Progress(
        len(plan.tasks),
        kind="judge",
        job=f"{run}:{judge}",
        path=progress_file,
        done=plan.n_stored,
        show_bar=show_bar,
    )
    writer = _Writer(db, plan, progress, api)
    items = message_stream(db, plan, db_lock=writer.db_lock)
    with progress.track("interrupted; the verdicts received are stored"):
        try:
            if api is not None:
                api.run(items, writer.add, writer.flush)
            elif complete_fn is not None:
                _judge_batches(complete_fn, items, cfg.batch_size, writer)
        finally:
            writer.flush()
    return _summary(db, plan, writer)


def _summary(db, plan: JudgePlan, writer: _Writer) -> JudgeSummary:
    tot = vstore.verdict_totals(db, plan.run, plan.judge)
    return JudgeSummary(
        run=plan.run,
        judge=plan.judge,
        orders=plan.cfg.orders,
        judge_format=plan.cfg.judge_format,
        prompt_hash=plan.cfg.prompt_hash,
        models=plan.models,
        n_tasks=len(plan.tasks),
        n_judged_now=writer.judged,
        n_skipped_existing=plan.n_stored,
        n_capped=plan.n_capped,
        n_pairs_missing_generation=plan.n_missing_generation,
        n_unparseable_now=writer.verdicts[None],
        n_failed_now=writer.errors,
        stored_verdicts=tot.counts,
        stored_verdicts_by_mode=tot.by_mode,
        n_unparseable=tot.counts["unparseable"],
        stored_usage=StoredUsage(
            prompt_tokens=tot.prompt_tokens,
            completion_tokens=tot.completion_tokens,
            attempts=tot.attempts,
            n_failed_requests=tot.n_errors,
            mean_latency_s=tot.mean_latency_s,
        ),
        requests_now=writer.api.stats.as_dict() if writer.api is not None else None,
        n_retried_failed=plan.n_retry_failed,
    )


# ------------------------------------------------------------------------ comparisons --------


def judgments_to_comparisons(
    db, run: str, judge: str, mode: str | None = None, combine: str = "separate"
) -> pd.DataFrame:
    """Judge verdicts as normalised pairwise comparisons for win-rates.

    ``combine="separate"``: each judged order is its own comparison row (with both orders, every
    pair is counted twice, once per position, so position bias cancels in the win-rate; the
    ``presented`` column tells them apart). ``combine="agree"``: one row per (unit, mode, pair):
    the common verdict when both orders agree, 'tie' when they disagree (a position-driven
    verdict is no preference), the parsed one when the other is unparseable, NULL when neither
    parsed. Unparseable verdicts stay as winner NULL rows (count them; win-rates drop them).

    Returns:
        DataFrame: prompt_id, repeat, mode, model_a, model_b, presented ('ab'|'ba'|'ab+ba'), winner
        ('a'|'b'|'tie'|None), plus human_winner (None) and judge_winner (= winner), so it is also in the
        normalised comparisons form of engine.tasks.comparisons / engine.analysis.comparisons.
    """
    if combine not in COMBINE:
        raise UserError(f"unknown combine {combine!r}; allowed: {', '.join(COMBINE)}")
    if mode is not None and mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {', '.join(store.MODES)}")
    df = vstore.verdict_winners(db, run, judge, mode)
    df = df.astype({"winner": object}).where(df.notna(), None)
    if combine == "separate" or df.empty:
        return _with_label_columns(df.reset_index(drop=True))
    rows = []
    for key, g in df.groupby(["prompt_id", "repeat", "mode", "model_a", "model_b"], sort=True):
        ws = [w for w in g["winner"] if w is not None]
        if not ws:
            w = None
        elif len(set(ws)) == 1:
            w = ws[0]
        else:
            w = "tie"
        rows.append(
            dict(
                zip(["prompt_id", "repeat", "mode", "model_a", "model_b"], key),
                presented="+".join(sorted(g["presented"])),
                winner=w,
            )
        )
    return _with_label_columns(pd.DataFrame(rows, columns=list(df.columns)).astype({"winner": object}))


def _with_label_columns(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(
        human_winner=pd.Series([None] * len(df), index=df.index, dtype=object),
        judge_winner=df["winner"].astype(object),
    )


def judgments_to_set(
    db, run: str, judge: str, mode: str, name: str, combine: str = "separate", replace: bool = False
) -> dict:
    """Store a run's judge verdicts (one mode) as comparison set ``name`` (judge labels only).

    prompt_id in the set is the prompt (the cluster of docs/METHODS.md 7.2: a prompt's repeats share
    its effect), and the repeat, mode, judge (as ``labeller``) and presentation order ('ab' | 'ba';
    None for ``combine="agree"``, which merges both orders) are their own columns; rows follow
    :func:`judgments_to_comparisons` with ``combine``. Unparseable verdicts become rows with no label.
    """
    from engine.tasks.comparisons import store_comparison_set

    if mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {', '.join(store.MODES)}")
    df = judgments_to_comparisons(db, run, judge, mode, combine)
    if df.empty:
        raise UserError(
            f"no judgments by {judge!r} on run {run!r} in mode {mode!r}; run `python -m engine judge` "
            "first"
        )
    rows = pd.DataFrame(
        {
            "prompt_id": df.prompt_id.astype(str),
            "model_a": df.model_a,
            "model_b": df.model_b,
            "human_winner": None,
            "judge_winner": df.winner,
            "repeat": [int(r) for r in df.repeat],
            "mode": df["mode"],
            "labeller": judge,
            "labelled_at": None,
            "presented": df.presented.where(df.presented.isin(("ab", "ba")), None),
        }
    ).astype(object)
    meta = {"format": "judgments", "run": run, "judge": judge, "mode": mode, "combine": combine}
    replaced = store_comparison_set(
        db, rows, name, f"judgments:{run}:{judge}:{mode}", meta, replace=replace
    )
    return {
        "name": name,
        "n_rows": int(len(rows)),
        "n_unlabelled": int(rows.judge_winner.isna().sum()),
        "replaced": replaced,
        **meta,
    }
