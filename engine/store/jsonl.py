"""One JSON-lines line -> a JSON object, never a traceback (datasets and Arena comparison files).

Untrusted files reach :func:`json.loads` with inputs it cannot take: nesting deeper than the
interpreter's recursion limit (RecursionError), integers with more digits than ``int()`` accepts
(ValueError), or a valid JSON value that is not an object. Each becomes a one-line problem.
"""

from __future__ import annotations

import json


def parse_object(line: str) -> tuple[dict | None, str | None]:
    """(object, None) for a line holding one JSON object, else (None, what is wrong)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg}, column {exc.colno})"
    except RecursionError:
        return None, "JSON nested too deeply"
    except (
        ValueError
    ) as exc:  # an integer with more digits than int() accepts (sys.get_int_max_str_digits)
        if "digits" in str(exc):
            return None, "a number has too many digits (more than Python's integer limit of 4,300)"
        return None, f"not a usable JSON value ({str(exc).splitlines()[0][:120]})"
    if not isinstance(obj, dict):
        return None, f"each line must be a JSON object, got {type(obj).__name__}"
    return obj, None
