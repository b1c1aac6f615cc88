"""The shareable report (``python -m engine report``): one offline HTML file with every section a run
supports, paper tables, harness logs and comparison sets in one command; docs/REPORT.md.

The browser tests open each report in headless Chromium with every network request aborted and check
that nothing was requested, nothing logged an error, every figure was drawn, and that the headline
numbers are those of ``python -m engine summary --json``.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from engine import cli
from tests.conftest import ROOT
from tests.system_packages import CHROMIUM_ARGS, chromium_or_skip, pdflatex
from tests.test_app import build_small_db

HARNESS = ROOT / "tests" / "data" / "harness"
RUN_ORDER = [
    "headline",
    "design",
    "accuracy",
    "paired",
    "benchmark",
    "slices",  # per-subject A − B with simultaneous intervals
    "ranksets",
    "winrates",
    "multigen",
    "sequential",
    "race",  # a replay of racing the run's models
    "reproduce",
]


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    return build_small_db(tmp_path_factory.mktemp("report") / "small.duckdb")


@pytest.fixture(scope="module")
def reports(small, tmp_path_factory) -> dict[str, Path]:
    """The three kinds of report, each made by the CLI as a user would: a run, harness logs, a set."""
    d = tmp_path_factory.mktemp("reports")
    out = {"run": d / "run.html", "harness": d / "harness.html", "set": d / "set.html"}
    assert cli.main(["report", "--run", "run-small", "--db", str(small), "--out", str(out["run"])]) == 0
    ins = sorted((HARNESS / "inspect" / "tinyqa").iterdir())
    assert (
        cli.main(
            [
                "report",
                *map(str, ins),
                "--db",
                str(d / "h.duckdb"),
                "--name",
                "h",
                "--out",
                str(out["harness"]),
            ]
        )
        == 0
    )
    assert (
        cli.main(["report", "--set", "human-small", "--db", str(small), "--out", str(out["set"])]) == 0
    )
    return {**out, "harness_db": d / "h.duckdb"}


def _summary_json(db: Path, run: str, capsys) -> dict:
    code, out, _ = _cli(["summary", "--run", run, "--db", str(db), "--json"], capsys)
    assert code == 0
    return json.loads(out)


def _keyed(html: str) -> dict[str, float]:
    return {k: float(v) for k, v in re.findall(r'data-key="([^"]+)" data-value="([^"]+)"', html)}


def test_a_run_report_has_its_sections_in_order_plotly_once_and_nothing_from_outside(reports):
    import plotly.offline

    html = reports["run"].read_text()
    ids = re.findall(r'<section id="([^"]+)">', html)
    assert ids == RUN_ORDER
    lib = plotly.offline.get_plotlyjs()
    assert html.count(lib[:300]) == 1  # the library once, however many figures
    assert (
        len(re.findall(r'<div class="plot" id="[^"]+" data-figure=', html)) == 15
    )  # 11 + the sequential replay's two + the per-subject forest plot + the race replay's
    # outside the library: nothing the browser would fetch (external src/href, stylesheet, font, import)
    html = html.replace(lib, "")
    assert not re.search(r'(src|href)\s*=\s*"(?!#|data:)', html)
    assert "<link" not in html and "@import" not in html and "@font-face" not in html
    for key in ("Methods.", "References:", "python -m engine report --run run-small", "dataset sha256"):
        assert key in html


def test_the_headline_numbers_are_the_summary_json(reports, small, capsys):
    s = _summary_json(small, "run-small", capsys)
    got = _keyed(reports["run"].read_text())
    want = {f"accuracy/{a['model']}/{a['mode']}": a["accuracy"] for a in s["accuracy"]}
    want.update(
        {
            f"diff/{p['model_a']}/{p['model_b']}/{m}": p[f"diff_{m}"]["diff"]
            for p in s["pairs"]
            for m in ("coupled", "independent")
        }
    )
    assert want and {k: got[k] for k in want} == want


def test_harness_logs_are_imported_and_reported_in_one_command(reports, capsys):
    html = reports["harness"].read_text()
    ids = re.findall(r'<section id="([^"]+)">', html)
    assert ids[:2] == ["headline", "design"] and "harness_paired" in ids and "ranksets" in ids
    assert "benchmark" not in ids  # no coupled generations: no coupling figures
    assert "minimum detectable effect" in html and "Imported from inspect" in html
    s = _summary_json(reports["harness_db"], "h", capsys)
    got = _keyed(html)
    assert {
        f"accuracy/{a['model']}/{a['mode']}": a["accuracy"] for a in s["accuracy"]
    }.items() <= got.items()


def test_a_set_report_has_winrates_bradley_terry_and_ranksets(reports):
    html = reports["set"].read_text()
    assert re.findall(r'<section id="([^"]+)">', html) == [
        "headline",
        "winrates",
        "ranksets",
        "set_judge_audit",  # the set has judge and human labels: its judge audit
        "reproduce",
    ]
    assert "Bradley-Terry" in html and "ppr" in html
    assert set(k.split("/")[0] for k in _keyed(html)) >= {"winrate"}


def test_an_unscored_or_unknown_run_says_what_is_missing_in_one_line(small, tmp_path, capsys):
    import duckdb

    db = tmp_path / "u.duckdb"
    shutil.copy(small, db)
    con = duckdb.connect(str(db))
    con.execute(
        "INSERT INTO runs (run_id, dataset_id, config, status, n_units) VALUES ('bare', 'ds-small', '{}', "
        "'done', 1)"
    )
    con.execute(
        "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, text) VALUES "
        "('bare', 'm-base', 'q0', 0, 'coupled', 'x')"
    )
    con.close()
    out = tmp_path / "r.html"
    for run, words in (("bare", "no scores yet: score it first"), ("nope", "unknown run 'nope'")):
        code, _, err = _cli(["report", "--run", run, "--db", str(db), "--out", str(out)], capsys)
        assert code == 2 and words in err and len(err.strip().splitlines()) == 1
        assert not out.exists()
    code, _, err = _cli(["report", "--db", str(db)], capsys)
    assert code == 2 and "nothing to report" in err


def _latex_tables(tex: str) -> list[list[str]]:
    return re.findall(r"\\begin\{tabular\}\{(l+)\}(.*?)\\end\{tabular\}", tex, flags=re.S)


def test_paper_tables_markdown_latex_csv(small, tmp_path, capsys):
    outs = {}
    for fmt, ext in (("md", "md"), ("latex", "tex"), ("csv", "csv")):
        outs[fmt] = tmp_path / f"t.{ext}"
        code, _, err = _cli(
            [
                "report",
                "--run",
                "run-small",
                "--db",
                str(small),
                "--format",
                fmt,
                "--out",
                str(outs[fmt]),
            ],
            capsys,
        )
        assert code == 0, err
    tex = outs["latex"].read_text()
    tables = _latex_tables(tex)
    assert (
        len(tables) == 4
    )  # accuracy, paired differences, rank-sets, the sequential replay's stopping questions
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") == 4
    assert "Stopping question over 20 question orders" in tex
    for spec, body in tables:
        rows = [
            r
            for r in body.split(r"\\")
            if r.strip() and not r.strip().startswith(("\\toprule", "\\bottomrule"))
        ]
        rows = [r.replace(r"\midrule", "") for r in rows]
        # every row has as many cells as the column spec, and no bare special character is left
        assert all(len(re.split(r"(?<!\\)&", r)) == len(spec) for r in rows if r.strip())
        assert not re.search(r"(?<!\\)[_%#]", body)
    assert re.search(r"0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]", tex) and "excludes 0" in tex
    if pdflatex():  # compile when a TeX engine is present
        doc = tmp_path / "doc.tex"
        doc.write_text(
            "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n"
            + tex
            + "\\end{document}\n"
        )
        subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", doc.name],
            cwd=tmp_path,
            check=True,
            capture_output=True,
            timeout=120,
        )
    md = outs["md"].read_text()
    assert "| model | mode | accuracy [95% CI] |" in md and "* the 95% interval" in md
    rows = list(csv.reader(io.StringIO(outs["csv"].read_text())))
    acc = [r for r in rows if r and r[0] == "Accuracy per model and mode"]
    assert len(acc) == 6 and float(acc[0][9]) == pytest.approx(float(acc[0][3].split()[0]), abs=5e-4)


def test_report_file_name_says_what_it_is():
    import datetime

    from engine.report.build import report_file_name

    d = datetime.date(2026, 11, 26)
    assert (
        report_file_name("run-small", models=("m-base", "m-int8"), date=d)
        == "report_run-run-small_m-base_vs_m-int8_2026-11-26.html"
    )
    assert (
        report_file_name(set_name="my prefs", models=list("abcde"), ext="tex", date=d)
        == "report_set-my-prefs_a_vs_b_vs_c_+2_2026-11-26.tex"
    )


# ------------------------------------------------------------------------------- in a real browser


@pytest.mark.browser
@pytest.mark.parametrize("kind", ["run", "harness", "set"])
def test_the_report_draws_offline_in_chromium(reports, kind, small, capsys):
    chromium = chromium_or_skip()
    sync = pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")
    path = reports[kind]
    url = path.resolve().as_uri()
    requested, errors, failed = [], [], []
    with sync.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium,
            args=CHROMIUM_ARGS,
        )
        page = b.new_page(viewport={"width": 1200, "height": 1600})

        def route(r):  # every request but the report file itself is aborted, and recorded
            if r.request.url == url:
                r.continue_()
            else:
                requested.append(r.request.url)
                r.abort()

        page.route("**/*", route)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: failed.append(r.url))
        page.goto(url)
        n = page.locator("div.plot[data-figure]").count()
        page.wait_for_function(
            f"document.querySelectorAll('div.plot.js-plotly-plot .main-svg').length >= {n}",
            timeout=60_000,
        )
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('div.plot')).filter("
            "d => d.querySelector('.main-svg .plot, .main-svg .cartesianlayer') !== null).length"
        )
        keyed = page.evaluate(
            "Object.fromEntries(Array.from(document.querySelectorAll('[data-key]'))"
            ".map(e => [e.dataset.key, parseFloat(e.dataset.value)]))"
        )
        b.close()
    assert requested == [] and failed == [] and errors == []
    assert n >= 3 and drawn == n
    if kind == "run":
        s = _summary_json(small, "run-small", capsys)
        assert all(keyed[f"accuracy/{a['model']}/{a['mode']}"] == a["accuracy"] for a in s["accuracy"])
    if kind == "harness":
        s = _summary_json(reports["harness_db"], "h", capsys)
        assert all(keyed[f"accuracy/{a['model']}/{a['mode']}"] == a["accuracy"] for a in s["accuracy"])


def test_home_and_benchmark_offer_the_report_named_after_run_models_and_date(small, monkeypatch):
    """The dashboard's "Download report" buttons (Home, Benchmark), and the bytes they serve."""
    import datetime

    from streamlit.testing.v1 import AppTest

    from dashboard import downloads
    from engine.report.build import run_report_html

    monkeypatch.setenv("COUPLED_EVAL_DB", str(small))
    monkeypatch.chdir(ROOT)
    for page in ("app_pages/home.py", "app_pages/benchmark.py"):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        if page != "app_pages/home.py":
            at.switch_page(page).run()
        assert not at.exception, [e.value for e in at.exception]
        labels = [b.proto.label for b in at.get("download_button")]
        assert "Download report" in labels, labels
    name = downloads.report_name("run-small", ("m-base", "m-int8"), datetime.date(2026, 11, 26))
    assert name == "report_run-small_m-base_vs_m-int8_2026-11-26.html"
    body = run_report_html(small, "run-small", ("m-int8", "m-base")).decode()  # the pair asked for leads
    assert body.startswith("<!DOCTYPE html>") and "m-base scores higher than m-int8 by" in body
    # the Download button's file names no folder and no host
    import platform

    assert str(small.parent) not in body and f" on {platform.node()} (" not in body
    assert "host not included (--include-host)" in body


