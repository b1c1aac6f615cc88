"""Tasks layer: link a harness's samples to the generations a server of this product stored
(``engine serve``; docs/METHODS.md 1.6), so that an imported lm-eval or Inspect run knows how its
models were sampled (coupled or independent, which seed) and carries their tokens and traces.

A sample made a request (:mod:`engine.tasks.harness_requests` rebuilds it from the log); the key rule
(:func:`engine.serving.keys.questions`) gives the request's prompt id, the same id the server stored its
generations under. Within one (served run, model, mode, prompt id) the harness's answers are matched to
the stored generations by their text, so a document asked R times (lm-eval's ``repeats``, Inspect's
epochs, or R runs of the harness) gets the R stored repeats, whichever order the client logged them in
(identical requests are exchangeable: equal texts may swap repeats without changing anything the
analyses read). Text match, in order: equal; equal after stripping whitespace; the stored text starts
with the harness's (a client that cut its answer at a stop string). A log links to the one served run
and mode that matches most of its samples; a sample that matches nothing there is unmatched (the
import reports it and leaves it out: never mixed in with the linked ones).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from engine.errors import UserError
from engine.serving import keys
from engine.store.served import served_rows
from engine.store.served_links import ServedRunFacts, served_runs
from engine.tasks.harness import HarnessLog, HarnessSample

INSPECT_OPENAI_PREFIX = "openai-api/"  # Inspect's model name: openai-api/<service>/<model as sent>


@dataclass(frozen=True)
class ServedGen:
    """One stored generation of a served run, as the import copies it."""

    run_id: str
    model: str  # the served model name (the request's `model`)
    prompt_id: str
    repeat: int
    mode: str
    seed: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str | None


@dataclass(frozen=True)
class LogLink:
    """How one harness log links to a served run: the run, mode and model, the served generation of each
    matched sample (by its index in ``log.samples``) and the samples that match none."""

    run_id: str
    model: str
    mode: str
    key_mode: str | None
    matched: dict[int, ServedGen]
    unmatched: tuple[int, ...]

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(sorted({g.seed for g in self.matched.values()}))


def sent_model_names(log: HarnessLog) -> list[str]:
    """The names the client may have sent as ``model``: the log's, and for Inspect's ``openai-api``
    provider the part after ``openai-api/<service>/``."""
    names = [log.model]
    if log.model.startswith(INSPECT_OPENAI_PREFIX) and log.model.count("/") >= 2:
        names.append(log.model.split("/", 2)[2])
    return names


def sample_prompt_id(s: HarnessSample) -> str | None:
    """The prompt id the server gave the sample's request (None: the log does not hold the request, or
    a request the key rule refuses, or a batched prompt)."""
    if s.request is None:
        return None
    endpoint, body = s.request
    if body.get(keys.KEY_FIELD):
        pin = body[keys.KEY_FIELD]
        return str(pin.get("prompt_id")) if isinstance(pin, dict) else None
    try:
        qs = keys.questions(body, endpoint)
    except (keys.RequestKeyError, ValueError):
        return None
    return qs[0].prompt_id if len(qs) == 1 else None


_TEXT_RULES: tuple[Callable[[str, str], bool], ...] = (
    lambda h, g: h == g,
    lambda h, g: h.strip() == g.strip(),
    lambda h, g: bool(h) and g.startswith(h),
)


def assign(answers: Sequence[tuple[int, str | None]], gens: Sequence[ServedGen]) -> dict[int, ServedGen]:
    """Match a group's harness answers (sample index, text) to its stored generations by text (the rules
    of the module docstring, tried in order over the whole group), each generation at most once, the
    smaller repeat first among equal texts."""
    free = sorted(gens, key=lambda g: g.repeat)
    out: dict[int, ServedGen] = {}
    for rule in _TEXT_RULES:
        for i, text in answers:
            if i in out or text is None:
                continue
            hit = next((g for g in free if rule(text, g.text)), None)
            if hit is not None:
                out[i] = hit
                free.remove(hit)
    return out


def _groups(rows: pd.DataFrame, run_id: str) -> dict[tuple[str, str, str], list[ServedGen]]:
    """(model, mode, prompt id) -> its stored generations."""
    out: dict[tuple[str, str, str], list[ServedGen]] = {}
    for r in rows.itertuples(index=False):
        g = ServedGen(
            run_id,
            str(r.model),
            str(r.prompt_id),
            int(r.repeat),
            str(r.mode),
            int(r.seed),
            "" if r.text is None else str(r.text),
            tuple(int(t) for t in (r.token_ids if r.token_ids is not None else ())),
            None if r.finish_reason is None else str(r.finish_reason),
        )
        out.setdefault((g.model, g.mode, g.prompt_id), []).append(g)
    return out


def _candidate(
    log: HarnessLog, pids: list[str | None], groups: dict, facts: ServedRunFacts, model: str, mode: str
) -> LogLink:
    by_pid: dict[str, list[tuple[int, str | None]]] = {}
    for i, (s, pid) in enumerate(zip(log.samples, pids)):
        if pid is not None:
            by_pid.setdefault(pid, []).append((i, s.text))
    matched: dict[int, ServedGen] = {}
    for pid, answers in by_pid.items():
        matched.update(assign(answers, groups.get((model, mode, pid), [])))
    unmatched = tuple(i for i in range(len(log.samples)) if i not in matched)
    return LogLink(facts.run_id, model, mode, facts.key_mode, matched, unmatched)


def link_log(log: HarnessLog, served: Sequence[tuple[ServedRunFacts, dict]]) -> LogLink | None:
    """The served run, model and mode that match most of ``log``'s samples (None: no sample matches
    any). UserError when two match equally many (say which with ``--served RUN``)."""
    pids = [sample_prompt_id(s) for s in log.samples]
    if not any(pids):
        return None
    names = sent_model_names(log)
    best: list[LogLink] = []
    for facts, groups in served:
        pairs = {(m, mode) for m, mode, _ in groups if m in names}
        for model, mode in sorted(pairs):
            c = _candidate(log, pids, groups, facts, model, mode)
            if not c.matched:
                continue
            if not best or len(c.matched) > len(best[0].matched):
                best = [c]
            elif len(c.matched) == len(best[0].matched):
                best.append(c)
    if len(best) > 1:
        shown = ", ".join(f"run {c.run_id!r} ({c.mode})" for c in best)
        raise UserError(
            f"{log.path}: the samples of model {log.model!r} match {len(best[0].matched)} served "
            f"generations in each of {shown}: name the served run with --served RUN"
        )
    return best[0] if best else None


def link_logs(
    db: str | os.PathLike, logs: Sequence[HarnessLog], runs: Sequence[str] | None = None
) -> list[LogLink | None]:
    """One :class:`LogLink` (or None) per log, against the database's served runs (``runs``: only
    these). UserError for a named run that is not a served run of ``db``."""
    facts = served_runs(db)
    if runs:
        known = {f.run_id for f in facts}
        bad = [r for r in runs if r not in known]
        if bad:
            raise UserError(
                f"--served {bad[0]!r} is not a served run of {str(db)!r}; served runs: "
                f"{', '.join(sorted(known)) or '(none)'}"
            )
        facts = [f for f in facts if f.run_id in set(runs)]
    if not facts or not any(s.request is not None for lg in logs for s in lg.samples):
        return [None] * len(logs)
    served = [(f, _groups(served_rows(db, f.run_id), f.run_id)) for f in facts]
    return [link_log(lg, served) for lg in logs]
