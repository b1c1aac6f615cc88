"""The Label page's parts: the tab's labelling session and its heartbeat, the vote / undo callbacks
(each writes one fsynced line to the sample's label log before it returns; never the database), and
the rendering of a unit (two responses side by side, in the recorded order, model names hidden until
the vote).

Model output is data from a model, so it is shown as plain text (``st.text``: no Markdown, no HTML, so
no remote image can load while a person labels), or on request as Markdown with images and raw HTML
off. Every other string from data (prompt ids, model, run and labeller names) is Markdown-escaped.
"""

from __future__ import annotations

import math
import re
import uuid
from typing import Any

import streamlit as st

from dashboard import jobs_panel
from dashboard import loaders as L
from dashboard.widgets import md_escape
from engine.errors import UserError
from engine.tasks import label_sets as S
from engine.tasks import labels as T

KEYS = {"first": "1", "second": "2", "tie": "3", "skip": "0"}  # keyboard shortcuts of the vote buttons
UNDO_KEY = "U"
SKIP_WARN = 0.2  # a skip rate above this (after 10 answers) is a selection risk (METHODS 9.1): a warning


SOURCES = ("a run", "a comparison set")
MAX_SHARE = 0.5  # the page's slider of the share shown to a second labeller goes up to this


def session_id() -> str:
    """This browser tab's labelling session (claims are per session: two tabs never get one unit)."""
    return st.session_state.setdefault("label_session", uuid.uuid4().hex)


# ------------------------------------------------------------- the selection and the active sample


def shows(sample: dict[str, Any], labeller: str) -> bool:
    """Whether the page's widgets select ``sample`` and ``labeller`` now: only then are its units
    shown, so a vote never goes to a sample (or a run) other than the one on screen."""
    ss = st.session_state
    try:
        same = (
            int(ss["label_n"]) == int(sample["n"])
            and int(ss["label_seed"]) == int(sample["seed"])
            and float(ss["label_share"]) == float(sample["share"])
            and (ss.get("label_name") or "").strip() == labeller
        )
        if ss.get("label_source", SOURCES[0]) == SOURCES[1]:
            return same and ss["label_set"] == sample.get("source_set")
        return (
            same
            and "source_set" not in sample
            and (ss["label_run"], ss["label_mode"]) == (sample["run"], sample["mode"])
        )
    except (KeyError, TypeError, ValueError):
        return False


def restore_selection(
    sample: dict[str, Any], labeller: str, runs: dict[str, dict[str, int]], sets: dict[str, int]
) -> None:
    """Put the widgets back on the active sample when their state is gone (the page was left and
    opened again), where its values are among the widgets' options (``runs``: run -> modes, ``sets``):
    the selectors then show the sample whose units are on screen."""
    ss = st.session_state
    src = sample.get("source_set")
    known = src in sets if src else sample["mode"] in runs.get(sample["run"], {})
    if "label_n" in ss or not known or float(sample["share"]) > MAX_SHARE:
        return
    ss.update(
        label_source=SOURCES[1] if src else SOURCES[0],
        label_n=int(sample["n"]),
        label_seed=int(sample["seed"]),
        label_share=float(sample["share"]),
        label_name=labeller,
    )
    ss.update({"label_set": src} if src else {"label_run": sample["run"], "label_mode": sample["mode"]})


def start() -> None:
    """Start button callback: check the labeller, draw (or reuse) the sample chosen in the widgets
    (read from the session state: a callback sees the values of this very click), make it active."""
    ss = st.session_state
    try:
        name = T.check_labeller(ss.get("label_name") or "")
        if ss.get("label_source", SOURCES[0]) == SOURCES[0]:
            s = T.make_sample(
                L.db_path(),
                ss["label_run"],
                ss["label_mode"],
                int(ss["label_n"]),
                int(ss["label_seed"]),
                float(ss["label_share"]),
            )
        else:
            s = T.make_sample(
                L.db_path(),
                None,
                None,
                int(ss["label_n"]),
                int(ss["label_seed"]),
                float(ss["label_share"]),
                set_name=ss["label_set"],
            )
        T.beat(L.db_path(), session_id(), s["sample_id"], name)
    except UserError as exc:
        st.session_state["label_error"] = str(exc)
        return
    st.session_state.update(
        label_sample=s["sample_id"], label_labeller=name, label_error=None, label_last=None
    )


# ------------------------------------------------------------------------------ votes and undo


def _note(text: str, kind: str = "caption") -> None:
    st.session_state["label_last"] = (kind, text)


