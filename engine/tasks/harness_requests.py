"""Tasks layer: what a harness sent to an OpenAI-compatible server, rebuilt from its log, and the
per-repeat scores lm-eval does not log.

``engine import harness`` links a harness's samples to the generations a server of this product
stored (docs/METHODS.md 1.6: the key is the request). The link needs the request each sample made,
as the key rule reads it: the prompt or the messages before any chat template, temperature, top_p,
top_k and the seed (:func:`engine.serving.keys.questions`). The logs say it:

* lm-eval ``local-completions`` / ``local-chat-completions`` (0.4.x): ``arguments`` holds the context
  (a string; with ``--apply_chat_template`` the chat's messages as a JSON string) and the generation
  arguments; lm-eval sends ``temperature`` (default 0), the remaining generation arguments (top_p, top_k
  where the task sets them) and its ``seed`` model argument (default 1234) in every request. Requests
  sent as token ids (``tokenized_requests=True``, local-completions' default) cannot be rebuilt from the
  log without the tokenizer: such samples are reported as unmatched (the recipe sends text).
* Inspect AI (``openai-api``): each sample's model events hold the request body as sent.

lm-eval with ``repeats: R`` sends each question R times and logs all R answers, but scores only the
first (its default ``take_first`` filter). :func:`lm_eval_repeat_scores` scores the others with
lm-eval's own ``exact_match`` rule and its arguments from the task's config, after checking that the
rule gives lm-eval's logged score on the first answer of every document.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping
from typing import Any

from engine.errors import UserError

LM_EVAL_ENDPOINTS = {"local-completions": "completions", "local-chat-completions": "chat"}
LM_EVAL_SEED = 1234  # lm-eval's TemplateAPI default `seed`, sent with every request
KEY_FIELDS = ("temperature", "top_p", "top_k")  # the sampling fields the key rule reads
EXACT_MATCH_ARGS = ("regexes_to_ignore", "ignore_case", "ignore_punctuation", "ignore_numbers")

Request = tuple[str, dict[str, Any]]  # (endpoint 'completions' | 'chat', the body's key fields)


def _int_arg(args: Mapping[str, str], name: str, default: int) -> int:
    raw = args.get(name)
    try:
        return default if raw is None else int(raw)
    except ValueError:
        return default


def lm_eval_request(
    model_type: str | None, model_args: Mapping[str, str], context: Any, gen_kwargs: Any
) -> Request | None:
    """The request lm-eval's API model sent for one generation (None: not an API model, or a
    context this function cannot read back)."""
    endpoint = LM_EVAL_ENDPOINTS.get(str(model_type))
    if endpoint is None or not isinstance(gen_kwargs, dict):
        return None
    if isinstance(context, list) and len(context) == 1:  # a JsonChatStr (NamedTuple) logged as a list
        context = context[0]
    if not isinstance(context, str):
        return None
    body: dict[str, Any] = {
        "temperature": gen_kwargs.get("temperature", 0),
        "seed": _int_arg(model_args, "seed", LM_EVAL_SEED),
    }
    body.update({k: gen_kwargs[k] for k in ("top_p", "top_k") if k in gen_kwargs})
    if endpoint == "chat":
        try:
            messages = json.loads(context)
        except json.JSONDecodeError:
            return None
        if not isinstance(messages, list):
            return None
        body["messages"] = messages
    else:
        body["prompt"] = context
    return endpoint, body


def context_text(context: Any) -> str | None:
    """An lm-eval context as the prompt a reader sees: the string, or a chat's messages (logged as a
    JSON string, itself inside a one-element list) as their contents, one paragraph each."""
    if isinstance(context, list) and len(context) == 1:
        context = context[0]
    if not isinstance(context, str):
        return None
    try:
        messages = json.loads(context)
    except json.JSONDecodeError:
        return context
    if isinstance(messages, list) and all(isinstance(m, dict) for m in messages):
        return "\n\n".join(str(m.get("content", "")) for m in messages)
    return context


def _inspect_messages(call: Mapping[str, Any], pool: Any) -> list | None:
    """A model call's request messages: as logged, or (Inspect >= 0.3.2xx condenses them) rebuilt
    from the sample's pool of call messages (``events_data.calls``) and the call's ``call_refs``,
    half-open [start, end) index ranges."""
    req = call.get("request") or {}
    key = call.get("call_key") or "messages"
    if isinstance(req.get(key), list):
        return req[key]
    refs = call.get("call_refs")
    if not isinstance(refs, list) or not isinstance(pool, list):
        return None
    try:
        return [pool[i] for start, end in refs for i in range(int(start), int(end))]
    except (IndexError, TypeError, ValueError):
        return None


def inspect_request(sample: Mapping[str, Any]) -> Request | None:
    """The chat request of an Inspect sample's last model call (None when the log has no model
    event with its request, e.g. a mock model)."""
    pool = (sample.get("events_data") or {}).get("calls")
    for ev in reversed(sample.get("events") or []):
        if not isinstance(ev, dict) or ev.get("event") != "model" or not ev.get("call"):
            continue
        req = ev["call"].get("request")
        messages = _inspect_messages(ev["call"], pool)
        if isinstance(req, dict) and messages is not None:
            body = {k: req[k] for k in ("seed", "coupling", *KEY_FIELDS) if k in req}
            return "chat", {**body, "messages": messages}
    return None


# ---------------------------------------------------------------------------------------------
# lm-eval's exact_match on every repeat


def exact_match(prediction: str, reference: str, args: Mapping[str, Any]) -> float:
    """lm-eval 0.4's ``exact_match`` (``exact_match_hf_evaluate``) on one pair: the regexes deleted from
    both, then lower case, punctuation and digits removed as asked, then string equality."""
    p, r = str(prediction), str(reference)
    for rx in args.get("regexes_to_ignore") or []:
        p, r = re.sub(rx, "", p), re.sub(rx, "", r)
    if args.get("ignore_case"):
        p, r = p.lower(), r.lower()
    if args.get("ignore_punctuation"):
        table = str.maketrans("", "", string.punctuation)
        p, r = p.translate(table), r.translate(table)
    if args.get("ignore_numbers"):
        table = str.maketrans("", "", string.digits)
        p, r = p.translate(table), r.translate(table)
    return float(p == r)


def _exact_match_args(task: str, cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    metrics = cfg.get("metric_list") or []
    em = [m for m in metrics if isinstance(m, dict) and m.get("metric") == "exact_match"]
    if not em:
        names = [m.get("metric") for m in metrics if isinstance(m, dict)]
        raise UserError(
            f"{where}: task {task!r} sends each question {cfg.get('repeats')} times but lm-eval scores "
            f"only the first answer, and its metric ({', '.join(map(str, names)) or 'none'}) is not one "
            "this import can score on the others (exact_match); import it with repeats: 1"
        )
    return {k: em[0][k] for k in EXACT_MATCH_ARGS if k in em[0]}


def lm_eval_repeat_scores(
    task: str, cfg: Mapping[str, Any], answers: list[str], target: Any, logged: float, where: str
) -> list[float]:
    """The exact_match score of each of a document's R answers (R = the task's ``repeats``).

    Raises:
        UserError: a task with a ``filter_list`` (lm-eval's filters decide what is scored) or another
            metric than exact_match, or a rule that does not give lm-eval's logged score on the first
            answer (then this reading of the log is wrong, and nothing is written).
    """
    if cfg.get("filter_list"):
        raise UserError(
            f"{where}: task {task!r} has repeats {cfg.get('repeats')} and a filter_list; lm-eval scores "
            "its filtered answers, which the log does not hold per repeat: import it with repeats: 1 "
            "(run lm-eval several times against the server instead)"
        )
    args = _exact_match_args(task, cfg, where)
    scores = [exact_match(a, str(target), args) for a in answers]
    if scores[0] != logged:
        raise UserError(
            f"{where}: lm-eval's exact_match of the first answer is {logged!r}, this import's reading "
            f"of the rule gives {scores[0]!r}; nothing was written"
        )
    return scores
