"""Datasets through the Hugging Face ``datasets`` library: ``hf:REPO[:CONFIG][:SPLIT]``.

REPO is a hub id (``cais/mmlu``), read from the local ``datasets`` / hub cache or from the hub
where one is reachable, or a local folder with the hub layout (a README.md whose ``configs:``
name each config's ``data_files``, e.g. ``<config>/test-*.parquet``). A small registry of known
layouts (:data:`LAYOUTS`) maps each to our task kinds and scoring rules; any other layout needs
its columns named (:class:`Columns`).

Prompt ids are stable across loads: the dataset's own id column where it has one, else a content
hash of the prompt (``<dataset>/<sha1[:12]>``). MMLU keeps the paper's ``mmlu/<subject>/<row>``
(row within the subject, in file order) so a hub load, ``import paper-mmlu`` and the MMLU CSV
folder give the same prompt ids and user prompts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import string
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.tasks.dataset_types import (
    CHAT_SYSTEM_PROMPT,
    LETTERS,
    MMLU_SYSTEM_PROMPT,
    NUMERIC_SYSTEM_PROMPT,
    Dataset,
    Prompt,
    format_mc_prompt,
)
from engine.tasks.numbers import extract_numeric

PREFIX = "hf:"
OPTION_SYSTEM_PROMPT = (
    "You will be given multiple choice questions. Please reply with the letter of the "
    "correct option only. DO NOT explain your reply."
)


@dataclass(frozen=True)
class Columns:
    """Column names for a layout the registry does not know (``--prompt-column`` ...)."""

    prompt: str | None = None
    answer: str | None = None
    choices: str | None = None
    id: str | None = None

    def given(self) -> bool:
        return any(v is not None for v in (self.prompt, self.answer, self.choices, self.id))


@dataclass(frozen=True)
class Layout:
    """A known dataset layout: the task kind, the scoring rule that fits it, the columns it needs."""

    name: str
    kind: str  # one of engine.tasks.datasets.KINDS
    rule: str | None  # the default scoring rule (None: open-ended, judged)
    repos: tuple[str, ...]
    columns: tuple[str, ...]


LAYOUTS: tuple[Layout, ...] = (
    Layout(
        "mmlu",
        "multiple_choice",
        "paper",
        ("cais/mmlu", "hails/mmlu_no_train"),
        ("question", "subject", "choices", "answer"),
    ),
    Layout(
        "arc",
        "multiple_choice",
        "lenient",
        ("allenai/ai2_arc", "ai2_arc"),
        ("question", "choices", "answerKey"),
    ),
    Layout(
        "hellaswag",
        "multiple_choice",
        "lenient",
        ("Rowan/hellaswag", "hellaswag"),
        ("ctx", "endings", "label"),
    ),
    Layout(
        "truthfulqa-mc",
        "multiple_choice",
        "lenient",
        ("truthfulqa/truthful_qa", "truthful_qa"),
        ("question", "mc1_targets"),
    ),
    Layout("gsm8k", "numeric", "numeric", ("openai/gsm8k", "gsm8k"), ("question", "answer")),
    Layout("mt-bench", "prompts", None, ("HuggingFaceH4/mt_bench_prompts",), ("prompt", "category")),
    Layout(
        "arena-hard",
        "prompts",
        None,
        ("lmarena-ai/arena-hard-auto-v0.1", "lmarena-ai/arena-hard-auto"),
        ("question_id", "turns"),
    ),
    Layout("alpacaeval", "prompts", None, ("tatsu-lab/alpaca_eval",), ("instruction", "output")),
)


@dataclass(frozen=True)
class Spec:
    repo: str
    config: str | None
    split: str | None


def is_hf(name: str) -> bool:
    return str(name).startswith(PREFIX)


def parse_spec(name: str) -> Spec:
    """``hf:REPO[:CONFIG][:SPLIT]`` -> :class:`Spec` (UserError for an empty REPO or extra parts)."""
    parts = str(name)[len(PREFIX) :].split(":")
    if not parts[0].strip() or len(parts) > 3:
        raise UserError(
            f"bad dataset {name!r}; expected hf:REPO[:CONFIG][:SPLIT], e.g. "
            "hf:cais/mmlu:college_computer_science:test"
        )
    parts += [""] * (3 - len(parts))
    return Spec(parts[0].strip(), parts[1].strip() or None, parts[2].strip() or None)


def layout_of(repo: str, columns: list[str]) -> Layout | None:
    """The registry layout of a repo (by name, else by its columns), or None."""
    name = repo.rstrip("/").lower()
    for lay in LAYOUTS:
        if any(name == r.lower() or name.endswith("/" + r.lower().split("/")[-1]) for r in lay.repos):
            if all(c in columns for c in lay.columns):
                return lay
    for lay in LAYOUTS:
        if all(c in columns for c in lay.columns):
            return lay
    return None


def default_rule_of(dataset_id: str) -> str | None:
    """The registry rule of a stored ``hf:`` dataset id (None when not a known layout)."""
    if not is_hf(dataset_id):
        return None
    lay = next((la for la in LAYOUTS if la.name == dataset_id.split("#", 1)[-1]), None)
    return None if lay is None else lay.rule


# ---------------------------------------------------------------------------------------------
# Opening a dataset split


def _where(repo: str) -> str:
    import datasets
    import huggingface_hub.constants as hc

    return (
        f"looked in the local folder {str(Path(repo).expanduser().resolve())!r} (absent), the datasets "
        f"cache {datasets.config.HF_DATASETS_CACHE} and the hub cache {hc.HF_HUB_CACHE}"
    )


def cached_configs(repo: str, cache_dir: str | None = None) -> dict[str, list[str]]:
    """{config: splits} of a hub dataset in the ``datasets`` cache
    (``<owner>___<name>/<config>/<version>/<hash>/ dataset_info.json``), what ``load_dataset`` falls back
    to offline; {} when it is not there."""
    import datasets

    root = Path(cache_dir or datasets.config.HF_DATASETS_CACHE) / repo.replace("/", "___")
    out: dict[str, list[str]] = {}
    for info in sorted(root.glob("*/*/*/dataset_info.json")) if root.is_dir() else []:
        try:
            splits = sorted((json.loads(info.read_text()).get("splits") or {}).keys())
        except (OSError, json.JSONDecodeError):
            continue
        out.setdefault(info.relative_to(root).parts[0], [])
        out[info.relative_to(root).parts[0]] = sorted(
            set(out[info.relative_to(root).parts[0]]) | set(splits)
        )
    return out


def _is_path(repo: str) -> bool:
    return repo.startswith(("/", ".", "~")) or Path(repo).expanduser().exists()


def hub_reachable(endpoint: str | None = None, timeout_s: float = 2.0) -> bool:
    """Whether the hub's host answers a TCP connection within ``timeout_s`` (one quick probe, no
    retries)."""
    import socket
    from urllib.parse import urlsplit

    import huggingface_hub.constants as hc

    url = urlsplit(endpoint or hc.ENDPOINT)
    try:
        socket.create_connection(
            (url.hostname or "", url.port or (443 if url.scheme == "https" else 80)), timeout=timeout_s
        ).close()
    except (OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def _offline_if_unreachable(repo: str) -> Iterator[bool]:
    """Offline mode for the block when the hub cannot be reached (the libraries would otherwise retry
    for ~24 s before failing); yields whether offline mode was switched on here."""
    import datasets
    import huggingface_hub.constants as hc

    already = bool(datasets.config.HF_HUB_OFFLINE or hc.HF_HUB_OFFLINE)
    if already or _is_path(repo) or hub_reachable():
        yield False
        return
    saved = datasets.config.HF_HUB_OFFLINE, hc.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hc.HF_HUB_OFFLINE = True
    try:
        yield True
    finally:
        datasets.config.HF_HUB_OFFLINE, hc.HF_HUB_OFFLINE = saved


def open_split(spec: Spec, cache_dir: str | None = None) -> tuple[Any, str, str]:
    """The ``datasets.Dataset`` of a spec's config and split, with the config and split chosen.

    Without CONFIG: the only config, else ``all``, else an error listing them; without SPLIT:
    ``test``, else the only split, else an error listing them.
    """
    import datasets

    datasets.disable_progress_bars()  # stderr belongs to our own messages
    datasets.logging.set_verbosity_error()
    repo = str(Path(spec.repo).expanduser()) if _is_path(spec.repo) else spec.repo
    if _is_path(spec.repo) and not Path(repo).is_dir():
        raise UserError(f"no dataset folder {repo!r} (hf:PATH needs a folder with the hub layout)")
    with _offline_if_unreachable(spec.repo) as went_offline:
        return _open_split(spec, repo, cache_dir, went_offline)


def _open_split(
    spec: Spec, repo: str, cache_dir: str | None, went_offline: bool
) -> tuple[Any, str, str]:
    import datasets

    cached: dict[str, list[str]] = {}
    try:
        configs = list(datasets.get_dataset_config_names(repo))
    except (ConnectionError, FileNotFoundError, OSError) as exc:
        # No hub (offline): what an earlier download left in the datasets cache, {config: splits}.
        cached = {} if _is_path(spec.repo) else cached_configs(repo, cache_dir)
        if not cached:
            why = (
                "the hub is unreachable and the dataset is in no local cache"
                if went_offline
                else "offline or unknown"
            )
            raise UserError(
                f"cannot open dataset {spec.repo!r} ({why}): {_where(spec.repo)}; "
                f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            ) from None
        configs = sorted(cached)
    if not _is_path(spec.repo) and not cached and set(configs) <= {"default"}:
        # offline with a cached download, the library answers "default": the cache knows the real configs
        cached = {c: v for c, v in cached_configs(repo, cache_dir).items() if c != "default"}
        configs = sorted(cached) or configs
    config = spec.config
    if config is None:
        config = configs[0] if len(configs) == 1 else "all" if "all" in configs else None
        if config is None:
            raise UserError(
                f"dataset {spec.repo!r} has several configs; name one (hf:{spec.repo}:CONFIG): "
                f"{', '.join(configs)}"
            )
    if config not in configs:
        raise UserError(
            f"dataset {spec.repo!r} has no config {config!r}; available: {', '.join(configs)}"
        )
    splits = cached[config] if cached else list(datasets.get_dataset_split_names(repo, config))
    split = spec.split or ("test" if "test" in splits else splits[0] if len(splits) == 1 else None)
    if split is None or split not in splits:
        raise UserError(
            f"dataset {spec.repo!r} config {config!r} has no split {spec.split!r}; available: "
            f"{', '.join(splits)}"
        )
    return datasets.load_dataset(repo, config, split=split, cache_dir=cache_dir), config, split


# ---------------------------------------------------------------------------------------------
# Rows -> prompts


def content_id(prefix: str, text: str) -> str:
    """A prompt id from the prompt's content (stable across loads and row orders)."""
    return f"{prefix}/{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def _options(question: str, options: list) -> tuple[dict, str]:
    letters = string.ascii_uppercase[: len(options)]
    choices = {k: str(v) for k, v in zip(letters, options)}
    if tuple(choices) == LETTERS:
        return choices, format_mc_prompt(question, choices)
    return choices, "\n".join([question] + [f"{k}. {v}" for k, v in choices.items()]) + "\nAnswer:"


