"""Scoring generations: answer extraction rules and per-generation scores.

The paper's rule (docs/METHODS.md 1.5) is reproduced exactly by :func:`extract_paper`.
"""

from __future__ import annotations

PAPER_CHOICES = ("A", "B", "C", "D")


def extract_paper(text: str | None) -> str:
    """The reference notebook's ``get_choice``, bit for bit (docs/METHODS.md 1.5).

    Text before the first space; delete ``. " , ) ;``; strip; if not A-D keep the part before
    the first newline; if still not A-D the answer is "E" (always wrong). Case-sensitive.
    """
    if text is None or not isinstance(text, str):
        return "E"
    choice = text.split(" ")[0]
    for ch in '.",);':
        choice = choice.replace(ch, "")
    choice = choice.strip()
    if choice not in PAPER_CHOICES:
        choice = choice.split("\n")[0]
    if choice not in PAPER_CHOICES:
        return "E"
    return choice


# ---------------------------------------------------------------------------------------------
# More forgiving rules and per-generation / per-run scoring.
# ---------------------------------------------------------------------------------------------

import json  # noqa: E402  (kept below extract_paper so that block stays exactly as published)
import re  # noqa: E402
import string  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from typing import Any  # noqa: E402

import pandas as pd  # noqa: E402

from engine.config import RULES, rule_for_dataset  # noqa: E402
from engine.errors import UserError  # noqa: E402
from engine.store import scores as scores_store  # noqa: E402
from engine.tasks.numbers import extract_numeric, normalise_number  # noqa: E402,F401  (re-exported)

NO_ANSWER = "E"  # what the multiple-choice rules extract when they find no option (always wrong)

# "answer" in any case, the letter itself upper case ("the answer is a bit..." is not "A").
_ANSWER_IS = re.compile(r"(?i:answer)\s*(?:(?i:is)|:)\s*[:\-]?\s*\(?\s*([A-Z])\s*\)?(?![A-Za-z])")
_PAREN_LETTER = re.compile(r"\(\s*([A-Z])\s*\)")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'’])([A-Z])(?![A-Za-z0-9'’])")
_PUNCT_TABLE = str.maketrans({c: " " for c in string.punctuation + "‘’“”–—…"})


def _choices_of(prompt_row: Mapping[str, Any] | None) -> dict[str, str]:
    """The {letter: option text} of a prompt row (JSON string, dict or missing -> A-D, no text)."""
    raw = None if prompt_row is None else prompt_row.get("choices")
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raw = None
    if isinstance(raw, Mapping) and raw:
        return {str(k).strip(): "" if v is None else str(v) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)) and raw:
        return {string.ascii_uppercase[i]: str(v) for i, v in enumerate(raw)}
    return {c: "" for c in PAPER_CHOICES}


def normalise_text(text: str | None) -> str:
    """Lower case, punctuation to spaces, whitespace collapsed (the "exact" rule's normal form)."""
    if text is None:
        return ""
    return " ".join(str(text).lower().translate(_PUNCT_TABLE).split())


def extract_lenient(text: str | None, choices: Mapping[str, str] | None = None) -> str:
    """A forgiving multiple-choice extraction; returns an option letter or "E".

    In order: an explicit "Answer: X" / "the answer is (X)"; the paper rule; a parenthesised "(X)"; the
    text of exactly one option (the whole response equal to it, else contained in it); a standalone
    capital option letter when exactly one distinct such letter occurs. Letters are the keys of
    ``choices`` (default A-D). Otherwise "E".
    """
    if text is None or not isinstance(text, str):
        return NO_ANSWER
    letters = tuple(choices) if choices else PAPER_CHOICES
    stripped = text.strip()
    for m in _ANSWER_IS.finditer(stripped):  # an explicit statement beats a leading article "A ..."
        if m.group(1) in letters:
            return m.group(1)
    paper = extract_paper(stripped)
    if paper in letters:
        return paper
    for m in _PAREN_LETTER.finditer(stripped):
        if m.group(1) in letters:
            return m.group(1)
    if choices:
        norm = normalise_text(stripped)
        opts = {k: normalise_text(v) for k, v in choices.items() if normalise_text(v)}
        equal = [k for k, v in opts.items() if v == norm]
        if len(equal) == 1:
            return equal[0]
        contained = [k for k, v in opts.items() if re.search(rf"(?<!\w){re.escape(v)}(?!\w)", norm)]
        if len(contained) == 1:
            return contained[0]
    # Last resort: a standalone capital option letter, only when exactly one distinct letter
    # occurs ("A,B,D" or truth-table variables "| C | D |" are not answers).
    standalone = {m.group(1) for m in _STANDALONE.finditer(stripped)} & set(letters)
    if len(standalone) == 1:
        return standalone.pop()
    return NO_ANSWER


def _gold_number(gold: str | None) -> str | None:
    if gold is None:
        return None
    return extract_numeric(str(gold))


