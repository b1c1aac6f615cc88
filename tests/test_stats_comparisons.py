"""Comparison data is one type (engine.stats.comparisons.Comparisons) that the ranking,
win-rate and clustered statistics accept; built from the normalised table it agrees exactly with
the per-function argument forms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.analysis.comparisons import cluster_ids, model_indices, to_comparisons, win_indicators
from engine.errors import UserError
from engine.stats import clustered as CL
from engine.stats import ranking as R
from engine.stats import winrates as WR
from engine.stats.comparisons import A_WINS, B_WINS, NO_LABEL, TIE, Comparisons, outcome_codes

DF = pd.DataFrame(
    {
        "prompt_id": ["p1", "p1", "p2", "p3", "p3", "p4"],
        "model_a": ["x", "y", "x", "z", "x", "y"],
        "model_b": ["y", "z", "z", "x", "y", "x"],
        "human_winner": ["a", "b", None, "tie", "b", "a"],
        "judge_winner": ["a", "a", "b", None, "tie", "b"],
    }
)


def test_exact_tiny_case():
    c = to_comparisons(DF)
    assert c.models == ("x", "y", "z") and len(c) == 6 and c.k == 3
    assert c.first.tolist() == [0, 1, 0, 2, 0, 1] and c.second.tolist() == [1, 2, 2, 0, 1, 0]
    assert c.human.tolist() == [A_WINS, B_WINS, NO_LABEL, TIE, B_WINS, A_WINS]
    assert c.judge.tolist() == [A_WINS, A_WINS, B_WINS, NO_LABEL, TIE, B_WINS]
    a, b, out = c.outcomes("human")
    assert (
        a.tolist() == [0, 1, 2, 0, 1]
        and b.tolist() == [1, 2, 0, 1, 0]
        and out.tolist() == [0, 1, 2, 1, 0]
    )
    assert c.clusters("human").tolist() == ["p1", "p1", "p3", "p3", "p4"]
    w, w2 = c.indicators("judge")
    assert w.tolist() == [1, 1, 0, 0, 0, 0] and w2.tolist() == [0, 0, 1, 0, 0, 1]
    # the analysis helpers the rank-set and win-rate analyses use agree with the type
    assert [x.tolist() for x in model_indices(DF, list(c.models))] == [
        c.first.tolist(),
        c.second.tolist(),
    ]
    assert [x.tolist() for x in win_indicators(DF.judge_winner)] == [w.tolist(), w2.tolist()]
    assert cluster_ids(DF).tolist() == c.cluster.tolist()
    assert to_comparisons(DF.drop(columns="prompt_id")).cluster is None
    assert to_comparisons(DF.assign(prompt_id=None)).cluster is None


def test_adapters_equal_the_array_forms():
    rng = np.random.default_rng(3)
    first, second = R.balanced_design(4, 30)
    n = len(first)
    human = rng.choice(np.array(["a", "b", "tie", None], dtype=object), size=n)
    prompts = np.array([f"p{i // 3}" for i in range(n)], dtype=object)
    c = Comparisons(
        ("m0", "m1", "m2", "m3"), first, second, outcome_codes(human), outcome_codes([None] * n), prompts
    )
    lab = human != None  # noqa: E711  (element-wise on an object array)
    w, w2 = (human[lab] == "a").astype(float), (human[lab] == "b").astype(float)
    th, sg = R.onesource_of(c, "human")
    th2, sg2 = R.onesource_theta_sigma(first[lab], second[lab], w, w2, 4, cluster=prompts[lab])
    np.testing.assert_array_equal(th, th2)
    np.testing.assert_array_equal(sg, sg2)
    codes = np.where(human[lab] == "a", WR.A_WINS, np.where(human[lab] == "b", WR.B_WINS, WR.TIE))
    for x, y in zip(
        WR.pairwise_counts_of(c, "human"), WR.pairwise_counts(first[lab], second[lab], codes, 4)
    ):
        np.testing.assert_array_equal(x, y)
    r1 = CL.winrate_cluster_bootstrap_of(c, "human", np.random.default_rng(0), n_resamples=200)
    r2 = CL.winrate_cluster_bootstrap(
        first[lab],
        second[lab],
        codes,
        4,
        np.random.default_rng(0),
        cluster=prompts[lab],
        n_resamples=200,
    )
    np.testing.assert_array_equal(r1["avg_draws"], r2["avg_draws"])


def test_bad_data_is_refused():
    with pytest.raises(UserError, match="two different models"):
        Comparisons(
            ("a", "b"), np.array([0]), np.array([0]), np.array([0], np.int8), np.array([-1], np.int8)
        )
    with pytest.raises(UserError, match="not in the model list"):
        Comparisons.from_labels(["a", "b"], ["a"], ["c"], ["a"])
    with pytest.raises(UserError, match="shape"):
        Comparisons(
            ("a", "b"), np.array([0, 1]), np.array([1]), np.array([0], np.int8), np.array([-1], np.int8)
        )
