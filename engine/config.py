"""Constants written once: modes, rules, methods, generation defaults, limits and default paths.

Cheap to import (standard library only: no torch, DuckDB or pandas), so the CLI can build its
parser, and the dashboard its forms, from these without loading the heavy layers. Every other
module takes its choices and defaults from here.
"""

from __future__ import annotations

import os
from pathlib import Path

# ---------------------------------------------------------------------------------- paths
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# COUPLED_EVAL_DB overrides the default database (the dashboard and tests use it).
DEFAULT_DB = Path(os.environ.get("COUPLED_EVAL_DB", PROJECT_ROOT / "data" / "coupled_eval.duckdb"))

# ---------------------------------------------------------------------------------- generation
MODES = ("coupled", "independent")  # coupled: one noise seed for every model; independent: one per model
KEY_MODES = ("token_id", "bytes")  # noise keyed by token id (one vocabulary) or by token byte string
TRACES = ("auto", "on", "off")  # --traces
# Seeds of a run (and the per-model seeds derived from it) lie in [0, 2^63): they fit a signed
# and an unsigned 64-bit column alike. The noise function itself accepts any 64-bit word.
SEED_MAX = 2**63
# Auto traces: about 1M token traces at MCQ lengths, the size the dashboard is measured on
# (docs/BENCHMARKS.md); a full-MMLU run (1.4M generations) would store ~30M trace rows.
TRACES_AUTO_MAX_UNITS = 50_000
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_K = 0  # 0 = off
DEFAULT_TOP_P = 1.0  # 1 = off
DEFAULT_MAX_NEW_TOKENS = 20
DEFAULT_BATCH_SIZE = 32
DEFAULT_TRACE_TOP_K = 5
SERVE_COMMIT_EVERY_S = 0.1  # engine serve commits its journaled answers this often (serving/writer.py)
# A trace stores trace_top_k alternatives per token: beyond 100 a trace is bigger than the rest of the
# run's data and no view reads it (the Token traces page shows the top 10).
TRACE_TOP_K_MAX = 100
# Generation backends: "hf" = our transformers loop; "vllm" = vLLM with our keyed-noise logits
# processor (a separate venv: scripts/install_vllm.sh). Runs with "hf" keep their pre-backend run ids.
BACKENDS = ("hf", "vllm")
DEFAULT_BACKEND = "hf"
DEFAULT_REPEATS = 10
DEFAULT_SEED = 0

# ---------------------------------------------------------------------------------- scoring, judging,
#   clustering
RULES = ("paper", "lenient", "numeric", "exact")  # answer-extraction rules (engine.tasks.scoring)
DEFAULT_RULE = "paper"
NO_ANSWER = "E"  # what the multiple-choice rules extract when they find no option (always wrong)


def rule_for_dataset(kind: str | None, dataset_id: str | None = None) -> str:
    """The scoring rule that fits a dataset when none is asked for.

    numeric -> "numeric" (last number / "####"); prompt lists -> "exact"; multiple choice ->
    "lenient" for the built-in ``demo`` set (its questions were written for this project and a
    small model answers "1. 17 + 26 = 43" or "B. 43"), else "paper": MMLU files and folders keep
    the coupled-generation paper's exact rule, so paper reproductions need no flag.
    """
    if kind == "numeric":
        return "numeric"
    if kind == "prompts":
        return "exact"
    base = (dataset_id or "").split(":", 1)[0]
    return "lenient" if base == "demo" else "paper"


CLUSTER_METHODS = ("answer", "llm", "embedding")
DEFAULT_EMBEDDING_THRESHOLD = (
    0.85  # cosine; paraphrases of one short answer typically score 0.85-0.99 with MiniLM
)
JUDGE_ORDERS = ("both", "random")
JUDGE_COMBINE = ("separate", "agree")

# ---------------------------------------------------------------------------------- pairwise comparisons
WINNERS = ("a", "b", "tie")  # normalised pairwise outcome; NULL = no label
COMPARISON_FORMATS = ("csv", "arena")
MAX_UPLOAD_BYTES = 200 * 1024 * 1024
RANK_METHODS = ("human", "judge", "ppr")  # rank-sets from human labels, judge labels, or both (PPR)
RANK_LABELS = ("human", "judge")  # whose labels a win-rate analysis uses
COVARIANCES = ("delta", "paper")  # rank-set covariance: valid delta method | the published formula
RANK_PROCEDURES = (
    "maxt",
    "marginal",
    "chi2",
)  # rank-sets: simultaneous max-t (default) | marginal | Algorithm 2
PPR_DEFAULT_HUMAN_LABELS = (
    990  # PPR on files where every row has both labels: human labels kept (paper, Fig. 1)
)

# ---------------------------------------------------------------------------------- analyses
DEFAULT_SAVING_N = 120  # without a target error: the error the coupled curve reaches at n = 120
DEFAULT_RESAMPLES = 1000
DEFAULT_PLAN_MDE = 0.05  # benchmark planner: the accuracy difference to detect (80% power, alpha 0.05)
PLAN_REPEATS = (1, 2, 5, 10)  # benchmark planner: repeats per question to plan for (plus the run's own)
DEFAULT_P_MAX = 0.1  # data map: flag prompts with P(correct) <= p_max ...
DEFAULT_S_MIN = -0.8  # ... and semantic consistency >= s_min

# ---------------------------------------------------------------------------------- exports
EXPORT_FORMATS = ("csv", "parquet")  # export generations
FIGURE_FORMATS = ("png", "svg", "html")  # chart downloads
