"""Shared helpers of the vLLM tests (not a test module)."""

from __future__ import annotations

import os

import pytest

from engine.generation.vllm_backend import installed_vllm_version

# Why metadata and not importorskip("vllm"): when pytest puts tests/ on sys.path, the folder
# tests/vllm is importable as a namespace package named "vllm" in an environment without vLLM.
VLLM_VERSION = installed_vllm_version()
needs_vllm = pytest.mark.skipif(
    VLLM_VERSION is None,
    reason="vLLM is not installed here: run scripts/install_vllm.sh, then $VLLM_VENV/bin/python -m pytest tests/vllm",
)

# small CPU footprint: 1 GiB of KV cache, engine core in this process (set before vLLM is built)
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# eager mode: no torch.compile warm-up (~25 s per engine on 2 cores); same kernels otherwise
ENGINE_KWARGS = {"enforce_eager": True}
