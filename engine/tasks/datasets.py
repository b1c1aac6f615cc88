"""Task layer of datasets: data -> stored labels.

Datasets: the built-in demo sets, MMLU-layout CSV/JSONL files, numeric sets and prompt lists.

Built-ins (``list_datasets()``), stored under ``engine/data/`` and written for this project:

* ``demo``: 40 multiple-choice questions in five subjects (arithmetic, geography, science,
  computing, language), gold answers balanced over A-D (10 each).
* ``demo-chat``: 10 open questions (kind ``prompts``; no gold answer).
* ``demo-gsm``: 10 short word problems with numeric gold answers (kind ``numeric``).
* ``demo-numbers``: 40 everyday numeric questions ("How many legs does a spider have?"; kind
  ``numeric``, system prompt "Answer with the number only."): the one-click demo, a task the
  packaged SmolLM2-135M can partly do.

Files (``load_dataset(path)``):

* MMLU layout, ``.csv`` without header (MMLU's own files: question, A, B, C, D, answer letter) or
  with a header naming ``question, A, B, C, D, answer`` (optional ``id``, ``subject``); ``.jsonl``
  with the same keys, or ``{"question", "choices": [4 strings], "answer": 0-3 or letter}``.
  A folder of MMLU CSVs (``<subject>_test.csv``) loads all subjects in alphabetical order.
* Numeric: ``question`` + ``answer`` columns whose answers are numbers (a GSM8K-style
  ``"... #### 42"`` answer keeps the number after ``####``).
* Prompt lists: ``.txt`` (one prompt per non-empty line), or CSV/JSONL with a ``prompt`` column.

``prompt_id`` is stable: the ``id`` column when given, else ``"<dataset>/<index>"`` (for an MMLU
folder ``"<folder>/<subject>/<index in subject>"``), where the index counts rows of the full file,
so filtering by subject or ``limit`` never renumbers prompts.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from engine.errors import UserError
from engine.store.jsonl import parse_object
from engine.tasks.dataset_types import (  # re-exported: the types' home is the leaf dataset_types
    CHAT_SYSTEM_PROMPT,
    KINDS,
    LETTERS,
    MMLU_SYSTEM_PROMPT,
    NUMERIC_SYSTEM_PROMPT,
    Dataset,
    Prompt,
    format_mc_prompt,
)
from engine.tasks.numbers import extract_numeric

__all__ = [
    "CHAT_SYSTEM_PROMPT",
    "KINDS",
    "LETTERS",
    "MMLU_SYSTEM_PROMPT",
    "NUMERIC_SYSTEM_PROMPT",
    "Dataset",
    "Prompt",
    "format_mc_prompt",
    "DATA_DIR",
    "ARITH_SYSTEM_PROMPT",
    "list_datasets",
    "load_dataset",
]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
# ---------------------------------------------------------------------------------------------
# Built-ins

_BUILTINS = {
    "demo": "demo_mcq.jsonl",
    "demo-chat": "demo_chat.txt",
    "demo-gsm": "demo_gsm.jsonl",
    "demo-numbers": "demo_numbers.jsonl",
}
# Built-ins whose system prompt is not their kind's default: the one-click demo's everyday-numbers set
# asks for the bare number, so a few new tokens hold the answer (the numeric rule reads the last number).
ARITH_SYSTEM_PROMPT = "Answer with the number only."
_BUILTIN_SYSTEM = {"demo-numbers": ARITH_SYSTEM_PROMPT}


def list_datasets() -> list[str]:
    """Names of the built-in datasets (the default, ``demo``, first)."""
    return list(_BUILTINS)


def load_dataset(
    name_or_path: str, *, limit: int | None = None, subject: str | None = None, columns=None
) -> Dataset:
    """A built-in name, a CSV/JSONL/TXT file or a folder of MMLU CSVs, as a :class:`Dataset`.

    Args:
        name_or_path: "demo", "demo-chat", "demo-gsm", a file path, or a folder of MMLU CSVs.
            ``"PATH:subject"`` / ``"demo:science"`` is the same as passing ``subject``.
        limit: keep the first ``limit`` prompts (after the subject filter).
        subject: keep only prompts of this subject.
        columns: for ``hf:REPO[:CONFIG][:SPLIT]`` of a layout the registry does not know, an
            ``engine.tasks.hf_datasets.Columns`` naming its prompt/answer/choices/id columns.
    Raises:
        UserError: unknown name, missing/empty file, missing columns, bad answers (naming the row).
    """
    name = str(name_or_path).strip()
    if not name:
        raise UserError(f"empty dataset name; built-ins: {', '.join(list_datasets())}, or a file path")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise UserError(f"limit must be a positive integer, got {limit!r}")
    if name.startswith("hf:"):
        from engine.tasks.hf_datasets import load_hf

        return _select(load_hf(name, columns), subject=subject, limit=limit)
    if subject is None and ":" in name and not Path(name).exists():
        head, _, tail = name.rpartition(":")
        if head and tail and (head in _BUILTINS or Path(head).exists()):
            name, subject = head, tail
    if name in _BUILTINS:
        ds = _load_file(DATA_DIR / _BUILTINS[name], dataset_id=name)
        ds = Dataset(
            name, ds.kind, f"builtin:{name}", ds.prompts, _BUILTIN_SYSTEM.get(name, ds.system_prompt)
        )
    else:
        path = Path(name).expanduser()
        if path.is_dir():
            ds = _load_mmlu_folder(path)
        elif path.is_file():
            ds = _load_file(path, dataset_id=path.stem)
        else:
            raise UserError(
                f"unknown dataset {name!r}: not a built-in ({', '.join(list_datasets())}) "
                "and no such file or folder"
            )
    return _select(ds, subject=subject, limit=limit)


def _select(ds: Dataset, *, subject: str | None, limit: int | None) -> Dataset:
    prompts = ds.prompts
    dataset_id = ds.dataset_id
    if subject is not None:
        subjects = ds.subjects()
        if not subjects:
            raise UserError(
                f"dataset {ds.dataset_id!r} has no subjects; cannot filter by subject {subject!r}"
            )
        if subject not in subjects:
            raise UserError(
                f"unknown subject {subject!r} in {ds.dataset_id!r}; available: {', '.join(subjects)}"
            )
        prompts = tuple(p for p in prompts if p.subject == subject)
        dataset_id = f"{ds.dataset_id}:{subject}"
    if limit is not None:
        prompts = prompts[:limit]
    return Dataset(dataset_id, ds.kind, ds.source, prompts, ds.system_prompt)


# ---------------------------------------------------------------------------------------------
# Files


def _subject_of_stem(stem: str) -> str:
    return re.sub(r"_(test|val|dev|train)$", "", stem)


def _load_mmlu_folder(path: Path) -> Dataset:
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in (".csv", ".jsonl"))
    if not files:
        raise UserError(f"folder {str(path)!r} holds no .csv or .jsonl files")
    prompts: list[Prompt] = []
    for f in files:
        sub = _subject_of_stem(f.stem)
        ds = _load_file(f, dataset_id=f"{path.name}/{sub}", subject=sub)
        if ds.kind != "multiple_choice":
            raise UserError(f"{str(f)!r} is not in the MMLU layout (question, A, B, C, D, answer)")
        prompts.extend(ds.prompts)
    _check_unique(prompts, path)
    return Dataset(path.name, "multiple_choice", str(path.resolve()), tuple(prompts), MMLU_SYSTEM_PROMPT)


def _read_text(path: Path) -> str:
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:  # keep "\r\n" inside quoted fields
            text = fh.read()
    except UnicodeDecodeError as exc:
        raise UserError(f"{str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise UserError(f"cannot read {str(path)!r}: {exc.strerror}") from exc
    if not text.strip():
        raise UserError(f"{str(path)!r} is empty")
    return text


def _load_file(path: Path, *, dataset_id: str, subject: str | None = None) -> Dataset:
    suffix = path.suffix.lower()
    text = _read_text(path)
    if suffix == ".txt":
        prompts = [line.strip() for line in text.splitlines() if line.strip()]
        return Dataset(
            dataset_id,
            "prompts",
            str(path.resolve()),
            tuple(Prompt(f"{dataset_id}/{i}", p, question=p) for i, p in enumerate(prompts)),
            CHAT_SYSTEM_PROMPT,
        )
    if suffix == ".csv":
        rows = _csv_rows(text, path)
    elif suffix in (".jsonl", ".json", ".ndjson"):
        rows = _jsonl_rows(text, path)
    else:
        raise UserError(
            f"unsupported dataset file type {suffix or '(none)'!r} for {str(path)!r}; "
            "use .csv, .jsonl or .txt"
        )
    return _from_rows(rows, path, dataset_id=dataset_id, subject=subject)


def _csv_rows(text: str, path: Path) -> list[tuple[int, dict]]:
    """(line number, row dict). Without a header the MMLU order question, A, B, C, D, answer is
    assumed."""
    try:
        raw = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise UserError(f"{str(path)!r} is not valid CSV: {exc}") from exc
    if not raw:
        raise UserError(f"{str(path)!r} is empty")
    first = [c.strip().lower() for c in raw[0]]
    if {"question", "prompt"} & set(first):
        header, body, start = [c.strip() for c in raw[0]], raw[1:], 2
    else:
        if len(raw[0]) != 6:
            raise UserError(
                f"{str(path)!r} has no header and {len(raw[0])} columns in row 1; "
                "expected a header (question, A, B, C, D, answer / prompt) or the 6 MMLU "
                "columns question, A, B, C, D, answer"
            )
        header, body, start = ["question", "A", "B", "C", "D", "answer"], raw, 1
    rows = []
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise UserError(
                f"{str(path)!r} row {i + start}: {len(r)} columns, expected {len(header)} "
                f"({', '.join(header)})"
            )
        rows.append((i + start, dict(zip(header, r))))
    if not rows:
        raise UserError(f"{str(path)!r} has a header but no rows")
    return rows


def _jsonl_rows(text: str, path: Path) -> list[tuple[int, dict]]:
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        obj, problem = parse_object(line)
        if obj is None:
            raise UserError(f"{str(path)!r} line {n}: {problem}")
        rows.append((n, obj))
    return rows


def _norm_keys(row: dict) -> dict:
    """Column names matched case-insensitively; the choice letters kept upper case."""
    out = {}
    for k, v in row.items():
        key = str(k).strip()
        out[key.upper() if key.upper() in LETTERS else key.lower()] = v
    return out


def _from_rows(
    rows: list[tuple[int, dict]], path: Path, *, dataset_id: str, subject: str | None
) -> Dataset:
    where = str(path)
    cols = _norm_keys(rows[0][1]).keys()
    partial = [k for k in LETTERS if k in cols]
    if "question" in cols and partial and len(partial) < 4:
        raise UserError(
            f"{where!r}: missing choice columns "
            f"{', '.join(k for k in LETTERS if k not in cols)}; multiple choice needs "
            "question, A, B, C, D, answer"
        )
    if "prompt" in cols:
        kind = "prompts"
    elif "question" in cols and (all(k in cols for k in LETTERS) or "choices" in cols):
        kind = "multiple_choice"
    elif "question" in cols and "answer" in cols:
        kind = "numeric"
    else:
        raise UserError(
            f"{where!r}: cannot tell the layout from columns {', '.join(map(str, cols))}; "
            "need question, A, B, C, D, answer (multiple choice), question + answer "
            "(numeric) or prompt (prompt list)"
        )
    prompts: list[Prompt] = []
    for idx, (line, raw) in enumerate(rows):
        row = _norm_keys(raw)
        pid = str(row["id"]).strip() if row.get("id") not in (None, "") else f"{dataset_id}/{idx}"
        sub: str | None
        if subject is not None:
            sub = subject
        elif row.get("subject") not in (None, ""):
            sub = str(row["subject"]).strip()
        else:  # MMLU files carry their subject in the name: "<subject>_test.csv"
            sub = _subject_of_stem(path.stem) if kind == "multiple_choice" else None
        if kind == "prompts":
            text = _text(row, "prompt", where, line)
            prompts.append(Prompt(pid, text, subject=sub, question=text))
            continue
        question = _text(row, "question", where, line, strip=False)  # verbatim, as the paper
        if kind == "multiple_choice":
            choices, gold = _choices_and_gold(row, where, line)
            prompts.append(
                Prompt(
                    pid,
                    format_mc_prompt(question, choices),
                    subject=sub,
                    question=question,
                    choices=choices,
                    gold=gold,
                )
            )
        else:
            ans = row.get("answer")
            num = extract_numeric(str(ans)) if ans is not None else None
            if num is None:
                raise UserError(
                    f"{where!r} row {line}: answer {ans!r} is not a number (numeric datasets "
                    "need a number, or GSM8K-style text ending in '#### N')"
                )
            prompts.append(Prompt(pid, question, subject=sub, question=question, gold=num))
    _check_unique(prompts, path)
    system = {
        "multiple_choice": MMLU_SYSTEM_PROMPT,
        "numeric": NUMERIC_SYSTEM_PROMPT,
        "prompts": CHAT_SYSTEM_PROMPT,
    }[kind]
    return Dataset(dataset_id, kind, str(path.resolve()), tuple(prompts), system)


def _text(row: dict, col: str, where: str, line: int, *, strip: bool = True) -> str:
    if col not in row:
        raise UserError(f"{where!r} row {line}: missing column {col!r}")
    v = row[col]
    if v is None or not str(v).strip():
        raise UserError(f"{where!r} row {line}: empty {col!r}")
    return str(v).strip() if strip else str(v)


def _choices_and_gold(row: dict, where: str, line: int) -> tuple[dict, str]:
    if all(k in row for k in LETTERS):
        choices = {}
        for k in LETTERS:
            v = row[k]
            if v is None:
                raise UserError(f"{where!r} row {line}: empty choice {k!r}")
            choices[k] = str(v)  # verbatim; an empty-string option ("") is legal in MMLU
    else:
        lst = row.get("choices")
        if not isinstance(lst, list) or len(lst) != 4:
            raise UserError(f"{where!r} row {line}: 'choices' must be a list of 4 options, got {lst!r}")
        choices = {k: str(v) for k, v in zip(LETTERS, lst)}
    if "answer" not in row:
        raise UserError(f"{where!r} row {line}: missing column 'answer'")
    ans = row["answer"]
    if isinstance(ans, int) and not isinstance(ans, bool) and 0 <= ans < 4:
        return choices, LETTERS[ans]
    gold = str(ans).strip().upper() if ans is not None else ""
    if gold not in LETTERS:
        raise UserError(f"{where!r} row {line}: answer {ans!r} is not one of A, B, C, D")
    return choices, gold


def _check_unique(prompts: list[Prompt], path: Path) -> None:
    seen: set[str] = set()
    for p in prompts:
        if p.prompt_id in seen:
            raise UserError(f"{str(path)!r}: duplicate prompt id {p.prompt_id!r}")
        seen.add(p.prompt_id)
