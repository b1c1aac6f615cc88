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
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from engine.errors import UserError
from engine.store.scores import ImportRows, imported_facts, run_exists, store_import
from engine.tasks.harness import GroupResult, HarnessLog, agrees, read_harness

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
    n_common: int  # sample ids every model has
    n_generations: int
    headline: dict[str, float]  # model -> the harness's accuracy (one task) ...
    ours: dict[str, float]  # ... and ours from the stored scores

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id,
            "dataset_id": self.dataset_id,
            "harness": self.harness,
            "models": list(self.models),
            "tasks": list(self.tasks),
            "n_prompts": self.n_prompts,
            "n_common": self.n_common,
            "n_generations": self.n_generations,
            "headline": self.headline,
            "ours": self.ours,
        }


def our_accuracy(log: HarnessLog) -> float:
    """Mean over samples of the mean over repeats, in the harnesses' order of operations."""
    per: dict[str, list[float]] = {}
    for s in log.samples:
        per.setdefault(s.sample_id, []).append(s.score)
    means = [sum(v) / len(v) for v in per.values()]
    return sum(means) / len(means)


# model arguments that name a checkpoint, in the order they are tried
CHECKPOINT_ARGS = ("model_path", "pretrained", "checkpoint", "path", "model_name_or_path", "model")


def _checkpoint_label(
    args: tuple[tuple[str, str], ...], others: list[tuple[tuple[str, str], ...]]
) -> str | None:
    """What tells this log's model apart from ``others`` of the same name: the shortest tail of the first
    checkpoint-like argument whose value differs (``/ckpt/run1/final`` vs ``/ckpt/run2/final`` ->
    ``run1/final``), or None when no such argument differs."""
    mine = dict(args)
    for key in CHECKPOINT_ARGS:
        theirs = [dict(o).get(key) for o in others]
        if key not in mine or mine[key] in theirs:
            continue
        parts = Path(mine[key].rstrip("/")).parts
        for n in range(1, len(parts) + 1):
            tail = "/".join(parts[-n:])
            if not any(
                t is not None and "/".join(Path(t.rstrip("/")).parts[-n:]) == tail for t in theirs
            ):
                return tail
        return mine[key]
    return None


def name_models(per_path: list[list[HarnessLog]], names: list[str] | None = None) -> list[HarnessLog]:
    """Every log with the model name it is stored under.

    ``names`` (``--model-names``): one per path, for every log found there (a path holding several models
    is refused). Else the harness's name, and where two different models share it (two checkpoints
    evaluated as Inspect's ``hf/local``, or lm-eval's ``pretrained=`` folders of one name), the name plus
    what tells them apart: ``hf/local@step-1000``. Logs that differ in nothing are left alone (``_check``
    refuses them).
    """
    if names is not None:
        if len(names) != len(per_path):
            raise UserError(
                f"--model-names: give one name per path ({len(per_path)} path(s), {len(names)} name(s))"
            )
        bad = [n for n in names if not n.strip() or any(ord(c) < 32 for c in n)]
        if bad or len(set(names)) != len(names):
            raise UserError(
                f"--model-names: names must be distinct and non-empty, without control characters "
                f"(got {names!r})"
            )
        for logs in per_path:
            several = sorted({lg.model for lg in logs})
            if len(several) > 1:
                raise UserError(
                    f"--model-names names one model per path, but {logs[0].path} holds logs of "
                    f"{', '.join(several)}: give each model's logs as its own path"
                )
        return [replace(lg, model=name) for logs, name in zip(per_path, names) for lg in logs]
    logs = [lg for group in per_path for lg in group]
    identities: dict[str, list[tuple[tuple[str, str], ...]]] = {}
    for lg in logs:
        seen = identities.setdefault(lg.model, [])
        if lg.model_args not in seen:
            seen.append(lg.model_args)
    out = []
    for lg in logs:
        ids = identities[lg.model]
        label = (
            None
            if len(ids) == 1
            else _checkpoint_label(lg.model_args, [i for i in ids if i != lg.model_args])
        )
        out.append(lg if label is None else replace(lg, model=f"{lg.model}@{label}"))
    return out


def exact_scores(log: HarnessLog) -> bool:
    """0/1 scores, one per sample: the accuracy is an integer count over n, the same in any summation
    order."""
    ids = [s.sample_id for s in log.samples]
    return len(ids) == len(set(ids)) and all(s.score in (0.0, 1.0) for s in log.samples)


