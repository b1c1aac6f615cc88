"""Regenerate the harness fixtures in tests/data/harness/ with the real harnesses (nothing hand-written).

Needs lm-eval and inspect-ai, which are NOT project dependencies: install them into a throwaway venv
(torch's CPU wheel first, so nothing pulls CUDA), then run this script with that venv's python:

    python3 -m venv /tmp/harness-venv
    /tmp/harness-venv/bin/python -m pip install torch==2.13.0+cpu
    /tmp/harness-venv/bin/python -m pip install -c <(echo torch==2.13.0+cpu) \
        lm-eval==0.4.13 inspect-ai==0.3.285
    HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 /tmp/harness-venv/bin/python scripts/make_harness_fixtures.py

Offline. lm-evaluation-harness: its ``dummy`` model (random log-likelihoods; ``--seed`` differs per
"model") on a local multiple-choice task YAML (``dataset_path: json``, local ``data_files``),
``--log_samples``; the model name comes from ``--model_args pretrained=NAME``. Two models on task
``tinyqa`` (paired), one on ``tinyqb`` (other doc ids); two models on a flat group task (``tinygroup``)
and a nested one (``tinynest`` -> two groups -> three tasks, the outer one unweighted). Inspect AI:
``mockllm`` models whose outputs a function fixes per sample (so the two models differ), scorer
``match()``, 2 epochs; one log as ``.eval`` (zip), one as ``.json``, plus a ``.eval`` of a task with
other sample ids; two checkpoints logged under one model name (``model_path`` in the model arguments);
partial-credit scores over 3 epochs. mockllm's input-token estimate uses tiktoken, which downloads its
encoding: the script counts words instead (only the logged token usage changes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

QUESTIONS = [
    ("2 + 2 =", ["3", "4", "5", "22"], 1),
    ("The capital of France is", ["Paris", "Rome", "Berlin", "Madrid"], 0),
    ("Water freezes at (Celsius)", ["10", "100", "0", "-10"], 2),
    ("A spider has how many legs?", ["6", "8", "10", "4"], 1),
    ("The largest planet is", ["Mars", "Venus", "Earth", "Jupiter"], 3),
    ("3 * 3 =", ["6", "9", "12", "33"], 1),
    ("The opposite of hot is", ["cold", "warm", "big", "red"], 0),
    ("10 - 7 =", ["2", "3", "4", "17"], 1),
]

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


GROUP_YAML = """group: {group}
task:
{children}
aggregate_metric_list:
  - metric: acc
    aggregation: mean
    weight_by_size: {weighted}
metadata:
  version: 1.0
