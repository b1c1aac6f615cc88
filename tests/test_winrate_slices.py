"""``engine winrates --by category`` (engine/analysis/winrate_slices.py, the clustered form of
engine/stats/slices.py): an exact tiny case worked by hand, the weighted slice moments against a naive
loop, the per-category difference against the win-rate matrix, a seeded simulation of the simultaneous
coverage with prompts as clusters, the CLI's --json shape, the refusals, the category column through
CSV / Arena import, export and a schema-5 database migrating."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from engine import store
from engine.analysis.winrate_slices import winrate_slices, winrate_slices_for
from engine.cli import main
from engine.errors import UserError
from engine.stats import slices as SL
from engine.stats import winrates as WR
from engine.tasks.comparisons import export_comparison_set, import_comparisons, read_comparison_set

# x vs y in two categories; s1's prompt p1 holds two comparisons (one in each order), both won by x
TINY = (
    "prompt_id,model_a,model_b,winner,category\n"
    "p1,x,y,a,s1\n"
    "p1,y,x,b,s1\n"
    "p2,x,y,tie,s1\n"
    "p3,x,y,b,s1\n"
    "p4,y,x,b,s2\n"
    "p5,x,y,a,s2\n"
    "p6,x,y,tie,s2\n"
    "p7,x,z,a,s2\n"
)


def _frame(text: str) -> pd.DataFrame:
    from engine.store.comparison_files import validate_comparisons_csv

    df, problems = validate_comparisons_csv(text.encode(), repeats=True)
    assert problems == []
    return df


def test_an_exact_tiny_case_worked_by_hand():
    res = winrate_slices_for(_frame(TINY), "tiny", "x", "y")
    s1, s2 = res.slices
    # s1: clusters p1 (m = 2, d = +1), p2 (1, 0), p3 (1, −1): W_xy = 2/4, W_yx = 1/4 (the tie a non-win)
    assert (s1.slice, s1.n, s1.n_prompts) == ("s1", 4, 3)
    assert (s1.winrate_a, s1.winrate_b, s1.difference) == pytest.approx((0.5, 0.25, 0.25))
    mbar, N2 = 4 / 3, 4 + 2 * 4 / 3  # the pseudo-clusters' rows; N'
    adj = 1 / N2  # Σ m d / N' = 0.15
    ss = 4 * (1 - adj) ** 2 + adj**2 + (1 + adj) ** 2
    ss += mbar**2 * (0.5 * (1 - adj) ** 2 + 0.5 * (1 + adj) ** 2 + adj**2)
    se1 = np.sqrt(5 / 4 * ss) / N2  # n' = 3 + 2 clusters: CR1 factor n'/(n' − 1)
    # s2: p4 (x wins), p5 (x wins), p6 (tie), each one comparison: the unweighted formula
    adj2 = 2 / 5
    ss2 = 2 * (1 - adj2) ** 2 + adj2**2 + 0.5 * (1 - adj2) ** 2 + 0.5 * (1 + adj2) ** 2 + adj2**2
    se2 = np.sqrt(ss2 / (4 * 5))
    assert (s2.n, s2.n_prompts, s2.winrate_a, s2.winrate_b) == (3, 3, pytest.approx(2 / 3), 0.0)
    c = st.t.ppf(1 - (1 - 0.95**0.5) / 2, 2)  # two slices of df 2: the Sidak quantile
    assert res.critical_value == pytest.approx(c)
    assert (s1.lower, s1.upper) == pytest.approx((max(-1, adj - c * se1), min(1, adj + c * se1)))
    assert (s2.lower, s2.upper) == pytest.approx((max(-1, adj2 - c * se2), min(1, adj2 + c * se2)))
    p = 2 * st.t.sf(np.array([adj / se1, adj2 / se2]), 2)
    assert [s1.p_value, s2.p_value] == pytest.approx(p.tolist())
    assert [s1.p_adjusted, s2.p_adjusted] == pytest.approx(SL.bh_adjust(p).tolist())
    # the pooled difference over both categories: 7 comparisons of x and y, x preferred 4 times, y once
    assert res.overall["difference"] == pytest.approx(3 / 7) and res.n == 7 and res.n_clusters == 6
    # the order of the pair is the user's: B − A flips every sign
    rev = winrate_slices_for(_frame(TINY), "tiny", "y", "x")
    assert [s.difference for s in rev.slices] == pytest.approx([-0.25, -2 / 3])


def _moments_naive(d, sl, w, S):
    """Per slice, the module docstring's formulas written out cluster by cluster."""
    out = []
    for s in range(S):
        dc, mc = d[sl == s], w[sl == s]
        n, N = len(dc), mc.sum()
        mbar = N / n
        N2 = N + 2 * mbar
        adj = sum(m * x for m, x in zip(mc, dc)) / N2
        ss = sum((m * (x - adj)) ** 2 for m, x in zip(mc, dc))
        ss += mbar**2 * (0.5 * (1 - adj) ** 2 + 0.5 * (1 + adj) ** 2 + adj**2)
        se = np.sqrt((n + 2) / (n + 1) * ss) / N2
        out.append((n, sum(m * x for m, x in zip(mc, dc)) / N, adj, se))
    return np.array(out).T


