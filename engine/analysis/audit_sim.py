"""A simulated judged run with human labels (known truth), in the frames of
:mod:`engine.analysis.run_units`: used by the judge-audit and label-planner tests and by
``bench/bench_judge_audit.py``.

Model m has quality q_m. A unit (prompt p, pair a < b) has latent preference
``z = q_a - q_b + u_p + e`` (u_p ~ N(0, prompt_sd²): the within-prompt correlation). A human sees
``z + N(0, 1)``; the judge, in order ab, ``z + beta_a - beta_b + pos + N(0, judge_sd²)`` and in
order ba the same with ``-pos`` (beta: per-model judge bias; pos: position bias toward the
first shown). A value above ``tie`` prefers a, below ``-tie`` b, else tie.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from engine.analysis.run_units import KEY

WIN = np.array(["a", "b", "tie"], dtype=object)


def _lab(x: np.ndarray, tie: float) -> np.ndarray:
    return np.where(x > tie, 0, np.where(x < -tie, 1, 2))


def simulated_run(
    n_prompts: int,
    k: int,
    n_labels: int,
    rng: np.random.Generator,
    *,
    prompt_sd: float = 0.7,
    judge_sd: float = 0.6,
    judge_bias: float = 0.3,
    position: float = 0.3,
    tie: float = 0.25,
    doubled: float = 0.2,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(units, labels): every pair of k models on n_prompts prompts judged in both orders; a uniform
    random sample of ``n_labels`` units labelled by labeller "h1", a share ``doubled`` of them also by
    "h2".

    Returns:
        units: KEY + w_ab, w_ba, judge (codes; :func:`run_units.judge_units`'s frame); labels: KEY +
        human_winner, labeller, labelled_at, presented, set_name (:func:`run_units.human_labels`).
    """
    models = [f"m{i}" for i in range(k)]
    q = np.linspace(0.6, -0.6, k)
    beta = np.zeros(k)
    beta[-1] = judge_bias  # the judge favours the weakest model
    pairs = np.array(list(combinations(range(k), 2)))
    P = len(pairs)
    p_idx = np.repeat(np.arange(n_prompts), P)
    a, b = np.tile(pairs[:, 0], n_prompts), np.tile(pairs[:, 1], n_prompts)
    u = rng.normal(0, prompt_sd, n_prompts)[p_idx]
    z = q[a] - q[b] + u + rng.normal(0, 0.5, a.size)
    jz = z + beta[a] - beta[b] + rng.normal(0, judge_sd, a.size)
    w_ab = _lab(jz + position + rng.normal(0, 0.3, a.size), tie)
    w_ba = _lab(jz - position + rng.normal(0, 0.3, a.size), tie)
    judge = np.where(w_ab == w_ba, w_ab, 2)
    units = pd.DataFrame(
        {
            "prompt_id": np.char.add("p", p_idx.astype(str)).astype(object),
            "repeat": 0,
            "mode": "coupled",
            "model_a": np.array(models, object)[a],
            "model_b": np.array(models, object)[b],
            "w_ab": w_ab,
            "w_ba": w_ba,
            "judge": judge,
        }
    )
    pick = rng.choice(a.size, size=min(n_labels, a.size), replace=False)
    h = _lab(z[pick] + rng.normal(0, 1.0, pick.size), tie)
    lab = units.loc[pick, KEY].assign(human_winner=WIN[h], labeller="h1", presented="ab")
    dbl = pick[: int(round(doubled * pick.size))]
    h2 = _lab(z[dbl] + rng.normal(0, 1.0, dbl.size), tie)
    lab2 = units.loc[dbl, KEY].assign(human_winner=WIN[h2], labeller="h2", presented="ba")
    labels = pd.concat([lab, lab2], ignore_index=True)
    labels["labelled_at"] = pd.Timestamp("2026-01-01") + pd.to_timedelta(
        np.arange(len(labels)), unit="s"
    )
    return units, labels.assign(set_name="sim")
