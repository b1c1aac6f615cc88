"""Issue 21 item 6: every ``next:`` command that ``generate`` prints runs as printed, and each
uses the scoring rule the run was scored with (the dataset kind's rule)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engine.store import scores as score_store
from engine.testing import tiny_lm
from tests.conftest import ROOT


def _env() -> dict:
    # `python` as printed resolves to this interpreter; the engine package is importable from any folder
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
            "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
def test_every_printed_next_command_runs_verbatim(tmp_path):
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        m, t = tiny_lm(seed)
        m.save_pretrained(tmp_path / name)
        t.save_pretrained(tmp_path / name)
    # a numeric dataset whose answers are single digits: the random character-level models write a
    # digit now and then, so some answers are right and the scores vary (a benchmark comparison of
    # scores that never differ has no error level to report)
    data = tmp_path / "digits.jsonl"
    data.write_text("".join(json.dumps({"id": f"d{i}", "question": f"Say the digit {i % 10}.", "answer": str(i % 10)})
                            + "\n" for i in range(40)))
    db = tmp_path / "next.duckdb"
    gen = [sys.executable, "-m", "engine", "generate", "--models", str(tmp_path / "tiny-a"), str(tmp_path / "tiny-b"),
           "--dataset", str(data), "--repeats", "2", "--max-new-tokens", "8",
           "--device", "cpu", "--run-id", "next-run", "--db", str(db)]
    out = subprocess.run(gen, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    nxt = [ln.strip() for ln in lines[lines.index("next:") + 1:] if ln.startswith("  python -m engine")]
    assert [shlex.split(c)[3] for c in nxt] == ["score", "summary", "benchmark-compare", "export"]
    outputs = {}
    for cmd in nxt:
        res = subprocess.run(cmd, shell=True, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, f"{cmd}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        outputs[shlex.split(cmd)[3]] = res.stdout
    assert (tmp_path / "next-run.csv").exists()
    # the numeric dataset was scored with the numeric rule, and the analyses used that rule
    assert score_store.scored_rules(db, "next-run") == ["numeric"]
    assert "rule numeric" in outputs["summary"] and "rule numeric" in outputs["benchmark-compare"]
