"""Importers of published outputs into the store.

:func:`import_paper_mmlu` loads the coupled-generation paper's MMLU responses (Benz et al., data
release; ``../shared/data/coupled-mmlu/``) with the MMLU questions and answers
(``../shared/data/mmlu/``), scores them with the paper's rule (docs/METHODS.md 1.5) and stores one run:

* responses: ``<responses_dir>/<model>/responses_*_seed<S>.csv``, one column (header ``0``),
  row r = question r // repeats, repeat r % repeats; question order = the subjects sorted
  alphabetically, rows in file order. The seed ``coupled_seed`` (72645763) is the coupled run
  shared by all models; a model's other seed is its independent run.
* questions: ``<questions_dir>/<subject>_test.csv``, no header: question, A, B, C, D, answer.

Everything goes in with one transaction per import (all or nothing) and is idempotent: a
re-import replaces the run's rows for the imported models, never duplicates them.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from engine.errors import UserError
from engine.store.scores import ImportRows, store_import
from engine.tasks.scoring import extract_paper

PAPER_COUPLED_SEED = 72645763
PAPER_RUN_ID = "paper-mmlu"
PAPER_DATASET_ID = "mmlu"
PAPER_REPEATS = 10
_SEED_RE = re.compile(r"seed(\d+)\.csv$")


@dataclass(frozen=True)
class ResponseFile:
    model: str
    mode: str  # 'coupled' | 'independent'
    seed: int
    path: Path


def _subject_files(questions_dir: Path) -> dict[str, Path]:
    if not questions_dir.is_dir():
        raise UserError(f"questions directory not found: {questions_dir}")
    files = {}
    for p in sorted(questions_dir.glob("*.csv")):
        subject = p.name[: -len("_test.csv")] if p.name.endswith("_test.csv") else p.stem
        files[subject] = p
    if not files:
        raise UserError(f"no <subject>_test.csv files in {questions_dir}")
    return dict(sorted(files.items()))


def read_mmlu_questions(questions_dir: str | os.PathLike) -> pd.DataFrame:
    """All MMLU questions in the paper's order (subjects alphabetically, rows in file order).

    Returns a DataFrame with idx, subject, row, prompt_id ('mmlu/<subject>/<row>'), question,
    A, B, C, D, gold.
    """
    frames = []
    for subject, path in _subject_files(Path(questions_dir)).items():
        try:
            q = pd.read_csv(path, header=None, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise UserError(f"cannot read questions file {path}: {exc}") from None
        if q.shape[1] != 6:
            raise UserError(
                f"{path}: expected 6 columns (question, A, B, C, D, answer), got {q.shape[1]}"
            )
        q.columns = ["question", "A", "B", "C", "D", "gold"]
        q["gold"] = q["gold"].str.strip()
        bad = ~q["gold"].isin(["A", "B", "C", "D"])
        if bad.any():
            raise UserError(
                f"{path}: answer column must be A-D, got {q['gold'][bad].iloc[0]!r} "
                f"in row {int(np.nonzero(bad.to_numpy())[0][0])}"
            )
        q.insert(0, "row", np.arange(len(q)))
        q.insert(0, "subject", subject)
        frames.append(q)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "idx", np.arange(len(out)))
    out["prompt_id"] = "mmlu/" + out["subject"] + "/" + out["row"].astype(str)
    return out


def find_response_files(
    responses_dir: str | os.PathLike, models=None, coupled_seed: int = PAPER_COUPLED_SEED
) -> list[ResponseFile]:
    """The response files per model: the coupled-seed file and (at most one) independent file."""
    root = Path(responses_dir)
    if not root.is_dir():
        raise UserError(f"responses directory not found: {root}")
    available = sorted(p.name for p in root.iterdir() if p.is_dir())
    if models:
        unknown = [m for m in models if m not in available]
        if unknown:
            raise UserError(f"unknown model(s) {unknown}; available in {root}: {available}")
        chosen = list(models)
    else:
        chosen = available
    out: list[ResponseFile] = []
    for model in chosen:
        seeds = {}
        for p in sorted((root / model).glob("*.csv")):
            m = _SEED_RE.search(p.name)
            if m:
                seeds[int(m.group(1))] = p
        if not seeds:
            if models:
                raise UserError(f"no responses_*_seed<S>.csv files for model {model} in {root / model}")
            continue  # a stray folder without responses
        others = [s for s in seeds if s != coupled_seed]
        if len(others) > 1:
            raise UserError(
                f"model {model} has several independent seeds {sorted(others)}; "
                f"expected one besides the coupled seed {coupled_seed}"
            )
        if coupled_seed in seeds:
            out.append(ResponseFile(model, "coupled", coupled_seed, seeds[coupled_seed]))
        for s in others:
            out.append(ResponseFile(model, "independent", s, seeds[s]))
    if not out:
        raise UserError(f"no response files (<model>/responses_*_seed<S>.csv) under {root}")
    return out


def _read_responses(path: Path) -> pd.Series:
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read responses file {path}: {exc}") from None
    if df.shape[1] != 1:
        raise UserError(f"{path}: expected one column of responses, got {df.shape[1]} columns")
    return df.iloc[:, 0]


def _subject_mask(questions: pd.DataFrame, subjects) -> np.ndarray:
    """Rows of the imported subjects (all when ``subjects`` is empty)."""
    all_subjects = sorted(questions["subject"].unique())
    if not subjects:
        return np.ones(len(questions), dtype=bool)
    unknown = [s for s in subjects if s not in all_subjects]
    if unknown:
        raise UserError(f"unknown subject(s) {unknown}; allowed: {all_subjects}")
    return questions["subject"].isin(list(subjects)).to_numpy()


def _paper_prompts(qk: pd.DataFrame) -> pd.DataFrame:
    """Rows of the prompts table (the user message as in docs/METHODS.md 1.4)."""
    choices = [
        json.dumps({"A": a, "B": b, "C": c, "D": d})
        for a, b, c, d in zip(qk["A"], qk["B"], qk["C"], qk["D"])
    ]
    user_prompt = (
        qk["question"]
        + "\nA. "
        + qk["A"]
        + "\nB. "
        + qk["B"]
        + "\nC. "
        + qk["C"]
        + "\nD. "
        + qk["D"]
        + "\nAnswer:"
    )
    return pd.DataFrame(
        {
            "dataset_id": PAPER_DATASET_ID,
            "prompt_id": qk["prompt_id"].to_numpy(),
            "idx": qk["idx"].to_numpy().astype(np.int32),
            "subject": qk["subject"].to_numpy(),
            "question": qk["question"].to_numpy(),
            "choices": choices,
            "gold": qk["gold"].to_numpy(),
            "user_prompt": user_prompt.to_numpy(),
        }
    )


def _paper_file_rows(
    f: ResponseFile, run_id: str, questions: pd.DataFrame, keep: np.ndarray, repeats: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(generations, scores) of one response file; row r = question r // repeats, repeat r % repeats."""
    n_q = len(questions)
    q_of_row = np.repeat(np.arange(n_q), repeats)  # (n_q * repeats,)
    keep_rows = keep[q_of_row]
    pid_rows = questions["prompt_id"].to_numpy()[q_of_row][keep_rows]
    gold_rows = questions["gold"].to_numpy()[q_of_row][keep_rows]
    rep_rows = np.tile(np.arange(repeats, dtype=np.int32), n_q)[keep_rows]
    text = _read_responses(f.path)
    if len(text) != n_q * repeats:
        raise UserError(
            f"{f.path}: {len(text)} responses, expected {n_q * repeats} "
            f"({n_q} questions x {repeats} repeats)"
        )
    text = text.to_numpy(dtype=object)[keep_rows]
    # extract_paper on the distinct texts only (most responses are a bare letter).
    uniq, inv = np.unique(text.astype(str), return_inverse=True)
    extracted = np.array([extract_paper(t if t != "" else None) for t in uniq], dtype=object)[inv]
    text_col = pd.Series(text, dtype=object).where(lambda s: s != "", None)
    gens = pd.DataFrame(
        {
            "run_id": run_id,
            "model": f.model,
            "prompt_id": pid_rows,
            "repeat": rep_rows,
            "mode": f.mode,
            "seed": np.uint64(f.seed),
            "text": text_col.to_numpy(),
        }
    )
    scores = pd.DataFrame(
        {
            "run_id": run_id,
            "model": f.model,
            "prompt_id": pid_rows,
            "repeat": rep_rows,
            "mode": f.mode,
            "rule": "paper",
            "extracted": extracted,
            "score": (extracted == gold_rows).astype(np.float64),
        }
    )
    return gens, scores


