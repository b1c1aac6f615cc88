"""Serving layer: OpenAI response bodies (completions and chat, whole or as stream chunks) from a
finished :class:`~engine.serving.core.Call`.

Every response also carries ``coupling``: the run and, per choice, the key it was drawn with
(prompt id, repeat, seed, mode), so a client or an importer can find the stored generation.
"""

from __future__ import annotations

from typing import Any

from engine.serving.protocol import finite

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}  # the engine's finish -> OpenAI's


def _piece(tok, t: int) -> str:
    return tok.decode([t])


def usage(call) -> dict[str, int]:
    prompt = sum(len(p) for p in call.prompts) * 1
    completion = sum(len(s.ids) for s in call.seqs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def coupling(call) -> dict[str, Any]:
    return {
        "run": call.core.cfg.run_id,
        "units": [
            {
                "prompt_id": s.unit.prompt_id,
                "repeat": s.unit.repeat,
                "seed": s.unit.seed,
                "mode": call.core.mode,
            }
            for s in call.seqs
        ],
    }


def _alts(tok, top) -> dict[str, float]:
    return {_piece(tok, t): finite(v) for t, v in top}


def completion_logprobs(tok, s, echo_ids: list[int] | None, offset: int) -> dict[str, Any]:
    """The legacy ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset (prompt
    tokens first with ``echo``, the first one's log-probability null)."""
    tokens: list[str] = []
    lps: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    if echo_ids is not None:
        tokens += [_piece(tok, t) for t in echo_ids]
        lps += [None if v is None else finite(v) for v in s.prompt_logprobs]
        tops += [None if top is None else _alts(tok, top) for top in s.prompt_top]
    tokens += [_piece(tok, t) for t in s.ids]
    lps += [finite(v) for v in s.token_logprobs]
    tops += [_alts(tok, top) for top in s.top_logprobs]
    offsets, pos = [], offset
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}


def _chat_entry(tok, t: int, lp: float, top) -> dict[str, Any]:
    piece = _piece(tok, t)
    return {
        "token": piece,
        "logprob": finite(lp),
        "bytes": list(piece.encode("utf-8")),
        "top_logprobs": [
            {"token": (p := _piece(tok, a)), "logprob": finite(v), "bytes": list(p.encode("utf-8"))}
            for a, v in top
        ],
    }


def chat_logprobs(tok, s) -> dict[str, Any]:
    return {
        "content": [
            _chat_entry(tok, t, lp, top) for t, lp, top in zip(s.ids, s.token_logprobs, s.top_logprobs)
        ]
    }


def completion_body(call) -> dict[str, Any]:
    tok, req = call.m.lm.tokenizer, call.req
    choices = []
    for i, s in enumerate(call.seqs):
        ids = call.prompts[i // req.n]
        q = req.questions[i // req.n]
        prefix = (q.content if isinstance(q.content, str) else tok.decode(ids)) if req.echo else ""
        choices.append(
            {
                "index": i,
                "text": prefix + s.text,
                "logprobs": completion_logprobs(tok, s, ids if req.echo else None, 0)
                if req.logprobs is not None
                else None,
                "finish_reason": FINISH.get(s.finish, s.finish),
            }
        )
    return {
        "id": call.id,
        "object": "text_completion",
        "created": call.created,
        "model": call.m.name,
        "choices": choices,
        "usage": usage(call),
        "coupling": coupling(call),
    }


def chat_body(call) -> dict[str, Any]:
    tok = call.m.lm.tokenizer
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": s.text},
            "logprobs": chat_logprobs(tok, s) if call.req.logprobs is not None else None,
            "finish_reason": FINISH.get(s.finish, s.finish),
        }
        for i, s in enumerate(call.seqs)
    ]
    return {
        "id": call.id,
        "object": "chat.completion",
        "created": call.created,
        "model": call.m.name,
        "choices": choices,
        "usage": usage(call),
        "coupling": coupling(call),
    }


def chunk(call, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    chat = call.req.endpoint == "chat"
    return {
        "id": call.id,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": call.created,
        "model": call.m.name,
        "choices": choices,
        **extra,
    }


def token_choice(call, index: int, delta: str, token: int, lp) -> dict[str, Any]:
    """A stream chunk's choice for one generated token."""
    tok = call.m.lm.tokenizer
    if call.req.endpoint == "chat":
        out: dict[str, Any] = {"index": index, "delta": {"content": delta}, "finish_reason": None}
        out["logprobs"] = {"content": [_chat_entry(tok, token, *lp)]} if lp is not None else None
        return out
    logprobs = None
    if lp is not None:
        piece = _piece(tok, token)
        logprobs = {
            "tokens": [piece],
            "token_logprobs": [finite(lp[0])],
            "top_logprobs": [_alts(tok, lp[1])],
            "text_offset": [0],
        }
    return {"index": index, "text": delta, "logprobs": logprobs, "finish_reason": None}


def finish_choice(call, index: int) -> dict[str, Any]:
    s = call.seqs[index]
    reason = FINISH.get(s.finish, s.finish)
    if call.req.endpoint == "chat":
        return {"index": index, "delta": {}, "logprobs": None, "finish_reason": reason}
    return {"index": index, "text": "", "logprobs": None, "finish_reason": reason}
