"""Numbers in answers: the canonical string of a number and GSM8K-style extraction. A leaf of
engine.tasks (re-exported by :mod:`engine.tasks.scoring`), so the dataset loaders use it without
importing the scorer (no import circle)."""

from __future__ import annotations

import re

_NUMBER = re.compile(r"[-−]?\$?\s?\d[\d,]*(?:\.\d+)?|[-−]?\$?\.\d+")


def normalise_number(token: str | None) -> str | None:
    """A number's canonical string: no "$", commas or spaces; unicode minus -> "-"; "12.50" -> "12.5",
    "3.0" -> "3"."""
    if token is None:
        return None
    t = str(token).strip().replace("$", "").replace(",", "").replace(" ", "").replace("−", "-")
    t = t.rstrip(".")
    if not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)", t):
        return None
    sign = "-" if t.startswith("-") else ""
    t = t.lstrip("+-")
    if "." in t:
        t = t.rstrip("0").rstrip(".")
    t = t.lstrip("0") or "0"
    if t.startswith("."):
        t = "0" + t
    return "0" if t == "0" else sign + t


def extract_numeric(text: str | None) -> str | None:
    """GSM8K style: the number after the last "####" if any, else the last number in the text.

    Normalised by :func:`normalise_number`; None when the text holds no number.
    """
    if text is None or not isinstance(text, str):
        return None
    if "####" in text:
        tail = text.rsplit("####", 1)[1]
        m = _NUMBER.search(tail)
        if m:
            return normalise_number(m.group(0))
    found = _NUMBER.findall(text)
    return normalise_number(found[-1]) if found else None
