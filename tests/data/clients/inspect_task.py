"""A small Inspect AI task for `engine serve` (tests/clients): the questions of gen.jsonl, sampled at
temperature 1 for 3 tokens, 4 epochs; a sample scores C when its answer holds only letters and spaces
(the rule of lm_eval/serve_gen.yaml). Inspect reads the dataset path relative to this file."""

import re

from inspect_ai import Epochs, Task, task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import TaskState, generate


@scorer(metrics=[accuracy()])
def letters_only():
    async def score(state: TaskState, target: Target) -> Score:
        answer = state.output.completion
        ok = re.fullmatch(r"[A-Za-z ]*", answer) is not None
        return Score(value=CORRECT if ok else INCORRECT, answer=answer)

    return score


@task
def serve_gen():
    return Task(
        dataset=json_dataset("gen.jsonl", FieldSpec(input="question", target="answer", id="id")),
        solver=generate(),
        scorer=letters_only(),
        epochs=Epochs(4),
        config=GenerateConfig(temperature=1.0, max_tokens=3),
    )
