"""LLM-as-judge pairwise comparisons of generations (METHODS.md section 3).

For every unit (prompt, repeat), noise mode and pair of models of a run, a judge model sees the
prompt and the two responses and answers A, B or tie. By default both presentation orders are
judged (position bias cancels in aggregate); ``orders="random"`` judges one seeded random order.
Every raw output is stored with its parse ('A'|'B'|'tie'|NULL, in presentation terms), the
order shown ('ab' = model_a first) and the winner in model terms ('a'|'b'|'tie'|NULL).
Unparseable outputs are stored with NULL and counted, never dropped.

Phases of :func:`judge_run`: 1. plan the tasks  2. skip those already stored (resume)
3. build prompts  4. call the judge in batches  5. parse + store each batch in one transaction.

The judge is any callable ``complete_fn(messages_list) -> list[str]`` (dependency injection):
by default a local model loaded with ``engine.models.load_model`` and greedy
``engine.generation.complete``; :func:`command_complete_fn` wraps an external command (e.g. a
script that calls a judge service) as an optional hook.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import string
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import pandas as pd

from engine import config, store
from engine.errors import UserError
from engine.progress import Progress

CompleteFn = Callable[[list[list[dict]]], list[str]]

# Coupled-generation paper (Benz et al.), Appendix C, Table 2: the judge's system prompt, verbatim.
PAPER_JUDGE_PROMPT = (
    'Please act as an impartial judge and evaluate the quality of the responses provided by two'
    ' AI assistants to the user prompt displayed below. Your job is to evaluate which assistant'
    '’s answer is better. When evaluating the assistants’ answers, compare both assistants’ ans'
    'wers. You must identify and correct any mistakes or inaccurate information. Then consider '
    'if the assistant’s answers are helpful, relevant, and concise. Helpful means the answer co'
    'rrectly responds to the prompt or follows the instructions. Note when user prompt has any '
    'ambiguity or more than one interpretation, it is more helpful and appropriate to ask for c'
    'larifications or more information from the user than providing an answer based on assumpti'
    'ons. Relevant means all parts of the response closely connect or are appropriate to what i'
    's being asked. Concise means the response is clear and not verbose or excessive. Then cons'
    'ider the creativity and novelty of the assistant’s answers when needed. Finally, identify '
    'any missing important information in the assistants’ answers that would be beneficial to i'
    'nclude when responding to the user prompt. do not provide any justification or explanation'
    ' for your response. You must output only one of the following choices as your final verdic'
    't: ‘A’ if the response of assistant A is better ‘B’ if the response of assistant B is bett'
    'er ‘Tie’ if the responses are tied'
)

# The user message carrying the prompt and the two answers. The paper prints only the system
# prompt ("adapted from [16]", Chiang et al., Chatbot Arena); its wording follows the LMSYS
# Arena-Hard judge prompt, so the user message uses Arena-Hard's pairwise layout (our choice).
JUDGE_USER_TEMPLATE = (
    "<|User Prompt|>\n{question}\n\n"
    "<|The Start of Assistant A's Answer|>\n{answer_a}\n<|The End of Assistant A's Answer|>\n\n"
    "<|The Start of Assistant B's Answer|>\n{answer_b}\n<|The End of Assistant B's Answer|>"
)
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

    def __post_init__(self):
        if not isinstance(self.judge_model, str) or not self.judge_model.strip():
            raise UserError("a judge needs a model name (--judge)")
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
            raise UserError(f"the judge user template is not a valid template ({exc}); "
                            "write literal braces as {{ and }}") from None
        if fields != set(USER_FIELDS):
            raise UserError(f"the judge user template must use exactly the fields {{question}}, {{answer_a}}, "
                            f"{{answer_b}}; it uses {sorted(fields)}")

    @property
    def prompt_hash(self) -> str:
        """First 16 hex digits of sha256(system prompt + NUL + user template)."""
        return hashlib.sha256((self.prompt_template + "\x00" + self.user_template).encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------- parsing ---

_ARENA_HARD = re.compile(r"\[\[\s*([AB])\s*(>>|>|=|<<|<)\s*([AB])\s*\]\]")
_VERDICT_IS = re.compile(r"(?i:verdict|winner|answer|better)\s*(?i:is)?\s*[:\-]?\s*[\"'‘“\[(*]*\s*(A|B|(?i:tie))(?![A-Za-z])")
_ASSISTANT = re.compile(r"(?i:assistant)\s+([AB])(?![A-Za-z])")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'’])(A|B)(?![A-Za-z0-9'’])")
_TIE = re.compile(r"(?i)(?<![a-z])(tie|tied|tie\s*\(bothbad\)|draw|equal(ly good)?)(?![a-z])")
_STRIP = " \t\r\n\"'‘’“”`*[](){}.,:;!"


def _norm_verdict(v: str) -> str:
    return "tie" if v.lower() in ("tie", "tied", "draw", "=") else v.upper()


def parse_verdict(raw: str | None) -> str | None:
    """The judge's verdict in presentation terms: 'A', 'B', 'tie' or None (unparseable/ambiguous).

    In order: the whole output is a verdict ("A", "‘B’", "[[Tie]]", "b", "tie."); its first word is
    "A"/"B" (upper case) or "tie"; Arena-Hard marks ("[[A>B]]", "[[A=B]]"); "verdict/winner/answer
    is X"; the only one of "Assistant A"/"Assistant B" named; the only verdict word present
    (standalone capital A or B, or tie/tied/draw). Anything naming two verdicts is None.
    """
    if raw is None or not isinstance(raw, str):
        return None
    text = raw.strip()
    whole = text.strip(_STRIP)
    if whole.lower() in ("a", "b", "tie", "tied", "draw"):
        return _norm_verdict(whole)
    first = re.split(r"[\s,.:;!]+", whole, maxsplit=1)[0].strip(_STRIP) if whole else ""
    if first in ("A", "B") or first.lower() in ("tie", "tied"):
        return _norm_verdict(first)
    m = _ARENA_HARD.search(text)
    if m:
        left, op, right = m.groups()
        if op == "=":
            return "tie"
        better = left if op.startswith(">") else right
        return better if left != right else None
    for m in _VERDICT_IS.finditer(text):
        return _norm_verdict(m.group(1))
    named = {m.group(1) for m in _ASSISTANT.finditer(text)}
    if len(named) == 1 and not _TIE.search(text):
        return named.pop()
    found = {m.group(1) for m in _STANDALONE.finditer(text)} | {"tie" for _ in _TIE.finditer(text)}
    if len(found) == 1:
        return found.pop()
    return None


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


def _run_models(con, run: str, present: list[str]) -> list[str]:
    """The run's models in its configured order (pairs are (earlier, later)), else sorted."""
    row = con.execute("SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = ?", [run]).fetchone()
    order: list[str] = []
    if row and row[0]:
        try:
            cfg = json.loads(row[0])
            models = cfg.get("models", []) if isinstance(cfg, dict) else []
            order = [m if isinstance(m, str) else (m.get("name") if isinstance(m, dict) else str(m)) for m in models]
        except (json.JSONDecodeError, AttributeError):
            order = []
    ranked = [m for m in order if m in present]
    return ranked + sorted(m for m in present if m not in ranked)


