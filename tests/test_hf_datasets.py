"""``hf:REPO[:CONFIG][:SPLIT]`` datasets through the real ``datasets`` library, offline, from folders
with the hub layout (README.md ``configs:`` + parquet per config) built in the test."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from engine.errors import UserError
from engine.tasks import datasets as ds_mod
from engine.tasks.hf_datasets import Columns, load_hf, parse_spec
from tests.conftest import ROOT, shared_path

pytest.importorskip("datasets")


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """No hub: the library's offline switches, and a private cache."""
    import datasets
    import huggingface_hub.constants as hc

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write_hub_folder(root, configs: dict[str, dict[str, pd.DataFrame]]):
    """A folder in the hub layout: ``<config>/<split>-00000-of-00001.parquet`` and the README's configs."""
    lines = ["---", "configs:"]
    for config, splits in configs.items():
        lines += [f"- config_name: {config}", "  data_files:"]
        for split, df in splits.items():
            (root / config).mkdir(parents=True, exist_ok=True)
            df.to_parquet(root / config / f"{split}-00000-of-00001.parquet")
            lines += [f"  - split: {split}", f"    path: {config}/{split}-*"]
    (root / "README.md").write_text("\n".join(lines + ["---", ""]))
    return root


def mmlu_hub_from_csv(csv_dir, out, subjects):
    """cais/mmlu's layout (question, subject, choices, answer index) from the MMLU CSVs."""
    frames = {}
    for s in subjects:
        q = pd.read_csv(csv_dir / f"{s}_test.csv", header=None, dtype=str, keep_default_na=False)
        frames[s] = pd.DataFrame(
            {
                "question": q[0],
                "subject": s,
                "choices": [list(r) for r in q[[1, 2, 3, 4]].values],
                "answer": q[5].map("ABCD".index).astype("int64"),
            }
        )
    allf = pd.concat([frames[s] for s in sorted(subjects)], ignore_index=True)
    cfgs = {s: {"test": f} for s, f in frames.items()}
    cfgs["all"] = {"test": allf}
    return write_hub_folder(out, cfgs)


def test_mmlu_hub_layout_matches_paper_import_and_csv_folder(tmp_path):
    csv_dir = shared_path("data", "mmlu")
    subjects = ["astronomy", "college_computer_science"]
    hub = mmlu_hub_from_csv(csv_dir, tmp_path / "mmlu", subjects)
    folder = tmp_path / "csv" / "mmlu"
    folder.mkdir(parents=True)
    for s in subjects:
        (folder / f"{s}_test.csv").write_bytes((csv_dir / f"{s}_test.csv").read_bytes())
    from_csv = ds_mod.load_dataset(str(folder))
    from_hub = ds_mod.load_dataset(f"hf:{hub}:all:test")
    assert from_hub.dataset_id == from_csv.dataset_id == "mmlu"
    assert from_hub.kind == "multiple_choice" and from_hub.system_prompt == from_csv.system_prompt
    assert [(p.prompt_id, p.user_prompt, p.gold, p.choices) for p in from_hub.prompts] == [
        (p.prompt_id, p.user_prompt, p.gold, p.choices) for p in from_csv.prompts
    ]
    one = ds_mod.load_dataset(f"hf:{hub}:college_computer_science")  # split defaults to test
    assert one.dataset_id == "mmlu:college_computer_science"
    assert [p.prompt_id for p in one.prompts] == [
        p.prompt_id for p in from_csv.prompts if p.subject == "college_computer_science"
    ]
    # import paper-mmlu's prompts (same ids, same user prompt text)
    from engine.tasks.importers import read_mmlu_questions

    q = read_mmlu_questions(folder)
    paper = dict(
        zip(
            q["prompt_id"],
            q["question"]
            + "\nA. "
            + q["A"]
            + "\nB. "
            + q["B"]
            + "\nC. "
            + q["C"]
            + "\nD. "
            + q["D"]
            + "\nAnswer:",
        )
    )
    assert {p.prompt_id: p.user_prompt for p in from_hub.prompts} == paper


