"""A new user's whole story in a real browser, on one fresh database, to one shared file: a run that
stops when decided (Generate's "Stop when decided"), an API judge on it (tests/fake_openai.py on
127.0.0.1), 30 human labels by keyboard while another job writes the database, the judge audit, PPR
rank-sets on the run's own units, and the report from the Download button. Every place that shows the
same fact of the run is read from the page and compared: the stop and its target (Home, Generate's
live section, the Benchmark page's Sequential tab, the report), the difference interval (Home, the
report), the label count (Label, Judge audit, Rank-sets, the report), the judge's figures (Judge audit,
Rank-sets, Win-rates, the report). Screenshots in test-artifacts/browser_story_*.png.

The two models answer the one digit of each question, tiny-a right with probability 0.8 and tiny-b
with 0.2 (engine.testing.tiny_digit_copier): the answer is known, so the run decides early; the fake
judge and the labeller read the digits and say which answer is right (the judge with a seeded
position slip on one request in five), so the judge audit has something to find.
"""

from __future__ import annotations

import html
import os
import re
import string
import time
from html.parser import HTMLParser

import pandas as pd
import pytest

from dashboard import jobs
from engine.analysis.sequential import live_stop
from engine.testing import tiny_digit_copier
from tests import test_browser as tb
from tests.fake_openai import Action, FakeOpenAI, messages_key
from tests.test_browser import _goto, _no_exception, _serve, _settle
from tests.test_browser_walk import _choose, _last_job
from tests.test_hf_datasets import write_hub_folder

pytestmark = pytest.mark.browser
# the browser tests' fixtures: one Chromium and one tab per module
browser, tab, page = tb.browser, tb.tab, tb.page
KEY = "sk-story-test-key"
N = 40  # questions of the benchmark
LETTERS = string.ascii_lowercase


def digits_dataset() -> pd.DataFrame:
    """N questions in the gsm8k layout, each with one digit, which is its gold answer."""
    return pd.DataFrame(
        {
            "question": [
                f"Type the digit {i % 10} (card {LETTERS[i // 26]}{LETTERS[i % 26]})." for i in range(N)
            ],
            "answer": [f"so #### {i % 10}" for i in range(N)],
        }
    )


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """A dashboard on a database that does not exist yet, the API key in its environment (the jobs it
    starts inherit it), the two digit copiers and the questions in the hub layout on disk."""
    tmp = tmp_path_factory.mktemp("story")
    models = [str(tiny_digit_copier(tmp, name, p)) for name, p in (("tiny-a", 0.8), ("tiny-b", 0.2))]
    write_hub_folder(tmp / "digits", {"main": {"test": digits_dataset()}})
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {
            "OPENAI_API_KEY": KEY,
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp / "hf-cache"),
        }.items():
            mp.setenv(k, v)
        for server in _serve(tmp, tmp / "story.duckdb"):
            yield {**server, "models": models, "dataset": f"hf:{tmp / 'digits'}:main:test"}


def _open(page, story, name: str, text: str) -> None:
    """Go to page ``name`` and wait until ``text`` shows (a first load of a page on a loaded 2-core
    machine can take minutes: bench/bench_dashboard.py measures it)."""
    _goto(page, story, name)
    page.get_by_text(text, exact=False).first.wait_for(timeout=300_000)
    _settle(page)


def _shot(page, artifacts_dir, name: str) -> None:
    page.screenshot(path=str(artifacts_dir / f"browser_story_{name}.png"), full_page=True)


def _text(page) -> str:
    """The main area's text, whitespace collapsed."""
    return " ".join(page.locator("[data-testid='stMain']").inner_text().split())


def _dump(artifacts_dir, name: str, text: str) -> None:
    (artifacts_dir / f"browser_story_{name}.txt").write_text(text)


def _fill(scope, label: str, value) -> None:
    box = scope.get_by_label(label, exact=True)
    box.fill(str(value))
    box.press("Tab")


def _right(answer: str, digit: str) -> bool:
    return answer.strip() == digit


