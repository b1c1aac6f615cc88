"""Tiny, randomly initialised models for tests and demos of the mechanics (no download, < 1 s).

``tiny_lm(seed)`` builds a 2-layer Llama from a config with a character-level tokenizer that has
a chat template, so every code path of the engine (chat templates, left padding, KV cache, EOS,
vocab checks, byte-string keys) runs on it exactly as on a real model. ``vocab_perm_seed``
shuffles the vocabulary order, giving a model with a *different* tokenizer over the same strings
(for cross-tokenizer coupling tests). ``descendants(pid)`` lists a process's live descendants (for
tests that kill or clean up what they started).
"""

from __future__ import annotations

import string

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from engine.generation.ray_cluster import descendants  # noqa: F401  (tests import it from here)

SPECIALS = ["<pad>", "<bos>", "<eos>"]
CHARS = list(string.ascii_letters + string.digits + string.punctuation + " \n")
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<bos>' + m['role'] + '\n' + m['content'] + '<eos>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<bos>assistant\n' }}{% endif %}"
)


def tiny_tokenizer(vocab_perm_seed: int | None = None) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer (specials first, then 96 characters, optionally shuffled)."""
    chars = list(CHARS)
    if vocab_perm_seed is not None:
        np.random.default_rng(vocab_perm_seed).shuffle(chars)
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<pad>"
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def tiny_lm(
    seed: int = 0,
    vocab_perm_seed: int | None = None,
    hidden: int = 64,
    layers: int = 2,
    dtype: torch.dtype = torch.float32,
):
    """(model, tokenizer): a randomly initialised 2-layer Llama, deterministic in ``seed``."""
    tok = tiny_tokenizer(vocab_perm_seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    gen = torch.Generator().manual_seed(seed)  # local generator: nothing seeds globally
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    # ignore: transformers wraps PreTrainedModel.to in functools.wraps, which mypy reads as an unbound
    # function
    model = model.to(dtype).eval()  # type: ignore[arg-type]
    return model, tok


def tiny_pair(folder, hidden: int = 64, scale: float = 6.0, nudge: float = 0.01) -> tuple:
    """Two tiny models whose next-token distributions are close but not equal, saved as Hugging Face
    folders ``folder/tiny-a`` and ``folder/tiny-b``: a = ``tiny_lm(0, hidden=hidden)`` with its logits
    scaled by ``scale`` (peaked, like a trained model's), b = a's weights plus seeded N(0, nudge^2)
    noise. Coupling shows between them (tests of the served path with real clients, vLLM). Returns the
    two folders (pathlib.Path)."""
    from pathlib import Path

    out = []
    for name, noise_sd in (("tiny-a", 0.0), ("tiny-b", nudge)):
        model, tok = tiny_lm(0, hidden=hidden)
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            model.model.norm.weight.mul_(scale)
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=gen) * noise_sd)
        path = Path(folder) / name
        model.save_pretrained(path)
        tok.save_pretrained(path)
        out.append(path)
    return out[0], out[1]
