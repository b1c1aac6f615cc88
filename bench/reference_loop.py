"""A faithful batch-1 re-implementation of the reference coupled-generation loop (the baseline).

What the reference code does, and this file copies on purpose (it is the thing we measure against):

* one prompt at a time, one repeat at a time: every repeat re-tokenizes and re-prefills its prompt;
* a Python loop per generated token, with a ``DynamicCache``;
* per step, the noise is ``torch.rand(V, generator=rng)`` from a ``torch.Generator`` seeded per
  (prompt, repeat) row, turned into Gumbel noise, and the token is
  ``argmax(log_softmax(logits / T) + g)``;
* ``.item()`` on the chosen token every step (a host sync per token) to test for EOS and append.

Not used by the product; bench/bench_generation.py imports it.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


@torch.inference_mode()
def reference_generate(
    model,
    tokenizer,
    prompt_texts: list[str],
    repeats: int,
    seed: int,
    temperature: float,
    max_new_tokens: int,
) -> list[list[int]]:
    """Token ids for every (prompt, repeat), generated one unit at a time.

    Args:
        prompt_texts: chat-templated prompt strings.
        repeats: generations per prompt; repeat r of prompt i uses seed ``seed + 1000 * i + r``.
    Returns:
        list (len(prompt_texts) * repeats) of generated token-id lists (EOS included when hit).
    """
    eos = tokenizer.eos_token_id
    V = model.get_output_embeddings().weight.shape[0]
    out: list[list[int]] = []
    for i, text in enumerate(prompt_texts):
        for r in range(repeats):
            rng = torch.Generator(device=model.device).manual_seed(seed + 1000 * i + r)
            ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"].to(
                model.device
            )
            cache = DynamicCache()
            step_input = ids
            generated: list[int] = []
            for _ in range(max_new_tokens):
                logits = model(input_ids=step_input, past_key_values=cache, use_cache=True).logits[
                    :, -1, :
                ]
                logp = torch.log_softmax(logits.float() / temperature, dim=-1)
                u = torch.rand(V, generator=rng, device=model.device).clamp_(1e-20, 1 - 1e-7)
                g = -torch.log(-torch.log(u))
                tok = int(torch.argmax(logp[0] + g).item())
                generated.append(tok)
                if tok == eos:
                    break
                step_input = torch.tensor([[tok]], device=model.device)
            out.append(generated)
    return out