def _check(logs: list[HarnessLog]) -> tuple[int, list[str]]:
    """Unique (model, task); every log's accuracy = its headline; sample ids overlap across models."""
    seen: set[tuple[str, str]] = set()
    for log in logs:
        if (log.model, log.task) in seen:
            raise UserError(
                f"model {log.model!r} appears twice for task {log.task!r} ({log.path}) and its model "
                "arguments do not tell the two apart: name each path's model with --model-names NAME "
                "[NAME ...] (one per path, in order), or import one log per model and task"
            )
        seen.add((log.model, log.task))
        if not log.samples:
            raise UserError(f"{log.path}: no samples")
        ours = our_accuracy(log)
        if not agrees(ours, log.headline, exact_scores(log)):
            raise UserError(
                f"{log.path}: the samples give accuracy {ours!r}, the harness reported {log.headline!r} "
                f"({log.metric}); nothing was written"
            )
    models = sorted({log.model for log in logs})
    ids = {m: {s.sample_id for log in logs if log.model == m for s in log.samples} for m in models}
    common = set.intersection(*ids.values())
    if len(models) > 1 and not common:
        shown = "; ".join(f"{m}: {sorted(v)[:2]}" for m, v in ids.items())
        raise UserError(
            f"the imports share no sample id, so they cannot be paired ({shown}); "
            "import logs of the same task and documents"
        )
    return len(common), models


def check_logs(logs: list[HarnessLog]) -> tuple[int, list[str]]:
    """The checks an import makes before it writes (unique model and task, every log's accuracy equals
    its headline, sample ids shared across models): (common sample ids, models), else UserError.
    Previews call it, so that what they call valid imports."""
    return _check(logs)