def plan_tasks(generations: pd.DataFrame, models: Sequence[str], orders: str, seed: int) -> tuple[list[JudgeTask], int]:
    """Every (unit, mode, model pair, order) to judge, and the number of pairs skipped because a
    generation of one of the two models is missing.

    Args:
        generations: columns model, prompt_id, repeat, mode (one row per stored generation).
        models: the run's models in order; pairs are (models[i], models[j]) with i < j.
    """
    have = set(zip(generations["model"], generations["prompt_id"], generations["repeat"].astype(int), generations["mode"]))
    units = sorted({(p, int(r), mo) for _, p, r, mo in have}, key=lambda u: (u[2], u[0], u[1]))
    tasks, missing = [], 0
    for pid, rep, mode in units:
        for ma, mb in combinations(models, 2):
            if (ma, pid, rep, mode) not in have or (mb, pid, rep, mode) not in have:
                missing += 1
                continue
            pres = ("ab", "ba") if orders == "both" else (random_order(seed, pid, rep, mode, ma, mb),)
            tasks.extend(JudgeTask(pid, rep, mode, ma, mb, o) for o in pres)
    return tasks, missing


def build_messages(cfg: JudgeConfig, question: str, response_a: str, response_b: str, presented: str) -> list[dict]:
    """The chat messages for one judgement; ``presented='ba'`` shows model_b's response first."""
    first, second = (response_a, response_b) if presented == "ab" else (response_b, response_a)
    user = cfg.user_template.format(question=question or "", answer_a=first or "", answer_b=second or "")
    return [{"role": "system", "content": cfg.prompt_template}, {"role": "user", "content": user}]


