"""Llama-3.2-1B / 3B and Llama-3.1-8B shapes (public configs), random-weight builders and the roofline.

Shared by bench/bench_noise_kernel.py and bench/bench_gpu_generation.py. Speed does not need
trained weights: a model of the right shape and dtype reads the same bytes per decode step.

Roofline of one decode step at batch B (memory-bandwidth bound; compute and launches ignored):

    t_step >= (weight bytes read + KV bytes read) / HBM bandwidth
    weight bytes read = every parameter except the input embedding (only B rows of it are read),
                        the LM head counted once (tied models read the embedding matrix as the head)
    KV bytes read     = layers * 2 (K, V) * kv_heads * head_dim * dtype bytes * sum over rows of context
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    head_dim: int | None = None

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def params(self) -> int:
        """Parameter count (RMSNorm weights included)."""
        h, hd = self.hidden, self.hd
        attn = h * self.heads * hd + 2 * h * self.kv_heads * hd + self.heads * hd * h
        mlp = 3 * h * self.intermediate
        per_layer = attn + mlp + 2 * h
        emb = self.vocab * h
        return self.layers * per_layer + h + emb * (1 if self.tied else 2)

    def step_weight_bytes(self, dtype_bytes: int = 2) -> int:
        """Bytes of weights one decode step reads: all but the input embedding's unread rows."""
        emb = self.vocab * self.hidden
        return (self.params() - (emb if not self.tied else 0)) * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return self.layers * 2 * self.kv_heads * self.hd * dtype_bytes

    def config(self, **kw):
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            head_dim=self.hd,
            tie_word_embeddings=self.tied,
            max_position_embeddings=131072,
            rope_theta=500000.0,
            rms_norm_eps=1e-5,
            **kw,
        )


# Public Hugging Face configs of meta-llama/Llama-3.2-1B, -3B and Llama-3.1-8B (rope scaling aside:
# it changes no byte counts).
SHAPES = {
    "llama-3.2-1b": Shape("Llama-3.2-1B", 2048, 8192, 16, 32, 8, 128_256, True, 64),
    "llama-3.2-3b": Shape("Llama-3.2-3B", 3072, 8192, 28, 24, 8, 128_256, True, 128),
    "llama-3.1-8b": Shape("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128_256, False, 128),
    # CPU smoke test: the real vocabulary width (the sampling cost scales with it), a toy body
    "tiny": Shape("tiny-llama (smoke test)", 64, 128, 2, 4, 2, 128_256, True, 16),
}


def roofline_step_s(
    shape: Shape, batch: int, context: float, hbm_gbps: float, dtype_bytes: int = 2
) -> float:
    """Lower bound (s) of one decode step: (weights + KV of batch x context positions) / bandwidth."""
    byts = shape.step_weight_bytes(dtype_bytes) + batch * context * shape.kv_bytes_per_token(dtype_bytes)
    return byts / (hbm_gbps * 1e9)


def random_model(shape: Shape, device, dtype, seed: int = 0, **cfg_kw):
    """A randomly initialised LlamaForCausalLM of ``shape`` built directly on ``device`` in ``dtype``."""
    import torch
    from transformers import LlamaForCausalLM

    cfg = shape.config(**cfg_kw)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(
        seed
    )  # the init uses the global generator; restored below (nothing seeds globally)
    try:
        with torch.device(device):
            model = LlamaForCausalLM._from_config(cfg, dtype=dtype)
    finally:
        torch.random.set_rng_state(gen_state)
    return model.eval()


def bench_tokenizer(vocab: int):
    """A character-level fast tokenizer whose vocabulary is ``vocab`` wide (the tiny test tokenizer's
    specials and 96 characters, then filler tokens), with a chat template: every id a random model
    samples decodes, and a prompt of n characters is n tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from engine.testing import CHARS, CHAT_TEMPLATE, SPECIALS

    toks = SPECIALS + CHARS
    vocab_map = {t: i for i, t in enumerate(toks)}
    vocab_map.update({f"<f{i}>": i for i in range(len(toks), vocab)})
    tk = Tokenizer(models.WordLevel(vocab=vocab_map, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    tk.add_special_tokens(SPECIALS)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<pad>"
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok
