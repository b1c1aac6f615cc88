"""The one page table: app.py builds st.navigation from it, pages link through it, tests drive it.

A new page is a file in ``app_pages/`` plus one row here. URL paths are explicit so that
bookmarks survive file renames.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    key: str  # used by empty_state / page links
    path: str  # the script, relative to the project root
    title: str
    icon: str
    url_path: str  # "" for the default page (the app's root URL)
    link_label: str  # the Home page's description of it


PAGES: tuple[Page, ...] = (
    Page("home", "app_pages/home.py", "Home", ":material/home:", "", "Home"),
    Page(
        "generate",
        "app_pages/generate.py",
        "Generate",
        ":material/play_arrow:",
        "Generate",
        "Generate: run models coupled and independent",
    ),
    Page(
        "traces",
        "app_pages/traces.py",
        "Token traces",
        ":material/timeline:",
        "Token_traces",
        "Token traces: where coupled models diverge",
    ),
    Page(
        "benchmark",
        "app_pages/benchmark.py",
        "Benchmark comparison",
        ":material/query_stats:",
        "Benchmark",
        "Benchmark comparison: variance, sample saving",
    ),
    Page(
        "winrates",
        "app_pages/winrates.py",
        "Win-rates",
        ":material/sports_score:",
        "Win_rates",
        "Win-rates: pairwise preferences",
    ),
    Page(
        "ranksets",
        "app_pages/ranksets.py",
        "Rank-sets",
        ":material/format_list_numbered:",
        "Rank_sets",
        "Rank-sets: prediction-powered ranking",
    ),
    Page(
        "judge_audit",
        "app_pages/judge_audit.py",
        "Judge audit",
        ":material/gavel:",
        "Judge_audit",
        "Judge audit: can the judge be trusted (agreement with people, bias, position)",
    ),
    Page(
        "accuracy_ranks",
        "app_pages/accuracy_ranks.py",
        "Accuracy ranks",
        ":material/leaderboard:",
        "Accuracy_ranks",
        "Accuracy ranks: which model is really best (generated or imported runs)",
    ),
    Page(
        "datamap",
        "app_pages/datamap.py",
        "Data map",
        ":material/scatter_plot:",
        "Data_map",
        "Data map: P(correct) vs consistency",
    ),
    Page(
        "label",
        "app_pages/label.py",
        "Label",
        ":material/thumbs_up_down:",
        "Label",
        "Label: human votes on a random sample of a run's comparisons",
    ),
    Page(
        "upload",
        "app_pages/upload.py",
        "Upload",
        ":material/upload_file:",
        "Upload",
        "Upload: human / judge comparisons",
    ),
)
BY_KEY = {p.key: p for p in PAGES}


def path(key: str) -> str:
    """The script path of page ``key`` (for st.page_link and AppTest.switch_page)."""
    return BY_KEY[key].path


def st_pages() -> list:
    """The st.Page objects for st.navigation (the first page is the default)."""
    import streamlit as st

    return [
        st.Page(p.path, title=p.title, icon=p.icon, default=(i == 0), url_path=p.url_path if i else None)
        for i, p in enumerate(PAGES)
    ]
