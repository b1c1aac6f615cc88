"""Analysis layer of multiple generations: stored data -> engine.stats -> a frozen result.

Multiple generations per prompt: P(correct), the score's within/between variance and CI,
semantic consistency and the data map.

Zhang et al., "Beyond the Singular: The Essential Role of Multiple Generations in Effective
Benchmark Evaluation and Analysis", Sections 3-4 (the estimator and its variance decomposition,
the data map of P(correct) vs semantic consistency).

A generation with no extractable answer (no number, no option: ``scores.extracted`` NULL, empty,
or the multiple-choice rules' "E") is its own category: it shares no cluster with another
generation, and a prompt is never flagged as a label-error candidate through such generations.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engine.analysis.result_base import ToDict, plain
from engine.analysis.stats_records import BootstrapCI, ScoreVariance, SingleGeneration
from engine.config import MODES, NO_ANSWER
from engine.errors import UserError
from engine.stats import multigen as mg
from engine.store import clusters as cluster_store
from engine.store import scores as score_store

MC_RULES = ("paper", "lenient")  # the rules whose "no answer" is the letter NO_ANSWER


@dataclass(frozen=True)
class PromptPoint:
    """One prompt of the data map."""

    prompt_id: str
    subject: str | None
    p_correct: float
    consistency: float
    no_answer: float  # share of its generations without an extractable answer
    flagged: bool


@dataclass(frozen=True)
class PCorrectDistribution(ToDict):
    """How many prompts have each value of P(correct) (the values j/k, ascending)."""

    values: list[float]
    counts: list[int]


@dataclass(frozen=True)
class Thresholds(ToDict):
    """The data map's flag region: P(correct) <= p_max and consistency S >= s_min."""

    p_max: float
    s_min: float


@dataclass(frozen=True)
class Multigen:
    """The multiple-generation analysis of one model in one mode (:func:`multigen_summary`)."""

    run: str
    model: str
    mode: str
    rule: str
    method: str
    subject: str | None
    clusters_source: str
    n: int
    k: int
    score: ScoreVariance  # engine.stats.multigen.score_variance
    score_method: str
    bootstrap: BootstrapCI  # engine.stats.multigen.bootstrap_score_ci
    single_generation: SingleGeneration  # engine.stats.multigen.single_generation_scores
    p_correct_distribution: PCorrectDistribution
    consistency_mean: float
    thresholds: Thresholds
    n_flagged: int
    n_no_answer: int  # generations without an extractable answer
    prompts: list[PromptPoint] = field(default_factory=list)

    @property
    def flagged(self) -> list[str]:
        return [p.prompt_id for p in self.prompts if p.flagged]

    def to_dict(self, with_prompts: bool = True) -> dict:
        keys = (
            "run",
            "model",
            "mode",
            "rule",
            "method",
            "subject",
            "clusters_source",
            "n",
            "k",
            "score",
            "score_method",
            "bootstrap",
            "single_generation",
            "p_correct_distribution",
            "consistency_mean",
            "thresholds",
            "n_flagged",
            "n_no_answer",
        )
        out = {k: plain(getattr(self, k)) for k in keys}
        if with_prompts:
            out["prompts"] = [dict(vars(p)) for p in self.prompts]
        return out


def no_answer_mask(extracted: pd.Series, rule: str) -> np.ndarray:
    """True where a generation has no extractable answer under ``rule``."""
    x = extracted.astype("string").str.strip()
    mask = x.isna() | (x == "")
    if rule in MC_RULES:
        mask |= x == NO_ANSWER
    return mask.fillna(True).to_numpy(dtype=bool)


def _answer_clusters(df: pd.DataFrame, rule: str) -> pd.Series:
    """Cluster id per generation from identical extracted answers; each non-answer gets its own id."""
    none = no_answer_mask(df["extracted"], rule)
    codes, _ = pd.factorize(df["extracted"].astype("string").where(~none, None))
    codes = codes.astype(np.int64)
    codes[none] = -1 - np.arange(int(none.sum()))  # distinct negative ids: singletons
    return pd.Series(codes, index=df.index)


def _cluster_matrix(
    df: pd.DataFrame, wide: pd.DataFrame, method: str, rule: str
) -> tuple[np.ndarray, str]:
    """(n, k) cluster ids aligned with ``wide`` and where they come from."""
    if df["cluster_id"].notna().any():
        cl = df.pivot_table(
            index=["idx", "prompt_id"], columns="repeat", values="cluster_id", aggfunc="first"
        )
        cl = cl.reindex(index=wide.index, columns=wide.columns)
        if cl.isna().any().any():
            raise UserError(
                f"clusters of method {method!r} are missing for some generations; re-run clustering"
            )
        return cl.to_numpy(dtype=np.int64), f"clusters table (method {method})"
    if method != "answer":
        raise UserError(
            f"no clusters of method {method!r} stored for this run/model/mode; "
            "run the clustering first, or use method 'answer'"
        )
    cl = df.assign(code=_answer_clusters(df, rule)).pivot_table(
        index=["idx", "prompt_id"], columns="repeat", values="code", aggfunc="first"
    )
    return (
        cl.reindex(index=wide.index, columns=wide.columns).to_numpy(dtype=np.int64),
        f"identical extracted answers (scores.extracted, rule {rule}; no answer = its own category)",
    )


