"""`engine serve` on CUDA against CPU (docs/BENCHMARKS.md, GPU check): a tiny float32 Llama served on
each device, the same requests (completions with n > 1, a chat, temperature > 0), identical tokens.
On CUDA the served batch samples with engine.sampling.keyed.draw's fused kernel; on CPU with the
torch reference. Skipped where there is no GPU (CI; run by scripts/gpu_check.sh on a GPU machine)."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.models.loading import from_objects
from engine.serving.core import ServeConfig
from engine.serving.server import ServerThread
from engine.testing import tiny_lm
from tests.serve_helpers import post

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)"
)


def _answers(url: str) -> list[list[str]]:
    out = []
    for i in range(8):
        body = {"model": "tiny", "prompt": f"what is {i} + {i}?", "max_tokens": 10, "temperature": 1.0}
        status, resp, _ = post(url + "/completions", {**body, "n": 3, "seed": 5})
        assert status == 200, resp
        out.append([c["text"] for c in resp["choices"]])
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.7}
    status, resp, _ = post(url + "/chat/completions", {**chat, "max_tokens": 10, "n": 2})
    assert status == 200, resp
    return out + [[c["message"]["content"] for c in resp["choices"]]]


def test_the_server_on_cuda_gives_the_cpu_servers_tokens(tmp_path):
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmuls on both devices
    torch.backends.cudnn.allow_tf32 = False
    model, tok = tiny_lm(seed=3)
    got = {}
    for dev in ("cpu", "cuda"):
        lm = from_objects("tiny", copy.deepcopy(model).to(dev), copy.deepcopy(tok))
        with ServerThread(ServeConfig(run_id=dev, db=tmp_path / "s.duckdb"), [lm]) as srv:
            got[dev] = _answers(srv.url)
    assert got["cpu"] == got["cuda"]
