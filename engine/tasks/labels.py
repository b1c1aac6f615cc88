"""Human labels on a run's own comparisons (docs/METHODS.md section 9.1): draw and record a sample,
hand its units to labellers (no two sessions get one unit unless it is marked for a second
labeller), record votes, skips and undos durably in the sample's label log
(:mod:`engine.store.label_log`), and fold the log into counts and comparison rows.

A unit is (prompt_id, repeat, mode, model_a, model_b) with (model_a, model_b) in the run's model
order; ``presented`` says which was shown first ('ab': model_a). Winners are in model_a/model_b
terms ('a' | 'b' | 'tie'); a skip is a response without a winner.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from engine import config
from engine.errors import UserError
from engine.stats.label_sample import draw_label_sample
from engine.store import label_log as LL
from engine.store import verdicts as vstore
from engine.store.generations import run_contents
from engine.store.label_log import LogState, fold, get_sample
from engine.store.runs import some_runs

CLAIM_TTL_S = 900.0  # a unit shown to a session and not answered is free for others after this
HEARTBEAT_S = 10.0  # a browser tab's labelling session beats this often while it is connected
# a tab that has not beaten for this long has ended: its claims are released. Browsers slow the
# timers of a tab in the background to about one a minute, so a hidden tab must not count as ended.
SESSION_DEAD_S = 150.0
CHOICES = ("first", "second", "tie", "skip")  # what a labeller answers, in presentation terms


def check_labeller(name: str) -> str:
    """A labeller name: non-blank, at most 100 characters, no control characters (one-line UserError)."""
    if not isinstance(name, str) or not name.strip():
        raise UserError("give a labeller name (letters, digits, spaces and punctuation)")
    name = name.strip()
    bad = sorted({c for c in name if ord(c) < 32 or 127 <= ord(c) < 160})
    if bad:
        raise UserError(
            f"labeller name {name!r} contains control characters ({', '.join(repr(c) for c in bad)}); "
            "use letters, digits, spaces and punctuation"
        )
    if len(name) > 100:
        raise UserError(f"labeller name is {len(name)} characters; at most 100 allowed")
    return name


def run_units(db, run: str, mode: str) -> tuple[list[str], list[tuple[str, int, str, str]]]:
    """The run's models (configured order) and its comparison units in ``mode``, canonically ordered
    (prompt_id, repeat, pair): every pair of models that both have a generation of (prompt, repeat)."""
    if mode not in config.MODES:
        raise UserError(f"unknown mode {mode!r}; allowed: {', '.join(config.MODES)}")
    contents = run_contents(db, run)
    if contents is None:
        raise UserError(f"unknown run {run!r}; runs: {', '.join(some_runs(db)) or 'none stored'}")
    keys = vstore.generation_keys(db, run)
    keys = keys[keys["mode"] == mode]
    present = sorted(set(keys["model"]))
    ranked = [m for m in vstore.configured_models(db, run) if m in present]
    models = ranked + [m for m in present if m not in ranked]
    if len(models) < 2:
        raise UserError(
            f"run {run!r} has {len(models)} model(s) with {mode} generations "
            f"({', '.join(models) or 'none'}); labelling compares two models, so it needs at least 2"
        )
    have = set(zip(keys["model"], keys["prompt_id"].astype(str), keys["repeat"].astype(int)))
    units = [
        (p, r, ma, mb)
        for p, r in sorted({(p, r) for _, p, r in have})
        for ma, mb in combinations(models, 2)
        if (ma, p, r) in have and (mb, p, r) in have
    ]
    return models, units


def set_units(db, set_name: str) -> tuple[str, str, list[str], list[tuple[str, int, str, str]]]:
    """A stored comparison set's units to label: (run, mode, models, units). The set must come from a run
    whose generations hold the responses to show (its meta names the run: ``comparisons from-judge``
    sets, label sets) and be of one mode; its units are its distinct (prompt, repeat, pair) rows, in the
    run's canonical order, each of which the run must have generated."""
    import json

    from engine.store.comparisons import list_sets, read_set

    rows = read_set(db, set_name)  # UserError for an unknown set
    metas = list_sets(db).set_index("name")["meta"]
    meta = json.loads(metas.get(set_name) or "{}") if set_name in metas.index else {}
    run = (meta.get("run") or meta.get("run_id")) if isinstance(meta, dict) else None
    if not run:
        raise UserError(
            f"comparison set {set_name!r} does not come from a run (no run in its meta: an upload or "
            "an Arena import), so there are no responses to show; label a run, or a set made by "
            "`comparisons from-judge`"
        )
    modes = {m for m in rows["mode"] if m is not None} | ({meta["mode"]} if meta.get("mode") else set())
    if len(modes) != 1:
        shown = ", ".join(sorted(modes)) or "none recorded"
        raise UserError(
            f"comparison set {set_name!r} has rows of {len(modes)} modes ({shown}); a sample is of one "
            "mode: label its run with --run and --mode"
        )
    mode = modes.pop()
    models, run_all = run_units(db, run, mode)
    order = {m: i for i, m in enumerate(models)}
    have = set(run_all)
    units, missing = set(), []
    for p, r, a, b in zip(rows["prompt_id"], rows["repeat"], rows["model_a"], rows["model_b"]):
        ma, mb = sorted((a, b), key=lambda m: order.get(m, len(order)))
        u = (str(p), int(r or 0), ma, mb)
        (units.add(u) if u in have else missing.append(u))
    if missing:
        raise UserError(
            f"comparison set {set_name!r} has {len(missing)} row(s) that run {run!r} did not generate "
            f"in mode {mode} (e.g. {missing[0]}); nothing was written"
        )
    return run, mode, models, sorted(units, key=run_all.index)


