"""Reading a judge's verdict out of its raw reply (docs/METHODS.md section 3).

Two formats (``--judge-format``):

* ``paper`` (default): the coupled-generation paper's A / B / Tie instruction. Real judges answer
  "[[A]]", "Assistant A", "A.", "**Tie**", or reason first and answer last; :func:`parse_verdict`
  takes the FINAL verdict of the reply.
* ``arena-hard``: Arena-Hard-Auto's five labels ``[[A>>B]]``, ``[[A>B]]``, ``[[A=B]]``,
  ``[[B>A]]``, ``[[B>>A]]`` (the last label in the reply counts), mapped to win / tie:
  A>>B and A>B -> 'A' (a win for the answer shown first: a strong and a slight preference both
  count as one win); A=B -> 'tie'; B>A and B>>A -> 'B'. The mirrored spellings B<A, B<<A, A<B,
  A<<B mean the same. Arena-Hard's own scoring weights a strong preference as three wins; here a
  comparison is a win, a loss or a tie, as the win-rate estimators expect.

Verdicts are in presentation terms ('A' = the answer shown first); None = unparseable.
"""

from __future__ import annotations

import re

from engine.errors import UserError

FORMATS = ("paper", "arena-hard")

# the arena-hard label -> verdict map (documented in the module docstring, the README and --help)
ARENA_HARD_LABELS = {
    "A>>B": "A",
    "A>B": "A",
    "A=B": "tie",
    "B>A": "B",
    "B>>A": "B",
    "B<<A": "A",
    "B<A": "A",
    "B=A": "tie",
    "A<B": "B",
    "A<<B": "B",
}
ARENA_HARD_HELP = "A>>B, A>B -> A wins; A=B -> tie; B>A, B>>A -> B wins"

_LABEL = re.compile(r"\[\[\s*([AB])\s*(>>|>|=|<<|<)\s*([AB])\s*\]\]")
_BRACKET = re.compile(r"\[\[\s*(A|B|(?i:tie))\s*\]\]")
_VERDICT_IS = re.compile(
    r"(?i:verdict|winner|answer|better|choice)\s*(?i:is)?\s*[:\-]?\s*[\"'‘“\[(*]*\s*"
    r"(?:(?i:assistant)\s+)?(A|B|(?i:tie))(?![A-Za-z])"
)
_LINE = re.compile(r"^(?:(?i:assistant|response|answer)\s+)?(A|B|(?i:tie|tied))$")
_ASSISTANT = re.compile(r"(?i:assistant)\s+([AB])(?![A-Za-z])")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'’])(A|B)(?![A-Za-z0-9'’])")
_TIE = re.compile(r"(?i)(?<![a-z])(tie|tied|tie\s*\(bothbad\)|draw|equal(ly good)?)(?![a-z])")
_STRIP = " \t\r\n\"'‘’“”`*[](){}.,:;!#"
# Plain sentences real judges write (docs/JUDGES.md lists them): "X is better than Y", "Y is worse
# than X", "Assistant B provides the better answer", "I prefer Assistant A", "Output (b)", "A > B".
_WHO = r"(?:(?i:assistant|response|answer|output|model)\s*)?\(?\b([AB])\b\)?(?:['’]s)?"
_POS = r"(?:better|superior|stronger|preferable|preferred|more\s+[a-z]+)"
_NEG = r"(?:worse|inferior|weaker|less\s+[a-z]+)"
_THAN = re.compile(_WHO + r"[^.\n]{0,60}?\b(?i:(" + _POS + r")|" + _NEG + r")\s+than\s+" + _WHO)
_IS_BETTER = re.compile(
    _WHO + r"(?:\s+(?i:answer|response|reply))?\s+(?i:is|was|provides|gives|offers|has|wins)"
    r"(?:\s+(?i:the|a|an|clearly|slightly|much|far|overall|significantly))*"
    r"(?:\s+(?i:" + _POS + r"|winner|wins)\b|$|\s*[.!])"
)
_PREFER = re.compile(r"(?i:prefer|choose|chose|pick|select|go\s+with|favou?r)\s+" + _WHO)
_OUTPUT = re.compile(r"(?i:output)\s*\(([abAB])\)")
_ARROW = re.compile(r"(?<![\[A-Za-z])([AB])\s*(>>|>|=|<<|<)\s*([AB])(?![\]A-Za-z])")
_NEITHER = re.compile(
    r"(?i)\bneither\b[^.\n]{0,40}\bbetter\b|\b(?:about|roughly|essentially)\s+(?:the\s+same|equal)"
)


