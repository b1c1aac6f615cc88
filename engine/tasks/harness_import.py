"""``import harness``: other harnesses' per-sample results as one run of our store.

Several paths = several models in one run, paired by sample id (``<task>/<doc or sample id>``);
epochs become repeats. The run is marked imported (``config.imported``: harness, versions, source
files, each model's headline accuracy as the harness reported it; ``coupled`` false), its
generations are mode 'independent' (not coupled, not our generation) and its scores rule
'harness' (the harness's own per-sample score). Our accuracy (mean over samples of the mean over
repeats, the harnesses' own reduction) must equal the harness's headline exactly, else nothing is
written. Everything is checked before the one transaction (engine.store.scores.store_import).

Logs made through ``engine serve`` (a served run in the same database) are linked to the generations
the server stored (:mod:`engine.tasks.harness_served`): a linked sample takes the served unit (prompt
id, repeat), mode (coupled / independent), seed, tokens and token traces, so the run is analysed like
a generated one (paired by the noise key, coupled against independent); ``config.imported.served``
says which served run each log came from. A linked log's samples that match no served generation are
left out and reported, one line per model (:attr:`HarnessImport.unmatched`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from engine.errors import UserError
from engine.store.scores import ImportRows, imported_facts, run_exists, store_import
from engine.tasks.harness import GroupResult, HarnessLog, HarnessSample, agrees, read_harness
from engine.tasks.harness_served import LogLink, ServedGen, link_logs

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
    served: tuple[dict, ...] = ()  # per linked log: model, task, served run, mode, seeds, counts
    unmatched: tuple[str, ...] = ()  # one line per model whose samples matched no served generation

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
            "served": list(self.served),
            "unmatched": list(self.unmatched),
        }


def our_accuracy(log: HarnessLog) -> float:
    """Mean over samples of the mean over repeats, in the harnesses' order of operations (lm-eval with
    ``repeats``: of the first repeat, the one its headline scores)."""
    per: dict[str, list[float]] = {}
    for s in log.samples:
        if log.headline_first_repeat and s.repeat > 0:
            continue
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


def _check(logs: list[HarnessLog], linked: list[bool] | None = None) -> tuple[int, list[str]]:
    """Unique (model, task) among the logs not linked to a served run (linked logs are told apart by
    their served units); every log's accuracy = its headline; sample ids overlap across models."""
    seen: set[tuple[str, str]] = set()
    for log, link in zip(logs, linked or [False] * len(logs)):
        if (log.model, log.task) in seen and not link:
            raise UserError(
                f"model {log.model!r} appears twice for task {log.task!r} ({log.path}) and its model "
                "arguments do not tell the two apart: name each path's model with --model-names NAME "
                "[NAME ...] (one per path, in order), or import one log per model and task"
            )
        if not link:
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


@dataclass(frozen=True)
class _Unit:
    """One imported generation: a harness sample, under its own id (unlinked) or its served unit."""

    log: HarnessLog
    sample: HarnessSample
    prompt_id: str
    repeat: int
    mode: str
    gen: ServedGen | None  # the served generation it is linked to


def _units(logs: list[HarnessLog], links: list[LogLink | None]) -> tuple[list[_Unit], tuple[str, ...]]:
    """Every imported generation, and one line per model whose linked logs have samples that match no
    served generation (those samples are left out)."""
    units: list[_Unit] = []
    missed: dict[str, list[tuple[HarnessLog, LogLink, int]]] = {}
    for log, link in zip(logs, links):
        if link is None:
            units += [_Unit(log, s, s.sample_id, s.repeat, HARNESS_MODE, None) for s in log.samples]
            continue
        for i, s in enumerate(log.samples):
            g = link.matched.get(i)
            if g is None:
                missed.setdefault(log.model, []).append((log, link, i))
            else:
                units.append(_Unit(log, s, g.prompt_id, g.repeat, g.mode, g))
    lines = []
    for model, miss in missed.items():
        log, link, i = miss[0]
        total = sum(len(lg.samples) for lg, lk in zip(logs, links) if lg.model == model and lk)
        first = log.samples[i]
        lines.append(
            f"model {model!r}: {len(miss)} of {total} samples match no generation of served run "
            f"{link.run_id!r} ({link.mode}), e.g. {first.sample_id} repeat {first.repeat}; left out"
        )
    return units, tuple(lines)