def sample_id_for(run: str, mode: str, seed: int, n: int, share: float) -> str:
    return f"labels-{run}-{mode}-s{seed}-n{n}" + (f"-x{share:g}" if share else "")


def make_sample(
    db,
    run: str | None,
    mode: str | None,
    n: int,
    seed: int,
    share: float = 0.0,
    set_name: str | None = None,
) -> dict[str, Any]:
    """Draw (or reuse) the sample of ``n`` units of ``run`` in ``mode`` (or of the stored comparison set
    ``set_name``: :func:`set_units`) from ``seed`` and record it in its sample file (the dashboard may
    call this: it never writes the database)."""
    if not 0 <= int(seed) < 2**63:
        raise UserError(f"seed {seed} is outside [0, 2^63)")
    if set_name is not None:
        run, mode, models, units = set_units(db, set_name)
        sid = sample_id_for(run, mode, int(seed), int(n), float(share)) + f"-set-{LL.file_id(set_name)}"
    else:
        if run is None or mode is None:
            raise UserError("give a run and a mode, or a comparison set")
        sid = sample_id_for(run, mode, int(seed), int(n), float(share))
    path = LL.sample_path(db, sid)
    if path.exists():
        return LL.read_sample(path)
    if set_name is None:
        models, units = run_units(db, run, mode)
    where = f"comparison set {set_name!r}'s" if set_name is not None else f"run {run!r}'s"
    if n > len(units):
        raise UserError(
            f"a sample of {n} is larger than {where} {len(units)} comparison units in mode {mode}; "
            f"use --n at most {len(units)}"
        )
    idx, swap, overlap = draw_label_sample(len(units), int(n), int(seed), float(share))
    drawn = [
        [units[i][0], units[i][1], units[i][2], units[i][3], "ba" if s else "ab", bool(o)]
        for i, s, o in zip(idx.tolist(), swap.tolist(), overlap.tolist())
    ]
    sample = {
        "sample_id": sid,
        "run": run,
        "mode": mode,
        "seed": int(seed),
        "n": int(n),
        "share": float(share),
        "n_units": len(units),
        "models": models,
        "created_at": _now_iso(),
        "units": drawn,
        **({"source_set": set_name} if set_name is not None else {}),
    }
    LL.write_sample(db, sample)
    return LL.read_sample(path)


def run_samples(db, run: str) -> list[dict[str, Any]]:
    """The recorded samples of ``run``."""
    return [s for s in LL.samples(db) if s.get("run") == run]


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


