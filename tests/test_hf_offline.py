"""``hf:`` datasets without a hub: an unreachable hub fails at once (no library retries), naming the
folders looked in; a multi-turn prompt set (MT-Bench) records that only turn 1 is used."""

from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from engine.errors import UserError
from engine.tasks.hf_datasets import hub_reachable, load_hf
from tests.test_hf_datasets import write_hub_folder

pytest.importorskip("datasets")


def test_unreachable_hub_fails_at_once_naming_the_folders(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub.constants as hc

    for mod in (datasets.config, hc):  # no offline switch set: the user did not say "offline"
        monkeypatch.setattr(mod, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(hc, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9", raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "ds-cache")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    assert not hub_reachable()
    t0 = time.monotonic()
    with pytest.raises(UserError) as exc:
        load_hf("hf:cais/mmlu:abstract_algebra:test")
    took = time.monotonic() - t0
    msg = str(exc.value)
    assert took < 8, f"{took:.1f} s: the library's retries ran"
    assert (
        "the hub is unreachable" in msg
        and str(tmp_path / "ds-cache") in msg
        and str(tmp_path / "hub-cache") in msg
    )
    assert "\n" not in msg
    assert (datasets.config.HF_HUB_OFFLINE, hc.HF_HUB_OFFLINE) == (False, False)  # switched back after


def test_multi_turn_prompts_record_that_only_turn_1_is_used(monkeypatch, tmp_path, capsys):
    import datasets
    import huggingface_hub.constants as hc

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    mt = pd.DataFrame(
        {
            "prompt": [["Write a poem.", "Now shorter."], ["One turn only."]],
            "category": ["writing", "writing"],
            "prompt_id": [81, 82],
        }
    )
    write_hub_folder(tmp_path / "mt_bench_prompts", {"default": {"train": mt}})
    ds = load_hf(f"hf:{tmp_path / 'mt_bench_prompts'}")
    assert [p.user_prompt for p in ds.prompts] == ["Write a poem.", "One turn only."]
    src = json.loads(ds.source)
    assert (src["turns_used"], src["multi_turn_prompts"]) == (1, 1)
    from engine.commands.generate import multi_turn_note

    multi_turn_note(ds.source)
    assert (
        "1 prompts of this dataset have several turns; only turn 1 is generated and judged"
        in capsys.readouterr().err
    )
    single = pd.DataFrame({"instruction": ["Say hi."], "output": ["hi"]})
    write_hub_folder(tmp_path / "alpaca_eval", {"default": {"eval": single}})
    assert "turns_used" not in json.loads(load_hf(f"hf:{tmp_path / 'alpaca_eval'}").source)