def score_generation(
    text: str | None, prompt_row: Mapping[str, Any] | None, rule: str = "paper"
) -> tuple[str | None, float | None]:
    """(extracted answer, score) of one generation under ``rule``.

    Args:
        text: the generated text (None counts as no answer).
        prompt_row: a mapping with ``gold`` (and ``choices`` for the lenient rule), e.g. a row of
            the prompts table.
        rule: one of :data:`RULES`.

    Returns:
        The extracted answer (None when the numeric rule finds no number) and the score: 1.0 when
        it matches the gold answer, 0.0 when not, None when the prompt has no gold answer.
    """
    if rule not in RULES:
        raise UserError(f"unknown scoring rule {rule!r}; allowed: {', '.join(RULES)}")
    gold = None if prompt_row is None else prompt_row.get("gold")
    if gold is not None and isinstance(gold, float) and pd.isna(gold):
        gold = None
    if rule == "paper":
        extracted: str | None = extract_paper(text)
        target = None if gold is None else str(gold).strip()
    elif rule == "lenient":
        extracted = extract_lenient(text, _choices_of(prompt_row))
        target = None if gold is None else str(gold).strip().upper()
    elif rule == "numeric":
        extracted = extract_numeric(text)
        target = _gold_number(gold)
        if gold is not None and target is None:
            raise UserError(
                f"gold answer {gold!r} holds no number; the numeric rule needs numeric gold answers"
            )
    else:  # exact
        extracted = normalise_text(text)
        target = None if gold is None else normalise_text(str(gold))
    if gold is None:
        return extracted, None
    return extracted, float(extracted is not None and extracted == target)


def default_rule(kind: str | None, dataset_id: str | None = None) -> str:
    """The scoring rule that fits a dataset when none is asked for: a registered ``hf:`` dataset's
    rule of its layout, else :func:`engine.config.rule_for_dataset` (numeric -> "numeric", prompt
    lists -> "exact", the built-in MC ``demo`` -> "lenient", other multiple choice -> "paper")."""
    if kind not in ("numeric", "prompts"):
        from engine.tasks.hf_datasets import default_rule_of

        registry = default_rule_of(dataset_id or "")  # hf: datasets: the rule of their layout
        if registry is not None:
            return registry
    return rule_for_dataset(kind, dataset_id)


def run_default_rule(db, run: str) -> str:
    """:func:`default_rule` of the dataset of a stored run (UserError for an unknown run)."""
    dataset, kind = scores_store.run_dataset_kind(db, run)
    return default_rule(kind, dataset)


def _has_gold(gold: object) -> bool:
    """A stored gold answer (None and NaN are none): :func:`score_generation`'s test."""
    return gold is not None and not (isinstance(gold, float) and pd.isna(gold))


def score_run(db, run: str, rule: str | None = None) -> dict:
    """Score every generation of ``run`` under ``rule`` and store the scores in ONE transaction.

    ``rule=None`` picks the rule that fits the run's dataset (:func:`default_rule`).

    Idempotent: the run's earlier scores for the same rule are replaced; other rules are kept, so
    scoring a run that is still generating stores what exists (``complete`` False, a ``warning``)
    and scoring it again after it finishes fills in the rest.
    Returns a summary: rule, number scored, mean score per (model, mode), counts of "E"/no answer
    and of prompts without a gold answer.

    Raises:
        UserError: an unknown rule, a run without generations, or a run none of whose prompts has a
            gold answer (a chat run: nothing is stored; it is judged, not scored).
    """
    if rule is None:
        rule = run_default_rule(db, run)
    if rule not in RULES:
        raise UserError(f"unknown scoring rule {rule!r}; allowed: {', '.join(RULES)}")
    data = scores_store.scoring_input(db, run)
    prompts, gens = data.prompts, data.generations
    if gens.empty:
        raise UserError(f"run {run!r} has no generations to score")
    if not any(_has_gold(prompts.get(pid, (None, None))[0]) for pid in set(gens["prompt_id"])):
        # nothing to compare with: storing an all-missing score would read as "scored" everywhere
        raise UserError(
            f"run {run!r} has no gold answers to score under rule {rule!r} (its prompts carry none); "
            f"nothing was stored: compare its answers with a judge instead (python -m engine judge "
            f"--run {run} ...), then report it (python -m engine report --run {run})"
        )
    # Most generations repeat (a bare letter, the same answer over repeats): score each distinct
    # (text, prompt) once and broadcast; score_generation stays the single definition.
    cache: dict[tuple, tuple[str | None, float | None]] = {}
    extracted, scores = [], []
    for text, pid in zip(gens["text"].tolist(), gens["prompt_id"].tolist()):
        text = text if isinstance(text, str) else None
        hit = cache.get((text, pid))
        if hit is None:
            gold, choices = prompts.get(pid, (None, None))
            hit = cache[(text, pid)] = score_generation(text, {"gold": gold, "choices": choices}, rule)
        extracted.append(hit[0])
        scores.append(hit[1])
    out = pd.DataFrame(
        {
            "run_id": run,
            "model": gens["model"],
            "prompt_id": gens["prompt_id"],
            "repeat": gens["repeat"].astype("int64"),
            "mode": gens["mode"],
            "rule": rule,
            "extracted": pd.Series(extracted, dtype="object"),
            "score": pd.Series(scores, dtype="float64"),
        }
    )
    scores_store.replace_scores(db, run, rule, out)
    means = (
        out.dropna(subset=["score"])
        .groupby(["model", "mode"])["score"]
        .mean()
        .round(6)
        .reset_index()
        .to_dict("records")
    )
    no_answer = (
        int(sum(e is None or e == NO_ANSWER for e in extracted))
        if rule in ("paper", "lenient", "numeric")
        else 0
    )
    status, n_expected = data.status, data.n_units
    partial = n_expected is not None and len(out) < n_expected
    warning = None
    if partial and n_expected is not None:
        what = "is still generating" if status == "running" else f"stopped (status {status})"
        warning = (
            f"run {run!r} {what}: scored {len(out)} of its {n_expected} generations; "
            "score it again once it has finished to fill in the rest"
        )
    return {
        "run": run,
        "rule": rule,
        "n_scored": int(len(out)),
        "n_no_gold": int(out["score"].isna().sum()),
        "n_no_answer": no_answer,
        "mean_score": means,
        "run_status": status,
        "n_expected": None if n_expected is None else int(n_expected),
        "complete": not partial,
        "warning": warning,
    }