@pytest.mark.browser
def test_images_put_a_static_png_of_every_figure_in_noscript(reports):
    """--images: kaleido renders each figure once (one headless Chromium for all) for readers without JavaScript."""
    chromium_or_skip()
    from engine.report.build import run_report
    from engine.report.render_html import report_html

    rep = run_report(reports["harness_db"], "h")
    html = report_html(rep, images=True)
    imgs = re.findall(
        r'<noscript><img alt="static image of the figure"[^>]*src="data:image/png;base64,([^"]+)"', html
    )
    assert len(imgs) == rep.n_figures >= 3
    import base64

    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in imgs)


def test_the_docs_harness_command_runs_verbatim(tmp_path):
    """docs/REPORT.md and the README's "Share the results": the command on the repository's own lm-eval logs,
    run as written (from a folder that has the repository's tests/ beside it)."""
    import os
    import shlex
    import sys

    cmds = {
        line
        for doc in ("docs/REPORT.md", "README.md")
        for line in (ROOT / doc).read_text().splitlines()
        if line.startswith(".venv/bin/python -m engine report tests/data/harness/")
    }
    assert len(cmds) == 1  # the same command in both
    cmds = sorted(cmds)
    argv = shlex.split(cmds[0])
    argv[0] = sys.executable
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    db = Path(argv[argv.index("--db") + 1])
    res = subprocess.run(
        argv,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert res.returncode == 0, res.stderr
        assert '<section id="harness_paired">' in (tmp_path / argv[argv.index("--out") + 1]).read_text()
    finally:
        db.unlink(missing_ok=True)


def test_weights_digest_of_a_file_a_folder_and_a_hub_cache_link(tmp_path):
    import hashlib

    from engine.models.weights import weights_digest

    a, b = tmp_path / "m" / "a.safetensors", tmp_path / "m" / "b.safetensors"
    a.parent.mkdir()
    a.write_bytes(b"weights a")
    b.write_bytes(b"weights b")
    (tmp_path / "m" / "config.json").write_text("{}")  # not a weight file
    sa, sb = (hashlib.sha256(x).hexdigest() for x in (b"weights a", b"weights b"))
    assert weights_digest(str(a)) == sa
    assert (
        weights_digest(str(a.parent))
        == hashlib.sha256(f"a.safetensors:{sa}\nb.safetensors:{sb}\n".encode()).hexdigest()
    )
    blob = tmp_path / "blobs" / ("f" * 64)  # a Hugging Face cache blob: named by its digest, not read
    blob.parent.mkdir()
    blob.write_bytes(b"not what the name says")
    (tmp_path / "snap.safetensors").symlink_to(blob)
    assert weights_digest(str(tmp_path / "snap.safetensors")) == "f" * 64
    assert weights_digest("HuggingFaceTB/not-here") is None and weights_digest(None) is None


def test_the_design_shows_what_the_run_recorded(small, tmp_path):
    import duckdb

    from engine.analysis.run_design import run_design

    db = tmp_path / "d.duckdb"
    shutil.copy(small, db)
    con = duckdb.connect(str(db))
    con.execute(
        "UPDATE models SET config = ? WHERE name = 'm-base'",
        [json.dumps({"dtype": "float32", "device": "cpu", "weights_sha256": "ab" * 32})],
    )
    con.close()
    d = run_design(db, "run-small")
    m = {x.name: x for x in d.models}
    assert m["m-base"].weights_sha256 == "ab" * 32 and m["m-base"].dtype == "float32"
    assert m["m-int8"].weights_sha256 is None  # not recorded: never a guess
    assert (
        d.seed == 7 and d.repeats == 4 and d.modes == ["coupled", "independent"] and d.temperature == 0.7
    )
    assert d.dataset is not None and len(d.dataset.sha256) == 64 and d.dataset.n_prompts_used == 40
    assert d.engine_version == "test" and d.git_commit is None  # code_version "test": no commit part


def test_reproduce_gives_the_run_s_own_generate_command(small, tmp_path):
    import duckdb

    from engine.report.context import RunContext
    from engine.report.run_more import reproduce_section

    db = tmp_path / "c.duckdb"
    shutil.copy(small, db)
    cmd = [
        "python",
        "-m",
        "engine",
        "generate",
        "--models",
        "m-base",
        "m-int8",
        "--dataset",
        "demo",
        "--run-id",
        "r x",
    ]
    con = duckdb.connect(str(db))
    cfg = json.loads(
        con.execute("SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = 'run-small'").fetchone()[0]
    )
    con.execute(
        "UPDATE runs SET config = ? WHERE run_id = 'run-small'", [json.dumps({**cfg, "command": cmd})]
    )
    con.close()
    code = reproduce_section(RunContext(db, "run-small", db_label="my db.duckdb")).code
    assert code[0] == "python -m engine generate --models m-base m-int8 --dataset demo --run-id 'r x'"
    assert code[1] == "python -m engine score --run run-small --rule paper --db 'my db.duckdb'"
    assert code[-1] == "python -m engine report --run run-small --db 'my db.duckdb' --out report.html"


@pytest.mark.parametrize("bad", [1.5, 0, float("nan"), "x"])
def test_a_bad_alpha_is_one_line_before_anything_is_read(tmp_path, bad):
    """Run and set reports check alpha with the rank-sets' one rule (a non-number named too), before
    the database is opened."""
    from engine.errors import UserError
    from engine.report.context import RunContext
    from engine.report.set_sections import SetContext

    missing = tmp_path / "none.duckdb"
    with pytest.raises(UserError, match=r"alpha must be (a number )?in \(0, 1\); got"):
        RunContext(missing, "r", alpha=bad)
    with pytest.raises(UserError, match=r"alpha must be (a number )?in \(0, 1\); got"):
        SetContext(missing, "s", None, bad, 0, None, None)
    assert not missing.exists()


# ------------------------------------------------------------- the text says what the numbers say


def test_the_win_rate_text_counts_ties_as_the_numbers_do(reports):
    """The set report's methods said "ties counting half" while its win-rates count a tie
    as a non-win (engine/stats/winrates.py); one definition, stated where the numbers are."""
    html = reports["set"].read_text()
    assert not re.search(r"ties? (count(s|ing)?|as) half", html)
    assert html.count("a tie counts as a non-win for both") >= 2  # the headline table and the methods
    run = reports["run"].read_text()  # a run with judge verdicts: its win-rates section says it too
    sec = re.search(r'<section id="winrates">.*?</section>', run, re.S)[0]
    assert "a tie counts as a non-win for both" in sec


def test_the_star_note_appears_only_with_a_starred_row(reports):
    for kind in ("run", "harness"):
        html = reports[kind].read_text()
        for table in re.findall(r"<table>.*?</table>(?:<p class=\"foot\">.*?</p>)?", html, re.S):
            starred = bool(re.search(r"\]\*</td>", table))
            assert ("* the 95% interval" in table) == starred, table[:200]


def test_an_lm_eval_group_report_names_its_subtasks_and_the_files_to_reimport(tmp_path):
    import html as H

    logs = [str(HARNESS / "lm_eval" / "tinygroup" / m) for m in ("dummy-a", "dummy-b")]
    out = tmp_path / "g.html"
    assert cli.main(["report", *logs, "--db", str(tmp_path / "g.duckdb"), "--out", str(out)]) == 0
    html = out.read_text()
    assert "group tinygroup = subtasks tinyg_a, tinyg_b" in html
    code = H.unescape(re.search(r'<section id="reproduce">.*?<pre><code>(.*?)</code>', html, re.S)[1])
    first = code.splitlines()[0]
    assert first.startswith("python -m engine report dummy-a dummy-b --name harness-tinygroup")
    assert str(HARNESS) not in html and str(tmp_path) not in html
