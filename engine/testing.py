"""Tiny, randomly initialised models for tests and demos of the mechanics (no download, < 1 s).

``tiny_lm(seed)`` builds a 2-layer Llama from a config with a character-level tokenizer that has
a chat template, so every code path of the engine (chat templates, left padding, KV cache, EOS,
vocab checks, byte-string keys) runs on it exactly as on a real model. ``vocab_perm_seed``
shuffles the vocabulary order, giving a model with a *different* tokenizer over the same strings
(for cross-tokenizer coupling tests). ``tiny_digit_copier`` wires one by hand to answer the digit
of its prompt, right with a chosen probability (runs whose answer is known in advance).
``descendants(pid)`` lists a process's live descendants (for tests that kill or clean up what they
started).
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
    model = model.to(dtype).eval()
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


def tiny_digit_copier(folder, name: str, p_right: float, hidden: int = 64):
    """A tiny model that answers the one digit of its prompt: it replies that digit with probability
    ``p_right`` and the next digit (mod 10) otherwise, then ends (so the numeric rule scores it right
    with probability ``p_right`` on a question whose gold answer is its digit). Saved as a Hugging Face
    folder ``folder/name``; returns the path (pathlib.Path).

    Built by hand on :func:`tiny_lm`'s architecture, no training: the embeddings mark the newline, the
    digits (and each digit's identity); layer 0's attention head 0 makes the newline that opens the
    reply look at the prompt's digit (query and key on the head's slowest rotary pair, so the score
    hardly depends on the distance) and copies its identity into the residual; every other block adds
    nothing; the (untied) output layer turns "newline + digit d" into the two digits' logits and
    "a digit" into end-of-sequence. Sampling draws from exactly these two-digit distributions, so the
    models' accuracies and their coupling are known in advance (tests of sequential stops, labels and
    judges on runs whose answer is known).
    """
    import math
    from pathlib import Path

    model, tok = tiny_lm(0, hidden=hidden)
    ids = {t: tok.convert_tokens_to_ids(t) for t in ["\n", "<eos>", *string.digits]}
    digits = [ids[d] for d in string.digits]
    NL, DIGIT, OTHER, IDENT, COPY = 0, 1, 2, 10, 20  # residual dims: markers, identity, copied identity
    head = model.config.hidden_size // model.config.num_attention_heads
    slow = head // 2 - 1  # the rotary pair with the lowest frequency (rotation ~3e-4 rad per position)
    c = math.sqrt(hidden / 2)  # a normalised residual with two unit entries has them at sqrt(H/2)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in [model.model.norm, *(m for layer in model.model.layers for m in layer.modules())]:
            if "RMSNorm" in type(norm).__name__:
                norm.weight.fill_(1.0)
        emb = model.model.embed_tokens.weight
        emb[:, OTHER] = 1.0
        emb[ids["\n"], OTHER], emb[ids["\n"], NL] = 0.0, 1.0
        for d, t in enumerate(digits):
            emb[t, OTHER], emb[t, DIGIT], emb[t, IDENT + d] = 0.0, 1.0, 1.0
        attn = model.model.layers[0].self_attn
        attn.q_proj.weight[slow, NL] = 1.5  # newline asks ...
        attn.k_proj.weight[slow, DIGIT] = 1.5  # ... for a digit: score 1.5 * 8 * 1.5 * 5.7 / 4 ~ 25
        for d in range(10):
            attn.v_proj.weight[d, IDENT + d] = 1.0
            attn.o_proj.weight[COPY + d, d] = 1.0 / c
        model.config.tie_word_embeddings = False
        model.lm_head = torch.nn.Linear(hidden, len(tok), bias=False)
        out = model.lm_head.weight
        out.zero_()
        out[:, NL] = -30.0 / c  # after the newline: every token far below ...
        for d in range(10):  # ... but the copied digit (p_right) and the next one
            out[digits[d], COPY + d] = (30.0 + math.log(p_right)) / c
            out[digits[(d + 1) % 10], COPY + d] = (30.0 + math.log(1.0 - p_right)) / c
        out[ids["<eos>"], DIGIT] = 60.0 / c  # after a digit: the end
    path = Path(folder) / name
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def sliding_window_twin(lm, name: str = "twin"):
    """The same weights as ``lm`` (a tiny Llama) in a Mistral with sliding-window layers, whose KV
    cache cannot be re-packed row by row: the static-batch path of the transformers loop and the
    server, checked against the continuous path of the same weights."""
    from transformers import MistralConfig, MistralForCausalLM

    from engine.models.loading import from_objects

    c = lm.model.config
    cfg = MistralConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        max_position_embeddings=512,
        sliding_window=400,
        pad_token_id=c.pad_token_id,
        bos_token_id=c.bos_token_id,
        eos_token_id=c.eos_token_id,
        tie_word_embeddings=c.tie_word_embeddings,
    )
    twin = MistralForCausalLM(cfg).eval()
    twin.load_state_dict(lm.model.state_dict())
    return from_objects(name, twin, lm.tokenizer)