# ------------------------------------------------------------------------------- the log, folded


def _ended(session: str, sample_id: str, beats: dict[str, dict[str, Any]], now: float) -> bool:
    """A session that beats (a browser tab) and has stopped (closed, reloaded, its server killed) or
    moved to another sample: its claims are released at once. A session that never beats (the CLI)
    holds a claim for CLAIM_TTL_S."""
    b = beats.get(session)
    return b is not None and (now - float(b["t"]) > SESSION_DEAD_S or b.get("sample_id") != sample_id)


def _held(
    sample_id: str, st: LogState, session: str, beats: dict[str, dict[str, Any]], now: float
) -> dict[int, list[dict[str, Any]]]:
    """idx -> the claims of other sessions that still hold the unit: fresh (under CLAIM_TTL_S), their
    session not ended, and not yet answered by their labeller."""
    held: dict[int, list[dict[str, Any]]] = {}
    for sess, ev in st.claims.items():
        i = int(ev["idx"])
        if (
            sess != session
            and now - float(ev["t"]) < CLAIM_TTL_S
            and not _ended(sess, sample_id, beats, now)
            and ev["labeller"] not in st.responders(i)
        ):
            held.setdefault(i, []).append(ev)
    return held


def _pick(
    sample: dict, st: LogState, labeller: str, session: str, now: float, beats: dict[str, dict]
) -> int | None:
    """The unit this session should label next (its unanswered claim first), or None when none is
    left."""
    held = _held(sample["sample_id"], st, session, beats, now)
    mine = st.claims.get(session)
    order = [int(mine["idx"])] if mine is not None else []
    for i in [*order, *range(len(sample["units"]))]:
        resp = st.responders(i)
        others = {ev["labeller"] for ev in held.get(i, ())}
        if labeller in resp or labeller in others:
            continue
        if len(resp) + len(held.get(i, ())) < LL.cap(sample, i):
            return i
    return None


def _state(
    db, sample: dict, events: list[dict[str, Any]], now: float
) -> tuple[LogState, dict[str, dict]]:
    """The log folded, and the heartbeats of the sessions whose claims are still fresh (only those
    can hold a unit; a sample labelled over weeks has many old sessions)."""
    st = fold(events, sample)
    fresh = [s for s, ev in st.claims.items() if now - float(ev["t"]) < CLAIM_TTL_S]
    return st, LL.beats(db, fresh)


def next_unit(db, sample_id: str, labeller: str, session: str, now: float | None = None) -> int | None:
    """Claim and return the position (in drawn order) of the next unit for ``labeller`` in browser
    tab / process ``session``; None when the sample has no unit left for them. Claims are log
    events, decided under the log's lock, so two sessions never get the same unit (a unit marked
    for a second labeller goes to two different labellers); a claim is released after CLAIM_TTL_S
    without an answer, or as soon as its session has ended (:func:`engine.store.label_log.beat`)."""
    labeller = check_labeller(labeller)
    sample = get_sample(db, sample_id)
    t = time.time() if now is None else now
    out: list[int | None] = [None]

    def decide(events):
        st, beats = _state(db, sample, events, t)
        i = _pick(sample, st, labeller, session, t, beats)
        out[0] = i
        mine = st.claims.get(session)
        if i is None or (
            mine is not None and int(mine["idx"]) == i and t - float(mine["t"]) < CLAIM_TTL_S / 2
        ):
            return []
        return [{"event": "claim", "idx": i, "session": session, "labeller": labeller, "t": t}]

    LL.append_decided(db, sample_id, decide)
    return out[0]


@dataclass(frozen=True)
class Hold:
    """A unit another session holds: whose session, and when it comes back without an answer."""

    idx: int
    labeller: str
    session: str
    stopped: bool  # the session beats and has missed its last beats (a tab closed, reloaded, restarted)
    back_in_s: float  # seconds until the claim is released if nobody answers it


