"""The transformers backend on CUDA against CPU (docs/BENCHMARKS.md, GPU check): a tiny float32 Llama, the same
units, identical tokens. On CUDA the loop samples with engine.sampling.keyed.draw's fused
Gumbel-argmax kernel; on CPU with the torch reference. Skipped where there is no GPU (CI; run by
scripts/gpu_check.sh on a GPU machine)."""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (none on this machine)"
)


@pytest.mark.parametrize("temperature, top_k, trace_k", [(1.0, 0, 0), (0.7, 20, 3)])
def test_hf_backend_on_cuda_gives_the_cpu_tokens(temperature, top_k, trace_k):
    from engine import models
    from engine.generation import GenConfig, generate_units
    from engine.sampling import triton_noise
    from engine.testing import tiny_lm

    assert triton_noise.triton_importable(), (
        "the CUDA path under test is the fused kernel: triton must import"
    )
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmuls on both devices
    torch.backends.cudnn.allow_tf32 = False
    model, tok = tiny_lm(seed=3)
    cpu = models.from_objects("tiny", model, tok)
    gpu = models.from_objects("tiny", copy.deepcopy(model).to("cuda"), copy.deepcopy(tok))
    prompts = {f"q{i}": f"what is {i} + {i}?" for i in range(12)}
    units = [(p, r) for p in prompts for r in range(3)]
    cfg = GenConfig(
        temperature=temperature, top_k=top_k, max_new_tokens=12, batch_size=16, trace_top_k=trace_k
    )
    a = generate_units(cpu, prompts, units, 7, cfg)
    b = generate_units(gpu, prompts, units, 7, cfg)
    assert [x.token_ids for x in a] == [y.token_ids for y in b]
    if trace_k:
        assert [x.top_ids for x in a] == [y.top_ids for y in b]
