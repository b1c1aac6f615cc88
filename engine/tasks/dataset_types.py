"""What a dataset is: :class:`Prompt`, :class:`Dataset`, the kinds, the default system prompts and
the paper's multiple-choice prompt. A leaf of engine.tasks (re-exported by :mod:`engine.tasks.datasets`),
so the file loaders and the ``hf:`` loader share it without importing each other (no import circle)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from engine.errors import UserError

KINDS = ("multiple_choice", "numeric", "prompts")
LETTERS = ("A", "B", "C", "D")

MMLU_SYSTEM_PROMPT = (
    "You will be given multiple choice questions. Please reply with a single "
    "character 'A', 'B', 'C', or 'D' only. DO NOT explain your reply."
)
CHAT_SYSTEM_PROMPT = "Keep your responses short and to the point."
NUMERIC_SYSTEM_PROMPT = (
    "Solve the problem. Keep your working short and end your reply with "
    "'#### ' followed by the final number."
)


@dataclass(frozen=True)
class Prompt:
    prompt_id: str
    user_prompt: str  # the exact user message sent to the models
    subject: str | None = None
    question: str | None = None
    choices: dict | None = None  # {"A": ..., "B": ..., "C": ..., "D": ...} for multiple choice
    gold: str | None = None  # "A".."D", a normalised number, or None


@dataclass(frozen=True)
class Dataset:
    dataset_id: str
    kind: str  # one of KINDS
    source: str
    prompts: tuple[Prompt, ...]
    system_prompt: str

    def __len__(self) -> int:
        return len(self.prompts)

    def subjects(self) -> list[str]:
        """Distinct subjects in order of first appearance."""
        return list(dict.fromkeys(p.subject for p in self.prompts if p.subject))

    def records(self) -> list[dict]:
        """Rows for the store's ``prompts`` table (choices as a JSON string)."""
        return [
            {
                "dataset_id": self.dataset_id,
                "prompt_id": p.prompt_id,
                "idx": i,
                "subject": p.subject,
                "question": p.question,
                "choices": json.dumps(p.choices) if p.choices is not None else None,
                "gold": p.gold,
                "user_prompt": p.user_prompt,
            }
            for i, p in enumerate(self.prompts)
        ]


def format_mc_prompt(question: str, choices: dict) -> str:
    """The paper's 0-shot user prompt: ``question\\nA. a\\nB. b\\nC. c\\nD. d\\nAnswer:``
    (docs/METHODS.md 1.4)."""
    missing = [k for k in LETTERS if k not in choices]
    if missing:
        raise UserError(
            f"choices lack {', '.join(missing)}; multiple-choice questions need A, B, C and D"
        )
    # No stripping: the paper's prompts use the MMLU strings verbatim (a changed space changes tokens).
    lines = [str(question)] + [f"{k}. {choices[k]}" for k in LETTERS]
    return "\n".join(lines) + "\nAnswer:"