def test_weighted_moments_against_a_naive_loop_and_the_unweighted_form():
    rng = np.random.default_rng(5)
    S = 6
    sl = rng.integers(0, S, 90)
    w = rng.integers(1, 6, 90).astype(float)
    d = np.array([rng.choice([-1.0, 0.0, 1.0], int(m)).mean() for m in w])
    got = np.array(SL.slice_moments(d, sl, S, w))
    np.testing.assert_allclose(got, _moments_naive(d, sl, w, S), rtol=1e-12)
    # every m_c = 1: the benchmark's (unweighted) moments, unchanged
    np.testing.assert_allclose(SL.slice_moments(d, sl, S, np.ones(90)), SL.slice_moments(d, sl, S))
    with pytest.raises(UserError, match="weights"):
        SL.slice_differences(d, sl, S, weights=np.zeros(90))


def test_each_category_equals_the_win_rate_matrix_on_its_rows():
    """Two implementations: the per-category W_AB − W_BA against engine.stats.winrates' matrix."""
    rng = np.random.default_rng(11)
    n = 400
    models = np.array(["m0", "m1", "m2"])
    i = rng.integers(0, 3, n)
    j = (i + rng.integers(1, 3, n)) % 3
    df = pd.DataFrame(
        {
            "prompt_id": [f"q{k}" for k in rng.integers(0, 150, n)],
            "model_a": models[i],
            "model_b": models[j],
            "human_winner": rng.choice(["a", "b", "tie"], n, p=[0.45, 0.35, 0.2]),
            "judge_winner": None,
        }
    )
    df["category"] = ["c" + str(int(p[1:]) % 4) for p in df.prompt_id]
    res = winrate_slices_for(df, "sim", "m2", "m0")
    for s in res.slices:
        part = df[df.category == s.slice]
        codes = np.select([part.human_winner == "a", part.human_winner == "b"], [0, 1], 2)
        W, _, N = WR.winrate_matrix(
            part.model_a.map({"m0": 0, "m1": 1, "m2": 2}), part.model_b.map({"m0": 0, "m1": 1, "m2": 2}),
            codes, 3,
        )  # fmt: skip
        assert s.n == N[2, 0] and s.difference == pytest.approx(W[2, 0] - W[0, 2])
        assert (s.winrate_a, s.winrate_b) == pytest.approx((W[2, 0], W[0, 2]))