"""

# Group tasks as lm-eval's own MMLU has them: a flat group over sample-level tasks, and a nested one (a
# group of groups, each over tasks), weighted by size or not. The results file then holds group
# aggregates with no samples file of their own, and group_subtasks says which task is under which group.
GROUPS = (
    ("tinygroup", ("tinyg_a", "tinyg_b"), "true"),
    ("tinynest", ("tinynest_x", "tinynest_y"), "false"),
    ("tinynest_x", ("tinyn_1", "tinyn_2"), "true"),
    ("tinynest_y", ("tinyn_3",), "true"),
)
GROUP_TASKS = {
    "tinyg_a": QUESTIONS[:5],
    "tinyg_b": QUESTIONS[5:],
    "tinyn_1": QUESTIONS[:3],
    "tinyn_2": QUESTIONS[3:7],
    "tinyn_3": QUESTIONS[6:],
}


def _lm_eval(task: str, tasks: Path, model: str, seed: int, out: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "lm_eval",
            "--model",
            "dummy",
            "--model_args",
            f"pretrained={model}",
            "--tasks",
            task,
            "--include_path",
            str(tasks),
            "--log_samples",
            "--seed",
            str(seed),
            "--output_path",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _task_files(tasks: Path, work: Path, rows_by_task: dict) -> None:
    for task, rows in rows_by_task.items():
        data = work / f"{task}.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": f"{task}-{i}", "question": q, "choices": c, "answer": a}) + "\n"
                for i, (q, c, a) in enumerate(rows)
            )
        )
        (tasks / f"{task}.yaml").write_text(TASK_YAML.format(task=task, data=data))


def lm_eval_group_logs(out: Path, work: Path) -> None:
    """Two models on a flat and on a nested group task (lm-eval writes OUTPUT/<model>/results_*.json)."""
    tasks = work / "group_tasks"
    tasks.mkdir()
    _task_files(tasks, work, GROUP_TASKS)
    for group, children, weighted in GROUPS:
        (tasks / f"{group}.yaml").write_text(
            GROUP_YAML.format(
                group=group, children="".join(f"  - {c}\n" for c in children), weighted=weighted
            )
        )
    for group in ("tinygroup", "tinynest"):
        for model, seed in (("dummy-a", 4), ("dummy-b", 5)):
            _lm_eval(group, tasks, model, seed, out / "lm_eval" / group)


def lm_eval_logs(out: Path, work: Path) -> None:
    tasks = work / "tasks"
    tasks.mkdir()
    for task, rows in (("tinyqa", QUESTIONS), ("tinyqb", QUESTIONS[:4])):
        data = work / f"{task}.jsonl"
        data.write_text(
            "".join(
                json.dumps({"id": f"{task}-{i}", "question": q, "choices": c, "answer": a}) + "\n"
                for i, (q, c, a) in enumerate(rows)
            )
        )
        (tasks / f"{task}.yaml").write_text(TASK_YAML.format(task=task, data=data))
    for model, task, seed in (
        ("dummy-a", "tinyqa", 1),
        ("dummy-b", "tinyqa", 2),
        ("dummy-c", "tinyqb", 3),
    ):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "lm_eval",
                "--model",
                "dummy",
                "--model_args",
                f"pretrained={model}",
                "--tasks",
                task,
                "--include_path",
                str(tasks),
                "--log_samples",
                "--seed",
                str(seed),
                "--output_path",
                str(out / "lm_eval" / task),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    lm_eval_group_logs(out, work)
    for f in (out / "lm_eval").rglob(
        "results_*.json"
    ):  # the task YAML's local path is not ours to commit
        f.write_text(f.read_text().replace(str(work), "/tmp/harness-work"))


async def _words(text: str) -> int:
    """mockllm's input-token estimate without tiktoken (which downloads its encoding: no network
    here)."""
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
        return Task(
            name=name,
            dataset=[
                Sample(input=q, target=c[a], id=f"{name}-{i}")
                for i, (q, c, a) in enumerate(QUESTIONS[:n])
            ],
            scorer=match(),
            epochs=2,
        )

    runs = (
        ("alpha", {0, 1, 2, 3, 4, 6}, "eval", "tinyqa", 8),
        ("beta", {0, 2, 5}, "json", "tinyqa", 8),
        ("gamma", {0}, "eval", "tinyqb", 4),
    )
    for name, right, fmt, tname, n in runs:
        model = get_model(f"mockllm/{name}", custom_outputs=answers(right, "I do not know"))
        model.api.count_text_tokens = _words  # type: ignore[method-assign]
        eval(
            task(tname, n),
            model=model,
            log_dir=str(out / "inspect" / tname),
            log_format=fmt,
            display="none",
        )
    # Two checkpoints of one model, as `--model hf/local -M model_path=...` logs them: one model name,
    # the checkpoint only in the model arguments.
    for step, right in (("step-100", {0, 1}), ("step-200", {0, 1, 2, 3, 5})):
        model = get_model(
            "mockllm/local", custom_outputs=answers(right, "no idea"), model_path=f"/ckpt/run/{step}"
        )
        model.api.count_text_tokens = _words  # type: ignore[method-assign]
        eval(
            task("tinyqa", 8),
            model=model,
            log_dir=str(out / "inspect" / "checkpoints"),
            log_format="eval",
            display="none",
        )
    # Fractional scores (partial credit), averaged over 3 epochs: the harness's accuracy is a float sum
    # whose order of summation is not ours.
    eval(
        Task(
            name="tinypartial",
            dataset=[
                Sample(input=q, target=c[a], id=f"tinypartial-{i}")
                for i, (q, c, a) in enumerate(QUESTIONS)
            ],
            scorer=partial(),
            epochs=3,
        ),
        model=_counted(get_model("mockllm/partial", custom_outputs=answers({0, 2, 4, 6}, "maybe"))),
        log_dir=str(out / "inspect" / "partial"),
        log_format="json",
        display="none",
    )


def _counted(model):
    model.api.count_text_tokens = _words  # type: ignore[method-assign]
    return model


def partial():
    """A scorer with partial credit: 1 for the right answer, else a fraction fixed per sample and
    epoch."""
    from inspect_ai.scorer import Score, accuracy, mean, scorer

    @scorer(metrics=[accuracy(), mean()])
    def partial_credit():
        seen: dict[str, int] = {}

        async def score(state, target):
            key = str(state.sample_id)
            seen[key] = seen.get(key, 0) + 1
            right = state.output.completion.strip() == target.text
            frac = ((hash_int(key) * 7 + seen[key] * 13) % 97) / 97
            return Score(value=1.0 if right else round(frac, 6), answer=state.output.completion)

        return score

    return partial_credit()


def hash_int(text: str) -> int:
    return sum((i + 1) * ord(c) for i, c in enumerate(text))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", default=str(Path(__file__).resolve().parent.parent / "tests" / "data" / "harness")
    )
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