def _letter(index: Any, n: int, where: str) -> str:
    try:
        i = int(index)
    except (TypeError, ValueError):
        raise UserError(f"{where}: answer {index!r} is not an option index") from None
    if not 0 <= i < n:
        raise UserError(f"{where}: answer index {i} outside the {n} options")
    return string.ascii_uppercase[i]


def _mmlu(row: Mapping, i: int, state: dict) -> Prompt:
    subject = str(row["subject"])
    k = state.setdefault(subject, 0)
    state[subject] = k + 1
    choices, text = _options(str(row["question"]), list(row["choices"]))
    base = state["_base"]
    return Prompt(
        f"{base}/{subject}/{k}",
        text,
        subject=subject,
        question=str(row["question"]),
        choices=choices,
        gold=_letter(row["answer"], len(choices), f"row {i}"),
    )


def _arc(row: Mapping, i: int, state: dict) -> Prompt:
    labels = list(row["choices"]["label"])
    choices, text = _options(str(row["question"]), list(row["choices"]["text"]))
    if str(row["answerKey"]) not in labels:
        raise UserError(f"row {i}: answerKey {row['answerKey']!r} is not one of the labels {labels}")
    gold = string.ascii_uppercase[labels.index(str(row["answerKey"]))]
    return Prompt(
        str(row.get("id") or content_id(state["_base"], text)),
        text,
        question=str(row["question"]),
        choices=choices,
        gold=gold,
    )


