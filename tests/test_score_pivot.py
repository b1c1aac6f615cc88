"""The score pivot has one home: engine.store.scores.question_means, the per-question
mean score per model, read by accuracy-ranks, the sequential replay and the live --until run."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from engine.store.scores import question_means
from tests.conftest import ROOT


def test_question_means_exact_tiny_case():
    df = pd.DataFrame(
        {
            "model": ["a", "a", "a", "b", "b"],
            "prompt_id": ["q1", "q1", "q2", "q1", "q1"],
            "repeat": [0, 1, 0, 0, 1],
            "mode": ["coupled"] * 5,
            "score": [1.0, 0.0, 1.0, 1.0, 1.0],
        }
    )
    w = question_means(df)
    assert list(w.index) == ["q1", "q2"] and list(w.columns) == ["a", "b"]
    np.testing.assert_array_equal(w.to_numpy(), [[0.5, 1.0], [1.0, np.nan]])


def test_the_pivot_is_written_once():
    pattern = re.compile(r'groupby\(\["prompt_id", "model"\]\)\["score"\]\.mean\(\)')
    hits = [
        str(p.relative_to(ROOT))
        for p in sorted((ROOT / "engine").rglob("*.py"))
        for _ in pattern.finditer(p.read_text())
    ]
    assert hits == ["engine/store/scores.py"], hits
