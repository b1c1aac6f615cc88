"""The Label page's parts: the tab's labelling session, the vote / undo callbacks (each writes one
fsynced line to the sample's label log before it returns; never the database), and the rendering
of a unit (two responses side by side, in the recorded order, model names hidden until the vote).

Model output is shown with ``st.markdown`` without ``unsafe_allow_html`` (raw HTML is not rendered,
scripts never run) or, on request, as plain text.
"""

from __future__ import annotations

import uuid

import streamlit as st

from dashboard import jobs_panel
from dashboard import loaders as L
from engine.errors import UserError
from engine.tasks import label_sets as S
from engine.tasks import labels as T

KEYS = {"first": "1", "second": "2", "tie": "3", "skip": "0"}  # keyboard shortcuts of the vote buttons
UNDO_KEY = "U"
SKIP_WARN = 0.2  # a skip rate above this (after 10 answers) is a selection risk (METHODS 9.1): a warning


SOURCES = ("a run", "a comparison set")


def session_id() -> str:
    """This browser tab's labelling session (claims are per session: two tabs never get one unit)."""
    return st.session_state.setdefault("label_session", uuid.uuid4().hex)


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
    except UserError as exc:
        st.session_state["label_error"] = str(exc)
        return
    st.session_state.update(
        label_sample=s["sample_id"], label_labeller=name, label_error=None, label_last=None
    )


def vote(
    sample_id: str, idx: int, choice: str, labeller: str, first_model: str, second_model: str
) -> None:
    """Button callback: record the answer (durable on return), remember what to reveal."""
    try:
        ev = T.record(L.db_path(), sample_id, idx, choice, labeller, session_id())
    except UserError as exc:
        st.session_state["label_error"] = str(exc)
        return
    said = {
        "first": f"A ({first_model})",
        "second": f"B ({second_model})",
        "tie": "a tie",
        "skip": "skip",
    }[choice]
    st.session_state["label_last"] = (
        f"Recorded: {said}. A was **{first_model}**, B was **{second_model}**."
        if ev is not None
        else "That unit already had your answer; nothing was added."
    )


def undo(sample_id: str, labeller: str) -> None:
    """Button callback: withdraw this labeller's latest answer; its unit is shown again."""
    idx = T.undo_last(L.db_path(), sample_id, labeller, session_id())
    st.session_state["label_last"] = (
        "Nothing to undo." if idx is None else "Undone: that unit is shown again."
    )


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


def _text(body: str, plain: bool) -> None:
    if plain:
        st.text(body)
    else:
        st.markdown(body)


def show_unit(unit: T.LabelUnit, position: int, n: int, plain: bool) -> None:
    """The prompt and the two responses (A = shown first) in scrolling boxes."""
    st.markdown(f"**Unit {position + 1} of {n}** (prompt `{unit.prompt_id}`, repeat {unit.repeat})")
    with st.container(border=True, height=180, key="label_prompt"):
        _text(unit.prompt, plain)
    left, right = st.columns(2)
    for col, title, body, key in (
        (left, "Response A", unit.first_text, "label_a"),
        (right, "Response B", unit.second_text, "label_b"),
    ):
        col.markdown(f"**{title}**")
        with col.container(border=True, height=420, key=key):
            _text(body, plain)


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
        st.error(str(exc))
        st.stop()


def sync_button(sample_id: str) -> None:
    """Start the short job that copies the sample's labels into the database."""
    if st.button("Copy labels into the database", key="label_sync"):
        run = T.get_sample(L.db_path(), sample_id)["run"]
        jobs_panel.start_job(["label", "sync", "--run", run, "--db", str(L.db_path())], kind="label")


@st.fragment
def labelling(sample_id: str, labeller: str) -> None:
    """Progress, the unit and the vote buttons: a fragment, so a vote reruns only this part of the
    page (less work for the server and the browser between a click and the next unit)."""
    status = progress(sample_id)
    if st.session_state.get("label_last"):
        st.caption(st.session_state["label_last"])
    idx = next_unit(sample_id, labeller)
    plain = st.toggle("Show responses as plain text", key="label_plain")
    if idx is None:
        st.success(f"Nothing left for {labeller} in this sample. {status.line}.")
        if status.remaining:
            st.info(
                f"The {status.remaining} remaining unit(s) are shown in other tabs or to other "
                f"labellers; a unit left unanswered for {T.CLAIM_TTL_S / 60:.0f} minutes comes back "
                "here on the next rerun."
            )
        st.button(
            f"Undo last ({UNDO_KEY})",
            key="label_undo_done",
            shortcut=UNDO_KEY,
            on_click=undo,
            args=(sample_id, labeller),
        )
        return
    try:
        unit = L.label_unit(sample_id, idx)
    except UserError as exc:
        st.error(str(exc))
        return
    show_unit(unit, idx, status.n, plain)
    buttons(sample_id, unit, labeller)
    L.prefetch_label_block(sample_id, idx, status.n)