def _hellaswag(row: Mapping, i: int, state: dict) -> Prompt:
    q = str(row["ctx"])
    choices, text = _options(q, list(row["endings"]))
    pid = (
        f"{state['_base']}/{row['ind']}"
        if row.get("ind") is not None
        else content_id(state["_base"], text)
    )
    return Prompt(
        pid,
        text,
        subject=row.get("activity_label"),
        question=q,
        choices=choices,
        gold=_letter(row["label"], len(choices), f"row {i}"),
    )


def _truthfulqa(row: Mapping, i: int, state: dict) -> Prompt:
    mc = row["mc1_targets"]
    choices, text = _options(str(row["question"]), list(mc["choices"]))
    return Prompt(
        content_id(state["_base"], text),
        text,
        question=str(row["question"]),
        choices=choices,
        gold=_letter(list(mc["labels"]).index(1), len(choices), f"row {i}"),
    )


def _gsm8k(row: Mapping, i: int, state: dict) -> Prompt:
    q = str(row["question"])
    gold = extract_numeric(str(row["answer"]))
    if gold is None:
        raise UserError(f"row {i}: answer {str(row['answer'])[-40:]!r} holds no '#### N' number")
    return Prompt(content_id(state["_base"], q), q, question=q, gold=gold)


def _first_turn(turns: Any) -> str:
    if isinstance(turns, list) and turns:
        t = turns[0]
        return str(t.get("content", "")) if isinstance(t, Mapping) else str(t)
    return str(turns)


