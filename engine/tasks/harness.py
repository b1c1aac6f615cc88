"""Readers of other harnesses' per-sample results: lm-evaluation-harness and Inspect AI.

* lm-evaluation-harness ``--log_samples`` output (0.4.x): ``results_<time>.json`` (model name,
  version, the headline metric per task) next to ``samples_<task>_<time>.jsonl`` (one line per
  document: ``doc_id``, ``arguments``, ``filtered_resps``, the per-sample metric). Standard library.
* Inspect AI logs (format version 2): ``.json`` (standard library) and ``.eval`` (a zip of
  ``header.json`` and ``samples/<id>_epoch_<n>.json``; current Inspect writes zstd members, read
  with ``zstandard``). With ``inspect-ai`` installed (optional), ``inspect_ai.log.read_eval_log``
  reads them instead. Epochs become repeats.

Every reader returns :class:`HarnessLog` (one model on one task) with the harness's own headline
accuracy; a file of another format version, a truncated zip or a missing field is one UserError.
"""

from __future__ import annotations

import json
import math
import re
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import UserError
from engine.tasks.harness_requests import (
    context_text,
    inspect_request,
    lm_eval_repeat_scores,
    lm_eval_request,
)

LM_EVAL_VERSIONS = ("0.4",)  # results files this reader knows (lm_eval_version prefix)
INSPECT_LOG_VERSIONS = (2,)  # Inspect's log format version
INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}  # Inspect's CORRECT/INCORRECT/PARTIAL/NOANSWER
LM_EVAL_METRICS = ("acc", "exact_match", "acc_norm", "mc1", "mc2", "f1")
_ZSTD = 93
REL_TOL = 1e-9  # the equality gate's tolerance where sums of floats may differ in order


def agrees(ours: float, reported: float, exact: bool) -> bool:
    """The import's equality gate between our accuracy and the harness's own number.

    ``exact``: 0/1 scores, one per sample, so both sides are an integer count over n, which every order
    of summation gives to the last bit; anything else (fractional scores, means over epochs, weighted
    group aggregates) is a floating-point sum whose order changes the last bits: equal within
    ``REL_TOL``.
    """
    if exact:
        return ours == reported
    return math.isclose(ours, reported, rel_tol=REL_TOL, abs_tol=REL_TOL * 1e-3)


@dataclass(frozen=True)
class HarnessSample:
    sample_id: str  # the harness's document / sample id (pairs models)
    repeat: int  # epoch - 1 (lm-eval: 0)
    score: float
    text: str | None  # the model's answer (lm-eval multiple choice: the highest-likelihood option)
    prompt: str | None
    target: str | None
    choices: tuple[str, ...] | None = None
    # the request the sample made of an OpenAI-compatible server, as the key rule reads it
    # (engine.tasks.harness_requests): (endpoint, body fields); None when the log does not say
    request: tuple[str, dict] | None = None


@dataclass(frozen=True)
class HarnessLog:
    harness: str  # 'lm-eval' | 'inspect'
    version: str
    model: str
    task: str
    metric: str
    headline: float  # the harness's own accuracy
    samples: tuple[HarnessSample, ...]
    path: str
    reader: str = "stdlib"
    model_args: tuple[
        tuple[str, str], ...
    ] = ()  # the harness's model arguments (what tells checkpoints apart)
    groups: tuple[GroupResult, ...] = ()  # lm-eval: every group of the results file, checked
    # lm-eval with `repeats: R`: its headline scores only the first answer of each document (repeat 0);
    # the samples hold all R, each scored by harness_requests.lm_eval_repeat_scores
    headline_first_repeat: bool = False


@dataclass(frozen=True)
class GroupResult:
    """An lm-eval group (``mmlu``, ``mmlu_stem``, ...): its reported aggregate and ours from its
    subtasks' samples."""

    name: str
    metric: str
    headline: float  # as lm-eval reported it
    ours: float  # lm-eval's aggregation of the leaf tasks' per-sample scores
    leaves: tuple[str, ...]  # the sample-level tasks under it, at any depth
    weight_by_size: bool


# ---------------------------------------------------------------------------------------------
# lm-evaluation-harness


