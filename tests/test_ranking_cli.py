"""CLI ``ranksets`` / ``winrates`` and the read-side helpers of engine.analysis (comparisons, ranksets)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from engine import cli
from engine.analysis import comparisons as C
from engine.analysis import ranksets as RS
from engine.errors import UserError
from engine.stats import ranking as R
from tests.conftest import ROOT, shared_path

ARENA_12 = ["gpt-4", "claude-v1", "claude-instant-v1", "gpt-3.5-turbo", "vicuna-13b", "palm-2", "koala-13b",
            "RWKV-4-Raven-14B", "oasst-pythia-12b", "alpaca-13b", "chatglm-6b", "fastchat-t5-3b"]

# the 3-model tiny case of test_stats_ranking as a CSV (x = m0, y = m1, z = m2)
TINY = """prompt_id,model_a,model_b,human_winner,judge_winner
p1,x,y,a,a
p2,y,z,b,b
p3,z,x,tie,a
p4,x,z,a,tie
p5,y,x,b,b
"""


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _synthetic_csv(path, rng, k=4, per=30, label_every=3, u=0.1):
    first, second = R.balanced_design(k, per)
    theta, judge = R.synthetic_theta(k, u, rng)
    w, wh = R.synthetic_outcomes(first, theta, judge, rng)
    names = [f"m{i}" for i in range(k)]
    lab = np.arange(len(first)) % label_every == 0
    df = pd.DataFrame({"prompt_id": [f"q{i}" for i in range(len(first))],
                       "model_a": [names[i] for i in first], "model_b": [names[i] for i in second],
                       "human_winner": np.where(lab, np.where(w == 1, "a", "tie"), ""),
                       "judge_winner": np.where(wh == 1, "a", "tie")})
    df.to_csv(path, index=False)
    return df


def test_ranksets_json_exact_tiny_case(tmp_path, capsys):
    f = tmp_path / "c.csv"
    f.write_text(TINY)
    rc, out, _ = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "human", "--alpha", "0.1",
                      "--procedure", "chi2", "--json")
    assert rc == 0
    d = json.loads(out)
    assert {"models", "theta", "theta_ci", "sigma", "lambda", "ranksets", "rank", "procedure", "covariance",
            "covariance_detail", "clustering", "n", "N", "warnings"} <= set(d)
    assert d["procedure"] == "chi2" and d["models"] == ["x", "y", "z"]
    assert d["rank"] == {m: v[0] for m, v in d["ranksets"].items()}
    assert d["theta"] == pytest.approx({"x": 0.75, "y": 0.0, "z": 1 / 3})
    np.testing.assert_allclose(np.array(d["sigma"])[[0, 2, 0], [0, 2, 2]], [3 / 64, 2 / 27, 1 / 72])
    assert d["lambda"] is None and d["covariance"] == "delta" and (d["n"], d["N"]) == (5, 0)
    lo, up = R.ranksets(np.array([0.75, 0, 1 / 3]), np.array(d["sigma"]), 0.1)
    assert d["ranksets"] == {m: [int(a), int(b)] for m, a, b in zip("xyz", lo, up)}
    rc, out, _ = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "judge", "--alpha", "0.1",
                      "--covariance", "paper", "--json")
    d = json.loads(out)
    assert (d["n"], d["N"], d["covariance"]) == (0, 5, "paper")
    # judge: p3 (z, x) 'a' -> z wins, p4 tie: x = (1 + 0 + 0 + 1) / 4, z = (1 + 1 + 0) / 3
    assert d["theta"] == pytest.approx({"x": 0.5, "y": 0.0, "z": 2 / 3})


def test_ranksets_ppr_cli_matches_library_and_lambda_zero_is_human_only(tmp_path, capsys):
    f = tmp_path / "s.csv"
    df = _synthetic_csv(f, np.random.default_rng(0))
    rc, out, _ = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "ppr", "--alpha", "0.1", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["n"] == int((df.human_winner != "").sum()) and d["n"] + d["N"] == len(df)
    assert 0 <= d["lambda"] <= 1
    rc, out0, _ = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "ppr", "--alpha", "0.1",
                       "--lambda", "0", "--json")
    rc, outh, _ = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "human", "--alpha", "0.1", "--json")
    d0, dh = json.loads(out0), json.loads(outh)
    assert d0["theta"] == pytest.approx(dh["theta"], abs=1e-12)
    np.testing.assert_allclose(d0["sigma"], dh["sigma"], atol=1e-15)
    assert d0["ranksets"] == dh["ranksets"]


@pytest.mark.parametrize("content, argv, needle", [
    ("model_a,model_b,human_winner,judge_winner\nx,y,maybe,a\n", ["--method", "human"], "maybe"),
    ("", ["--method", "human"], "empty"),
    ("model_a,model_b,human_winner\n", ["--method", "human"], "no comparisons"),
    ("first,second,outcome\nx,y,a\n", ["--method", "human"], "columns must include"),
    (TINY, ["--method", "human", "--alpha", "1.5"], "alpha"),
    (TINY, ["--method", "human", "--alpha", "abc"], "alpha"),
    (TINY, ["--method", "ppr", "--lambda", "2"], "lambda"),
    (TINY, ["--method", "ppr"], "judge only"),
    (TINY.replace("p5,y,x,b,b", "p5,y,x,,b"), ["--method", "ppr"], "never appear"),
    (TINY.replace("p2,y,z,b,b", "p2,y,z,b,"), ["--method", "ppr"], "judge label on every"),
    (TINY, ["--method", "human", "--models", "x,y,w"], "'w'"),
    ("model_a,model_b,human_winner\nx,y,a,extra\n", ["--method", "human"], "more fields than the header"),
    ("model_a,model_b,human_winner\nx,y,a\nx,y,a,extra\n", ["--method", "human"], "not a readable CSV"),
])
def test_bad_input_is_a_clear_user_error(tmp_path, capsys, content, argv, needle):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    rc, out, err = _run(capsys, "ranksets", "--comparisons", str(f), *argv)
    assert rc == 2 and out == ""
    assert needle in err and "Traceback" not in err


def test_ppr_model_missing_from_unlabelled_set(tmp_path, capsys):
    # every comparison of z is human-labelled: z never appears in the unlabelled set
    f = tmp_path / "c.csv"
    f.write_text(TINY + "p6,x,y,,a\np7,y,x,,b\n")
    rc, _, err = _run(capsys, "ranksets", "--comparisons", str(f), "--method", "ppr")
    assert rc == 2 and "['z'] never appear in the unlabelled set" in err


def test_cli_subprocess_no_traceback(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text(TINY)
    p = subprocess.run([sys.executable, "-m", "engine", "ranksets", "--comparisons", str(f), "--method", "human",
                        "--alpha", "0"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "alpha must be in (0, 1)" in p.stderr and "Traceback" not in p.stderr


def test_winrates_cli_and_compare(tmp_path, capsys):
    f = tmp_path / "c.csv"
    f.write_text(TINY)
    g = tmp_path / "d.csv"
    g.write_text(TINY.replace("p2,y,z,b,b", "p2,y,z,a,b"))
    rc, out, _ = _run(capsys, "winrates", "--comparisons", str(f), "--bootstrap", "20", "--compare", str(g), "--json")
    assert rc == 0
    d = json.loads(out)
    # x vs y: x won p1 (as a) and p5 (as b) -> 1.0; x vs z: p3 tie, p4 x wins -> 0.5, tie 0.5
    assert d["matrix"]["x"]["y"] == 1.0 and d["matrix"]["x"]["z"] == 0.5 and d["ties"]["x"]["z"] == 0.5
    assert d["average"]["x"]["winrate"] == pytest.approx(0.75)
    assert d["counts"]["x"]["z"] == 2 and d["n"] == 5
    assert set(d["bradley_terry"]["beta"]) == {"x", "y", "z"} and set(d["elo"]["rating"]) == {"x", "y", "z"}
    assert d["compare"]["z"]["y"]["winrate"] == 1.0 and d["compare"]["z"]["y"]["winrate_other"] == 0.0
    # paired by prompt: only p2 differs (z beat y vs y beat z) -> diff 1 on one prompt, no variance -> no p-value
    assert d["compare"]["z"]["y"]["diff"] == 1.0 and d["compare"]["z"]["y"]["n_prompts"] == 1
    assert d["compare"]["x"]["y"]["diff"] == 0.0 and d["compare"]["x"]["y"]["p"] == 1.0
    assert d["compare"]["x"]["y"]["p_holm"] == 1.0 and d["compare"]["x"]["y"]["stars"] == ""
    assert d["clustering"] == "intervals clustered by prompt (5 prompts, 5 rows)" and not d["per_row_clusters"]
    assert d["ci_method"].startswith("prompt-cluster percentile bootstrap, 20 resamples")


def test_ranksets_from_stored_set(tmp_path, capsys, tmp_db):
    from engine.tasks.comparisons import import_comparisons
    f = tmp_path / "up.csv"
    f.write_text(TINY.replace("human_winner", "winner"))
    import_comparisons(tmp_db, f, "tiny")
    rc, out, _ = _run(capsys, "ranksets", "--set", "tiny", "--db", str(tmp_db), "--method", "human", "--alpha", "0.1",
                      "--json")
    assert rc == 0 and json.loads(out)["theta"] == pytest.approx({"x": 0.75, "y": 0.0, "z": 1 / 3})
    rc, _, err = _run(capsys, "ranksets", "--set", "nope", "--db", str(tmp_db), "--method", "human")
    assert rc == 2 and "nope" in err


def test_rankset_draws_consistency():
    rng = np.random.default_rng(1)
    k = 4
    first, second = R.balanced_design(k, 40)
    theta, judge = R.synthetic_theta(k, 0.05, rng)
    w, wh = R.synthetic_outcomes(first, theta, judge, rng)
    names = [f"m{i}" for i in range(k)]
    df = pd.DataFrame({"model_a": [names[i] for i in first], "model_b": [names[i] for i in second],
                       "human_winner": np.where(w == 1, "a", "tie"), "judge_winner": np.where(wh == 1, "a", "tie")})
    res = RS.rankset_draws(df, None, n=60, reps=30, alpha=0.1, seed=3, alphas=(0.3, 0.1, 0.05))
    assert set(res["position_prob"]) == {"baseline", "human", "judge", "ppr"}
    assert res["n"] == 60 and res["N"] == 6 * 80 - 60
    for m in res["position_prob"]:
        P = np.array(res["position_prob"][m])
        size = [c["size"] for c in res["curve"][m] if c["alpha"] == 0.1][0]
        # two routes to the mean rank-set size: from the position probabilities and directly
        assert P.sum() / k == pytest.approx(size)
    for m, per_model in res["rankset_prob"].items():
        P = np.array(res["position_prob"][m])
        for i, name in enumerate(res["models"]):
            sets = per_model[name]
            assert sum(s["prob"] for s in sets) == pytest.approx(1.0)
            # two routes to P(rank r in the set): from the rank-set distribution and directly
            via = [sum(s["prob"] for s in sets if s["lower"] <= r <= s["upper"]) for r in range(1, k + 1)]
            np.testing.assert_allclose(via, P[i], atol=1e-12)
    base = [c for c in res["curve"]["baseline"]]
    assert all(c["intersection"] == 1.0 and c["coverage"] == 1.0 for c in base)
    sizes = [c["size"] for c in res["curve"]["human"]]  # alphas descending -> sizes non-decreasing
    assert sizes == sorted(sizes)


@pytest.mark.shared
def test_arena_real_files_count_and_cli(capsys, tmp_path):
    human = shared_path("data", "arena", "human.json")
    judge = shared_path("data", "arena", "gpt-4-0125-preview.json")
    df = C.load_comparisons(human=human, judge=judge, models=ARENA_12)
    assert len(df) == 14_947
    rc, out, _ = _run(capsys, "ranksets", "--human", str(human), "--judge", str(judge), "--models", ",".join(ARENA_12),
                      "--method", "human", "--alpha", "0.05", "--json")
    d = json.loads(out)
    assert rc == 0 and d["n"] == 14_947 and d["ranksets"]["gpt-4"] == [1, 1]
    rc, out, _ = _run(capsys, "ranksets", "--human", str(human), "--judge", str(judge), "--models", ",".join(ARENA_12),
                      "--method", "judge", "--alpha", "0.05", "--covariance", "paper", "--json")
    assert rc == 0 and json.loads(out)["N"] == 14_947
    # PPR on a CSV where 2 of 3 human labels are removed
    csv = tmp_path / "arena.csv"
    d2 = df.copy()
    d2.loc[d2.index % 3 != 0, "human_winner"] = None
    d2.to_csv(csv, index=False)
    rc, out, _ = _run(capsys, "ranksets", "--comparisons", str(csv), "--method", "ppr", "--alpha", "0.05", "--json")
    d = json.loads(out)
    assert rc == 0 and d["n"] == 4983 and d["N"] == 14_947 - 4983 and 0 < d["lambda"] <= 1


@pytest.mark.shared
def test_arena_bootstrap_variance_vs_covariances():
    """METHODS.md section 4: on Arena human data Var_boot(theta_hat) is ~17-100x the paper Sigma and ~1x the delta one."""
    human = shared_path("data", "arena", "human.json")
    df = C.load_comparisons(human=human, models=ARENA_12)
    first, second = C.model_indices(df, ARENA_12)
    w, w2 = C.win_indicators(df.human_winner)
    rng = np.random.default_rng(0)
    n, k = len(df), len(ARENA_12)
    draws = np.array([R.winrate_pointestimate(first[i], second[i], w[i], w2[i], k)
                      for i in (rng.integers(0, n, n) for _ in range(400))])
    vb = draws.var(axis=0, ddof=1)
    _, s_delta = R.onesource_theta_sigma(first, second, w, w2, k, "delta")
    _, s_paper = R.onesource_theta_sigma(first, second, w, w2, k, "paper")
    r_delta, r_paper = vb / np.diag(s_delta), vb / np.diag(s_paper)
    # 400 resamples: relative s.e. of a variance ~7%, so +-30% is > 4 s.e.
    assert np.all((r_delta > 0.7) & (r_delta < 1.3)), r_delta
    assert r_paper.min() > 12 and r_paper.max() < 130 and 25 < np.median(r_paper) < 60, r_paper


def test_ranksets_for_subset_of_models_and_string_parameters():
    df = pd.read_csv(pd.io.common.StringIO(TINY), dtype=str, keep_default_na=False)
    df = df.replace("", None)
    extra = pd.DataFrame([{"prompt_id": "p9", "model_a": "x", "model_b": "w", "human_winner": "a", "judge_winner": "a"}])
    full = pd.concat([df, extra], ignore_index=True)
    sub = RS.ranksets_for(full, "human", "0.1", "delta", "auto", models=["x", "y", "z"])
    ref = RS.ranksets_for(df, "human", 0.1)
    assert sub == ref and sub["n"] == 5
    with pytest.raises(UserError, match="appear in no comparison"):
        RS.ranksets_for(full, "human", 0.1, models=["x", "q"])
    with pytest.raises(UserError, match="alpha"):
        RS.ranksets_for(df, "human", 0)
    with pytest.raises(UserError, match="method"):
        RS.ranksets_for(df, "bt", 0.1)


@pytest.mark.shared
def test_arena_bench_smoke():
    from bench import ppr_arena

    first, second, human, judges, n_rows = ppr_arena.load(shared_path("data", "arena"))
    assert n_rows == 14_947 and set(judges) == {"GPT4", "CL3", "GPT3.5"}
    res = ppr_arena.draws(first, second, human, judges, reps=3, seed=0, n_grid=(66, 990),
                          alphas=RS.PAPER_ALPHAS, log=lambda s: None)
    m = res["metrics"]["delta"][990]
    assert m["N"] + m["n"] == 6336 and m["n"] == 990
    assert set(m["metrics"]) == {"baseline", "human"} | {f"{p}:{j}" for p in ("judge", "ppr") for j in judges}
    assert all(row["intersection"] == 1.0 for row in m["metrics"]["baseline"])


def test_csv_with_byte_order_mark_and_upload_column_name(tmp_path):
    f = tmp_path / "bom.csv"
    f.write_bytes("\ufeff".encode() + TINY.replace("human_winner", "winner").encode())
    df = C.read_comparisons_file(f)
    assert list(df.model_a) == ["x", "y", "z", "x", "y"] and df.human_winner.tolist() == ["a", "b", "tie", "a", "b"]


def test_cli_choices_match_the_library():
    """The CLI builds its choices from engine.config without importing the analyses: they must agree."""
    from engine import config
    from engine.analysis import winrates as WR

    assert config.RANK_METHODS == RS.METHODS and config.RANK_LABELS == WR.LABELS
    assert config.COVARIANCES == R.COVARIANCES


def test_default_models_are_the_papers_twelve_when_present():
    many = sorted(ARENA_12) + ["mpt-7b-chat", "dolly-v2-12b"]
    assert C.default_models(many) == list(C.ARENA_PAPER_MODELS) == ARENA_12
    assert C.default_models(["b", "a", "c"], limit=2) == ["b", "a"]  # not Arena: first `limit`


def test_cli_closed_stdout_is_not_a_traceback():
    """`python -m engine ... | head -c 1`: a closed pipe ends the command quietly (exit 0)."""
    script = ("import sys, types, engine.cli as c\n"
              "def big(args):\n"
              "    for _ in range(100_000): print('x' * 80)\n"  # 8 MB: far beyond the pipe buffer
              "ns = types.SimpleNamespace(func=big)\n"
              "c.build_parser = lambda: types.SimpleNamespace(parse_args=lambda argv: ns)\n"
              "sys.exit(c.main([]))\n")
    p = subprocess.run(f"'{sys.executable}' -c \"$SCRIPT\" | head -c 1; exit ${{PIPESTATUS[0]}}", shell=True,
                       executable="/bin/bash", cwd=ROOT, capture_output=True, text=True, env={**os.environ, "SCRIPT": script})
    assert p.stdout == "x" and p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