def vote(
    sample_id: str, idx: int, choice: str, labeller: str, first_model: str, second_model: str
) -> None:
    """Button callback: record the answer (durable on return), remember what to reveal. A vote for a
    sample the page no longer shows, or on a unit this tab no longer holds, is refused in the page."""
    ss = st.session_state
    if ss.get("label_sample") != sample_id or ss.get("label_labeller") != labeller:
        _note(
            "Not recorded: the page no longer shows that unit's sample. Check the unit shown.", "warning"
        )
        return
    try:
        ev = T.record(L.db_path(), sample_id, idx, choice, labeller, session_id())
    except T.LateVote as exc:
        _note(f"{md_escape(str(exc))}. Here is your next unit.", "warning")
        return
    except UserError as exc:
        _note(md_escape(str(exc)), "error")
        return
    a, b = md_escape(first_model), md_escape(second_model)
    said = {"first": f"A ({a})", "second": f"B ({b})", "tie": "a tie", "skip": "skip"}[choice]
    _note(
        f"Recorded: {said}. A was **{a}**, B was **{b}**."
        if ev is not None
        else "That unit already had your answer; nothing was added."
    )


def undo(sample_id: str, labeller: str) -> None:
    """Button callback: withdraw this labeller's latest answer; its unit is shown again."""
    idx = T.undo_last(L.db_path(), sample_id, labeller, session_id())
    _note("Nothing to undo." if idx is None else "Undone: that unit is shown again.")


def progress(sample_id: str) -> S.SampleStatus:
    """The sample's counts, read live from its label log."""
    status = S.sample_status(L.db_path(), T.get_sample(L.db_path(), sample_id))
    st.progress(min(1.0, (status.n - status.remaining) / max(status.n, 1)), text=status.line)
    answered = status.labelled + status.skipped
    if answered >= 10 and status.skipped / answered > SKIP_WARN:
        st.warning(
            f"{status.skipped} of {answered} answers are skips ({status.skipped / answered:.0%}): "
            "skipped units are missing, and a high skip rate makes the labelled units a non-random "
            "subset."
        )
    return status


# ------------------------------------------------------------------------------ showing a unit

_IMAGE = re.compile(r"!(?=\[)")  # every Markdown image starts with "![" (inline, reference, shortcut)


def markdown_without_images(text: str) -> str:
    """``text`` as Markdown in which no image can load: the "!" of every "![" is escaped (the rest
    stays a link, which loads nothing until clicked). Raw HTML is off in ``st.markdown`` by default."""
    return _IMAGE.sub(r"\\!", text)


def _text(body: str, markdown: bool) -> None:
    if markdown:
        st.markdown(markdown_without_images(body))
    else:
        st.text(body)


def show_unit(unit: T.LabelUnit, position: int, n: int, markdown: bool) -> None:
    """The prompt and the two responses (A = shown first) in scrolling boxes."""
    st.markdown(
        f"**Unit {position + 1} of {n}** (prompt {md_escape(unit.prompt_id)}, repeat {unit.repeat})"
    )
    with st.container(border=True, height=180, key="label_prompt"):
        _text(unit.prompt, markdown)
    left, right = st.columns(2)
    for col, title, body, key in (
        (left, "Response A", unit.first_text, "label_a"),
        (right, "Response B", unit.second_text, "label_b"),
    ):
        col.markdown(f"**{title}**")
        with col.container(border=True, height=420, key=key):
            _text(body, markdown)


def buttons(sample_id: str, unit: T.LabelUnit, labeller: str) -> None:
    """A better / B better / tie / skip / undo, each with its keyboard key."""
    cols = st.columns(5)
    labels = {"first": "A is better", "second": "B is better", "tie": "Tie", "skip": "Skip"}
    for col, (choice, label) in zip(cols, labels.items()):
        col.button(
            f"{label} ({KEYS[choice]})",
            key=f"label_vote_{choice}",
            shortcut=KEYS[choice],
            type="primary" if choice in ("first", "second") else "secondary",
            width="stretch",
            on_click=vote,
            args=(sample_id, unit.idx, choice, labeller, unit.first_model, unit.second_model),
        )
    cols[4].button(
        f"Undo last ({UNDO_KEY})",
        key="label_undo",
        shortcut=UNDO_KEY,
        width="stretch",
        on_click=undo,
        args=(sample_id, labeller),
    )


def next_unit(sample_id: str, labeller: str) -> int | None:
    """Claim the next unit for this tab (the same one again on a rerun before the vote); a problem
    is shown and stops the page."""
    try:
        return T.next_unit(L.db_path(), sample_id, labeller, session_id())
    except UserError as exc:
        st.error(md_escape(str(exc)))
        st.stop()


def sync_button(sample_id: str) -> None:
    """Start the short job that copies the sample's labels into the database."""
    if st.button("Copy labels into the database", key="label_sync"):
        run = T.get_sample(L.db_path(), sample_id)["run"]
        jobs_panel.start_job(["label", "sync", "--run", run, "--db", str(L.db_path())], kind="label")


# ------------------------------------------------------------------ waiting, heartbeat, key guard


