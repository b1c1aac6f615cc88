"""Scoring generations: answer extraction rules and per-generation scores.

The paper's rule (METHODS.md 1.5) is reproduced exactly by :func:`extract_paper`.
"""

from __future__ import annotations

PAPER_CHOICES = ("A", "B", "C", "D")


def extract_paper(text: str | None) -> str:
    """The reference notebook's ``get_choice``, bit for bit (METHODS.md 1.5).

    Text before the first space; delete ``. " , ) ;``; strip; if not A-D keep the part before
    the first newline; if still not A-D the answer is "E" (always wrong). Case-sensitive.
    """
    if text is None or not isinstance(text, str):
        return "E"
    choice = text.split(" ")[0]
    for ch in '.",);':
        choice = choice.replace(ch, "")
    choice = choice.strip()
    if choice not in PAPER_CHOICES:
        choice = choice.split("\n")[0]
    if choice not in PAPER_CHOICES:
        return "E"
    return choice
