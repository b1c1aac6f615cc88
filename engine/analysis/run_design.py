"""How a run was made, as a reader of its results needs it: the models (files, dtype, backend), the
dataset (its content hash and size), the sampling settings, the code and the machine, the wall time.

Read-only: the stored run, models and dataset rows (:func:`engine.store.design.design_rows`); nothing
is recomputed. What a run did not record (older runs, imported logs) reads "not recorded", never a guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from engine.analysis.result_base import ToDict
from engine.store.design import design_rows

NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class ModelDesign(ToDict):
    name: str
    source: str | None
    variant: str | None
    dtype: str | None
    device: str | None
    backend: str | None
    backend_version: str | None
    weights_sha256: str | None  # digest of the weight files when the run recorded one
    num_parameters: int | None


@dataclass(frozen=True)
class DatasetDesign(ToDict):
    dataset_id: str
    source: str | None
    kind: str | None
    n_prompts: int | None  # stored for the dataset
    n_prompts_used: int  # asked in this run
    sha256: str  # of the run's prompts (id, question, choices, gold, user prompt) in order


@dataclass(frozen=True)
class HarnessGroup(ToDict):
    """An lm-eval group of an imported run: its name and the subtasks its headline averages."""

    name: str
    subtasks: list[str]


@dataclass(frozen=True)
class RunDesign(ToDict):
    """The design of one run (:func:`run_design`)."""

    run: str
    created_at: str | None
    status: str | None
    imported_from: (
        str | None
    )  # "lm-eval" / "inspect" / the paper's data release, or None (generated here)
    code_version: str | None
    engine_version: str | None
    git_commit: str | None
    key_mode: str | None
    host: str | None
    device: str | None
    models: list[ModelDesign]
    dataset: DatasetDesign | None
    seed: int | None
    seeds: dict[str, int] | None  # per (model, mode) when the run used several (imported runs)
    temperature: float | None
    top_k: int | None
    top_p: float | None
    max_new_tokens: int | None
    repeats: int | None
    modes: list[str]
    system_prompt: str | None
    n_generations: int
    n_tokens: int
    wall_s: float | None
    command: list[str] | None
    warnings: list[str] = field(default_factory=list)
    imported_sources: list[str] = field(default_factory=list)  # the log folders / files as imported
    imported_groups: list[HarnessGroup] = field(default_factory=list)  # lm-eval groups and subtasks
    # an import of logs made through `engine serve`: how the server sampled them, e.g. "served coupled,
    # seed 1234 (run cpl); served independent, a seed per model (run ind)"; None otherwise
    served: str | None = None


def _split_version(code: str | None) -> tuple[str | None, str | None]:
    """'0.1.0+abc1234' -> ('0.1.0', 'abc1234'); 'import:...' -> (None, None)."""
    if not code or code.startswith("import:"):
        return None, None
    version, _, commit = code.partition("+")
    return version or None, commit or None


def _model(m: dict[str, Any], cfg: dict[str, Any]) -> ModelDesign:
    mc = m.get("config") or {}
    be = (cfg.get("backends") or {}).get(m["name"]) or {}
    return ModelDesign(
        name=m["name"],
        source=m.get("source"),
        variant=m.get("variant"),
        dtype=be.get("dtype") or mc.get("dtype") or cfg.get("dtype"),
        device=be.get("device") or mc.get("device") or cfg.get("device"),
        backend=be.get("backend") or cfg.get("backend"),
        backend_version=be.get("version") or be.get("backend_version") or cfg.get("backend_version"),
        weights_sha256=mc.get("weights_sha256"),
        num_parameters=mc.get("num_parameters"),
    )


def _imported_from(cfg: dict[str, Any], code: str | None) -> str | None:
    imp = cfg.get("imported")
    if isinstance(imp, dict) and imp.get("harness"):
        return str(imp["harness"])
    if code and code.startswith("import:"):
        return cfg.get("source") or code.removeprefix("import:")
    return None


def _groups(cfg: dict[str, Any]) -> list[HarnessGroup]:
    imp = cfg.get("imported")
    if not isinstance(imp, dict):
        return []
    seen: dict[str, list[str]] = {}
    for g in imp.get("groups") or []:
        seen.setdefault(str(g.get("group")), [str(t) for t in g.get("subtasks") or []])
    return [HarnessGroup(n, t) for n, t in seen.items()]


def served_design(cfg: dict[str, Any]) -> str | None:
    """How the served runs behind an imported harness run sampled (``config.imported.served``): one
    phrase per served run and mode, e.g. "served coupled, seed 1234 (run cpl)"."""
    links = (cfg.get("imported") or {}).get("served") or []
    out: dict[tuple[str, str], set[int]] = {}
    for ln in links:
        out.setdefault((str(ln.get("served_run")), str(ln.get("mode"))), set()).update(
            ln.get("seeds") or []
        )
    parts = []
    for (run, mode), seeds in out.items():
        if mode == "coupled" and len(seeds) == 1:
            parts.append(f"served coupled, seed {next(iter(seeds))} (run {run})")
        elif mode == "coupled":
            parts.append(f"served coupled, seeds {', '.join(map(str, sorted(seeds)))} (run {run})")
        else:
            parts.append(f"served {mode}, a seed per model (run {run})")
    return "; ".join(parts) or None


def run_design(db: str | os.PathLike, run: str) -> RunDesign:
    """The design of ``run`` from what the store recorded (UserError for an unknown run)."""
    r = design_rows(db, run)
    cfg = r.config
    version, commit = _split_version(r.code_version)
    imported = _imported_from(cfg, r.code_version)
    seed = cfg.get("seed", cfg.get("coupled_seed"))
    modes = cfg.get("modes") or sorted({k.split("/")[-1] for k in (cfg.get("seeds") or {})})
    ds = None if r.dataset is None else DatasetDesign(**r.dataset)
    return RunDesign(
        run=r.run_id,
        created_at=r.created_at,
        status=r.status,
        imported_from=imported,
        code_version=r.code_version,
        engine_version=version,
        git_commit=commit,
        key_mode=r.key_mode,
        host=r.host,
        device=cfg.get("device"),
        models=[_model(m, cfg) for m in r.models],
        dataset=ds,
        seed=None if seed is None else int(seed),
        seeds=cfg.get("seeds"),
        temperature=cfg.get("temperature"),
        top_k=cfg.get("top_k"),
        top_p=cfg.get("top_p"),
        max_new_tokens=cfg.get("max_new_tokens"),
        repeats=cfg.get("repeats"),
        modes=list(modes),
        system_prompt=cfg.get("system_prompt"),
        n_generations=r.n_generations,
        n_tokens=r.n_tokens,
        wall_s=None if imported or not r.wall_s else r.wall_s,
        command=cfg.get("command"),
        warnings=list(r.warnings),
        imported_sources=[str(s) for s in ((cfg.get("imported") or {}).get("sources") or [])]
        if isinstance(cfg.get("imported"), dict)
        else [],
        imported_groups=_groups(cfg),
        served=served_design(cfg),
    )
