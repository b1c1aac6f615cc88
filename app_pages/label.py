"""Label: give human labels to a uniformly random sample of a run's comparisons (METHODS 9.1)."""

import streamlit as st

from dashboard import label_view as LV
from dashboard import loaders as L
from dashboard import widgets as ui

ui.header(
    "Label",
    "Human labels for a random sample of your run's comparisons: the prompt and two responses in a "
    "random left/right order, model names hidden until you vote. Keys: 1 = A better, 2 = B better, "
    "3 = tie, 0 = skip, U = undo. Each vote is on disk when the button returns, even while a job "
    "holds the database.",
)

choices = ui.safe(L.label_choices)
if not choices:
    ui.empty_state(
        "No run with two models yet: generate one (and judge it) first.", "generate", "Generate"
    )
    st.stop()

sid = st.session_state.get("label_sample")
who = st.session_state.get("label_labeller")
active = ui.safe(L.label_sample, sid) if sid and who else None
sets = ui.safe(L.label_set_choices) or {}
if active is not None:
    LV.restore_selection(active, who, choices, sets)
source = st.radio(
    "Label the units of",
    LV.SOURCES if sets else LV.SOURCES[:1],
    horizontal=True,
    key="label_source",
    help="a comparison set made from a run (e.g. its judge verdicts by `comparisons from-judge`): "
    "the sample is drawn from the set's rows, the responses come from the run",
)
c1, c2, c3 = st.columns([3, 1, 2])
if source == LV.SOURCES[0]:
    run = c1.selectbox("Run", list(choices), key="label_run")
    mode = c2.selectbox("Mode", list(choices[run]), key="label_mode")
    n_units, what = choices[run][mode], "units"
else:
    name = c1.selectbox("Comparison set", list(sets), key="label_set")
    n_units, what = sets[name], "rows"
c3.text_input("Your name (labeller)", key="label_name", max_chars=100)
with st.expander("Sample", expanded="label_sample" not in st.session_state):
    s1, s2, s3 = st.columns(3)
    s1.number_input(
        f"Sample size (of {n_units:,} {what})",
        min_value=1,
        value=min(200, n_units),
        step=50,
        key="label_n",
    )
    s2.number_input("Seed (recorded)", min_value=0, value=0, step=1, key="label_seed")
    s3.slider(
        "Share also shown to a second labeller",
        0.0,
        LV.MAX_SHARE,
        0.0,
        0.05,
        key="label_share",
        help="for human-human agreement: these units go to two different labellers",
    )
    st.button("Start labelling", key="label_start", type="primary", on_click=LV.start)

if st.session_state.get("label_error"):
    st.error(ui.md_escape(st.session_state["label_error"]))
if active is None or not who:
    st.info("Choose the sample and your name, then press Start labelling.")
    st.stop()
if not LV.shows(active, who):
    st.info(
        f"The selection above is not the sample in progress ({ui.md_escape(sid)}, run "
        f"{ui.md_escape(active['run'])}, labeller {ui.md_escape(who)}): press Start labelling to "
        "label what is selected. The answers given so far are kept in the label log."
    )
    st.stop()

LV.key_guard()
LV.labelling(sid, who)
LV.heartbeat(sid, who)
st.divider()
st.caption(
    f"Sample {ui.md_escape(sid)}. The labels form the comparison set of that name once copied into the "
    "database (a short job; they are safe in the label log until then)."
)
LV.sync_button(sid)
