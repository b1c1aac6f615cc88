"""A randomly initialised Llama folder of a chosen shape with SmolLM2's tokenizer (speed needs no
trained weights; the coupled equivalence checks need none either).

    .venv-vllm/bin/python bench/make_random_llama.py /tmp/llama-tp-bench            # 113 M parameters
    .venv-vllm/bin/python bench/make_random_llama.py /tmp/l --hidden 2048 --layers 16 --heads 32 --kv-heads 8
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _smoke import SMOKE_HELP  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", nargs="?", help="output folder (required unless --smoke)")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--intermediate", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    a = ap.parse_args(argv)
    if a.smoke:  # a 1-layer, 64-wide model in a fresh folder
        import tempfile

        a.out = a.out or tempfile.mkdtemp(prefix="bench_smoke_llama_")
        a.hidden, a.intermediate, a.layers, a.heads, a.kv_heads = 64, 128, 1, 4, 2
    if not a.out:
        ap.error("the output folder is required")

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from engine import models

    if a.smoke:  # the character-level test tokenizer: no SmolLM2 conversion
        from engine.testing import tiny_tokenizer

        tok = tiny_tokenizer()
    else:
        spec = next(s for s in models.list_models() if s.name == "smollm2-135m")
        tok = AutoTokenizer.from_pretrained(str(models.ensure_cached(spec)))
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(a.out)
    tok.save_pretrained(a.out)
    print(f"{a.out}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")


if __name__ == "__main__":
    main()