def test_simultaneous_coverage_with_prompts_as_clusters():
    """Seeded: 8 categories of 15-40 prompts, each prompt 1-4 comparisons sharing the prompt's own
    P(A, B, tie) (a Dirichlet draw around its category's: clustered), alpha 0.05, 300 replications.
    The max-t intervals cover every category's Δ_s = P(A) − P(B) at once in >= 0.95 - 2 MC s.e. (0.959
    over 3,000 replications); per-category 95% intervals that count comparisons as independent, and
    the max-t ones with comparisons as independent (no clusters), cover all at once far less (about
    0.75 for the latter)."""
    rng = np.random.default_rng(36)
    S, reps, alpha = 8, 300, 0.05
    base = rng.dirichlet([3, 3, 2], S)  # per category: P(A preferred), P(B preferred), P(tie)
    truth = base[:, 0] - base[:, 1]
    sizes = rng.integers(15, 41, S)
    cat = np.repeat(np.arange(S), sizes)
    P = cat.size
    cover = naive = rows_only = 0
    for _ in range(reps):
        g = rng.gamma(2 * base[cat])  # (P, 3): a prompt's own probabilities, Dirichlet(2 base) by gammas
        cum = np.cumsum(g / g.sum(axis=1, keepdims=True), axis=1)
        m = rng.integers(1, 5, P)
        u = rng.random((P, 4))
        rows = np.where(u < cum[:, [0]], 1.0, np.where(u < cum[:, [1]], -1.0, 0.0))  # (P, 4)
        used = np.arange(4)[None, :] < m[:, None]
        d = np.where(used, rows, 0).sum(axis=1) / m
        out = SL.slice_differences(d, cat, S, alpha, weights=m)
        cover += bool(np.all((out["lower"] <= truth) & (truth <= out["upper"])))
        # per category, rows as independent: the row mean with a row-level SE and the 95% t quantile
        x, c = rows[used], np.repeat(cat, m)
        k = np.bincount(c, minlength=S)
        mean = np.bincount(c, weights=x, minlength=S) / k
        sd = np.sqrt(np.bincount(c, weights=(x - mean[c]) ** 2, minlength=S) / (k - 1))
        naive += bool(np.all(np.abs(mean - truth) <= st.t.ppf(0.975, k - 1) * sd / np.sqrt(k)))
        o = SL.slice_differences(x, c, S, alpha)  # max-t, but rows as independent: clustering ignored
        rows_only += bool(np.all((o["lower"] <= truth) & (truth <= o["upper"])))
    rate, se = cover / reps, np.sqrt(0.95 * 0.05 / reps)
    assert rate >= 0.95 - 2 * se, rate
    assert naive / reps < 0.8, naive / reps
    assert rows_only / reps < 0.85, rows_only / reps


@pytest.fixture
def cat_db(tmp_db, tmp_path):
    import_comparisons(tmp_db, TINY.encode(), "tiny", fmt="csv")
    plain = "prompt_id,model_a,model_b,winner\np1,x,y,a\np2,x,y,b\n"
    import_comparisons(tmp_db, plain.encode(), "plain", fmt="csv")
    return tmp_db


def test_cli_json_shape_and_the_stored_set(cat_db, tmp_path, capsys):
    assert main(["winrates", "--db", str(cat_db), "--set", "tiny", "--by", "category",
                 "--model-a", "x", "--model-b", "y", "--json"]) == 0  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert d["models"] == ["x", "y"] and d["by"] == "category" and d["label"] == "human"
    assert [s["slice"] for s in d["slices"]] == ["s1", "s2"]
    for s in d["slices"]:
        assert {"slice", "n", "difference", "lower", "upper", "p_adjusted"} <= set(s)
    assert d["slices"][0]["difference"] == pytest.approx(0.25)
    assert d == json.loads(json.dumps(winrate_slices(cat_db, "tiny", "x", "y").to_dict()))
    csv = tmp_path / "tiny.csv"
    csv.write_text(TINY)
    assert main(["winrates", "--comparisons", str(csv), "--by", "category", "--models", "x,y"]) == 0
    out = capsys.readouterr().out
    assert "W(x > y) − W(y > x)" in out and "s1" in out and "a tie is a non-win" in out


