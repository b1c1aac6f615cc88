"""``import harness``: other harnesses' per-sample results as one run of our store.

Several paths = several models in one run, paired by sample id (``<task>/<doc or sample id>``);
epochs become repeats. The run is marked imported (``config.imported``: harness, versions, source
files, each model's headline accuracy as the harness reported it; ``coupled`` false), its
generations are mode 'independent' (not coupled, not our generation) and its scores rule
'harness' (the harness's own per-sample score). Our accuracy (mean over samples of the mean over
repeats, the harnesses' own reduction) must equal the harness's headline exactly, else nothing is
written. Everything is checked before the one transaction (engine.store.scores.store_import).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from engine.errors import UserError
from engine.store.scores import ImportRows, imported_facts, run_exists, store_import
from engine.tasks.harness import HarnessLog, read_harness

HARNESS_RULE = "harness"
HARNESS_MODE = "independent"


@dataclass(frozen=True)
class HarnessImport:
    run_id: str
    dataset_id: str
    harness: str
    models: tuple[str, ...]
    tasks: tuple[str, ...]
    n_prompts: int
    n_common: int                    # sample ids every model has
    n_generations: int
    headline: dict[str, float]       # model -> the harness's accuracy (one task) ...
    ours: dict[str, float]           # ... and ours from the stored scores

    def to_dict(self) -> dict:
        return {"run_id": self.run_id, "dataset_id": self.dataset_id, "harness": self.harness,
                "models": list(self.models), "tasks": list(self.tasks), "n_prompts": self.n_prompts,
                "n_common": self.n_common, "n_generations": self.n_generations, "headline": self.headline,
                "ours": self.ours}


def our_accuracy(log: HarnessLog) -> float:
    """Mean over samples of the mean over repeats, in the harnesses' order of operations."""
    per: dict[str, list[float]] = {}
    for s in log.samples:
        per.setdefault(s.sample_id, []).append(s.score)
    means = [sum(v) / len(v) for v in per.values()]
    return sum(means) / len(means)


REL_TOL = 1e-9  # a float sum in another order: ~n ulps apart (n samples), far below any real difference


def agrees(ours: float, log: HarnessLog) -> bool:
    """Our accuracy equals the harness's headline: exactly when every sample has one 0/1 score (an
    integer count over n, the same bits in any order), else to ``REL_TOL`` relative (a metric such
    as f1 or partial credit, or repeats, whose float sum depends on the order of the additions)."""
    exact = all(s.score in (0.0, 1.0) for s in log.samples) and len({s.sample_id for s in log.samples}) == len(
        log.samples)
    return ours == log.headline if exact else math.isclose(ours, log.headline, rel_tol=REL_TOL, abs_tol=1e-15)


def _check(logs: list[HarnessLog]) -> tuple[int, list[str]]:
    """Unique (model, task); every log's accuracy = its headline; sample ids overlap across models."""
    seen: set[tuple[str, str]] = set()
    for log in logs:
        if (log.model, log.task) in seen:
            raise UserError(f"model {log.model!r} appears twice for task {log.task!r} ({log.path}); "
                            "import one log per model and task")
        seen.add((log.model, log.task))
        if not log.samples:
            raise UserError(f"{log.path}: no samples")
        ours = our_accuracy(log)
        if not agrees(ours, log):
            raise UserError(f"{log.path}: the samples give accuracy {ours!r}, the harness reported {log.headline!r} "
                            f"({log.metric}); nothing was written")
    models = sorted({log.model for log in logs})
    ids = {m: {s.sample_id for log in logs if log.model == m for s in log.samples} for m in models}
    common = set.intersection(*ids.values())
    if len(models) > 1 and not common:
        shown = "; ".join(f"{m}: {sorted(v)[:2]}" for m, v in ids.items())
        raise UserError(f"the imports share no sample id, so they cannot be paired ({shown}); "
                        "import logs of the same task and documents")
    return len(common), models