def _linked_model(units: list[_Unit]) -> None:
    """A model and task imported both linked to a served run and not: refused (its rows would mix
    served units with the harness's own ids)."""
    kinds: dict[tuple[str, str], set[bool]] = {}
    for u in units:
        kinds.setdefault((u.log.model, u.log.task), set()).add(u.gen is not None)
    mixed = [k for k, v in kinds.items() if len(v) > 1]
    if mixed:
        raise UserError(
            f"model {mixed[0][0]!r} on task {mixed[0][1]!r}: one log links to a served run and another "
            "does not; import them as separate runs"
        )


def _prompt_row(u: _Unit, dataset_id: str, idx: int) -> dict:
    s = u.sample
    choices = (
        None if s.choices is None else json.dumps({chr(65 + i): c for i, c in enumerate(s.choices)})
    )
    return {
        "dataset_id": dataset_id,
        "prompt_id": u.prompt_id,
        "idx": idx,
        "subject": u.log.task,
        "question": s.prompt,
        "choices": choices,
        "gold": s.target,
        "user_prompt": s.prompt,
    }


def _frames(
    units: list[_Unit], run_id: str, dataset_id: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    prompts: dict[str, dict] = {}
    gens, scores = [], []
    for u in units:
        if u.prompt_id not in prompts:
            prompts[u.prompt_id] = _prompt_row(u, dataset_id, len(prompts))
        g = u.gen
        key = {"run_id": run_id, "model": u.log.model, "prompt_id": u.prompt_id, "repeat": u.repeat}
        gens.append(
            {
                **key,
                "mode": u.mode,
                "seed": 0 if g is None else g.seed,
                # linked: the model's output as the server stored it (the harness may have cut it)
                "text": u.sample.text if g is None else g.text,
                "token_ids": None if g is None else list(g.token_ids),
                "finish_reason": None if g is None else g.finish_reason,
                "n_tokens": None if g is None else len(g.token_ids),
            }
        )
        scores.append(
            {
                **key,
                "mode": u.mode,
                "rule": HARNESS_RULE,
                "extracted": u.sample.text,
                "score": u.sample.score,
            }
        )
    g = pd.DataFrame(gens)
    unit = ["model", "prompt_id", "repeat", "mode"]
    if g.duplicated(unit).any():
        dup = g[g.duplicated(unit)].iloc[0]
        raise UserError(
            f"sample {dup['prompt_id']!r} (repeat {dup['repeat']}, {dup['mode']}) of {dup['model']!r} "
            "appears twice"
        )
    g["seed"] = g["seed"].astype("uint64")
    g["n_tokens"] = g["n_tokens"].astype("Int64")  # NULL where a sample is not linked
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


def _served_config(links: list[tuple[HarnessLog, LogLink]]) -> dict:
    """What the run's config says of the served runs its linked logs came from (the design section's
    "served coupled, seed S"): per log the served run, model, mode and seeds; the run's seed where every
    coupled link used one; per (model, mode) seeds where each used one."""
    served = [
        {
            "model": lg.model,
            "task": lg.task,
            "served_run": lk.run_id,
            "served_model": lk.model,
            "mode": lk.mode,
            "seeds": list(lk.seeds),
            "matched": len(lk.matched),
            "unmatched": len(lk.unmatched),
        }
        for lg, lk in links
    ]
    out: dict = {"served": served}
    coupled = {sd for lg, lk in links if lk.mode == "coupled" for sd in lk.seeds}
    if len(coupled) == 1:
        out["seed"] = next(iter(coupled))
    per: dict[str, set[int]] = {}
    for lg, lk in links:
        per.setdefault(f"{lg.model}/{lk.mode}", set()).update(lk.seeds)
    if per and all(len(v) == 1 for v in per.values()):
        out["seeds"] = {k: next(iter(v)) for k, v in sorted(per.items())}
    key_modes = {lk.key_mode for _, lk in links}
    out["key_mode"] = next(iter(key_modes)) if len(key_modes) == 1 else None
    return out


def _log_record(lg: HarnessLog) -> dict:
    return {
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


def _config(
    logs: list[HarnessLog],
    paths: list[str],
    groups: dict[str, list[GroupResult]],
    units: list[_Unit],
    linked: list[tuple[HarnessLog, LogLink]],
    n_common: int,
) -> dict:
    served = _served_config(linked) if linked else {}
    modes = sorted({u.mode for u in units})
    imported = {
        "harness": "+".join(sorted({log.harness for log in logs})),
        "coupled": "coupled" in modes,
        "generated_here": False,
        "sources": sorted({str(Path(p).expanduser().resolve()) for p in paths}),
        "logs": [_log_record(lg) for lg in logs],
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
        "headline": _headlines(logs, groups)[0],
        "n_common_samples": n_common,
        **({"served": served["served"]} if linked else {}),
    }
    out = {
        "imported": imported,
        "models": sorted({u.log.model for u in units}),
        "modes": modes,
        "scoring_rule": HARNESS_RULE,
        "repeats": max(u.repeat for u in units) + 1,
    }
    out.update({k: served[k] for k in ("seed", "seeds") if k in served})
    return out


def _trace_links(units: list[_Unit]) -> pd.DataFrame:
    """The served generations whose token traces the run copies (served run and model -> its model)."""
    rows = [
        (u.gen.run_id, u.gen.model, u.log.model, u.prompt_id, u.repeat, u.mode)
        for u in units
        if u.gen is not None
    ]
    cols = ["served_run", "served_model", "model", "prompt_id", "repeat", "mode"]
    return pd.DataFrame(rows, columns=cols)


def import_harness(
    db: str | os.PathLike,
    paths: list[str],
    name: str | None = None,
    use_inspect: bool = True,
    model_names: list[str] | None = None,
    served: list[str] | None = None,
) -> HarnessImport:
    """Import lm-eval / Inspect logs (files or output folders) as one run; see the module docstring.

    ``served``: link only to these served runs of ``db`` (default: any served run whose generations
    match the logs).

    Raises:
        UserError: an unreadable or foreign log, a model twice on one task, an accuracy that differs
            from the harness's, imports without a common sample id, a log that matches two served runs
            equally well; nothing is written then.
    """
    if not paths:
        raise UserError("give at least one lm-eval output folder / results file or Inspect log")
    read = [read_harness(p, use_inspect) for p in paths]
    links = link_logs(db, [lg for group in read for lg in group], served)
    logs = name_models(read, model_names)
    n_common, models = _check(logs, [lk is not None for lk in links])
    units, unmatched = _units(logs, links)
    _linked_model(units)
    linked = [(lg, lk) for lg, lk in zip(logs, links) if lk is not None]
    if linked:  # paired by the served units' prompt ids, every model's that survived the link
        models = sorted({u.log.model for u in units})
        ids = [{u.prompt_id for u in units if u.log.model == m} for m in models]
        n_common = len(set.intersection(*ids))
    groups = _groups(logs)
    run_id = name or f"harness-{'-'.join(_top_names(logs, groups))}"
    if run_exists(db, run_id) and not (imported_facts(db, run_id) or {}).get("harness"):
        raise UserError(
            f"run {run_id!r} exists and is not a harness import; nothing was written: pass another "
            "--name"
        )
    dataset_id = f"harness:{run_id}"
    prompts, gens, scores = _frames(units, run_id, dataset_id)
    headline, ours = _headlines(logs, groups)
    config = _config(logs, paths, groups, units, linked, n_common)
    harnesses = config["imported"]["harness"]
    models_df = pd.DataFrame(
        {
            "name": models,
            "source": [f"imported:{harnesses}"] * len(models),
            "variant": "imported",
            "vocab_id": None,
            "config": None,
        }
    )
    kind = "multiple_choice" if prompts["choices"].notna().all() else "prompts"
    key_mode = _served_config(linked)["key_mode"] if linked else None
    rows = ImportRows(
        run_id,
        dataset_id,
        harnesses,
        kind,
        prompts,
        gens,
        scores,
        models_df,
        config,
        f"import:{harnesses}",
        key_mode=key_mode,
        replace_run=True,
        trace_links=_trace_links(units) if linked else None,
    )
    n = store_import(db, rows)
    return HarnessImport(
        run_id,
        dataset_id,
        harnesses,
        tuple(models),
        tuple(sorted({log.task for log in logs})),
        len(prompts),
        n_common,
        n,
        headline,
        ours,
        tuple(config["imported"].get("served") or ()),
        unmatched,
    )