def _norm(v: str) -> str:
    return "tie" if v.lower() in ("tie", "tied", "draw", "=") else v.upper()


def _label_verdict(m: re.Match) -> str | None:
    left, op, right = m.groups()
    return None if left == right else ARENA_HARD_LABELS.get(f"{left}{op}{right}")


def parse_arena_hard(raw: str | None) -> str | None:
    """The last ``[[A>B]]``-style label of ``raw`` as 'A' | 'B' | 'tie' (:data:`ARENA_HARD_LABELS`), else
    None."""
    if not isinstance(raw, str):
        return None
    labels = list(_LABEL.finditer(raw))
    return _label_verdict(labels[-1]) if labels else None


def _sentence_verdict(text: str) -> str | None:
    """The verdict of the LAST plain comparative sentence ("A is better than B" -> A, "A is worse
    than B" -> B, "I prefer Assistant B" -> B, "Output (a)" -> A, "A > B" -> A, "neither is
    better" -> tie), or None when there is none."""
    hits: list[tuple[int, str | None]] = []
    for m in _THAN.finditer(text):
        left, positive, right = m.group(1), m.group(2), m.group(3)
        if left != right:
            hits.append((m.start(), left if positive else right))
    hits += [(m.start(), m.group(1)) for rx in (_IS_BETTER, _PREFER) for m in rx.finditer(text)]
    hits += [(m.start(), m.group(1).upper()) for m in _OUTPUT.finditer(text)]
    hits += [(m.start(), _label_verdict(m)) for m in _ARROW.finditer(text)]
    hits += [(m.start(), "tie") for m in _NEITHER.finditer(text)]
    return max(hits, key=lambda h: h[0])[1] if hits else None


def parse_verdict(raw: str | None, fmt: str = "paper") -> str | None:
    """The judge's final verdict in presentation terms: 'A', 'B', 'tie' or None (unparseable).

    ``fmt='paper'``, in order: the whole reply is a verdict ("A", "‘B’", "**Tie**", "b", "A.");
    the LAST bracketed mark ("[[A]]", or an Arena-Hard label "[[A>B]]"); the last "verdict / winner
    / answer is X"; the last line is a verdict ("Assistant B", "**Tie**"); the last plain
    comparative sentence (:func:`_sentence_verdict`: "Assistant A is better than Assistant B.",
    "B is worse than A"); the first word is "A"/"B" (upper case) or "tie" ("A\\n\\nBecause ...");
    the only one of "Assistant A"/"Assistant B" named; the only verdict word present. Anything
    naming two verdicts otherwise is None.
    ``fmt='arena-hard'``: :func:`parse_arena_hard`.
    """
    if fmt not in FORMATS:
        raise UserError(f"unknown judge format {fmt!r}; allowed: {', '.join(FORMATS)}")
    if fmt == "arena-hard":
        return parse_arena_hard(raw)
    if raw is None or not isinstance(raw, str):
        return None
    text = raw.strip()
    whole = text.strip(_STRIP)
    if whole.lower() in ("a", "b", "tie", "tied", "draw"):
        return _norm(whole)
    marks: list[tuple[int, str | None]] = [
        (m.start(), _norm(m.group(1))) for m in _BRACKET.finditer(text)
    ]
    marks += [(m.start(), _label_verdict(m)) for m in _LABEL.finditer(text)]
    if marks:
        return max(marks, key=lambda sv: sv[0])[1]
    said = list(_VERDICT_IS.finditer(text))
    if said:
        return _norm(said[-1].group(1))
    lines = [ln.strip(_STRIP) for ln in text.splitlines() if ln.strip(_STRIP)]
    if len(lines) > 1:
        m = _LINE.match(lines[-1])
        if m:
            return _norm(m.group(1))
    first = re.split(r"[\s,.:;!]+", whole, maxsplit=1)[0].strip(_STRIP) if whole else ""
    sentence = _sentence_verdict(text)
    if sentence is not None:
        return sentence
    if first in ("A", "B") or first.lower() in ("tie", "tied"):
        return _norm(first)
    named = {m.group(1) for m in _ASSISTANT.finditer(text)}
    if len(named) == 1 and not _TIE.search(text):
        return named.pop()
    found = {m.group(1) for m in _STANDALONE.finditer(text)} | {"tie" for _ in _TIE.finditer(text)}
    return found.pop() if len(found) == 1 else None