def holds(db, sample_id: str, session: str, now: float | None = None) -> list[Hold]:
    """The units of the sample that other sessions hold now (what a labeller with nothing left is
    waiting for), each with its holder and when it comes back."""
    sample = get_sample(db, sample_id)
    t = time.time() if now is None else now
    st, beats = _state(db, sample, LL.read_events(db, sample_id), t)
    out = []
    for i, claims in sorted(_held(sample_id, st, session, beats, t).items()):
        for ev in claims:
            b = beats.get(str(ev["session"]))
            quiet = t - float(b["t"]) if b is not None else 0.0
            back = CLAIM_TTL_S - (t - float(ev["t"]))
            if b is not None:
                back = min(back, SESSION_DEAD_S - quiet)
            out.append(
                Hold(i, ev["labeller"], str(ev["session"]), quiet > 2 * HEARTBEAT_S, max(back, 0.0))
            )
    return out


def beat(db, session: str, sample_id: str, labeller: str, now: float | None = None) -> None:
    """Browser tab ``session`` is alive and labelling ``sample_id`` (every HEARTBEAT_S while it is
    connected): its claims hold; when the beats stop, they are released after SESSION_DEAD_S."""
    LL.beat(db, session, sample_id, check_labeller(labeller), now)


def peek_unit(db, sample_id: str, labeller: str, session: str, now: float | None = None) -> int | None:
    """The unit :func:`next_unit` would give now, without claiming it (a waiting page's check)."""
    sample = get_sample(db, sample_id)
    t = time.time() if now is None else now
    st, beats = _state(db, sample, LL.read_events(db, sample_id), t)
    return _pick(sample, st, check_labeller(labeller), session, t, beats)


class LateVote(UserError):
    """A vote on a unit that this session no longer holds (its claim expired and the unit went to
    another session, or another labeller answered it): not recorded."""


def _late(sample: dict, st: LogState, idx: int, held: dict[int, list[dict]]) -> str | None:
    """Why a vote on ``idx`` would make the unit take more labellers than its cap, or None."""
    answered = len(st.responses.get(idx, ()))
    if answered + len(held.get(idx, ())) < LL.cap(sample, idx):
        return None
    why = (
        "it already has its answer from another labeller"
        if answered >= LL.cap(sample, idx)
        else "it is now on screen in another tab or for another labeller"
    )
    return (
        f"your answer to unit {idx + 1} was not recorded: {why} (this session's hold on it had lapsed: "
        f"{CLAIM_TTL_S / 60:.0f} minutes without an answer, or the session had stopped)"
    )


def record(
    db,
    sample_id: str,
    idx: int,
    choice: str,
    labeller: str,
    session: str = "cli",
    now: float | None = None,
) -> dict[str, Any] | None:
    """Record ``labeller``'s answer to unit ``idx`` (``choice`` in presentation terms: first / second /
    tie / skip), durably before returning. A second answer by the same labeller to the same unit is
    not written (returns None): labels are never duplicated. A vote on a unit that another session
    holds, or that has all the labellers it takes, raises :class:`LateVote` (nothing written): a unit
    never gets more labellers than it was drawn for."""
    labeller = check_labeller(labeller)
    if choice not in CHOICES:
        raise UserError(f"unknown answer {choice!r}; allowed: {', '.join(CHOICES)}")
    sample = get_sample(db, sample_id)
    if not 0 <= int(idx) < len(sample["units"]):
        raise UserError(f"unit {idx} is outside the sample's 0..{len(sample['units']) - 1}")
    idx = int(idx)
    presented = sample["units"][idx][4]
    winner = {"first": "a", "second": "b", "tie": "tie", "skip": None}[choice]
    if presented == "ba" and winner in ("a", "b"):
        winner = "b" if winner == "a" else "a"
    ev = {
        "event": "label",
        "id": uuid.uuid4().hex,
        "idx": idx,
        "winner": winner,
        "presented": presented,
        "labeller": labeller,
        "session": session,
        "at": _now_iso(),
    }
    t = time.time() if now is None else now
    refused: list[str] = []

    def decide(events):
        st, beats = _state(db, sample, events, t)
        if labeller in st.responders(idx):
            return []
        why = _late(sample, st, idx, _held(sample_id, st, session, beats, t))
        if why is not None:
            refused.append(why)
            return []
        return [ev]

    new = LL.append_decided(db, sample_id, decide)
    if refused:
        raise LateVote(refused[0])
    return new[0] if new else None


