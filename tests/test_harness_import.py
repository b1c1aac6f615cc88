"""``import harness`` on real lm-evaluation-harness and Inspect AI logs (tests/data/harness/, made by
scripts/make_harness_fixtures.py with the harnesses themselves; nothing hand-written)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.errors import UserError
from engine.tasks.harness import read_harness, read_inspect
from engine.tasks.harness_import import import_harness, our_accuracy
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "harness"
LM_QA = DATA / "lm_eval" / "tinyqa"
LM_QB = DATA / "lm_eval" / "tinyqb"
INS_QA = DATA / "inspect" / "tinyqa"
INS_QB = DATA / "inspect" / "tinyqb"


def _one(folder: Path, pattern: str) -> Path:
    (p,) = sorted(folder.rglob(pattern))
    return p


LM_GROUP = DATA / "lm_eval" / "tinygroup"  # a flat group task (two subtasks), weighted by size
LM_NEST = DATA / "lm_eval" / "tinynest"  # a group of groups, the outer one unweighted
INS_CKPT = DATA / "inspect" / "checkpoints"  # two checkpoints logged under one model name
INS_PARTIAL = DATA / "inspect" / "partial"  # fractional scores over 3 epochs


def test_every_fixture_reads_and_our_accuracy_is_the_harness_number():
    logs = read_harness(DATA / "lm_eval") + read_harness(DATA / "inspect")
    assert {(lg.harness, lg.model) for lg in logs} == {
        ("lm-eval", "dummy-a"),
        ("lm-eval", "dummy-b"),
        ("lm-eval", "dummy-c"),
        ("inspect", "mockllm/alpha"),
        ("inspect", "mockllm/beta"),
        ("inspect", "mockllm/gamma"),
        ("inspect", "mockllm/local"),
        ("inspect", "mockllm/partial"),
    }
    for lg in logs:
        raw = [s.score for s in lg.samples]
        if lg.model == "mockllm/partial":
            assert not set(raw) <= {0.0, 1.0}  # the one fixture with partial credit
            assert our_accuracy(lg) == pytest.approx(lg.headline, rel=1e-12)
        else:
            assert our_accuracy(lg) == lg.headline, lg.path  # exactly
            assert set(raw) <= {0.0, 1.0}
    ins = {lg.model: lg for lg in logs if lg.harness == "inspect"}
    assert {s.repeat for s in ins["mockllm/alpha"].samples} == {0, 1}  # 2 epochs -> repeats 0, 1
    assert ins["mockllm/alpha"].reader == "stdlib+zstandard" and ins["mockllm/beta"].reader == "stdlib"


def test_stdlib_reader_agrees_with_inspect_ai():
    pytest.importorskip("inspect_ai", reason="inspect-ai is an optional extra (not installed here)")
    for f in [*INS_QA.iterdir(), *INS_QB.iterdir()]:
        a, b = read_inspect(f, use_inspect=True), read_inspect(f, use_inspect=False)
        assert a.reader == "inspect_ai" and (a.model, a.headline) == (b.model, b.headline)
        assert sorted((s.sample_id, s.repeat, s.score, s.text) for s in a.samples) == sorted(
            (s.sample_id, s.repeat, s.score, s.text) for s in b.samples
        )


@pytest.mark.parametrize(
    "paths,models,repeats",
    [
        ([LM_QA], ("dummy-a", "dummy-b"), 1),
        ([_one(INS_QA, "*.eval"), _one(INS_QA, "*.json")], ("mockllm/alpha", "mockllm/beta"), 2),
    ],
)
def test_import_pairs_models_and_analyses_show_the_harness_accuracy(tmp_db, paths, models, repeats):
    from engine.analysis.accuracy_ranks import accuracy_ranksets, paired_accuracy
    from engine.analysis.summary import run_summary

    res = import_harness(tmp_db, [str(p) for p in paths], name="h")
    assert res.models == models and res.n_common == res.n_prompts == 8
    assert res.ours == res.headline
    s = run_summary(tmp_db, "h")
    acc = {r.model: r.accuracy for r in s.accuracy}
    assert acc == res.headline and s.n_repeats == repeats and s.modes == ["independent"]
    ranks = accuracy_ranksets(tmp_db, "h")
    assert ranks.imported and {m.model: m.accuracy for m in ranks.models} == res.headline
    assert all(m.harness_accuracy == m.accuracy for m in ranks.models)
    pa = paired_accuracy(tmp_db, "h", *models)
    assert pa.paired.diff == pytest.approx(res.headline[models[0]] - res.headline[models[1]], abs=1e-15)
    assert pa.n_questions == 8 and pa.n_repeats == repeats
    again = import_harness(tmp_db, [str(p) for p in paths], name="h")  # idempotent
    assert again.n_generations == res.n_generations == 8 * repeats * 2
    from engine.analysis.multigen import multigen_summary

    mg = multigen_summary(tmp_db, "h", models[0], mode="independent", rule="harness")
    assert mg.score.mu == res.headline[models[0]] and mg.k == repeats and mg.n == 8  # epochs = repeats


def test_rank_sets_match_a_direct_computation(tmp_db):
    from engine.analysis.accuracy_ranks import accuracy_ranksets
    from engine.stats.maxt import wild_draws_means
    from engine.stats.ranking import ranksets_maxt

    import_harness(tmp_db, [str(_one(INS_QA, "*.eval")), str(_one(INS_QA, "*.json"))], name="h")
    logs = read_harness(INS_QA)
    per = {lg.model: {} for lg in logs}
    for lg in logs:
        for s in lg.samples:
            per[lg.model].setdefault(s.sample_id, []).append(s.score)
    models = sorted(per)
    ids = sorted(per[models[0]])
    M = np.array([[np.mean(per[m][i]) for m in models] for i in ids])
    rng = np.random.default_rng(0)  # the wild bootstrap-t over questions (the default), then the max-t
    rs = ranksets_maxt(
        M.mean(0),
        np.cov(M, rowvar=False) / len(ids),
        0.05,
        rng=rng,
        null_draws=wild_draws_means(M, rng, 10_000),
    )
    got = accuracy_ranksets(tmp_db, "h")
    assert got.calibration == "wild" == got.to_dict()["calibration"]
    assert list(got.critical_values) == pytest.approx(rs["critical_values"], rel=1e-12)
    byname = {m.model: (m.rank_low, m.rank_high) for m in got.models}
    assert [byname[m] for m in models] == list(zip(rs["lower"].tolist(), rs["upper"].tolist()))


def _bad(tmp_path, paths, match, db=None):
    db = db or tmp_path / "bad.duckdb"
    before = db.read_bytes() if db.exists() else None
    with pytest.raises(UserError, match=match) as exc:
        import_harness(db, [str(p) for p in paths], name="bad")
    assert "\n" not in str(exc.value)
    assert (db.read_bytes() if db.exists() else None) == before  # nothing written


def test_bad_input_one_line_nothing_written(tmp_path):
    # lm-eval results of another version
    other = tmp_path / "other"
    shutil.copytree(LM_QA / "dummy-a", other)
    res = _one(other, "results_*.json")
    data = json.loads(res.read_text())
    data["lm_eval_version"] = "0.3.0"
    res.write_text(json.dumps(data))
    _bad(tmp_path, [other], r"lm-eval version 0\.3\.0; this reader knows 0\.4\.x")
    # Inspect log of another format version
    ins = tmp_path / "old.json"
    data = json.loads(_one(INS_QA, "*.json").read_text())
    data["version"] = 1
    ins.write_text(json.dumps(data))
    _bad(tmp_path, [ins], "Inspect log format version 1")
    # a truncated .eval zip
    cut = tmp_path / "cut.eval"
    raw = _one(INS_QA, "*.eval").read_bytes()
    cut.write_bytes(raw[: len(raw) // 2])
    _bad(tmp_path, [cut], r"not a readable \.eval zip \(truncated\?\)")
    # two imports whose sample ids do not overlap
    _bad(tmp_path, [LM_QA / "dummy-a", LM_QB], "share no sample id")
    _bad(tmp_path, [_one(INS_QA, "*.eval"), _one(INS_QB, "*.eval")], "share no sample id")
    # samples file missing
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(_one(LM_QA / "dummy-a", "results_*.json"), lone)
    _bad(tmp_path, [lone], "run lm-eval with --log_samples")
    # an existing run that is not a harness import (here: its config says nothing of one) is never replaced
    from engine import store

    db = tmp_path / "kept.duckdb"
    import_harness(db, [str(LM_QA)], name="bad")
    with store.transaction(db) as con:
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'bad'", [json.dumps({"models": ["x"]})])
    _bad(tmp_path, [LM_QA], "exists and is not a harness import", db=db)


def test_cli_error_is_one_line(tmp_path):
    db = tmp_path / "cli.duckdb"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "import",
            "harness",
            str(LM_QA / "dummy-a"),
            str(LM_QB),
            "--db",
            str(db),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        r.returncode == 2
        and len(r.stderr.strip().splitlines()) == 1
        and "share no sample id" in r.stderr
    )
    assert not db.exists()


def test_accuracy_rank_sets_cover_the_true_ranks_in_a_seeded_simulation():
    """k = 4 models answering the same questions (correlated through a question difficulty), 3 repeats:
    the simultaneous rank-sets contain every true rank in >= 95% - MC error of 300 simulations."""
    from engine.analysis.accuracy_ranks import rank_accuracies

    rng = np.random.default_rng(20)
    skill = np.array([0.8, 0.2, 0.0, -0.6])  # true ranks 1, 2, 3, 4 (logit offsets)
    Q, R, sims, covered = 150, 3, 300, 0
    for _ in range(sims):
        diff = rng.normal(0, 1.5, Q)[:, None, None]  # (Q, 1, 1) shared difficulty
        p = 1 / (1 + np.exp(-(skill[None, :, None] - diff)))  # (Q, k, 1)
        Y = (rng.random((Q, 4, R)) < p).mean(axis=2)  # (Q, k) per-question means
        _, _, rs = rank_accuracies(Y, 0.05, rng, n_draws=1000)  # the default (wild) calibration
        true = np.arange(1, 5)
        covered += bool(np.all((rs["lower"] <= true) & (true <= rs["upper"])))
    assert covered / sims >= 0.95 - 2.5 * np.sqrt(0.05 * 0.95 / sims)


def test_accuracy_interval_exact_cases():
    """An import has one 0/1 score per question: the exact Clopper-Pearson interval (the one rule of
    engine.stats.multigen.proportion_interval; tests/test_proportion_interval.py)."""
    from scipy import stats as st

    from engine.stats.multigen import proportion_interval

    assert proportion_interval(np.zeros(8), 1) == pytest.approx(
        (0.0, 1 - 0.025 ** (1 / 8)), rel=1e-12
    )  # 0 of 8
    assert proportion_interval(np.ones(8), 1) == pytest.approx((0.025 ** (1 / 8), 1.0), rel=1e-12)
    lo, hi = proportion_interval(np.array([0, 1] * 4, float), 1)
    assert (lo, hi) == pytest.approx((st.beta.ppf(0.025, 4, 5), st.beta.ppf(0.975, 5, 4)), rel=1e-12)
    # Clopper-Pearson upper bound for 0 successes equals the beta quantile
    assert 1 - 0.025 ** (1 / 8) == pytest.approx(st.beta.ppf(0.975, 1, 8), rel=1e-12)


def test_cli_summary_benchmark_compare_and_accuracy_ranks_on_an_import(tmp_db, capsys):
    from engine.cli import main

    assert main(["import", "harness", str(LM_QA), "--db", str(tmp_db), "--name", "h"]) == 0
    capsys.readouterr()
    assert main(["summary", "--run", "h", "--db", str(tmp_db)]) == 0
    out = capsys.readouterr().out
    assert "imported from lm-eval (not coupled, not generated here)" in out and "harness reported" in out
    assert (
        main(["benchmark-compare", "--run", "h", "--db", str(tmp_db), "--json"]) == 0
    )  # picks the two models
    res = json.loads(capsys.readouterr().out)
    assert res["models"] == ["dummy-a", "dummy-b"] and res["harness_accuracy"] == [0.0, 0.25]
    assert res["paired"]["diff"] == -0.25 and res["plan"][0]["repeats"] == 1
    assert main(["accuracy-ranks", "--run", "h", "--db", str(tmp_db), "--json"]) == 0
    ranks = json.loads(capsys.readouterr().out)
    assert [m["model"] for m in ranks["models"]] == ["dummy-b", "dummy-a"] and ranks["imported"]
    assert main(["benchmark-compare", "--db", str(tmp_db)]) == 2
    assert "give --model-a and --model-b, or --run RUN" in capsys.readouterr().err


def test_lm_eval_group_tasks_import_with_subtasks_as_subjects(tmp_db):
    """lm-eval's group tasks (results for `tinygroup` with no samples file of its own; `tinynest` -> two
    groups -> three tasks): every sample-level task is read, the group aggregates are checked against them
    (weighted by size or not, whichever lm-eval used), and the subtasks become subjects."""
    from engine import store
    from engine.store.scores import imported_facts

    res = import_harness(tmp_db, [str(LM_GROUP)])
    assert (
        res.run_id == "harness-tinygroup" and res.tasks == ("tinyg_a", "tinyg_b") and res.n_common == 8
    )
    # one weighted outermost group: its number is the model's headline, and ours equals it
    assert res.headline == res.ours and set(res.headline) == {"dummy-a", "dummy-b"}
    facts = imported_facts(tmp_db, res.run_id)
    assert {(g["model"], g["group"], g["weight_by_size"]) for g in facts["groups"]} == {
        ("dummy-a", "tinygroup", True),
        ("dummy-b", "tinygroup", True),
    }
    from engine.analysis.summary import run_summary

    s = run_summary(tmp_db, res.run_id)
    assert {r.model: r.accuracy for r in s.accuracy} == pytest.approx(res.headline, rel=1e-12)
    nest = import_harness(tmp_db, [str(LM_NEST)])
    assert nest.tasks == ("tinyn_1", "tinyn_2", "tinyn_3")
    groups = {(g["model"], g["group"]): g for g in imported_facts(tmp_db, nest.run_id)["groups"]}
    outer = groups[("dummy-a", "tinynest")]
    assert outer["weight_by_size"] is False and outer["subtasks"] == ["tinyn_1", "tinyn_2", "tinyn_3"]
    # lm-eval's unweighted aggregate is the plain mean of the three subtasks' accuracies (any depth)
    per_task = {lg.task: our_accuracy(lg) for lg in read_harness(LM_NEST) if lg.model == "dummy-a"}
    assert outer["headline"] == pytest.approx(sum(per_task.values()) / 3, rel=1e-12)
    assert groups[("dummy-a", "tinynest_x")]["weight_by_size"] is True
    assert nest.headline == {}  # an unweighted mean of subtask means is not our accuracy: not compared
    subjects = store.query_df(
        tmp_db, "SELECT DISTINCT subject FROM prompts WHERE dataset_id = ?", [nest.dataset_id]
    )["subject"]
    assert sorted(subjects) == ["tinyn_1", "tinyn_2", "tinyn_3"]


def test_a_group_aggregate_that_its_subtasks_do_not_give_is_refused(tmp_path):
    bad = tmp_path / "nest"
    shutil.copytree(LM_NEST / "dummy-a", bad)
    res = _one(bad, "results_*.json")
    data = json.loads(res.read_text())
    data["results"]["tinynest_x"]["acc,none"] += 0.01
    res.write_text(json.dumps(data))
    _bad(tmp_path, [bad], r"group 'tinynest_x' reports acc .* weighted by size and .* unweighted")


def test_the_results_folder_may_sit_one_level_down(tmp_db):
    """lm-eval writes OUTPUT/<model name>/results_*.json: the OUTPUT folder of two models is one path."""
    res = import_harness(tmp_db, [str(LM_NEST)], name="one-level")
    assert res.models == ("dummy-a", "dummy-b")


def test_two_checkpoints_of_one_model_are_named_from_their_model_arguments(tmp_db, capsys):
    logs = read_harness(INS_CKPT)
    assert {lg.model for lg in logs} == {"mockllm/local"}  # what Inspect logs for both
    res = import_harness(tmp_db, [str(p) for p in sorted(INS_CKPT.glob("*.eval"))], name="ck")
    assert set(res.models) == {"mockllm/local@step-100", "mockllm/local@step-200"}
    assert res.headline == {"mockllm/local@step-100": 0.25, "mockllm/local@step-200": 0.625}
    # explicit names, one per path, in order
    paths = sorted(INS_CKPT.glob("*.eval"))
    by_path = {str(p): read_inspect(p).model_args for p in paths}
    named = import_harness(tmp_db, [str(p) for p in paths], name="ck2", model_names=["early", "late"])
    assert set(named.models) == {"early", "late"}
    step = {"early": by_path[str(paths[0])], "late": by_path[str(paths[1])]}
    assert named.headline["early" if "step-100" in str(step["early"]) else "late"] == 0.25
    from engine.cli import main

    assert (
        main(
            [
                "import",
                "harness",
                *map(str, paths),
                "--db",
                str(tmp_db),
                "--name",
                "ck3",
                "--model-names",
                "x",
            ]
        )
        == 2
    )
    assert "one name per path (2 path(s), 1 name(s))" in capsys.readouterr().err


def test_logs_that_nothing_tells_apart_name_the_option(tmp_path):
    twin = tmp_path / "twin.eval"
    shutil.copy(_one(INS_QA, "*.eval"), twin)
    _bad(tmp_path, [_one(INS_QA, "*.eval"), twin], r"appears twice .* --model-names NAME")


def test_checkpoint_labels_use_the_shortest_distinguishing_tail():
    from engine.tasks.harness_import import _checkpoint_label

    a, b = (("model_path", "/ckpt/run1/final"),), (("model_path", "/ckpt/run2/final"),)
    assert _checkpoint_label(a, [b]) == "run1/final" and _checkpoint_label(b, [a]) == "run2/final"
    assert _checkpoint_label((("pretrained", "org/m-7b"),), [(("pretrained", "org/m-13b"),)]) == "m-7b"
    assert (
        _checkpoint_label((("dtype", "float16"),), [(("dtype", "bfloat16"),)]) is None
    )  # not a checkpoint


def test_equality_gate_tolerates_the_order_of_a_float_sum_but_not_a_real_difference(tmp_path, tmp_db):
    """Partial-credit scores averaged over epochs: the harness's accuracy is a float sum in its own order.
    The same samples in another order give our sum different last bits, and the import still takes it
    (1e-9 relative); a change in the fourth digit is refused; 0/1 scores keep exact equality."""
    from engine.tasks.harness import REL_TOL, agrees

    src = _one(INS_PARTIAL, "*.json")
    data = json.loads(src.read_text())
    headline = data["results"]["scores"][0]["metrics"]["accuracy"]["value"]
    rng = np.random.default_rng(0)
    for _ in range(
        200
    ):  # find an order of the samples whose float sum is not the harness's to the last bit
        order = rng.permutation(len(data["samples"]))
        shuffled = dict(data, samples=[data["samples"][i] for i in order])
        path = tmp_path / "shuffled.json"
        path.write_text(json.dumps(shuffled))
        if our_accuracy(read_inspect(path, use_inspect=False)) != headline:
            break
    else:
        pytest.fail("no order of the samples changed the sum's last bits")
    ours = our_accuracy(read_inspect(path, use_inspect=False))
    assert ours != headline and abs(ours - headline) <= REL_TOL * abs(headline)
    res = import_harness(tmp_db, [str(path)], name="partial", use_inspect=False)
    assert res.headline["mockllm/partial"] == headline
    off = dict(data)
    off["results"] = json.loads(json.dumps(data["results"]))
    off["results"]["scores"][0]["metrics"]["accuracy"]["value"] = headline + 1e-4
    (tmp_path / "off.json").write_text(json.dumps(off))
    _bad(tmp_path, [tmp_path / "off.json"], "the samples give accuracy")
    assert agrees(0.25, 0.25, exact=True) and not agrees(0.25, 0.25 + 2**-54, exact=True)
    assert agrees(0.25, 0.25 + 2**-54, exact=False)


def test_summary_of_an_import_leaves_out_tokens_and_time(tmp_db, capsys):
    """An imported run has no token counts and no generation time (its stored times are the import's,
    seconds on a slow import): the summary result has no generation time, and the CLI summary leaves
    out the "0 tokens in 5 s" line even when given one."""
    from dataclasses import replace

    from engine.analysis.summary import run_summary
    from engine.cli import main
    from engine.commands.summary import summary_text
    from engine.store.scores import imported_facts

    assert main(["import", "harness", str(LM_QA), "--db", str(tmp_db), "--name", "h"]) == 0
    capsys.readouterr()
    s = run_summary(tmp_db, "h")
    assert s.generation_s is None and s.n_tokens == 0
    text = summary_text(replace(s, generation_s=5.0, imported=imported_facts(tmp_db, "h")))
    assert "tokens in" not in text and "imported from lm-eval" in text


def test_the_equality_gate_tolerates_the_sum_order_of_a_float_metric_only():
    """The harness's own number and ours may add the same per-sample values in another order: for a
    float metric (f1, partial credit) that changes the last bits, and the import must accept it; a
    real difference (1e-6) is still refused, and 0/1 scores keep exact equality (their sum is exact)."""
    import math
    import random

    from engine.tasks import harness_import as hi
    from engine.tasks.harness import HarnessLog, HarnessSample

    rnd = random.Random(3)
    scores = [rnd.random() for _ in range(997)]  # an f1-like metric, one value per sample

    def log(values, headline):
        samples = tuple(HarnessSample(f"s{i}", 0, v, None, None, None) for i, v in enumerate(values))
        return HarnessLog("lm-eval", "0.4.9", "m", "t", "f1", headline, samples, "x.json")

    ours = hi.our_accuracy(log(scores, 0.0))
    theirs = sum(sorted(scores, reverse=True)) / len(scores)  # the harness's order of additions
    assert theirs != ours and math.isclose(theirs, ours, rel_tol=1e-12)  # the last bits differ
    assert hi._check([log(scores, theirs)])[0] == 997
    with pytest.raises(UserError, match="the samples give accuracy"):
        hi._check([log(scores, ours * (1 + 1e-6))])
    binary = [float(v > 0.5) for v in scores]
    exact = sum(binary) / len(binary)
    assert hi._check([log(binary, exact)])[0] == 997
    with pytest.raises(UserError, match="the samples give accuracy"):
        hi._check(
            [log(binary, math.nextafter(exact, 1.0))]
        )  # one ulp off a 0/1 mean: a real disagreement
