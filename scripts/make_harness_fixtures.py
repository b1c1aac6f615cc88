"""Regenerate the harness fixtures in tests/data/harness/ with the real harnesses (nothing hand-written).

Needs lm-eval and inspect-ai, which are NOT project dependencies: install them into a throwaway venv
(torch's CPU wheel first, so nothing pulls CUDA), then run this script with that venv's python:

    python3 -m venv /tmp/harness-venv
    /tmp/harness-venv/bin/python -m pip install torch==2.13.0+cpu
    /tmp/harness-venv/bin/python -m pip install -c <(echo torch==2.13.0+cpu) lm-eval==0.4.13 inspect-ai==0.3.285
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 /tmp/harness-venv/bin/python scripts/make_harness_fixtures.py

Offline. lm-evaluation-harness: its ``dummy`` model (random log-likelihoods; ``--seed`` differs per
"model") on a local multiple-choice task YAML (``dataset_path: json``, local ``data_files``),
``--log_samples``; the model name comes from ``--model_args pretrained=NAME``. Two models on task
``tinyqa`` (paired), one on ``tinyqb`` (other doc ids). Inspect AI: ``mockllm`` models whose outputs
a function fixes per sample (so the two models differ), scorer ``match()``, 2 epochs; one log as
``.eval`` (zip), one as ``.json``, plus a ``.eval`` of a task with other sample ids. mockllm's
input-token estimate uses tiktoken, which downloads its encoding: the script counts words instead
(only the logged token usage changes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUESTIONS = [("2 + 2 =", ["3", "4", "5", "22"], 1), ("The capital of France is", ["Paris", "Rome", "Berlin", "Madrid"], 0),
             ("Water freezes at (Celsius)", ["10", "100", "0", "-10"], 2),
             ("A spider has how many legs?", ["6", "8", "10", "4"], 1),
             ("The largest planet is", ["Mars", "Venus", "Earth", "Jupiter"], 3), ("3 * 3 =", ["6", "9", "12", "33"], 1),
             ("The opposite of hot is", ["cold", "warm", "big", "red"], 0), ("10 - 7 =", ["2", "3", "4", "17"], 1)]

TASK_YAML = """task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: 1.0
"""


def lm_eval_logs(out: Path, work: Path) -> None:
    tasks = work / "tasks"
    tasks.mkdir()
    for task, rows in (("tinyqa", QUESTIONS), ("tinyqb", QUESTIONS[:4])):
        data = work / f"{task}.jsonl"
        data.write_text("".join(json.dumps({"id": f"{task}-{i}", "question": q, "choices": c, "answer": a}) + "\n"
                                for i, (q, c, a) in enumerate(rows)))
        (tasks / f"{task}.yaml").write_text(TASK_YAML.format(task=task, data=data))
    for model, task, seed in (("dummy-a", "tinyqa", 1), ("dummy-b", "tinyqa", 2), ("dummy-c", "tinyqb", 3)):
        subprocess.run([sys.executable, "-m", "lm_eval", "--model", "dummy", "--model_args", f"pretrained={model}",
                        "--tasks", task, "--include_path", str(tasks), "--log_samples", "--seed", str(seed),
                        "--output_path", str(out / "lm_eval" / task)], check=True, stdout=subprocess.DEVNULL)
    for f in (out / "lm_eval").rglob("results_*.json"):  # the task YAML's local path is not ours to commit
        f.write_text(f.read_text().replace(str(work), "/tmp/harness-work"))


async def _words(text: str) -> int:
    """mockllm's input-token estimate without tiktoken (which downloads its encoding: no network here)."""
    return max(1, len(text.split()))


def inspect_logs(out: Path) -> None:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.scorer import match

    def answers(right: set[int], wrong: str):
        def out_for(messages, tools, tool_choice, config):
            text = messages[-1].text
            i = next(k for k, (q, _, _) in enumerate(QUESTIONS) if q in text)
            q, choices, a = QUESTIONS[i]
            return ModelOutput.from_content("mockllm/model", choices[a] if i in right else wrong)
        return out_for

    def task(name: str, n: int) -> Task:
        return Task(name=name, dataset=[Sample(input=q, target=c[a], id=f"{name}-{i}")
                                        for i, (q, c, a) in enumerate(QUESTIONS[:n])], scorer=match(), epochs=2)

    runs = (("alpha", {0, 1, 2, 3, 4, 6}, "eval", "tinyqa", 8), ("beta", {0, 2, 5}, "json", "tinyqa", 8),
            ("gamma", {0}, "eval", "tinyqb", 4))
    for name, right, fmt, tname, n in runs:
        model = get_model(f"mockllm/{name}", custom_outputs=answers(right, "I do not know"))
        model.api.count_text_tokens = _words  # type: ignore[method-assign]
        eval(task(tname, n), model=model, log_dir=str(out / "inspect" / tname), log_format=fmt, display="none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "harness"))
    args = ap.parse_args()
    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as work:
        lm_eval_logs(out, Path(work))
    inspect_logs(out)
    for f in sorted(out.rglob("*")):
        if f.is_file():
            print(f.relative_to(out), f.stat().st_size)


if __name__ == "__main__":
    main()