def multigen_summary(
    db: str | os.PathLike,
    run: str,
    model: str,
    mode: str = "coupled",
    rule: str = "paper",
    method: str = "answer",
    subject: str | None = None,
    p_max: float = 0.1,
    s_min: float = -0.8,
    n_bootstrap: int = 2000,
    seed: int = 0,
) -> Multigen:
    """Multiple-generation analysis of one model's k generations per prompt (docs/METHODS.md section 5).

    Clusters come from the ``clusters`` table (``method``); for method 'answer' without stored
    clusters, generations are clustered by identical extracted answers (``scores.extracted``), a
    generation without an answer in a cluster of its own. A prompt is flagged (P(correct) <= p_max,
    consistency >= s_min) only when an actual answer repeats (``engine.stats.multigen.data_map_flags``).
    """
    if mode not in MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {list(MODES)}")
    df = score_store.model_scores(db, run, model, mode, rule, method, subject)
    df = df.sort_values(["idx", "prompt_id", "repeat"])
    wide = df.pivot_table(
        index=["idx", "prompt_id"], columns="repeat", values="score", aggfunc="first"
    ).dropna()
    if wide.empty:
        raise UserError("no prompt has a score for every repeat")
    keep = wide.index.get_level_values("prompt_id")
    Y = wide.to_numpy(dtype=np.float64)  # (n, k)
    C, source = _cluster_matrix(df, wide, method, rule)
    none = df.assign(none=no_answer_mask(df["extracted"], rule)).pivot_table(
        index=["idx", "prompt_id"], columns="repeat", values="none", aggfunc="first"
    )
    answered = ~none.reindex(index=wide.index, columns=wide.columns).fillna(True).to_numpy(
        dtype=bool
    )  # (n, k)
    p = mg.p_correct(Y)
    S = mg.semantic_consistency(C)
    flags = mg.data_map_flags(
        p, S, p_max=p_max, s_min=s_min, largest_answer=mg.largest_answer_cluster(C, answered)
    )
    subj = df.drop_duplicates("prompt_id").set_index("prompt_id")["subject"].reindex(keep)
    values, counts = np.unique(np.round(p, 9), return_counts=True)  # p takes the values j/k
    return Multigen(
        run=run,
        model=model,
        mode=mode,
        rule=rule,
        method=method,
        subject=subject,
        clusters_source=source,
        n=int(Y.shape[0]),
        k=int(Y.shape[1]),
        score=ScoreVariance.of(mg.score_variance(Y)),
        score_method="t CI with Var(mu) = sigma_hat^2/n; unbiased within/between components "
        "(docs/METHODS.md 5)",
        bootstrap=BootstrapCI.of(
            mg.bootstrap_score_ci(Y, np.random.default_rng(seed), n_resamples=n_bootstrap)
        ),
        single_generation=SingleGeneration.of(mg.single_generation_scores(Y)),
        p_correct_distribution=PCorrectDistribution(values=values.tolist(), counts=counts.tolist()),
        consistency_mean=float(S.mean()),
        thresholds=Thresholds(p_max=p_max, s_min=s_min),
        n_flagged=int(flags.sum()),
        n_no_answer=int((~answered).sum()),
        prompts=[
            PromptPoint(
                str(pid),
                None if pd.isna(sj) else sj,
                float(pi),
                float(si),
                float(1 - ai.mean()),
                bool(fi),
            )
            for pid, sj, pi, si, ai, fi in zip(keep, subj.to_numpy(), p, S, answered, flags)
        ],
    )


def multigen(
    db: str | os.PathLike,
    run: str,
    model: str,
    mode: str = "coupled",
    rule: str = "paper",
    method: str = "answer",
    subject: str | None = None,
    p_max: float = 0.1,
    s_min: float = -0.8,
    seed: int = 0,
) -> Multigen:
    """The multiple-generation analysis and data map (:func:`multigen_summary`)."""
    return multigen_summary(
        db,
        run,
        model,
        mode=mode,
        rule=rule,
        method=method,
        subject=subject,
        p_max=p_max,
        s_min=s_min,
        seed=seed,
    )


def default_rule(db: str | os.PathLike, run: str) -> str:
    """The rule the run was scored with (its dataset's rule when scored with it): the Data map's
    default."""
    return score_store.run_rule(db, run)


def cluster_methods(db: str | os.PathLike, run: str) -> list[str]:
    """Clustering methods stored for a run ('answer' is always possible from the scores)."""
    return sorted({"answer", *cluster_store.cluster_methods(db, run)})


def prompts_generations(
    db: str | os.PathLike,
    run: str,
    model: str,
    mode: str,
    prompt_ids: list[str],
    rule: str = "paper",
    limit: int = 2000,
) -> pd.DataFrame:
    """Generations of ``prompt_ids`` (one model and mode) with gold answer, extraction and score."""
    if not prompt_ids:
        return pd.DataFrame(
            columns=["prompt_id", "question", "gold", "repeat", "extracted", "score", "text"]
        )
    return score_store.scored_generations(db, run, model, mode, prompt_ids, rule, limit)