def waiting_text(holds: list[T.Hold], labeller: str) -> str:
    """What the remaining units are waiting for, as it is: a tab of this labeller's that is open, one
    that stopped (closed, reloaded, its server restarted) and when its units come back, other
    labellers."""
    mine = [h for h in holds if h.labeller == labeller]
    open_, stopped = [h for h in mine if not h.stopped], [h for h in mine if h.stopped]
    parts = []
    if open_:
        parts.append(f"{len(open_)} on screen in another open tab of yours")
    if stopped:
        parts.append(
            f"{len(stopped)} on screen in a tab of yours that has gone quiet (closed, reloaded, in "
            f"the background, or its server restarted): back here within "
            f"{max(h.back_in_s for h in stopped):.0f} s unless that tab answers"
        )
    for who in sorted({h.labeller for h in holds} - {labeller}):
        theirs = [h for h in holds if h.labeller == who]
        back = math.ceil(max(h.back_in_s for h in theirs) / 60)
        parts.append(
            f"{len(theirs)} with {md_escape(who)} (free again within {back} min if left unanswered)"
        )
    return "The remaining units: " + "; ".join(parts) + "." if parts else ""


def _done(sample_id: str, labeller: str, status: S.SampleStatus) -> None:
    st.success(f"Nothing left for {md_escape(labeller)} in this sample now. {status.line}.")
    holds = T.holds(L.db_path(), sample_id, session_id()) if status.remaining else []
    st.session_state["label_waiting"] = bool(holds)
    if holds:
        st.info(waiting_text(holds, labeller) + " This page checks again by itself.")
    st.button(
        f"Undo last ({UNDO_KEY})",
        key="label_undo_done",
        shortcut=UNDO_KEY,
        on_click=undo,
        args=(sample_id, labeller),
    )


@st.fragment
def labelling(sample_id: str, labeller: str) -> None:
    """Progress, the unit and the vote buttons: a fragment, so a vote reruns only this part of the
    page (less work for the server and the browser between a click and the next unit)."""
    T.beat(L.db_path(), session_id(), sample_id, labeller)
    status = progress(sample_id)
    last = st.session_state.get("label_last")
    if last:
        kind, text = last if isinstance(last, tuple) else ("caption", str(last))
        getattr(st, kind)(text)
    idx = next_unit(sample_id, labeller)
    markdown = st.toggle(
        "Format responses as Markdown (images and HTML off)",
        key="label_markdown",
        help="by default model output is shown as plain text, exactly as generated",
    )
    if idx is None:
        _done(sample_id, labeller, status)
        return
    st.session_state["label_waiting"] = False
    try:
        unit = L.label_unit(sample_id, idx)
    except UserError as exc:
        st.error(md_escape(str(exc)))
        return
    show_unit(unit, idx, status.n, markdown)
    buttons(sample_id, unit, labeller)
    L.prefetch_label_block(sample_id, idx, status.n)


@st.fragment(run_every=T.HEARTBEAT_S)
def heartbeat(sample_id: str, labeller: str) -> None:
    """While this tab is connected: tell the label log it is alive (its unit stays its own; when the
    beats stop, the unit is released within SESSION_DEAD_S), and when it waits for units held
    elsewhere, show the next one as soon as it is free."""
    T.beat(L.db_path(), session_id(), sample_id, labeller)
    if st.session_state.get("label_waiting") and (
        T.peek_unit(L.db_path(), sample_id, labeller, session_id()) is not None
    ):
        st.rerun()


# A key pressed while the page has lost its server (the buttons are disabled until it reconnects)
# would do nothing, silently: say so in the page. Constant code, no data in it.
KEY_GUARD = """<script>
(() => {
  if (window.__labelKeyGuard) return;
  window.__labelKeyGuard = true;
  const KEYS = {"1": ["label_vote_first"], "2": ["label_vote_second"], "3": ["label_vote_tie"],
                "0": ["label_vote_skip"], "u": ["label_undo", "label_undo_done"]};
  document.addEventListener("keydown", (e) => {
    const keys = KEYS[e.key.toLowerCase()];
    const t = e.target;
    if (!keys || e.ctrlKey || e.metaKey || e.altKey) return;
    if (t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName))) return;
    const btn = keys.map((k) => document.querySelector(`.st-key-${k} button`)).find((b) => b);
    if (!btn) return;
    let bar = document.getElementById("label-key-refused");
    if (!btn.disabled) { if (bar) bar.remove(); return; }
    if (!bar) {
      bar = document.createElement("div");
      bar.id = "label-key-refused";
      bar.setAttribute("role", "alert");
      bar.title = "click to dismiss";
      bar.style.cssText = "position:fixed;top:0;left:0;right:0;z-index:999999;padding:14px;" +
        "background:#b3261e;color:#fff;font:600 16px sans-serif;text-align:center;cursor:pointer";
      bar.onclick = () => bar.remove();
      document.body.appendChild(bar);
    }
    bar.textContent = "Not connected to the server: the key " + e.key + " was NOT recorded. " +
      "Wait until the page has reconnected, check the unit shown, and press it again.";
  }, true);
})();
</script>"""


def key_guard() -> None:
    """Install :data:`KEY_GUARD` once in this browser page."""
    st.html(KEY_GUARD, unsafe_allow_javascript=True)