def parse_model_args(raw: Any) -> tuple[tuple[str, str], ...]:
    """A harness's model arguments as sorted (key, value) pairs: lm-eval writes a dict or a
    ``"pretrained=A,dtype=float16"`` string, Inspect a dict (``-M model_path=A``)."""
    if isinstance(raw, str):
        pairs = [part.split("=", 1) for part in raw.split(",") if "=" in part]
        return tuple(sorted((k.strip(), v.strip()) for k, v in pairs))
    if isinstance(raw, dict):
        return tuple(sorted((str(k), str(v)) for k, v in raw.items() if v is not None))
    return ()


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"cannot read {str(path)!r} as JSON: {exc}") from None


def _lm_eval_metric(task: str, res: dict, path: Path) -> tuple[str, str, float]:
    """(metric, filter, headline value) of one task's entry in ``results``."""
    for metric in LM_EVAL_METRICS:
        for key, value in res.items():
            if key.split(",")[0] == metric and "," in key and isinstance(value, (int, float)):
                return metric, key.split(",", 1)[1], float(value)
    raise UserError(
        f"{str(path)!r}: task {task!r} reports none of the metrics {', '.join(LM_EVAL_METRICS)}"
    )


def _lm_eval_text(line: dict) -> str | None:
    resps = line.get("filtered_resps")
    args = line.get("arguments") or {}
    conts = [a.get("arg_1") for a in args.values()] if isinstance(args, dict) else []
    if (
        isinstance(resps, list)
        and resps
        and all(isinstance(r, list) and r for r in resps)
        and len(conts) == len(resps)
    ):
        lls = [float(r[0]) for r in resps]  # multiple choice: (loglikelihood, is_greedy) per option
        return str(conts[lls.index(max(lls))]).strip()
    if isinstance(resps, list) and resps:
        return str(resps[0] if not isinstance(resps[0], list) else resps[0][0])
    return None


def _lm_eval_answers(line: dict) -> list[str] | None:
    """A generate_until document's answers, one per repeat (``resps``: [[a_0, ..., a_R-1]]), or None
    (multiple choice, or one answer)."""
    resps = line.get("resps")
    if not (isinstance(resps, list) and len(resps) == 1 and isinstance(resps[0], list)):
        return None
    answers = resps[0]
    if len(answers) < 2 or not all(isinstance(a, str) for a in answers):
        return None
    return answers


@dataclass(frozen=True)
class _LmEvalTask:
    """What the samples reader needs of one task's entry in the results file."""

    name: str
    metric: str
    filter: str
    config: dict  # the task's entry under ``configs`` (metric_list, filter_list, repeats, ...)
    model_type: str | None  # config.model: 'local-completions', 'hf', ...
    model_args: dict


def _lm_eval_line(task: _LmEvalTask, line: dict, where: str) -> list[HarnessSample]:
    """The samples of one document: one, or one per repeat (a task with ``repeats``)."""
    args = line.get("arguments") or {}
    first: dict = next(iter(args.values()), {}) if isinstance(args, dict) else {}
    conts = tuple(str(a.get("arg_1", "")).strip() for a in args.values()) if len(args) > 1 else None
    target = None if line.get("target") is None else str(line["target"])
    request = lm_eval_request(task.model_type, task.model_args, first.get("arg_0"), first.get("arg_1"))
    prompt = context_text(first.get("arg_0"))
    sid, score = f"{task.name}/{line['doc_id']}", float(line[task.metric])
    answers = _lm_eval_answers(line) if int(task.config.get("repeats") or 1) > 1 else None
    if answers is None:
        text = _lm_eval_text(line)
        return [HarnessSample(sid, 0, score, text, prompt, target, conts, request)]
    scores = lm_eval_repeat_scores(task.name, task.config, answers, line.get("target"), score, where)
    return [
        HarnessSample(sid, r, sc, a, prompt, target, None, request)
        for r, (a, sc) in enumerate(zip(answers, scores))
    ]


def _lm_eval_samples(path: Path, task: _LmEvalTask) -> list[HarnessSample]:
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {str(path)!r}: {exc}") from None
    for n, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UserError(f"{str(path)!r} line {n}: not JSON ({exc.msg})") from None
        if line.get("filter", task.filter) != task.filter:
            continue
        if "doc_id" not in line or task.metric not in line:
            raise UserError(
                f"{str(path)!r} line {n}: no 'doc_id' or no {task.metric!r} (an lm-eval --log_samples "
                "file?)"
            )
        out.extend(_lm_eval_line(task, line, f"{str(path)!r} line {n}"))
    return out


