"""Shared pieces of the server tests: tiny models, a server on them, raw HTTP requests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import torch

from engine.models.loading import from_objects
from engine.serving.core import ServeConfig
from engine.serving.server import ServerThread
from engine.testing import tiny_lm


def tiny(name: str = "tiny-a", seed: int = 0, nudge: float = 0.0):
    """A tiny model; ``nudge`` > 0: the seed's weights plus that much noise (a close sibling model)."""
    model, tok = tiny_lm(seed)
    if nudge:
        gen = torch.Generator().manual_seed(1000 + seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * nudge)
    return from_objects(name, model, tok)


def server(db, models, run="run", **kw) -> ServerThread:
    api_key = kw.pop("api_key", None)
    return ServerThread(ServeConfig(run_id=run, db=db, **kw), models, api_key=api_key)


def post(url: str, body, key: str | None = None, raw: bytes | None = None) -> tuple[int, dict, dict]:
    """(status, JSON body, headers with lower-case names) of a POST; errors are returned, not raised."""
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), {k.lower(): v for k, v in e.headers.items()}


def get(url: str, key: str | None = None) -> tuple[int, dict]:
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