def test_registry_layouts_and_stable_ids(tmp_path):
    arc = pd.DataFrame(
        {
            "id": ["Q1", "Q2"],
            "question": ["Sky?", "Sea?"],
            "choices": [
                {"text": ["blue", "red", "green"], "label": ["A", "B", "C"]},
                {"text": ["wet", "dry", "hot", "cold", "big"], "label": ["1", "2", "3", "4", "5"]},
            ],
            "answerKey": ["A", "4"],
        }
    )
    gsm = pd.DataFrame({"question": ["2+2?", "3*3?"], "answer": ["so #### 4", "nine #### 9"]})
    write_hub_folder(tmp_path / "ai2_arc", {"ARC-Challenge": {"test": arc}})
    write_hub_folder(tmp_path / "gsm8k", {"main": {"test": gsm, "train": gsm}})
    a = load_hf(f"hf:{tmp_path / 'ai2_arc'}")
    assert a.kind == "multiple_choice" and [p.prompt_id for p in a.prompts] == ["Q1", "Q2"]
    assert [p.gold for p in a.prompts] == ["A", "D"] and list(a.prompts[1].choices) == list("ABCDE")
    assert a.prompts[0].user_prompt == "Sky?\nA. blue\nB. red\nC. green\nAnswer:"
    g = load_hf(f"hf:{tmp_path / 'gsm8k'}:main:test")
    assert g.kind == "numeric" and [p.gold for p in g.prompts] == ["4", "9"]
    assert g.prompts[0].prompt_id == load_hf(f"hf:{tmp_path / 'gsm8k'}:main:train").prompts[
        0
    ].prompt_id.replace(":train#", ":test#")
    from engine.tasks.scoring import default_rule

    assert (
        default_rule(a.kind, a.dataset_id) == "lenient"
        and default_rule(g.kind, g.dataset_id) == "numeric"
    )


def test_custom_columns(tmp_path):
    df = pd.DataFrame({"q": ["x?", "y?"], "a": ["1", "2"], "key": ["k1", "k2"]})
    write_hub_folder(tmp_path / "mine", {"default": {"test": df}})
    with pytest.raises(UserError, match="unknown layout.*--prompt-column"):
        load_hf(f"hf:{tmp_path / 'mine'}")
    d = load_hf(f"hf:{tmp_path / 'mine'}", Columns(prompt="q", answer="a", id="key"))
    assert d.kind == "numeric" and [p.prompt_id.rsplit("/", 1)[1] for p in d.prompts] == ["k1", "k2"]
    with pytest.raises(UserError, match=r"--answer-column 'nope'.*its columns: q, a, key"):
        load_hf(f"hf:{tmp_path / 'mine'}", Columns(prompt="q", answer="nope"))


def test_missing_config_and_split_list_the_available_ones(tmp_path):
    df = pd.DataFrame({"question": ["2+2?"], "answer": ["#### 4"]})
    write_hub_folder(tmp_path / "gsm8k", {"main": {"test": df}, "socratic": {"test": df}})
    with pytest.raises(UserError, match="no config 'nope'; available: main, socratic"):
        load_hf(f"hf:{tmp_path / 'gsm8k'}:nope")
    with pytest.raises(UserError, match="no split 'train'; available: test"):
        load_hf(f"hf:{tmp_path / 'gsm8k'}:main:train")
    with pytest.raises(UserError, match="several configs; name one"):
        load_hf(f"hf:{tmp_path / 'gsm8k'}")
    assert parse_spec("hf:a/b::x").split == "x"