def test_refusals_are_one_line(cat_db, tmp_path, capsys):
    assert main(["winrates", "--db", str(cat_db), "--set", "plain", "--by", "category"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "comparison set 'plain' has no categories" in err and "add a 'category' column" in err
    assert "comparisons export plain --out set.csv" in err and "--name plain --replace" in err
    csv = tmp_path / "plain.csv"
    csv.write_text("prompt_id,model_a,model_b,winner\np1,x,y,a\n")
    assert main(["winrates", "--comparisons", str(csv), "--by", "category"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{csv} has no categories" in err and "add a 'category' column to the CSV" in err
    with pytest.raises(UserError, match="3 models; pass --model-a and --model-b"):
        winrate_slices(cat_db, "tiny")  # x, y and z: which pair is not guessed
    with pytest.raises(UserError, match="'w' is in no comparison"):
        winrate_slices(cat_db, "tiny", "x", "w")
    two = TINY.replace("p5,x,y,a,s2", "p1,x,y,a,s2")  # prompt p1 now in s1 and s2
    with pytest.raises(UserError, match="prompt 'p1' has rows in 2 categories"):
        winrate_slices_for(_frame(two), "two", "x", "y")


def test_the_category_column_through_import_and_export(tmp_db, tmp_path):
    res = import_comparisons(tmp_db, TINY.encode(), "tiny", fmt="csv")
    assert res["n_categories"] == 2
    text = export_comparison_set(tmp_db, "tiny").replace("\r\n", "\n")
    assert text.splitlines()[0].endswith(",category") and text.splitlines()[1].endswith(",s1")
    import_comparisons(tmp_db, text.encode(), "again", fmt="csv")
    assert export_comparison_set(tmp_db, "again").replace("\r\n", "\n") == text
    arena = tmp_path / "h.json"
    arena.write_text(
        '{"num": 0, "question_id": "q1", "model_a": "x", "model_b": "y", "winner": "model_a", '
        '"category": "coding"}\n'
        '{"num": 1, "question_id": "q2", "model_a": "y", "model_b": "x", "winner": "tie"}\n'
    )
    import_comparisons(tmp_db, arena, "arena", fmt="arena")
    assert read_comparison_set(tmp_db, "arena").category.tolist() == ["coding", None]
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_a": "x", "model_b": "y", "winner": "tie", "category": ["a"]}\n')
    with pytest.raises(UserError, match="category.*must be an integer or a string"):
        import_comparisons(tmp_db, bad, "bad", fmt="arena")


def test_a_schema_5_database_migrates_and_keeps_its_sets(tmp_path):
    from engine.store.schema import MIGRATIONS
    from tests.test_store_integrity import make_v1

    db = tmp_path / "v5.duckdb"
    make_v1(db)
    con = duckdb.connect(str(db))
    for version, stmts in MIGRATIONS:
        if version < 5:
            for sql in stmts:
                con.execute(sql)
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.execute(
        "INSERT INTO comparison_sets (name, source, n_rows, meta) VALUES ('old', 'f.csv', 1, '{}')"
    )
    con.execute("INSERT INTO comparisons (set_name, row_idx, prompt_id, model_a, model_b, human_winner) "
                "VALUES ('old', 0, 'p1', 'x', 'y', 'a')")  # fmt: skip
    con.close()
    with pytest.raises(UserError, match="schema version 5 .*db migrate"):
        read_comparison_set(db, "old")
    res = store.migrate(db)
    assert (res["from_version"], res["to_version"]) == (5, store.SCHEMA_VERSION) and res["backup"]
    old = read_comparison_set(db, "old")
    assert old.iloc[0][["prompt_id", "human_winner", "category"]].tolist() == ["p1", "a", None]
    import_comparisons(db, TINY.encode(), "tiny", fmt="csv")
    assert [s.slice for s in winrate_slices(db, "tiny", "x", "y").slices] == ["s1", "s2"]


def test_the_set_report_has_the_per_category_section(cat_db):
    from types import SimpleNamespace

    from engine.report.set_sections import SET_SECTIONS
    from engine.report.set_slices import set_slices_section

    assert set_slices_section in SET_SECTIONS
    ctx = SimpleNamespace(db=cat_db, name="tiny", _models=["x", "y"], label="human", alpha=0.05)
    sec = set_slices_section(ctx)
    assert sec is not None and "x vs y" in sec.title and "--by category" in sec.methods
    assert len(sec.figures[0].table.rows) == 2 and "0.25" in sec.figures[0].table.rows[0][5].text
    assert set_slices_section(SimpleNamespace(db=cat_db, name="plain", _models=["x", "y"])) is None


def test_winrates_page_draws_the_categories(cat_db, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard import navigation
    from tests.conftest import ROOT

    monkeypatch.setenv("COUPLED_EVAL_DB", str(cat_db))
    monkeypatch.setenv("COUPLED_EVAL_SHARED", str(tmp_path / "no-shared"))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.session_state["wr_reps"] = 200  # the page's smallest bootstrap: this test reads no interval of it
    at.run()
    at.switch_page(navigation.path("winrates")).run()
    assert at.selectbox(key="wr_source").value == 0  # the first set: "tiny", stored first
    assert not at.exception, [e.value for e in at.exception]
    at.selectbox(key="wr_cat_a").set_value("x")
    at.selectbox(key="wr_cat_b").set_value("y")
    at.run()
    tables = [df.value for df in at.dataframe if "p_adjusted" in df.value.columns]
    assert tables and tables[0]["slice"].tolist() == ["s1", "s2"]
    assert tables[0]["difference"].tolist()[0] == pytest.approx(0.25)
    assert any("holds for all 2 categories at once" in c.value for c in at.caption)
    at.selectbox(key="wr_source").select_index(1).run()  # "plain": no categories, says how to add them
    assert not at.exception, [e.value for e in at.exception]
    assert any("has no categories" in i.value for i in at.info)