def judge_script(body: dict, n: int) -> Action:
    """The fake judge: the right answer wins (a tie when both or neither are right); one request in
    five, chosen by a hash of the messages, says "A" whatever the answers (a position slip)."""
    user = body["messages"][-1]["content"]
    digit = re.search(r"digit (\d)", user).group(1)
    a, b = (
        re.search(rf"Assistant {x}'s Answer\|>\n(.*?)\n<\|The End", user, re.S).group(1) for x in "AB"
    )
    if int(messages_key(body)[:8], 16) % 5 == 0:
        return Action(text="A")
    ra, rb = _right(a, digit), _right(b, digit)
    return Action(text="Tie" if ra == rb else ("A" if ra else "B"))


# ------------------------------------------------------------------------------------ the steps


def _stop_when_decided(page, story, artifacts_dir) -> str:
    """Generate: two models, the hub-layout questions, "Stop when decided" (rule and round size as
    the form offers them); the live section shows the stop with no reload. Returns the run id."""
    _open(page, story, "generate", "Start generation")
    _choose(page, "Dataset", "(file path)")
    path = (
        page.locator("[data-testid='stTextInput']")
        .filter(has_text="hf:REPO[:CONFIG][:SPLIT]")
        .locator("input")
    )
    path.fill(story["dataset"])
    path.press("Tab")
    form = page.locator("[data-testid='stForm']").filter(
        has=page.get_by_role("button", name="Start generation")
    )
    models = form.locator("[data-testid='stMultiSelect']").first.locator("input")
    for _ in range(4):  # clear the default models
        models.press("Backspace")
    form.get_by_label("Other models (space-separated HF folders, .gguf files or hub ids)").fill(
        " ".join(story["models"])
    )
    for label, value in (
        ("Repeats per prompt", 2),
        ("Temperature (0 = greedy)", 1),
        ("Max new tokens", 4),
    ):
        _fill(form, label, value)
    form.locator("[data-testid='stCheckbox']").filter(has_text="Stop when decided").first.click()
    form.get_by_role("button", name="Start generation").click()
    page.get_by_text("Started job", exact=False).first.wait_for(timeout=60_000)
    # the live section follows the run started here, with no reload, to its stop
    page.get_by_text(re.compile(r"decided: \S+ > \S+ at question \d+ of 40")).first.wait_for(
        timeout=300_000
    )
    gen = _last_job(story["db"], "generate")
    _last_job(story["db"], "score")
    run = gen.args[gen.args.index("--run-id") + 1]
    # the open page follows the jobs to their end (no reload): the jobs panel, then the runs table
    page.get_by_text(re.compile(r"score-\S+ · done")).first.wait_for(timeout=120_000)
    _settle(page)
    _no_exception(page)
    _shot(page, artifacts_dir, "1_generate_stopped")
    text = _text(page)
    _dump(artifacts_dir, "1_generate", text)
    assert "No runs yet" not in text and " · running · " not in text, text
    return run


def _judge(page, story, run: str) -> None:
    """The judge form of the Generate page, an OpenAI-compatible judge on 127.0.0.1."""
    with FakeOpenAI(key=KEY, models=("judge-1",), script=judge_script) as srv:
        _open(page, story, "generate", "Start generation")
        page.get_by_text("Score, judge or cluster a stored run", exact=False).first.click()
        _settle(page)
        _choose(page, "Run", run)
        tb._pick(page, "API (OpenAI-compatible)", page.get_by_label("Base URL"))
        page.get_by_label("Base URL").fill(srv.url)
        page.get_by_label("Judge model (as the server names it)").fill("judge-1")
        page.get_by_label("Judge model (as the server names it)").press("Tab")
        _settle(page)
        page.get_by_role("button", name="Judge pairs").click()
        judged = _last_job(story["db"], "judge")
        assert srv.n_chat >= 64 and KEY not in judged.log_tail


def _busy_job(story) -> str:
    """Another generation writing the database in chunks for minutes (cancelled after the votes)."""
    args = [
        "generate",
        "--models",
        *story["models"],
        "--dataset",
        story["dataset"],
        "--repeats",
        "200",
        "--max-new-tokens",
        "4",
        "--threads",
        "1",
        "--run-id",
        "busy",
        "--db",
        str(story["db"]),
    ]
    return jobs.start_job(
        args, kind="generate", db=story["db"], env={"COUPLED_EVAL_DB": str(story["db"])}
    )