def _frames(logs: list[HarnessLog], run_id: str, dataset_id: str) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    prompts: dict[str, dict] = {}
    gens, scores = [], []
    for log in logs:
        for s in log.samples:
            if s.sample_id not in prompts:
                choices = None if s.choices is None else json.dumps(
                    {chr(65 + i): c for i, c in enumerate(s.choices)})
                prompts[s.sample_id] = {"dataset_id": dataset_id, "prompt_id": s.sample_id, "idx": len(prompts),
                                        "subject": log.task, "question": s.prompt, "choices": choices,
                                        "gold": s.target, "user_prompt": s.prompt}
            gens.append({"run_id": run_id, "model": log.model, "prompt_id": s.sample_id, "repeat": s.repeat,
                         "mode": HARNESS_MODE, "seed": 0, "text": s.text})
            scores.append({"run_id": run_id, "model": log.model, "prompt_id": s.sample_id, "repeat": s.repeat,
                           "mode": HARNESS_MODE, "rule": HARNESS_RULE, "extracted": s.text, "score": s.score})
    g = pd.DataFrame(gens)
    if g.duplicated(["model", "prompt_id", "repeat"]).any():
        dup = g[g.duplicated(["model", "prompt_id", "repeat"])].iloc[0]
        raise UserError(f"sample {dup['prompt_id']!r} (repeat {dup['repeat']}) of {dup['model']!r} appears twice")
    g["seed"] = g["seed"].astype("uint64")
    return pd.DataFrame(list(prompts.values())), g, pd.DataFrame(scores)


def import_harness(db: str | os.PathLike, paths: list[str], name: str | None = None,
                   use_inspect: bool = True) -> HarnessImport:
    """Import lm-eval / Inspect logs (files or output folders) as one run; see the module docstring.

    Raises:
        UserError: an unreadable or foreign log, a model twice on one task, an accuracy that differs
            from the harness's, imports without a common sample id; nothing is written then.
    """
    if not paths:
        raise UserError("give at least one lm-eval output folder / results file or Inspect log")
    logs = [log for p in paths for log in read_harness(p, use_inspect)]
    n_common, models = _check(logs)
    tasks = sorted({log.task for log in logs})
    harnesses = sorted({log.harness for log in logs})
    run_id = name or f"harness-{'-'.join(tasks)}"
    if run_exists(db, run_id) and not (imported_facts(db, run_id) or {}).get("harness"):
        raise UserError(f"run {run_id!r} exists and is not a harness import; nothing was written: pass another --name")
    dataset_id = f"harness:{run_id}"
    prompts, gens, scores = _frames(logs, run_id, dataset_id)
    headline = {log.model: log.headline for log in logs if sum(lg.model == log.model for lg in logs) == 1}
    ours = {log.model: our_accuracy(log) for log in logs if log.model in headline}
    config = {
        "imported": {"harness": "+".join(harnesses), "coupled": False, "generated_here": False,
                     "sources": sorted({str(Path(p).expanduser().resolve()) for p in paths}),
                     "logs": [{"model": lg.model, "task": lg.task, "harness": lg.harness, "version": lg.version,
                               "metric": lg.metric, "headline": lg.headline, "file": lg.path, "reader": lg.reader,
                               "n_samples": len(lg.samples)} for lg in logs],
                     "headline": headline, "n_common_samples": n_common},
        "models": models, "modes": [HARNESS_MODE], "scoring_rule": HARNESS_RULE,
        "repeats": int(gens["repeat"].max()) + 1}
    models_df = pd.DataFrame({"name": models, "source": [f"imported:{'+'.join(harnesses)}"] * len(models),
                              "variant": "imported", "vocab_id": None, "config": None})
    kind = "multiple_choice" if prompts["choices"].notna().all() else "prompts"
    n = store_import(db, ImportRows(run_id, dataset_id, "+".join(harnesses), kind, prompts, gens, scores, models_df,
                                    config, f"import:{'+'.join(harnesses)}", key_mode=None, replace_run=True))
    return HarnessImport(run_id, dataset_id, "+".join(harnesses), tuple(models), tuple(tasks), len(prompts),
                         n_common, n, headline, ours)