def _leaves(name: str, tree: dict[str, list[str]]) -> list[str]:
    """The sample-level tasks under ``name`` at any depth (lm-eval's ``group_subtasks``; a task maps to
    [])."""
    children = tree.get(name) or []
    return [name] if not children else [leaf for c in children for leaf in _leaves(c, tree)]


def _mean(scores: list[float]) -> float:
    return sum(scores) / len(scores)


def check_groups(res: dict, logs: list[HarnessLog], path: Path) -> tuple[GroupResult, ...]:
    """Every group aggregate of an lm-eval results file against its leaf tasks' samples.

    lm-eval aggregates a group over all the sample-level tasks below it, at any depth, as the
    size-weighted mean of their accuracies or (``weight_by_size: false``) their plain mean; the results
    file does not record which, so both are computed and the one that gives lm-eval's number is recorded.
    A group entry without a metric (no ``aggregate_metric_list``) is only listed.
    """
    tree = {str(k): [str(c) for c in v] for k, v in (res.get("group_subtasks") or {}).items()}
    by_task = {lg.task: lg for lg in logs}
    out = []
    for group in [g for g, children in tree.items() if children]:
        entry = (res.get("results") or {}).get(group) or (res.get("groups") or {}).get(group) or {}
        leaves = _leaves(group, tree)
        missing = [t for t in leaves if t not in by_task]
        if missing:
            raise UserError(
                f"{str(path)!r}: group {group!r} lists subtasks without results: {', '.join(missing)}"
            )
        try:
            metric, _, headline = _lm_eval_metric(group, entry, path)
        except UserError:
            continue  # a group that reports no aggregate (lm-eval prints only its subtasks)
        # what lm-eval averaged: each document's score (with `repeats`, its first answer's)
        scored = {t: [s.score for s in by_task[t].samples if s.repeat == 0] for t in leaves}
        means = [_mean(scored[t]) for t in leaves]
        sizes = [len(scored[t]) for t in leaves]
        weighted = sum(m * n for m, n in zip(means, sizes)) / sum(sizes)
        plain = sum(means) / len(means)
        if agrees(weighted, headline, False):
            out.append(GroupResult(group, metric, headline, weighted, tuple(leaves), True))
        elif agrees(plain, headline, False):
            out.append(GroupResult(group, metric, headline, plain, tuple(leaves), False))
        else:
            raise UserError(
                f"{str(path)!r}: group {group!r} reports {metric} {headline!r}, its subtasks' samples "
                f"give {weighted!r} weighted by size and {plain!r} unweighted; nothing was written"
            )
    return tuple(out)


def read_lm_eval(results_path: Path) -> list[HarnessLog]:
    """One :class:`HarnessLog` per sample-level task of an lm-eval ``results_*.json`` with its samples
    files.

    Group tasks (``mmlu`` -> ``mmlu_stem`` -> subjects: ``group_subtasks``, any depth) have no samples
    file of their own: their aggregates are checked against their subtasks' samples
    (:func:`check_groups`) and kept on every log of the file (``groups``); the subtasks become the run's
    subjects.
    """
    res = _load_json(results_path)
    if not isinstance(res, dict) or "results" not in res:
        raise UserError(f"{str(results_path)!r} is not an lm-eval results file (no 'results')")
    version = str(res.get("lm_eval_version") or "")
    if not version.startswith(LM_EVAL_VERSIONS):
        raise UserError(
            f"{str(results_path)!r}: lm-eval version {version or '(none)'}; this reader knows "
            f"{', '.join(v + '.x' for v in LM_EVAL_VERSIONS)}"
        )
    model = res.get("model_name") or (res.get("config") or {}).get("model")
    if not model:
        raise UserError(f"{str(results_path)!r}: no model name (model_name / config.model)")
    stamp = results_path.name[len("results_") : -len(".json")]
    groups = {str(g) for g, children in (res.get("group_subtasks") or {}).items() if children}
    args = parse_model_args((res.get("config") or {}).get("model_args"))
    logs = []
    for task, entry in res["results"].items():
        if task in groups:
            continue
        metric, filt, headline = _lm_eval_metric(task, entry, results_path)
        samples_path = results_path.with_name(f"samples_{task}_{stamp}.jsonl")
        if not samples_path.is_file():
            raise UserError(
                f"{str(results_path)!r}: no {samples_path.name} beside it (run lm-eval with "
                "--log_samples)"
            )
        spec = _LmEvalTask(
            task,
            metric,
            filt,
            dict((res.get("configs") or {}).get(task) or {}),
            (res.get("config") or {}).get("model"),
            dict(args),
        )
        samples = _lm_eval_samples(samples_path, spec)
        logs.append(
            HarnessLog(
                "lm-eval",
                version,
                str(model),
                task,
                metric,
                headline,
                tuple(samples),
                str(samples_path),
                model_args=args,
                headline_first_repeat=any(s.repeat > 0 for s in samples),
            )
        )
    checked = check_groups(res, logs, results_path)
    return [replace(lg, groups=checked) for lg in logs]