def import_paper_mmlu(
    db: str | os.PathLike,
    responses_dir: str | os.PathLike,
    questions_dir: str | os.PathLike,
    models=None,
    subjects=None,
    run_id: str = PAPER_RUN_ID,
    repeats: int = PAPER_REPEATS,
    coupled_seed: int = PAPER_COUPLED_SEED,
) -> dict:
    """Import the paper's MMLU responses into ``db`` as run ``run_id`` (dataset 'mmlu').

    Stores prompts (all questions of the imported subjects), generations (text = raw response;
    empty responses stored as NULL), and scores with rule 'paper' (extract_paper; NULL/empty → 'E').

    Args:
        db: database path.
        responses_dir: folder with one sub-folder per model.
        questions_dir: folder with the 57 ``<subject>_test.csv`` files (all are needed to map rows).
        models: model folder names to import (default: all).
        subjects: subjects to import (default: all).
    Returns:
        dict with run_id, models, subjects, n_prompts, n_generations, files (model, mode, seed).
    Raises:
        UserError: missing directories, unknown model/subject, a response file whose row count is
        not repeats × number of questions.
    """
    questions = read_mmlu_questions(questions_dir)
    keep = _subject_mask(questions, subjects)
    files = find_response_files(responses_dir, models, coupled_seed)
    qk = questions[keep]
    prompts = _paper_prompts(qk)  # 1. the prompts of the imported subjects
    # 2. Generations + scores per file; 3. one transaction (store_import: replace, then bulk insert).
    rows = [_paper_file_rows(f, run_id, questions, keep, repeats) for f in files]
    gen_df = pd.concat([g for g, _ in rows], ignore_index=True)
    found = {f.model for f in files}  # in the order of --models (A of A − B first), then the rest sorted
    model_names = [m for m in dict.fromkeys(models or []) if m in found] + sorted(
        found - set(models or [])
    )
    config = {
        "source": "coupled-generation paper data release (Benz et al.)",
        "responses_dir": str(Path(responses_dir).resolve()),
        "questions_dir": str(Path(questions_dir).resolve()),
        "models": model_names,
        "repeats": repeats,
        "coupled_seed": coupled_seed,
        "seeds": {f"{f.model}/{f.mode}": f.seed for f in files},
        "temperature": 0.7,
        "max_new_tokens": 20,
        "scoring_rule": "paper",
    }
    models_df = pd.DataFrame(
        {
            "name": model_names,
            "source": [str(Path(responses_dir) / m) for m in model_names],
            "variant": "base",
            "vocab_id": "llama-3",
            "config": None,
        }
    )
    store_import(
        db,
        ImportRows(
            run_id,
            PAPER_DATASET_ID,
            str(Path(questions_dir).resolve()),
            "multiple_choice",
            prompts,
            gen_df,
            pd.concat([s for _, s in rows], ignore_index=True),
            models_df,
            config,
            "import:paper-mmlu",
        ),
    )
    return {
        "run_id": run_id,
        "dataset_id": PAPER_DATASET_ID,
        "models": model_names,
        "subjects": sorted(qk["subject"].unique()),
        "n_prompts": int(len(prompts)),
        "n_generations": int(len(gen_df)),
        "files": [
            {"model": f.model, "mode": f.mode, "seed": f.seed, "path": str(f.path)} for f in files
        ],
    }
