"""Helpers of the bench scripts' ``--smoke`` mode (tiny sizes, seconds; run by CI in
tests/test_bench_smoke.py, so a refactor that breaks a bench script fails CI).

Not a script: it has no ``__main__`` block, and the CI test runs only scripts.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

SMOKE_HELP = (
    "tiny sizes that finish in seconds (CI runs every bench script this way); numbers mean nothing"
)


def tiny_model_dir(seed: int = 0) -> str:
    """A randomly initialised 2-layer Llama with a character-level tokenizer, saved to a fresh folder
    (engine.testing.tiny_lm): a model any loader accepts by path, in a fraction of a second."""
    from engine.testing import tiny_lm

    out = Path(tempfile.mkdtemp(prefix="bench_smoke_model_"))
    model, tok = tiny_lm(seed)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


def synthetic_arena(
    folder: str | Path | None = None, n: int = 600, prompts: int = 120, seed: int = 0
) -> Path:
    """A folder laid out like ../shared/data/arena: ``human.json`` and one file per judge of
    ``engine.analysis.comparisons.ARENA_JUDGES`` (JSON lines: num, question_id, model_a, model_b,
    winner) over the paper's 12 models, outcomes drawn from a Bradley-Terry model with ties; the
    judges agree with the human label 80% of the time. The bench scripts' stand-in for the real data."""
    import numpy as np

    from engine.analysis.comparisons import ARENA_JUDGES, ARENA_PAPER_MODELS

    rng = np.random.default_rng(seed)
    out = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="bench_smoke_arena_"))
    out.mkdir(parents=True, exist_ok=True)
    models = list(ARENA_PAPER_MODELS)
    strength = np.linspace(1.5, -1.5, len(models))
    outcomes = ("model_a", "model_b", "tie")
    human = []
    for i in range(n):
        a, b = rng.choice(len(models), 2, replace=False)
        pa = 1 / (1 + np.exp(strength[b] - strength[a]))
        u = rng.random()
        winner = "tie" if u < 0.1 else "model_a" if u < 0.1 + 0.9 * pa else "model_b"
        human.append(
            {
                "num": i,
                "question_id": f"q{i % prompts}",
                "model_a": models[a],
                "model_b": models[b],
                "winner": winner,
            }
        )
    (out / "human.json").write_text("".join(json.dumps(r) + "\n" for r in human))
    for judge in ARENA_JUDGES:
        rows = [
            {**r, "winner": r["winner"] if rng.random() < 0.8 else str(rng.choice(outcomes))}
            for r in human
        ]
        (out / f"{judge}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out