# ---------------------------------------------------------------------------------------------
# Inspect AI


def _inspect_value(value: Any, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in INSPECT_VALUES:
        return INSPECT_VALUES[value]
    raise UserError(
        f"{where}: score value {value!r} is not a number or one of {', '.join(INSPECT_VALUES)}"
    )


def _inspect_text(output: Any) -> str | None:
    if isinstance(output, dict):
        return output.get("completion")
    return getattr(output, "completion", None)


def _inspect_sample(sample: dict) -> dict:
    """A sample with only its model events' requests kept of its events (what the link needs)."""
    keep = ("request", "call_refs", "call_key")
    events = [
        {"event": "model", "call": {k: ev["call"].get(k) for k in keep}}
        for ev in sample.get("events") or []
        if isinstance(ev, dict) and ev.get("event") == "model" and ev.get("call")
    ]
    return {**sample, "events": events}


def _inspect_log(header: dict, samples: Iterable[dict], path: Path, reader: str) -> HarnessLog:
    version = header.get("version")
    if version not in INSPECT_LOG_VERSIONS:
        raise UserError(
            f"{str(path)!r}: Inspect log format version {version!r}; this reader knows "
            f"{', '.join(map(str, INSPECT_LOG_VERSIONS))}"
        )
    if header.get("status") != "success":
        raise UserError(
            f"{str(path)!r}: the Inspect run did not succeed (status {header.get('status')!r})"
        )
    ev, results = header.get("eval") or {}, header.get("results") or {}
    scores = results.get("scores") or []
    if not scores:
        raise UserError(f"{str(path)!r}: no scores in the log's results")
    scorer = scores[0]
    metric = (
        "accuracy"
        if "accuracy" in (scorer.get("metrics") or {})
        else next(iter(scorer.get("metrics") or {}), None)
    )
    if metric is None:
        raise UserError(f"{str(path)!r}: scorer {scorer.get('name')!r} reports no metric")
    out = []
    for s in samples:
        sid, epoch = s.get("id"), s.get("epoch")
        sc = (s.get("scores") or {}).get(scorer["name"])
        if sid is None or epoch is None or sc is None:
            raise UserError(f"{str(path)!r}: a sample without id, epoch or a {scorer['name']!r} score")
        value = sc.get("value") if isinstance(sc, dict) else getattr(sc, "value", None)
        inp = s.get("input")
        out.append(
            HarnessSample(
                f"{ev.get('task')}/{sid}",
                int(epoch) - 1,
                _inspect_value(value, str(path)),
                _inspect_text(s.get("output")),
                inp if isinstance(inp, str) else None,
                None if s.get("target") is None else str(s.get("target")),
                request=inspect_request(s),
            )
        )
    return HarnessLog(
        "inspect",
        str((ev.get("packages") or {}).get("inspect_ai", "")),
        str(ev.get("model")),
        str(ev.get("task")),
        metric,
        float(scorer["metrics"][metric]["value"]),
        tuple(out),
        str(path),
        reader,
        model_args=parse_model_args(ev.get("model_args")),
    )


def _zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path) -> dict:
    if info.compress_type == _ZSTD:
        try:
            import zstandard
        except ImportError:
            raise UserError(
                f"{str(path)!r} has zstd-compressed members: install zstandard (requirements.txt) or "
                "inspect-ai"
            ) from None
        raw = _raw_member(zf, info)
        if len(raw) != info.compress_size:
            raise EOFError(f"member {info.filename} is cut short")
        # Inspect writes several zstd frames per member: read across them.
        data = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True).read()
        if len(data) != info.file_size or zlib.crc32(data) != info.CRC:
            raise ValueError(f"member {info.filename} fails its size/CRC check")
    else:
        data = zf.read(info)
    return json.loads(data)