def _unit_heading(page) -> str:
    return page.locator(
        "[data-testid='stMarkdownContainer'] strong", has_text="Unit "
    ).first.inner_text()


NEXT_UNIT = """(before) => {
  const e = [...document.querySelectorAll('[data-testid="stMarkdownContainer"] strong')]
    .find((x) => x.innerText.startsWith('Unit '));
  return e && e.innerText !== before && !document.querySelector('[data-stale="true"]');
}"""


def _start_labelling(page, artifacts_dir, tries: int = 3) -> None:
    """Press Start labelling until the first unit shows. A click that lands while a re-run redraws the
    button is lost (as in tests/test_browser.py's ``_pick``); pressing it again reuses the sample
    drawn, so it is pressed again. An error the page shows (e.g. the database busy past the readers'
    wait) fails the test at once, with its text."""
    first = page.get_by_text("Unit 1 of 30", exact=False).first
    error = page.locator("[data-testid='stAlertContentError']")
    for i in range(tries):
        page.get_by_role("button", name="Start labelling").click()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if first.is_visible():
                return
            _no_exception(page)
            assert error.count() == 0, f"Start labelling: {error.first.inner_text()}"
            page.wait_for_timeout(500)
        _shot(page, artifacts_dir, f"3_start_labelling_try{i + 1}")
    raise AssertionError(
        f"no first unit after {tries} presses of Start labelling; the page reads: {_text(page)[-3000:]}"
    )


def _label_30(page, story, run: str, artifacts_dir) -> str:
    """The Label page: a sample of 30 of the run's coupled units, each answered by key (1 / 2 / 3) as a
    person reading the digits would."""
    _open(page, story, "label", "Your name (labeller)")
    _choose(page, "Run", run)
    name = page.get_by_label("Your name (labeller)")
    name.fill("ann")
    name.press("Enter")
    _settle(page)
    size = page.get_by_label(re.compile("Sample size"))
    size.fill("30")
    size.press("Enter")
    _settle(page)
    _start_labelling(page, artifacts_dir)
    _settle(page)
    page.mouse.click(5, 5)  # focus the page, not a text box, so keys reach the shortcuts
    for i in range(30):
        before = _unit_heading(page)
        assert before.startswith(f"Unit {i + 1} of 30"), before
        digit = re.search(r"digit (\d)", page.locator(".st-key-label_prompt").inner_text()).group(1)
        a = _right(page.locator(".st-key-label_a").inner_text(), digit)
        b = _right(page.locator(".st-key-label_b").inner_text(), digit)
        page.keyboard.press("3" if a == b else ("1" if a else "2"))
        if i < 29:  # the next unit, drawn whole: its texts and its buttons (nothing left stale)
            page.wait_for_function(NEXT_UNIT, arg=before, timeout=120_000)
    page.get_by_text("Nothing left for ann", exact=False).first.wait_for(timeout=120_000)
    _settle(page)
    _no_exception(page)
    _shot(page, artifacts_dir, "3_labelled")
    text = _text(page)
    _dump(artifacts_dir, "3_label", text)
    return text


# --------------------------------------------------------------------- reading the places it shows


