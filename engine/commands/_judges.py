"""Building the judge a command hands to a task (the tasks never load models themselves).

``--judge`` spellings: ``MODEL`` (a model engine.models can load: our transformers loop),
``vllm:MODEL_OR_FOLDER`` (a batched local judge on our vLLM backend) and ``openai:MODEL`` (an
OpenAI-compatible server, :class:`engine.tasks.judge_api.ApiJudge`). Any other ``PREFIX:`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import UserError

CompleteFn = Callable[[list[list[dict]]], list[str]]
PROVIDERS = ("openai", "vllm")


@dataclass(frozen=True)
class LocalJudgeFn:
    """A local judge's batch completion function (``messages_list -> list[str]``) with what the
    verdicts store about it: ``reported_model``, the model ``--judge`` resolved to (the registry
    name, with its variant; else the absolute folder or .gguf path, or the hub id), which
    ``engine.tasks.judge.judge_run`` stores as each verdict's reported model (an API judge stores
    the server's). ``backend``: the vLLM backend the caller closes (None for transformers)."""

    complete: CompleteFn
    reported_model: str
    backend: Any = None

    def __call__(self, messages_list: list[list[dict]]) -> list[str]:
        return self.complete(messages_list)


def resolved_model(name: str) -> str:
    """What a local judge ``name`` resolves to (:class:`LocalJudgeFn`'s ``reported_model``)."""
    from engine.models import resolve

    ref = resolve(name)
    return ref.name if ref.kind == "registry" else ref.source


@dataclass(frozen=True)
class JudgeSpec:
    """``--judge`` split: provider 'local' (transformers), 'vllm' or 'openai', and the model."""

    provider: str
    model: str


def parse_judge_spec(spec: str) -> JudgeSpec:
    """``openai:gpt-4o`` -> (openai, gpt-4o); ``vllm:/models/judge`` -> (vllm, ...); a plain name,
    a path or a Windows-free ``./x:y`` -> (local, spec). An unknown ``word:`` prefix is a UserError."""
    spec = (spec or "").strip()
    if not spec:
        raise UserError("--judge is empty; give MODEL, vllm:MODEL_OR_FOLDER or openai:MODEL")
    head, sep, rest = spec.partition(":")
    if sep and head.isidentifier() and "/" not in head:
        if head not in PROVIDERS:
            raise UserError(
                f"unknown judge provider {head!r} in --judge {spec!r}; allowed: "
                f"{', '.join(p + ':' for p in PROVIDERS)} or a local model name"
            )
        if not rest.strip():
            raise UserError(f"--judge {spec!r} names no model after '{head}:'")
        return JudgeSpec(head, rest.strip())
    return JudgeSpec("local", spec)


def model_complete_fn(
    name: str, *, max_new_tokens: int = 8, batch_size: int = 16, seed: int = 0
) -> LocalJudgeFn:
    """Greedy completion with a local model our transformers loop runs (``engine.models``)."""
    from engine import generation, models  # heavy imports only when a real model judges

    lm = models.load_model(name)

    def complete(messages_list: list[list[dict]]) -> list[str]:
        return generation.complete(
            lm,
            messages_list,
            max_new_tokens=max_new_tokens,
            temperature=0.0,
            seed=seed,
            batch_size=batch_size,
        )

    return LocalJudgeFn(complete, resolved_model(name))


def vllm_complete_fn(
    model: str, *, max_new_tokens: int = 8, engine_kwargs: dict | None = None
) -> LocalJudgeFn:
    """Greedy completion on our vLLM backend: one request per comparison, the whole batch handed to
    vLLM at once (its scheduler batches them), prefix caching on (the shared system prompt and the
    question are computed once). The coupled-noise processor is idle: these requests carry no keys.
    The prompt text is the transformers judge's (``chat_text``). ``engine_kwargs`` default:
    ``$COUPLED_EVAL_VLLM_ARGS``, as for generation runs."""
    from engine.generation.backends import vllm_engine_args
    from engine.generation.prompts import chat_text
    from engine.generation.vllm_backend import VllmBackend

    backend = VllmBackend(
        model, engine_kwargs=vllm_engine_args() if engine_kwargs is None else engine_kwargs
    )
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=int(max_new_tokens))

    def complete(messages_list: list[list[dict]]) -> list[str]:
        prompts = [chat_text(backend.tokenizer, m) for m in messages_list]
        outs = backend.llm.generate(prompts, params, use_tqdm=False)
        return [o.outputs[0].text if o.outputs else "" for o in outs]

    return LocalJudgeFn(complete, resolved_model(model), backend)  # the caller closes the backend