def _frames(
    logs: list[HarnessLog], run_id: str, dataset_id: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    prompts: dict[str, dict] = {}
    gens, scores = [], []
    for log in logs:
        for s in log.samples:
            if s.sample_id not in prompts:
                choices = (
                    None
                    if s.choices is None
                    else json.dumps({chr(65 + i): c for i, c in enumerate(s.choices)})
                )
                prompts[s.sample_id] = {
                    "dataset_id": dataset_id,
                    "prompt_id": s.sample_id,
                    "idx": len(prompts),
                    "subject": log.task,
                    "question": s.prompt,
                    "choices": choices,
                    "gold": s.target,
                    "user_prompt": s.prompt,
                }
            gens.append(
                {
                    "run_id": run_id,
                    "model": log.model,
                    "prompt_id": s.sample_id,
                    "repeat": s.repeat,
                    "mode": HARNESS_MODE,
                    "seed": 0,
                    "text": s.text,
                }
            )
            scores.append(
                {
                    "run_id": run_id,
                    "model": log.model,
                    "prompt_id": s.sample_id,
                    "repeat": s.repeat,
                    "mode": HARNESS_MODE,
                    "rule": HARNESS_RULE,
                    "extracted": s.text,
                    "score": s.score,
                }
            )
    g = pd.DataFrame(gens)
    if g.duplicated(["model", "prompt_id", "repeat"]).any():
        dup = g[g.duplicated(["model", "prompt_id", "repeat"])].iloc[0]
        raise UserError(
            f"sample {dup['prompt_id']!r} (repeat {dup['repeat']}) of {dup['model']!r} appears twice"
        )
    g["seed"] = g["seed"].astype("uint64")
    return pd.DataFrame(list(prompts.values())), g, pd.DataFrame(scores)


def _groups(logs: list[HarnessLog]) -> dict[str, list[GroupResult]]:
    """model -> its checked lm-eval groups (each once, whichever log of the results file carried
    them)."""
    out: dict[str, dict[str, GroupResult]] = {}
    for lg in logs:
        for g in lg.groups:
            out.setdefault(lg.model, {}).setdefault(g.name, g)
    return {m: list(gs.values()) for m, gs in out.items()}


def _top_names(logs: list[HarnessLog], groups: dict[str, list[GroupResult]]) -> list[str]:
    """The outermost groups, and the tasks in no group: what the user asked lm-eval / Inspect for."""
    all_groups = {g.name: g for gs in groups.values() for g in gs}
    inner = {leaf for g in all_groups.values() for leaf in g.leaves}
    inner |= {
        h
        for g in all_groups.values()
        for h in all_groups
        if h != g.name and set(all_groups[h].leaves) < set(g.leaves)
    }
    tops = [g for g in all_groups if g not in inner]
    return sorted(tops) + sorted({lg.task for lg in logs} - inner)


def _headlines(logs: list[HarnessLog], groups: dict[str, list[GroupResult]]) -> tuple[dict, dict]:
    """model -> the harness's own accuracy and ours, where the harness gave one number for the model's
    whole import that means what ours means (the mean over its questions): a single task, or a single
    outermost group weighted by size (an unweighted group's mean of subtask means is another quantity:
    kept in the run's config, not compared)."""
    headline, ours = {}, {}
    for m in sorted({lg.model for lg in logs}):
        mine = [lg for lg in logs if lg.model == m]
        tops = [g for g in groups.get(m, []) if g.name in _top_names(mine, {m: groups.get(m, [])})]
        if len(mine) == 1 and not tops:
            headline[m], ours[m] = mine[0].headline, our_accuracy(mine[0])
        elif (
            len(tops) == 1 and tops[0].weight_by_size and set(tops[0].leaves) == {lg.task for lg in mine}
        ):
            headline[m], ours[m] = tops[0].headline, tops[0].ours
    return headline, ours


def import_harness(
    db: str | os.PathLike,
    paths: list[str],
    name: str | None = None,
    use_inspect: bool = True,
    model_names: list[str] | None = None,
) -> HarnessImport:
    """Import lm-eval / Inspect logs (files or output folders) as one run; see the module docstring.

    Raises:
        UserError: an unreadable or foreign log, a model twice on one task, an accuracy that differs
            from the harness's, imports without a common sample id; nothing is written then.
    """
    if not paths:
        raise UserError("give at least one lm-eval output folder / results file or Inspect log")
    logs = name_models([read_harness(p, use_inspect) for p in paths], model_names)
    n_common, models = _check(logs)
    tasks = sorted({log.task for log in logs})
    harnesses = sorted({log.harness for log in logs})
    groups = _groups(logs)
    run_id = name or f"harness-{'-'.join(_top_names(logs, groups))}"
    if run_exists(db, run_id) and not (imported_facts(db, run_id) or {}).get("harness"):
        raise UserError(
            f"run {run_id!r} exists and is not a harness import; nothing was written: pass another "
            "--name"
        )
    dataset_id = f"harness:{run_id}"
    prompts, gens, scores = _frames(logs, run_id, dataset_id)
    headline, ours = _headlines(logs, groups)
    config = {
        "imported": {
            "harness": "+".join(harnesses),
            "coupled": False,
            "generated_here": False,
            "sources": sorted({str(Path(p).expanduser().resolve()) for p in paths}),
            "logs": [
                {
                    "model": lg.model,
                    "task": lg.task,
                    "harness": lg.harness,
                    "version": lg.version,
                    "metric": lg.metric,
                    "headline": lg.headline,
                    "file": lg.path,
                    "reader": lg.reader,
                    "n_samples": len(lg.samples),
                }
                for lg in logs
            ],
            "groups": [
                {
                    "model": m,
                    "group": g.name,
                    "metric": g.metric,
                    "headline": g.headline,
                    "ours": g.ours,
                    "weight_by_size": g.weight_by_size,
                    "subtasks": list(g.leaves),
                }
                for m, gs in groups.items()
                for g in gs
            ],
            "headline": headline,
            "n_common_samples": n_common,
        },
        "models": models,
        "modes": [HARNESS_MODE],
        "scoring_rule": HARNESS_RULE,
        "repeats": int(gens["repeat"].max()) + 1,
    }
    models_df = pd.DataFrame(
        {
            "name": models,
            "source": [f"imported:{'+'.join(harnesses)}"] * len(models),
            "variant": "imported",
            "vocab_id": None,
            "config": None,
        }
    )
    kind = "multiple_choice" if prompts["choices"].notna().all() else "prompts"
    n = store_import(
        db,
        ImportRows(
            run_id,
            dataset_id,
            "+".join(harnesses),
            kind,
            prompts,
            gens,
            scores,
            models_df,
            config,
            f"import:{'+'.join(harnesses)}",
            key_mode=None,
            replace_run=True,
        ),
    )
    return HarnessImport(
        run_id,
        dataset_id,
        "+".join(harnesses),
        tuple(models),
        tuple(tasks),
        len(prompts),
        n_common,
        n,
        headline,
        ours,
    )