class _Tables(HTMLParser):
    """The report's tables: {caption: [{header: cell}]}, a cell being its data-value when it has one
    (the exact number), else its text."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[dict[str, str]]] = {}
        self._cap, self._head, self._row, self._cell, self._value, self._in = "", [], [], "", None, None

    def handle_starttag(self, tag, attrs):
        if tag in ("caption", "th", "td"):
            self._in, self._cell, self._value = tag, "", dict(attrs).get("data-value")
        elif tag == "table":
            self._cap, self._head = "", []
        elif tag == "tr":
            self._row = []

    def handle_endtag(self, tag):
        if tag == "caption":
            self._cap = " ".join(self._cell.split())
        elif tag == "th":
            self._head.append(self._cell.strip())
        elif tag == "td":
            self._row.append(self._value if self._value is not None else self._cell.strip())
        elif tag == "tr" and self._row:
            self.tables.setdefault(self._cap, []).append(dict(zip(self._head, self._row)))
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in:
            self._cell += data


def _report(path) -> tuple[str, dict[str, list[dict[str, str]]], dict[str, str]]:
    """The shared file as (its text, whitespace collapsed; its tables; its keyed cells' texts)."""
    body = path.read_text()
    tables = _Tables()
    tables.feed(body)
    keyed = dict(re.findall(r'data-key="([^"]*)"[^>]*>([^<]*)<', body))
    plain = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", plain)).split())
    return text, tables.tables, {html.unescape(k): html.unescape(v) for k, v in keyed.items()}


def _csv(page, key: str, artifacts_dir, name: str) -> pd.DataFrame:
    """The CSV button of the table with ``key``: what the page's table holds."""
    with page.expect_download(timeout=120_000) as dl:
        page.locator(f".st-key-csv_{key} button").first.click()
    path = artifacts_dir / f"browser_story_{name}.csv"
    dl.value.save_as(str(path))
    return pd.read_csv(path)


def _metric(page, label: str) -> str:
    box = page.locator("[data-testid='stMetric']").filter(has_text=label).first
    return box.locator("[data-testid='stMetricValue']").inner_text().strip()


DIFF = r"([+-]\d\.\d{3}) \[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\]"
PLAN = (
    r"with (\d+) labels: widest rank-set (\d+), widest theta CI (\d\.\d+) \(floor with unlimited labels "
    r"(\d\.\d+)\); with all (\d+) unlabelled units of this run labelled: widest rank-set (\d+), widest "
    r"theta CI (\d\.\d+)"
)


def _visit(page, story, artifacts_dir, name: str, ready: str) -> str:
    _open(page, story, name, ready)
    _no_exception(page)
    _shot(page, artifacts_dir, f"4_{name}")
    text = _text(page)
    _dump(artifacts_dir, f"4_{name}", text)
    return text


def _pages(page, story, artifacts_dir) -> dict:
    """Every place that shows the run, as the user sees it: texts, metrics and the tables' CSVs; the
    report from the Judge audit page's Download button."""
    seen: dict = {}
    seen["home"] = _visit(page, story, artifacts_dir, "home", "Sequential stop, coupled")
    seen["generate"] = _visit(page, story, artifacts_dir, "generate", "Confidence sequence of")
    seen["audit"] = _visit(page, story, artifacts_dir, "judge_audit", "With a human label")
    seen["audit_metrics"] = {m: _metric(page, m) for m in ("Units judged", "With a human label")}
    seen["audit_csv"] = _csv(page, "ja_table", artifacts_dir, "judge_audit")
    # the run's one shared file, from this page's Download button (Home's, outside its live
    # fragment, is downloaded by tests/test_browser.py)
    with page.expect_download(timeout=300_000) as dl:
        page.locator(".st-key-ja_report button").first.click()
    path = artifacts_dir / "browser_story_report.html"
    dl.value.save_as(str(path))
    seen["report"], seen["report_tables"], seen["report_keyed"] = _report(path)
    _dump(artifacts_dir, "5_report", seen["report"])
    seen["ranksets"] = _visit(page, story, artifacts_dir, "ranksets", "Planner")
    seen["ranksets_csv"] = _csv(page, "rr_table", artifacts_dir, "run_ranksets")
    seen["winrates"] = _visit(page, story, artifacts_dir, "winrates", "Average win-rate")
    seen["winrates_csv"] = _csv(page, "wr_avg", artifacts_dir, "average_winrates")
    _open(page, story, "benchmark", "Mean per-question covariance")
    page.get_by_role("tab", name="Sequential").click()
    page.get_by_text("Random orders", exact=True).first.wait_for(timeout=120_000)
    _settle(page)
    _no_exception(page)
    _shot(page, artifacts_dir, "4_benchmark_sequential")
    tab = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    seen["sequential"] = " ".join(tab.inner_text().split())
    _dump(artifacts_dir, "4_benchmark_sequential", seen["sequential"])
    seen["sequential_csv"] = _csv(page, "bm_seq_summary", artifacts_dir, "sequential_summary")
    return seen


def test_stop_judge_label_rank_share_one_run(story, page, artifacts_dir):
    t0 = time.monotonic()
    db = story["db"]
    steps = {}
    run = _stop_when_decided(page, story, artifacts_dir)
    steps["stop when decided"] = time.monotonic()
    _judge(page, story, run)
    steps["judge"] = time.monotonic()
    busy = _busy_job(story)
    try:
        done_before = _wait_writing(db, busy)
        label_text = _label_30(page, story, run, artifacts_dir)
        after = jobs.job_status(busy, db)
        # the votes were taken while the other job held the database: it ran and stored all along
        assert after.status == "running" and after.done > done_before, (after.status, after.done)
    finally:
        jobs.cancel_job(busy, db)
    steps["30 labels"] = time.monotonic()
    seen = {"label": label_text, **_pages(page, story, artifacts_dir)}
    steps["pages and report"] = time.monotonic()
    last = t0
    for name, t in steps.items():
        print(f"{name}: {t - last:.0f} s")
        last = t
    _same_stop(seen, live_stop(db, run))
    _same_interval(seen, live_stop(db, run).models)
    _same_labels(seen, run)
    _same_judge(seen)
    print(f"story: {time.monotonic() - t0:.0f} s (load average {os.getloadavg()[0]:.1f})")


def _wait_writing(db, job: str) -> int:
    """Wait until the other job has stored its first chunk (it holds the database from then on)."""
    deadline = time.monotonic() + 180
    while (st := jobs.job_status(job, db)).done == 0 and st.status == "running":
        assert time.monotonic() < deadline, st.log_tail[-2000:]
        time.sleep(0.5)
    assert st.status == "running", st.log_tail[-2000:]
    # it only has to hold the database: at a low CPU priority it leaves the cores to the page. Not the
    # lowest: on a loaded machine a writer at nice 19 gets under 2 % of a core, and while it holds the
    # file mid-chunk the page's readers (nice 0) would wait on it (a priority inversion)
    os.setpriority(os.PRIO_PGRP, st.pid, 10)
    return st.done


# ------------------------------------------------------------------------ no contradiction


def _same_stop(seen: dict, ls) -> None:
    """The stop and its target: one sentence per mode on Generate, Home and in the report; the pair
    "decided: A > B at question n of 40", n < 40 (decided before N, so never "all N used"); the
    replay of the stored questions says its N is theirs."""
    coupled = next(m for m in ls.modes if m.mode == "coupled").state
    assert coupled.outcome == "decided" and coupled.n_stop < N, ls.to_dict()
    a, b = ls.models
    pair = f"decided: {a} > {b} at question {coupled.n_stop} of {N}"
    assert pair in seen["generate"], seen["generate"]
    for m in ls.modes:
        sentence = ls.text(m.mode)
        assert f"{m.mode}: {sentence}" in seen["generate"], (sentence, seen["generate"])
        assert f"Sequential stop, {m.mode}: {sentence}." in seen["home"], (sentence, seen["home"])
        assert f"{m.mode}: {sentence};" in seen["report"], sentence
        share = (
            f"{m.n_seen} questions generated in this mode ({m.n_seen / N:.1%} of the benchmark's {N})"
        )
        assert share in seen["report"], share
    n_seen = ls.modes[0].n_seen
    for where in ("home", "report"):  # the questions the run has: those generated before the stop
        assert f"{n_seen} questions × 2 repeats" in seen[where], seen[where]
        assert "not decided:" not in seen[where] and f"all {N} questions used" not in seen[where]
    # Generate shows each mode's pair at its own last question: the mode that stops the run is
    # decided; a mode generated alongside it may not be (its own CS can still include 0 there)
    for m in ls.modes:
        line = ls.pair_text(m.mode, 0)
        assert line in seen["generate"], (line, seen["generate"])
        if m.state.decided[0]:
            assert line.startswith("decided:"), line
    # the Benchmark page's replay reorders the questions the run generated: it says so, beside the
    # run's own stop in the same words, and its N is theirs
    assert f"it generated {n_seen} of the benchmark's {N} questions" in seen["sequential"]
    for m in ls.modes:
        assert f"Sequential stop, {m.mode}: {ls.text(m.mode)}." in seen["sequential"]
    assert (seen["sequential_csv"]["of N"] == n_seen).all(), seen["sequential_csv"]
    cell = seen["report_keyed"][f"seq/coupled/{a} - {b}/verdict"]
    assert cell == "decided", cell


def _same_interval(seen: dict, models) -> None:
    """The headline difference (about questions like these): Home and the report, same numbers, same
    sign as the stop's."""
    a, b = models
    home = re.search(r"questions like these\): coupled: " + DIFF, seen["home"])
    assert home, seen["home"]
    head = re.search(
        r"by (\d\.\d{3}) accuracy \(95% CI \[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\] about questions like "
        "these",
        seen["report"],
    )
    assert head and head.group(0).startswith("by") and f"{a} scores higher than {b}" in seen["report"]
    assert (float(home.group(1)), home.group(2), home.group(3)) == (
        float(head.group(1)),
        head.group(2),
        head.group(3),
    )
    cell = seen["report_keyed"][f"diff/{a}/{b}/coupled"]
    assert cell.startswith(f"{home.group(1)} [{home.group(2)}, {home.group(3)}]"), cell


def _same_labels(seen: dict, run: str) -> None:
    """30 labels: the Label page counted them; Judge audit, Rank-sets and the report read 30 of the
    same judged units."""
    assert "30 labelled, 0 skipped, of a sample of 30 (0 remaining)" in seen["label"], seen["label"]
    units = seen["audit_metrics"]["Units judged"]
    assert seen["audit_metrics"]["With a human label"] == "30", seen["audit_metrics"]
    caption = f"{units} judged units of run {run} · 30 with a human label (30 labels read)"
    assert caption in seen["ranksets"], seen["ranksets"]
    agree = seen["audit_csv"].set_index("figure").loc["agreement (judge vs human)"]
    assert int(agree["n"]) == 30
    assert f"agrees with the human labels on {agree['estimate']:.1%} of 30 units" in seen["report"]
    assert f"(30 units with a human and a judge label of {units} judged)" in seen["report"]
    page_plan = re.search(PLAN, seen["ranksets"])
    report_plan = re.search(PLAN, seen["report"])
    assert page_plan and report_plan and page_plan.groups() == report_plan.groups()
    assert page_plan.group(1) == "30" and int(page_plan.group(5)) == int(units.replace(",", "")) - 30


def _same_judge(seen: dict) -> None:
    """The judge's figures: the audit's agreement and kappa, the PPR / judge-only / human-only θ and
    rank-sets, the average win-rates: the page's CSV and the report's table hold the same numbers."""
    audit = seen["audit_csv"].set_index("figure")
    keyed = seen["report_keyed"]
    for fig, key in (
        ("agreement (judge vs human)", "agreement"),
        ("Cohen's kappa (a / b / tie)", "kappa"),
    ):
        row = audit.loc[fig]
        shown = f"{row['estimate']:.3f} [{row['lower']:.3f}, {row['upper']:.3f}]"
        assert keyed[f"audit/openai:judge-1/{key}"] == shown, (fig, shown)
    rr = seen["ranksets_csv"]
    table = next(v for k, v in seen["report_tables"].items() if k.startswith("Rank-sets by method"))
    assert len(table) == len(rr) == 6  # 2 models x (PPR, judge only, human only)
    for want, got in zip(rr.to_dict("records"), table):
        assert (got["model"], got["method"]) == (want["model"], want["method"])
        for col in ("rank", "lower", "upper", "theta", "theta_low", "theta_high"):
            assert float(got[col]) == pytest.approx(want[col], abs=1e-9), (want, got)
    wr = seen["winrates_csv"]
    table = seen["report_tables"]["Average win-rate with 95% CI and rank-set per group"]
    for want, got in zip(wr.to_dict("records"), table):
        assert got["model"] == want["model"]
        for col in ("coupled_winrate", "coupled_ci_low", "coupled_ci_high", "independent_winrate"):
            assert float(got[col]) == pytest.approx(want[col], abs=1e-9), (col, want, got)