# ------------------------------------------------------------------------------ judges -------

def model_complete_fn(cfg: JudgeConfig) -> CompleteFn:
    """Greedy completion with a local model the engine can load (``engine.models``)."""
    from engine import generation, models  # heavy imports only when a real model judges

    lm = models.load_model(cfg.judge_model)

    def complete(messages_list: list[list[dict]]) -> list[str]:
        return generation.complete(lm, messages_list, max_new_tokens=cfg.max_new_tokens, temperature=0.0, seed=cfg.seed)

    return complete


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
            res = subprocess.run(argv, input=payload, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            raise UserError(f"external judge command not found: {argv[0]!r}") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"external judge command timed out after {timeout_s:.0f} s: {command!r}") from None
        if res.returncode != 0:
            raise UserError(f"external judge command failed (exit {res.returncode}): {res.stderr.strip()[:500]}")
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

@dataclass
class _Counts:
    judged: int = 0
    verdicts: dict = field(default_factory=lambda: {"A": 0, "B": 0, "tie": 0, None: 0})


def judge_run(db, run: str, judge_model: str | None = None, cfg: JudgeConfig | None = None,
              complete_fn: CompleteFn | None = None, *, progress_file=None, replace: bool = False,
              show_bar: bool = True) -> dict:
    """Judge every pair of models on every unit and mode of ``run``; resumable.

    Args:
        db: database path. run: the run id.
        judge_model: the judge's name (stored in ``judgments.judge``); defaults to cfg.judge_model.
        cfg: :class:`JudgeConfig` (default: the paper's prompt, both orders).
        complete_fn: ``messages_list -> list[str]``; default loads ``judge_model`` locally.
        replace: delete this run's earlier judgments by this judge first (e.g. after editing the
            prompt); without it, judgments already stored are skipped (resume), and stored rows
            made with a different prompt are a UserError.

    Returns:
        Summary dict: tasks planned, judged now, skipped (already stored), pairs without both
        generations, verdict counts and the number of unparseable outputs over all stored rows.
    """
    if cfg is None:
        if judge_model is None:
            raise UserError("give a judge model")
        cfg = JudgeConfig(judge_model=judge_model)
    judge = judge_model or cfg.judge_model
    # 1. plan: every (unit, mode, pair, order) with both generations present
    with store.reader(db) as con:
        gens = con.execute("SELECT model, prompt_id, repeat, mode FROM generations WHERE run_id = ?", [run]).df()
        if gens.empty:
            raise UserError(f"run {run!r} has no generations; known runs: {', '.join(store.known_runs(con)) or '(none)'}")
        models = _run_models(con, run, sorted(set(gens["model"])))
        old_hashes = {r[0] for r in con.execute(
            "SELECT DISTINCT judge_prompt_hash FROM judgments WHERE run_id = ? AND judge = ?", [run, judge]).fetchall()}
    if len(models) < 2:
        raise UserError(f"run {run!r} has generations of one model only ({models[0]}); judging needs two or more")
    if old_hashes - {cfg.prompt_hash} and not replace:
        raise UserError(f"run {run!r} already has judgments by {judge!r} made with a different judge prompt; "
                        "pass --replace to redo them, or judge under another --judge-name")
    tasks, missing = plan_tasks(gens, models, cfg.orders, cfg.seed)
    if replace:
        with store.transaction(db) as con:
            con.execute("DELETE FROM judgments WHERE run_id = ? AND judge = ?", [run, judge])
    # 2. resume: skip what is stored
    with store.reader(db) as con:
        done = {tuple(r) for r in con.execute(
            "SELECT prompt_id, repeat, mode, model_a, model_b, presented FROM judgments WHERE run_id = ? AND judge = ?",
            [run, judge]).fetchall()}
    pending = [t for t in tasks if t.key not in done]
    progress = Progress(len(tasks), kind="judge", job=f"{run}:{judge}", path=progress_file,
                        done=len(tasks) - len(pending), show_bar=show_bar)
    if complete_fn is None and pending:
        complete_fn = model_complete_fn(cfg)
    counts = _Counts()
    with progress.track("interrupted; completed batches are stored"):
        for start in range(0, len(pending), cfg.batch_size):
            batch = pending[start:start + cfg.batch_size]
            # 3. build the prompts of this batch (texts read per batch: a long run never sits in memory)
            texts, questions = _batch_texts(db, run, batch)
            messages = [build_messages(cfg, questions.get(t.prompt_id, ""),
                                       texts[(t.model_a, t.prompt_id, t.repeat, t.mode)],
                                       texts[(t.model_b, t.prompt_id, t.repeat, t.mode)], t.presented) for t in batch]
            # 4. call the judge
            raws = list(complete_fn(messages))
            if len(raws) != len(batch):
                raise UserError(f"the judge returned {len(raws)} outputs for {len(batch)} prompts")
            # 5. parse and store the batch in one transaction
            rows = []
            for t, raw in zip(batch, raws):
                parsed = parse_verdict(raw)
                counts.verdicts[parsed] += 1
                rows.append([run, judge, t.prompt_id, t.repeat, t.mode, t.model_a, t.model_b, t.presented,
                             cfg.prompt_hash, raw, parsed, winner_from_verdict(parsed, t.presented)])
            with store.transaction(db) as con:
                con.executemany("INSERT OR REPLACE INTO judgments VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            counts.judged += len(batch)
            progress.update(len(batch))
    with store.reader(db) as con:
        stored = con.execute("""SELECT mode, coalesce(parsed, 'unparseable') AS v, count(*) FROM judgments
                                WHERE run_id = ? AND judge = ? GROUP BY 1, 2""", [run, judge]).fetchall()
    empty = {k: 0 for k in ("A", "B", "tie", "unparseable")}
    totals, by_mode = dict(empty), {}
    for mode, v, n in stored:
        totals[v] += int(n)
        by_mode.setdefault(mode, dict(empty))[v] += int(n)
    return {
        "run": run, "judge": judge, "orders": cfg.orders, "prompt_hash": cfg.prompt_hash, "models": models,
        "n_tasks": len(tasks), "n_judged_now": counts.judged, "n_skipped_existing": len(tasks) - len(pending),
        "n_pairs_missing_generation": missing,
        "n_unparseable_now": counts.verdicts[None],
        "stored_verdicts": totals, "stored_verdicts_by_mode": by_mode, "n_unparseable": totals["unparseable"],
    }


def _batch_texts(db, run: str, batch: list[JudgeTask]) -> tuple[dict, dict]:
    keys = {(m, t.prompt_id, t.repeat, t.mode) for t in batch for m in (t.model_a, t.model_b)}
    pids = sorted({t.prompt_id for t in batch})
    with store.reader(db) as con:
        con.execute("CREATE TEMP TABLE _want (model VARCHAR, prompt_id VARCHAR, repeat INTEGER, mode VARCHAR)")
        con.executemany("INSERT INTO _want VALUES (?, ?, ?, ?)", [list(k) for k in keys])
        rows = con.execute("""SELECT g.model, g.prompt_id, g.repeat, g.mode, g.text FROM generations g
                              JOIN _want w USING (model, prompt_id, repeat, mode) WHERE g.run_id = ?""", [run]).fetchall()
        q = con.execute(f"""SELECT p.prompt_id, coalesce(p.user_prompt, p.question) FROM prompts p
                            JOIN runs r ON r.dataset_id = p.dataset_id
                            WHERE r.run_id = ? AND p.prompt_id IN ({', '.join('?' * len(pids))})""",
                        [run, *pids]).fetchall()  # placeholders only; values are parameters
    texts = {(m, p, int(r), mo): t for m, p, r, mo, t in rows}
    return texts, {p: q for p, q in q}


# ------------------------------------------------------------------------ comparisons --------

def judgments_to_comparisons(db, run: str, judge: str, mode: str | None = None,
                             combine: str = "separate") -> pd.DataFrame:
    """Judge verdicts as normalised pairwise comparisons for win-rates.

    ``combine="separate"``: each judged order is its own comparison row (with both orders, every
    pair is counted twice, once per position, so position bias cancels in the win-rate; the
    ``presented`` column tells them apart). ``combine="agree"``: one row per (unit, mode, pair):
    the common verdict when both orders agree, 'tie' when they disagree (a position-driven
    verdict is no preference), the parsed one when the other is unparseable, NULL when neither
    parsed. Unparseable verdicts stay as winner NULL rows (count them; win-rates drop them).

    Returns:
        DataFrame: prompt_id, repeat, mode, model_a, model_b, presented ('ab'|'ba'|'ab+ba'),
        winner ('a'|'b'|'tie'|None), plus human_winner (None) and judge_winner (= winner), so it
        is also in the normalised comparisons form of engine.tasks.comparisons / engine.analysis.comparisons.
    """
    if combine not in COMBINE:
        raise UserError(f"unknown combine {combine!r}; allowed: {', '.join(COMBINE)}")
    if mode is not None and mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {', '.join(store.MODES)}")
    sql = """SELECT prompt_id, repeat, mode, model_a, model_b, presented, winner FROM judgments
             WHERE run_id = ? AND judge = ?""" + (" AND mode = ?" if mode else "") + \
          " ORDER BY mode, prompt_id, repeat, model_a, model_b, presented"
    df = store.query_df(db, sql, [run, judge] + ([mode] if mode else []))
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
        rows.append(dict(zip(["prompt_id", "repeat", "mode", "model_a", "model_b"], key),
                         presented="+".join(sorted(g["presented"])), winner=w))
    return _with_label_columns(pd.DataFrame(rows, columns=list(df.columns)).astype({"winner": object}))


def _with_label_columns(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(human_winner=pd.Series([None] * len(df), index=df.index, dtype=object),
                     judge_winner=df["winner"].astype(object))


def judgments_to_set(db, run: str, judge: str, mode: str, name: str, combine: str = "separate",
                     replace: bool = False) -> dict:
    """Store a run's judge verdicts (one mode) as comparison set ``name`` (judge labels only).

    prompt_id in the set is ``"<prompt_id>:<repeat>"`` (one unit); rows follow
    :func:`judgments_to_comparisons` with ``combine``. Unparseable verdicts become rows with no label.
    """
    from engine.tasks.comparisons import store_comparison_set

    if mode not in store.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {', '.join(store.MODES)}")
    df = judgments_to_comparisons(db, run, judge, mode, combine)
    if df.empty:
        raise UserError(f"no judgments by {judge!r} on run {run!r} in mode {mode!r}; run `python -m engine judge` first")
    rows = pd.DataFrame({"prompt_id": df.prompt_id.astype(str) + ":" + df.repeat.astype(str),
                         "model_a": df.model_a, "model_b": df.model_b, "human_winner": None,
                         "judge_winner": df.winner}).astype(object)
    meta = {"format": "judgments", "run": run, "judge": judge, "mode": mode, "combine": combine}
    replaced = store_comparison_set(db, rows, name, f"judgments:{run}:{judge}:{mode}", meta, replace=replace)
    return {"name": name, "n_rows": int(len(rows)), "n_unlabelled": int(rows.judge_winner.isna().sum()),
            "replaced": replaced, **meta}