def _open_ended(row: Mapping, i: int, state: dict) -> Prompt:
    turns = row.get("prompt", row.get("turns", row.get("instruction")))
    if (
        isinstance(turns, list) and len(turns) > 1
    ):  # MT-Bench's second turn: not generated (docs/JUDGES.md)
        state["_multi_turn"] = state.get("_multi_turn", 0) + 1
    text = _first_turn(turns)
    own = row.get("prompt_id", row.get("question_id"))
    return Prompt(
        f"{state['_base']}/{own}" if own is not None else content_id(state["_base"], text),
        text,
        subject=row.get("category") or row.get("cluster") or row.get("dataset"),
        question=text,
    )


_ROWS: dict[str, Callable[[Mapping, int, dict], Prompt]] = {
    "mmlu": _mmlu,
    "arc": _arc,
    "hellaswag": _hellaswag,
    "truthfulqa-mc": _truthfulqa,
    "gsm8k": _gsm8k,
    "mt-bench": _open_ended,
    "arena-hard": _open_ended,
    "alpacaeval": _open_ended,
}


def _custom(cols: Columns, names: list[str]) -> tuple[str, Callable[[Mapping, int, dict], Prompt]]:
    """The kind and row reader of a layout described by its columns."""
    named = {"prompt": cols.prompt, "answer": cols.answer, "choices": cols.choices, "id": cols.id}
    missing = [f"--{k}-column {v!r}" for k, v in named.items() if v is not None and v not in names]
    if cols.prompt is None:
        missing.insert(0, "--prompt-column (required for a layout the registry does not know)")
    if missing:
        raise UserError(
            f"column(s) not in the dataset: {'; '.join(missing)}; its columns: {', '.join(names)}"
        )
    kind = "multiple_choice" if cols.choices else "numeric" if cols.answer else "prompts"

    def read(row: Mapping, i: int, state: dict) -> Prompt:
        q = str(row[cols.prompt])
        own = row[cols.id] if cols.id else None
        if kind == "multiple_choice":
            choices, text = _options(q, list(row[cols.choices]))
            ans = row[cols.answer] if cols.answer else None
            gold = (
                None
                if ans is None
                else (
                    str(ans).strip().upper()
                    if str(ans).strip().upper() in choices
                    else _letter(ans, len(choices), f"row {i}")
                )
            )
        else:
            text, choices = q, None
            gold = None if kind == "prompts" else extract_numeric(str(row[cols.answer]))
            if kind == "numeric" and gold is None:
                raise UserError(f"row {i}: answer {str(row[cols.answer])[-40:]!r} is not a number")
        pid = f"{state['_base']}/{own}" if own is not None else content_id(state["_base"], text)
        return Prompt(pid, text, question=q, choices=choices, gold=gold)

    return kind, read