def test_cli_unknown_repo_offline_is_one_line(tmp_path):
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "PATH": "/usr/bin",
    }
    r = subprocess.run(
        [sys.executable, "-m", "engine", "datasets", "hf:nobody/nothing:x:test"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot open dataset 'nobody/nothing'" in r.stderr and str(tmp_path / "hf") in r.stderr


def test_cli_preview_counts_questions(tmp_path):
    df = pd.DataFrame({"question": ["2+2?", "3+3?", "4+4?"], "answer": ["#### 4", "#### 6", "#### 8"]})
    write_hub_folder(tmp_path / "gsm8k", {"main": {"test": df}})
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "PATH": "/usr/bin",
    }
    r = subprocess.run(
        [sys.executable, "-m", "engine", "datasets", f"hf:{tmp_path / 'gsm8k'}", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_prompts"] == 3 and out["kind"] == "numeric"


def test_more_registry_layouts(tmp_path):
    hs = pd.DataFrame(
        {
            "ind": [14, 15],
            "activity_label": ["Cooking", "Sports"],
            "ctx": ["He cuts", "She runs"],
            "endings": [["a", "b", "c", "d"], ["e", "f", "g", "h"]],
            "label": ["2", "0"],
        }
    )
    tq = pd.DataFrame(
        {
            "question": ["Is the sky green?"],
            "mc1_targets": [{"choices": ["No", "Yes", "Maybe"], "labels": [1, 0, 0]}],
        }
    )
    mt = pd.DataFrame(
        {"prompt": [["Write a poem.", "Shorter."]], "category": ["writing"], "prompt_id": [81]}
    )
    write_hub_folder(tmp_path / "hellaswag", {"default": {"validation": hs}})
    write_hub_folder(tmp_path / "truthful_qa", {"multiple_choice": {"validation": tq}})
    write_hub_folder(tmp_path / "mt_bench_prompts", {"default": {"train": mt}})
    h = load_hf(f"hf:{tmp_path / 'hellaswag'}")
    assert h.kind == "multiple_choice" and [p.gold for p in h.prompts] == ["C", "A"]
    assert h.prompts[0].prompt_id.endswith("/14") and h.prompts[0].subject == "Cooking"
    t = load_hf(f"hf:{tmp_path / 'truthful_qa'}")
    assert t.prompts[0].gold == "A" and list(t.prompts[0].choices) == ["A", "B", "C"]
    m = load_hf(f"hf:{tmp_path / 'mt_bench_prompts'}")
    assert (
        m.kind == "prompts" and m.prompts[0].user_prompt == "Write a poem." and m.prompts[0].gold is None
    )
    from engine.tasks.scoring import default_rule

    assert default_rule(m.kind, m.dataset_id) == "exact"  # open-ended: judged, not scored by a rule
    # the same file loaded twice gives the same ids (resume / pairing across models)
    assert [p.prompt_id for p in load_hf(f"hf:{tmp_path / 'truthful_qa'}").prompts] == [
        p.prompt_id for p in t.prompts
    ]


def test_generate_and_datasets_parse_the_column_flags():
    from engine.cli import build_parser
    from engine.commands.datasets import columns_from_args

    for argv in (
        ["datasets", "hf:x/y", "--prompt-column", "q", "--id-column", "k"],
        ["generate", "--models", "m", "--dataset", "hf:x/y", "--prompt-column", "q", "--id-column", "k"],
    ):
        args = build_parser().parse_args(argv)
        assert columns_from_args(args) == Columns(prompt="q", id="k")
    assert columns_from_args(build_parser().parse_args(["datasets", "demo"])) is None


@pytest.mark.slow
def test_generate_and_score_an_hf_dataset_end_to_end(tmp_path):
    from engine import generation as G
    from engine import models
    from engine.store.scores import per_question_scores
    from engine.tasks.scoring import score_run
    from engine.testing import tiny_lm

    df = pd.DataFrame({"question": ["2+2?", "3+3?", "4+4?"], "answer": ["#### 4", "#### 6", "#### 8"]})
    write_hub_folder(tmp_path / "gsm8k", {"main": {"test": df}})
    ds = ds_mod.load_dataset(f"hf:{tmp_path / 'gsm8k'}:main:test", limit=2)
    db = tmp_path / "g.duckdb"
    cfg = G.GenConfig(temperature=1.0, max_new_tokens=3, batch_size=2)
    run = G.run_generation(
        db,
        [models.from_objects("a", *tiny_lm(0)), models.from_objects("b", *tiny_lm(1))],
        ds,
        2,
        ["coupled"],
        cfg=cfg,
        show_bar=False,
    )
    res = score_run(db, run)  # the registry's rule for GSM8K
    assert res["rule"] == "numeric" and res["n_scored"] == 2 * 2 * 2
    got = per_question_scores(db, run)
    assert sorted(got["prompt_id"].unique()) == sorted(p.prompt_id for p in ds.prompts)


def test_a_hub_id_loads_offline_from_the_datasets_cache(tmp_path):
    """What a download leaves in the datasets cache (<owner>___<name>/<config>/<version>/<hash>/: the
    arrow file per split + dataset_info.json) is found offline, configs and splits listed from it. The cache
    entry is made here by loading a hub-layout folder (no network) and filing it under the hub id."""
    import shutil

    import datasets

    df = pd.DataFrame(
        {
            "question": ["q1", "q2"],
            "subject": ["astronomy"] * 2,
            "choices": [list("abcd")] * 2,
            "answer": [0, 3],
        }
    )
    folder = write_hub_folder(tmp_path / "mmlu", {"astronomy": {"test": df, "validation": df}})
    datasets.load_dataset(str(folder), "astronomy", split="test", cache_dir=str(tmp_path / "tmpcache"))
    (built,) = (tmp_path / "tmpcache" / "mmlu" / "astronomy").glob("*/*/dataset_info.json")
    target = (
        datasets.config.HF_DATASETS_CACHE
        / "cais___mmlu"
        / "astronomy"
        / built.parent.parent.name
        / built.parent.name
    )
    target.mkdir(parents=True)
    for f in built.parent.iterdir():
        if f.suffix in (".arrow", ".json"):
            shutil.copy(f, target / f.name)  # mmlu-<split>.arrow: the builder names files after the repo
    d = load_hf("hf:cais/mmlu:astronomy")
    assert d.dataset_id == "mmlu:astronomy" and [p.prompt_id for p in d.prompts] == [
        "mmlu/astronomy/0",
        "mmlu/astronomy/1",
    ]
    with pytest.raises(UserError, match="no config 'nope'; available: astronomy"):
        load_hf("hf:cais/mmlu:nope")
    with pytest.raises(UserError, match="no split 'train'; available: test, validation"):
        load_hf("hf:cais/mmlu:astronomy:train")