def undo_last(db, sample_id: str, labeller: str, session: str = "cli") -> int | None:
    """Withdraw ``labeller``'s latest live answer (durably) and claim its unit for ``session`` again,
    so it is shown next; returns the unit's position, or None when there is nothing to undo."""
    labeller = check_labeller(labeller)
    sample = get_sample(db, sample_id)
    out: list[int | None] = [None]

    def decide(events):
        st = fold(events, sample)
        live = {ev["id"] for rs in st.responses.values() for ev in rs if ev["labeller"] == labeller}
        last = next(
            (ev for ev in reversed(events) if ev.get("event") == "label" and ev.get("id") in live), None
        )
        if last is None:
            return []
        out[0] = int(last["idx"])
        return [
            {"event": "undo", "target": last["id"], "labeller": labeller, "at": _now_iso()},
            {
                "event": "claim",
                "idx": int(last["idx"]),
                "session": session,
                "labeller": labeller,
                "t": time.time(),
            },
        ]

    LL.append_decided(db, sample_id, decide)
    return out[0]


# ------------------------------------------------------------------------- what the page shows


@dataclass(frozen=True)
class LabelUnit:
    """One unit as a labeller sees it: the prompt and the two responses in presentation order
    (the model names are for after the vote)."""

    idx: int
    prompt_id: str
    repeat: int
    prompt: str
    first_text: str
    second_text: str
    first_model: str
    second_model: str


BLOCK = 50  # units whose texts are read together: one read-only connection serves 50 votes


def block_view(db, sample_id: str, block: int) -> dict[int, LabelUnit]:
    """The units at positions ``block * BLOCK`` .. ``(block + 1) * BLOCK - 1`` (drawn order) with their
    texts, read in one connection (opening one costs ~0.1 s on a busy machine; a vote must not)."""
    sample = get_sample(db, sample_id)
    mode = sample["mode"]
    rows = list(enumerate(sample["units"]))[block * BLOCK : (block + 1) * BLOCK]
    shown = {i: ((ma, mb) if pres == "ab" else (mb, ma)) for i, (_p, _r, ma, mb, pres, _) in rows}
    keys = {(m, u[0], int(u[1]), mode) for i, u in rows for m in shown[i]}
    texts, questions = vstore.texts_for(db, sample["run"], sorted(keys), sorted({u[0] for _, u in rows}))
    return {
        i: LabelUnit(
            i,
            u[0],
            int(u[1]),
            questions.get(u[0]) or "",
            texts.get((shown[i][0], u[0], int(u[1]), mode)) or "",
            texts.get((shown[i][1], u[0], int(u[1]), mode)) or "",
            shown[i][0],
            shown[i][1],
        )
        for i, u in rows
    }


def label_choices(db) -> dict[str, dict[str, int]]:
    """{run: {mode: number of comparison units}} for the modes with generations of two or more models
    ({} when the database does not exist yet: the page then says what to do first, once)."""
    out: dict[str, dict[str, int]] = {}
    if not Path(db).is_file():
        return out
    for run in some_runs(db, limit=200):
        keys = vstore.generation_keys(db, run)
        counts = {}
        for mode in config.MODES:
            k = keys[keys["mode"] == mode].groupby(["prompt_id", "repeat"])["model"].nunique()
            n_units = int((k * (k - 1) // 2).sum())
            if n_units:
                counts[mode] = n_units
        if counts:
            out[run] = counts
    return out


def label_set_choices(db) -> dict[str, int]:
    """{set name: rows} of the stored comparison sets that come from a run (their meta names it), which
    :func:`make_sample` can sample with ``set_name``."""
    import json

    from engine.store.comparisons import list_sets

    out: dict[str, int] = {}
    if not Path(db).is_file():
        return out
    for name, n, meta in zip(*(list_sets(db)[c] for c in ("name", "n_rows", "meta"))):
        m = json.loads(meta) if meta else {}
        if isinstance(m, dict) and (m.get("run") or m.get("run_id")) and m.get("format") != "labels":
            out[str(name)] = int(n)
    return out