def _unique(prompts: list[Prompt]) -> list[Prompt]:
    """Repeated ids (the same content twice) get ``#2``, ``#3`` in order: still stable."""
    seen: dict[str, int] = {}
    out = []
    for p in prompts:
        n = seen[p.prompt_id] = seen.get(p.prompt_id, 0) + 1
        out.append(
            p
            if n == 1
            else Prompt(f"{p.prompt_id}#{n}", p.user_prompt, p.subject, p.question, p.choices, p.gold)
        )
    return out


def load_hf(name: str, columns: Columns | None = None, cache_dir: str | None = None) -> Dataset:
    """``hf:REPO[:CONFIG][:SPLIT]`` as a :class:`Dataset` (kind and system prompt from the layout)."""
    spec = parse_spec(name)
    table, config, split = open_split(spec, cache_dir)
    names = list(table.column_names)
    cols = columns or Columns()
    lay = None if cols.given() else layout_of(spec.repo, names)
    if lay is not None:
        kind, read, tag = lay.kind, _ROWS[lay.name], lay.name
    elif cols.given():
        (kind, read), tag = _custom(cols, names), "custom"
    else:
        raise UserError(
            f"unknown layout of {spec.repo!r} (columns: {', '.join(names)}); known: "
            f"{', '.join(la.name for la in LAYOUTS)}; name the columns with --prompt-column "
            "[--answer-column] [--choices-column] [--id-column]"
        )
    if (
        tag == "mmlu"
    ):  # the paper's ids and dataset id (test split), as import paper-mmlu and the CSV folder
        base = "mmlu" if split == "test" else f"mmlu-{split}"
        dataset_id = base if config == "all" else f"{base}:{config}"
    else:
        base = dataset_id = f"{PREFIX}{spec.repo}:{config}:{split}#{tag}"
    state: dict = {"_base": base}
    try:
        prompts = _unique([read(row, i, state) for i, row in enumerate(table)])
    except KeyError as exc:
        raise UserError(
            f"dataset {spec.repo!r} ({tag} layout) lacks column {exc.args[0]!r}; its columns: "
            f"{', '.join(names)}"
        ) from None
    if not prompts:
        raise UserError(f"dataset {spec.repo!r} config {config!r} split {split!r} is empty")
    system = {
        "multiple_choice": MMLU_SYSTEM_PROMPT
        if all(tuple(p.choices or ()) == LETTERS for p in prompts)
        else OPTION_SYSTEM_PROMPT,
        "numeric": NUMERIC_SYSTEM_PROMPT,
        "prompts": CHAT_SYSTEM_PROMPT,
    }[kind]
    source: dict[str, Any] = {"repo": spec.repo, "config": config, "split": split, "layout": tag}
    if state.get("_multi_turn"):  # recorded with the dataset (and so with every run on it): turn 1 only
        source["turns_used"] = 1
        source["multi_turn_prompts"] = int(state["_multi_turn"])
    return Dataset(dataset_id, kind, json.dumps(source), tuple(prompts), system)
