"""Every ``next:`` command that ``generate`` prints runs as printed, and each
uses the scoring rule the run was scored with (the dataset kind's rule)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.store import scores as score_store
from engine.testing import tiny_lm
from tests.conftest import ROOT


def _env() -> dict:
    # `python` as printed resolves to this interpreter; the engine package is importable from any folder
    bindir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
    }


def _generate_and_run_next(
    tmp_path: Path, n_questions: int
) -> tuple[Path, dict[str, str], dict[str, list[str]]]:
    """Generate with two tiny random models on ``n_questions`` digit questions, then run every printed
    ``next:`` command verbatim; returns the database, each command's stdout and its argv."""
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        m, t = tiny_lm(seed)
        m.save_pretrained(tmp_path / name)
        t.save_pretrained(tmp_path / name)
    # a numeric dataset whose answers are single digits: the random character-level models write a
    # digit now and then, so some answers are right and the scores vary
    data = tmp_path / "digits.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "question": f"Say the digit {i % 10}.", "answer": str(i % 10)})
            + "\n"
            for i in range(n_questions)
        )
    )
    db = tmp_path / "next.duckdb"
    gen = [
        sys.executable,
        "-m",
        "engine",
        "generate",
        "--models",
        str(tmp_path / "tiny-a"),
        str(tmp_path / "tiny-b"),
        "--dataset",
        str(data),
        "--repeats",
        "2",
        "--max-new-tokens",
        "8",
        "--device",
        "cpu",
        "--run-id",
        "next-run",
        "--db",
        str(db),
    ]
    out = subprocess.run(gen, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    nxt = [ln.strip() for ln in lines[lines.index("next:") + 1 :] if ln.startswith("  python -m engine")]
    assert [shlex.split(c)[3] for c in nxt] == ["score", "summary", "benchmark-compare", "export"]
    outputs, argv = {}, {}
    for cmd in nxt:
        argv[shlex.split(cmd)[3]] = shlex.split(cmd)
        res = subprocess.run(
            cmd, shell=True, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        outputs[shlex.split(cmd)[3]] = res.stdout
    assert (tmp_path / "next-run.csv").exists()
    return db, outputs, argv


@pytest.mark.slow
def test_every_printed_next_command_runs_verbatim(tmp_path):
    db, outputs, _ = _generate_and_run_next(tmp_path, 40)
    # the numeric dataset was scored with the numeric rule, and the analyses used that rule
    assert score_store.scored_rules(db, "next-run") == ["numeric"]
    assert "rule numeric" in outputs["summary"] and "rule numeric" in outputs["benchmark-compare"]


@pytest.mark.slow
def test_next_commands_run_verbatim_on_a_five_question_run(tmp_path):
    # benchmark-compare on a small run exited 2 ("target error must be > 0") when the
    # scores never differ; now it prints its numbers with the typed small-sample warning, and the
    # planner says when it cannot plan
    db, outputs, argv = _generate_and_run_next(tmp_path, 5)
    bc = outputs["benchmark-compare"]
    assert "5 questions × 2 repeats" in bc and "rule numeric" in bc
    assert "warning: small sample: only 5 questions" in bc
    assert "Planner: " in bc
    # the same result as JSON, warnings typed by kind
    from engine.analysis.benchmark import benchmark_compare
    from engine.analysis.notices import Notice

    bc_argv = argv["benchmark-compare"]
    model_a, model_b = (bc_argv[bc_argv.index(flag) + 1] for flag in ("--model-a", "--model-b"))
    res = benchmark_compare(db, model_a, model_b, run="next-run", rule="numeric", n_resamples=50)
    assert res.has(Notice.SMALL_SAMPLE) and res.n_questions == 5
    assert res.planner.can_plan == (not res.has(Notice.CANNOT_PLAN))
    assert res.has(Notice.NO_ERROR_LEVEL) == (not res.saving_detail.error > 0)
    if not res.planner.can_plan:
        assert res.planner.headline.startswith("cannot plan") and "Planner: cannot plan" in bc


def test_benchmark_compare_on_five_questions_that_never_differ(tmp_db, capsys):
    """Exact tiny case of the degenerate small run: both models give the same answer everywhere, so the
    estimation error is 0 at every sample size. Numbers come back with typed warnings, exit 0."""
    import numpy as np

    from engine.analysis.benchmark import benchmark_compare
    from engine.analysis.notices import Notice
    from engine.cli import main
    from engine.tasks import scoring
    from tests.test_summary import make_numeric_run

    gold = {f"p{i}": str(i) for i in range(5)}
    answers = np.array([[str(i), str(i)] for i in range(5)])  # always right, 2 repeats
    make_numeric_run(
        tmp_db, {(m, mode): answers for m in ("m1", "m2") for mode in ("coupled", "independent")}, gold
    )
    scoring.score_run(tmp_db, "r1")
    res = benchmark_compare(tmp_db, "m1", "m2", run="r1", rule="numeric", n_resamples=50)
    assert [w.kind for w in res.warnings] == [
        Notice.SMALL_SAMPLE,
        Notice.NO_ERROR_LEVEL,
        Notice.CANNOT_PLAN,
    ]
    assert (res.n_questions, res.n_repeats) == (5, 2) and res.accuracy == {"m1": 1.0, "m2": 1.0}
    assert res.paired["coupled"].diff == 0.0 and res.saving_detail.error == 0.0
    assert res.saving is None and res.saving_detail.saving is None and res.saving_ci is None
    assert not res.planner.can_plan and res.planner.mde_plans == [] and res.planner.se_plans == []
    assert res.planner.headline.startswith(
        "cannot plan: the coupled score differences of this run never vary"
    )
    d = json.loads(json.dumps(res.to_dict()))
    assert (
        d["warnings"][0].startswith("small sample: only 5 questions")
        and d["planner"]["can_plan"] is False
    )
    assert main(["benchmark-compare", "--db", str(tmp_db), "--run", "r1", "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "Planner: cannot plan" in out and "warning: small sample: only 5 questions" in out


def test_prompt_list_next_commands_are_the_judge_chain_and_run_verbatim(tmp_path, monkeypatch, capsys):
    """A prompt list has no gold answers: ``generate`` prints the judge chain (judge, store the verdicts
    as a set, win-rates and judge-only rank-sets on it), never ``score`` / ``summary`` /
    ``benchmark-compare``, with ``--db``; each printed command runs as printed."""
    from engine import generation
    from engine.cli import main as cli_main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # the random tiny judge writes no verdict; its replies come from a seeded stand-in (A / B / Tie), the
    # printed command and the loading of the judge model stay as they are
    rng = iter(np.random.default_rng(0).choice(["A", "B", "Tie"], size=1000, p=[0.45, 0.4, 0.15]))
    monkeypatch.setattr(generation, "complete", lambda lm, msgs, **kw: [str(next(rng)) for _ in msgs])
    monkeypatch.chdir(tmp_path)
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        m, t = tiny_lm(seed)
        m.save_pretrained(tmp_path / name)
        t.save_pretrained(tmp_path / name)
    prompts = tmp_path / "chat.txt"
    prompts.write_text(
        "".join(f"Say something about {w}.\n" for w in ("cats", "rain", "tea", "maps", "jazz", "salt"))
    )
    db = tmp_path / "chat.duckdb"
    assert (
        cli_main(
            [
                "generate",
                "--models",
                str(tmp_path / "tiny-a"),
                str(tmp_path / "tiny-b"),
                "--dataset",
                str(prompts),
                "--repeats",
                "1",
                "--max-new-tokens",
                "3",
                "--modes",
                "coupled",
                "--device",
                "cpu",
                "--run-id",
                "chat-run",
                "--db",
                str(db),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    nxt = [ln.strip() for ln in lines[lines.index("next:") + 1 :] if ln.startswith("  python -m engine")]
    assert [shlex.split(c)[3] for c in nxt] == ["judge", "comparisons", "winrates", "ranksets", "export"]
    for cmd in nxt:
        argv = shlex.split(cmd)
        assert argv[:3] == ["python", "-m", "engine"] and argv[argv.index("--db") + 1] == str(db)
        assert cli_main(argv[3:]) == 0, cmd
        out = capsys.readouterr().out
        if argv[3] in ("winrates", "ranksets"):
            assert "judge" in out
    assert (tmp_path / "chat-run.csv").exists()