def _raw_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The stored (still compressed) bytes of a zip member: after its local header."""
    fp = zf.fp
    assert fp is not None
    fp.seek(info.header_offset)
    local = fp.read(30)
    name_len, extra_len = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
    fp.seek(info.header_offset + 30 + name_len + extra_len)
    return fp.read(info.compress_size)


def _read_eval_zip(path: Path) -> HarnessLog:
    try:
        with zipfile.ZipFile(path) as zf:
            infos = {i.filename: i for i in zf.infolist()}
            if "header.json" not in infos:
                raise UserError(
                    f"{str(path)!r}: no header.json in the .eval zip (an unfinished Inspect run?)"
                )
            header = _zip_member(zf, infos["header.json"], path)
            names = sorted(n for n in infos if re.fullmatch(r"samples/.+_epoch_\d+\.json", n))
            samples = [_zip_member(zf, infos[n], path) for n in names]
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise UserError(f"{str(path)!r} is not a readable .eval zip (truncated?): {exc}") from None
    return _inspect_log(header, samples, path, "stdlib+zstandard")


def _read_with_inspect(path: Path) -> HarnessLog | None:
    try:
        from inspect_ai.log import read_eval_log  # optional extra
    except ImportError:
        return None
    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # noqa: BLE001  (Inspect raises many types; one line for the user)
        raise UserError(f"cannot read Inspect log {str(path)!r}: {type(exc).__name__}: {exc}") from None
    header = json.loads(log.model_dump_json(exclude={"samples", "reductions"}))
    samples = [
        _inspect_sample(
            json.loads(
                s.model_dump_json(
                    include={"id", "epoch", "scores", "output", "input", "target", "events"}
                )
            )
        )
        for s in (log.samples or [])
    ]
    return _inspect_log(header, samples, path, "inspect_ai")


def read_inspect(path: Path, use_inspect: bool = True) -> HarnessLog:
    """An Inspect log (``.eval`` or ``.json``): with inspect-ai when installed, else the standard
    library."""
    got = _read_with_inspect(path) if use_inspect else None
    if got is not None:
        return got
    if path.suffix == ".eval":
        return _read_eval_zip(path)
    data = _load_json(path)
    if not isinstance(data, dict) or "eval" not in data:
        raise UserError(f"{str(path)!r} is not an Inspect log (no 'eval')")
    return _inspect_log(data, data.get("samples") or [], path, "stdlib")


# ---------------------------------------------------------------------------------------------
# Paths -> logs


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        found = sorted([*path.rglob("results_*.json"), *path.rglob("*.eval"), *path.rglob("*.json")])
        return [f for f in dict.fromkeys(found) if not f.name.startswith(("samples_", "."))]
    raise UserError(f"no such file or folder: {str(path)!r}")


def read_harness(path: str | Path, use_inspect: bool = True) -> list[HarnessLog]:
    """Every harness log in a file or an output folder (format detected)."""
    p = Path(path).expanduser()
    logs: list[HarnessLog] = []
    for f in _files(p):
        if f.name.startswith("results_") and f.suffix == ".json":
            logs.extend(read_lm_eval(f))
        elif f.name.startswith("samples_") and f.suffix == ".jsonl":
            stamp = f.name.rsplit("_", 1)[-1].removesuffix(".jsonl")
            results = sorted(f.parent.glob(f"results_{stamp}.json"))
            if not results:
                raise UserError(f"{str(f)!r}: no results_*.json beside it (lm-eval writes both)")
            logs.extend(read_lm_eval(results[0]))
        elif f.suffix == ".eval" or (f.suffix == ".json" and p.is_file()):
            logs.append(read_inspect(f, use_inspect))
        elif f.suffix == ".json" and '"eval"' in f.read_text(encoding="utf-8", errors="replace")[:2000]:
            logs.append(read_inspect(f, use_inspect))
    if not logs:
        raise UserError(
            f"no lm-eval (results_*.json + samples_*.jsonl) or Inspect (.eval / .json) log in {str(p)!r}"
        )
    return logs
