"""How often the dashboard's live views re-run themselves (``st.fragment(run_every=...)``): one
period for every view that follows a running job, one for noticing a job started elsewhere.

Each re-run costs the Streamlit server a script run and the browser a re-render, on the same machine
that usually runs the job being watched (docs/BENCHMARKS.md, "The dashboard while a job runs").
"""

from __future__ import annotations

LIVE_S = 2.0  # while a job runs: the jobs panel, Home's counters, the live sections of Generate
IDLE_S = 10.0  # otherwise: a job started from another tab or the CLI shows up within this


def period(running: bool) -> float:
    """The re-run period of a live view: :data:`LIVE_S` while a job runs, :data:`IDLE_S` otherwise."""
    return LIVE_S if running else IDLE_S
