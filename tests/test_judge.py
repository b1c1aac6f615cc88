"""LLM-as-judge: verdict parsing, presentation-order handling, unparseable counting, resume."""

from __future__ import annotations

import glob
import re

import pytest

from engine import store
from engine.errors import UserError
from engine.tasks import judge as J
from tests.conftest import shared_path
from tests.test_scoring import make_run

RANK = {"m1": 0, "m2": 1, "m3": 2}  # the stub judge prefers lower rank; m1 best


def make_judge_run(
    db, n_prompts=3, repeats=2, models=("m1", "m2", "m3"), modes=("coupled", "independent"), drop=()
):
    prompts = [(f"q{i}", None, None, f"Question {i}?") for i in range(n_prompts)]
    gens = [
        (m, f"q{i}", r, mode, f"answer of {m} to q{i} r{r} {mode}")
        for m in models
        for i in range(n_prompts)
        for r in range(repeats)
        for mode in modes
        if (m, f"q{i}", r, mode) not in drop
    ]
    make_run(db, gens, prompts, models=models)
    return gens


def answers_shown(messages):
    user = messages[1]["content"]
    first = re.search(r"Assistant A's Answer\|>\nanswer of (m\d)", user).group(1)
    second = re.search(r"Assistant B's Answer\|>\nanswer of (m\d)", user).group(1)
    return first, second


class StubJudge:
    """Prefers the better-ranked model; 'tie' on q1 repeat 0; garbage for q2 repeat 1."""

    def __init__(self, fail_after_calls=None):
        self.calls, self.n_prompts, self.fail_after_calls = 0, 0, fail_after_calls

    def __call__(self, messages_list):
        if self.fail_after_calls is not None and self.calls >= self.fail_after_calls:
            raise KeyboardInterrupt("simulated kill")
        self.calls += 1
        self.n_prompts += len(messages_list)
        out = []
        for msgs in messages_list:
            assert msgs[0] == {"role": "system", "content": J.PAPER_JUDGE_PROMPT}
            first, second = answers_shown(msgs)
            if "q1 r0" in msgs[1]["content"]:
                out.append("Tie")
            elif "q2 r1" in msgs[1]["content"]:
                out.append("I like both of them, hard to say")
            else:
                out.append("[[A]]" if RANK[first] < RANK[second] else "B is better")
        return out


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("A", "A"),
        ("B", "B"),
        ("Tie", "tie"),
        ("tie", "tie"),
        ("‘A’", "A"),
        ("'B'", "B"),
        ("[[A]]", "A"),
        ("[[A>B]]", "A"),
        ("[[B>>A]]", "B"),
        ("[[A=B]]", "tie"),
        ("A is better", "A"),
        ("Verdict: B", "B"),
        ("My final verdict is tie", "tie"),
        ("**B**", "B"),
        ("Assistant B is better", "B"),
        ("b", "B"),
        ("B.", "B"),
        ("a tie", "tie"),
        ("  A\n\nBecause", "A"),
        ("Both A and B", None),
        ("", None),
        ("I cannot decide", None),
        (None, None),
        ("Either A or B, or a tie", None),
    ],
)
def test_parse_verdict(raw, expected):
    assert J.parse_verdict(raw) == expected


@pytest.mark.parametrize(
    "parsed,presented,winner",
    [
        ("A", "ab", "a"),
        ("B", "ab", "b"),
        ("A", "ba", "b"),
        ("B", "ba", "a"),
        ("tie", "ba", "tie"),
        (None, "ab", None),
    ],
)
def test_order_handling(parsed, presented, winner):
    assert J.winner_from_verdict(parsed, presented) == winner


@pytest.mark.shared
def test_paper_prompt_is_verbatim_from_appendix_c():
    path = shared_path("seeds")
    text = open(glob.glob(str(path / "002_*.txt"))[0], encoding="utf-8").read()
    line = next(l for l in text.splitlines() if l.startswith("System: Please act as an impartial judge"))
    assert J.PAPER_JUDGE_PROMPT == line[len("System: ") :]


def test_build_messages_swaps_for_ba():
    cfg = J.JudgeConfig("j")
    ab = J.build_messages(cfg, "Q?", "first {x}", "second", "ab")[1]["content"]
    ba = J.build_messages(cfg, "Q?", "first {x}", "second", "ba")[1]["content"]
    assert ab.index("first {x}") < ab.index("second") and ba.index("second") < ba.index("first {x}")
    assert ab.startswith("<|User Prompt|>\nQ?\n")


def test_config_validation():
    with pytest.raises(UserError, match="unknown orders 'some'; allowed: both, random"):
        J.JudgeConfig("j", orders="some")
    with pytest.raises(UserError, match="exactly the fields"):
        J.JudgeConfig("j", user_template="{question} {answer_a}")
    with pytest.raises(UserError, match="batch_size"):
        J.JudgeConfig("j", batch_size=0)


def test_judge_run_both_orders_known_verdicts(tmp_db):
    make_judge_run(tmp_db)
    stub = StubJudge()
    cfg = J.JudgeConfig("stub", batch_size=5)
    s = J.judge_run(tmp_db, "r1", "stub", cfg, complete_fn=stub, show_bar=False)
    n_units = 3 * 2 * 2  # prompts x repeats x modes
    assert s.n_tasks == n_units * 3 * 2 == stub.n_prompts  # 3 pairs, 2 orders
    assert s.n_unparseable == 3 * 2 * 2 and s.stored_verdicts["tie"] == 3 * 2 * 2
    assert (
        s.stored_verdicts_by_mode["coupled"]["unparseable"]
        == 6
        == s.stored_verdicts_by_mode["independent"]["tie"]
    )
    df = store.query_df(tmp_db, "SELECT * FROM judgments")
    assert len(df) == s.n_tasks and set(df.presented) == {"ab", "ba"}
    assert (df.judge_prompt_hash == cfg.prompt_hash).all()
    decided = df[df.parsed.isin(["A", "B"])]
    # the stub always prefers the better-ranked model: in model terms model_a (earlier in the run) wins
    assert (decided.winner == "a").all() and len(decided) == n_units * 6 - 24
    # a 'ba' presentation with parsed 'B' means model_a won (model_a was shown second)
    assert set(decided[decided.presented == "ba"].parsed) == {"B"}
    assert (
        df[df.parsed.isna()].raw.str.contains("hard to say").all()
        and df[df.parsed.isna()].winner.isna().all()
    )
    # vectorised comparisons equal a naive loop over stored rows
    comp = J.judgments_to_comparisons(tmp_db, "r1", "stub", "coupled")
    naive = [
        J.winner_from_verdict(p if isinstance(p, str) else None, o)
        for p, o, m in zip(df.parsed, df.presented, df["mode"])
        if m == "coupled"
    ]
    assert sorted(comp.winner, key=str) == sorted(naive, key=str) and len(comp) == n_units * 3
    assert comp.judge_winner.tolist() == comp.winner.tolist() and comp.human_winner.isna().all()
    agree = J.judgments_to_comparisons(tmp_db, "r1", "stub", "coupled", combine="agree")
    assert (
        len(agree) == 3 * 2 * 3 and agree.winner.isna().sum() == 3 and (agree.winner == "tie").sum() == 3
    )


def test_random_orders_are_seeded_and_fair(tmp_db):
    """One seeded order per (unit, pair), the same in both modes, whatever the batching or resume,
    fair, and changed by the seed; verdicts mapped back to models through it."""
    make_judge_run(
        tmp_db, n_prompts=40, repeats=1, models=("m1", "m2"), modes=("coupled", "independent")
    )

    def orders(judge, seed, batch_size, parts=1):
        cfg = J.JudgeConfig(judge, orders="random", seed=seed, batch_size=batch_size)
        for _ in range(parts):  # judged in parts: a resumed run must draw the same orders
            J.judge_run(
                tmp_db,
                "r1",
                judge,
                cfg,
                complete_fn=StubJudge(),
                show_bar=False,
                max_requests=80 // parts,
            )
        df = store.query_df(
            tmp_db,
            "SELECT prompt_id, mode, presented, winner FROM judgments WHERE judge = ? "
            "ORDER BY mode, prompt_id",
            [judge],
        )
        assert len(df) == 80
        return df

    df = orders("stub", 7, 16)
    coupled, indep = (
        df[df["mode"] == m].set_index("prompt_id").presented for m in ("coupled", "independent")
    )
    assert (coupled == indep).all()  # the mode does not enter: both modes see the same positions
    assert 8 < (coupled == "ab").sum() < 32  # a fair coin; P(outside) < 1e-4
    assert (
        (df.winner == "a") | df.prompt_id.isin(["q1", "q2"])
    ).all()  # the preferred model wins in either order
    assert orders("stub-rebatched", 7, 3, parts=4).presented.tolist() == df.presented.tolist()
    assert orders("stub-seed8", 8, 16).presented.tolist() != df.presented.tolist()  # P(equal) = 2**-40


def test_resume_after_kill_judges_only_what_is_missing(tmp_db, tmp_path):
    make_judge_run(tmp_db)
    cfg = J.JudgeConfig("stub", batch_size=7)
    killed = tmp_path / "killed.json"
    with pytest.raises(KeyboardInterrupt):
        J.judge_run(
            tmp_db,
            "r1",
            "stub",
            cfg,
            complete_fn=StubJudge(fail_after_calls=3),
            show_bar=False,
            progress_file=killed,
        )
    assert store.table_counts(tmp_db)["judgments"] == 21  # 3 batches stored, nothing half-written
    from engine.progress import read_progress

    assert read_progress(killed)["status"] == "cancelled" and read_progress(killed)["done"] == 21
    stub = StubJudge()
    prog = tmp_path / "p.json"
    s = J.judge_run(tmp_db, "r1", "stub", cfg, complete_fn=stub, progress_file=prog, show_bar=False)
    assert s.n_skipped_existing == 21 and stub.n_prompts == s.n_tasks - 21 == s.n_judged_now
    from engine.progress import read_progress

    p = read_progress(prog)
    assert p["status"] == "done" and p["done"] == p["total"] == s.n_tasks
    again = J.judge_run(
        tmp_db, "r1", "stub", cfg, complete_fn=StubJudge(fail_after_calls=0), show_bar=False
    )
    assert again.n_judged_now == 0 and again.stored_verdicts == s.stored_verdicts
    # a different prompt over stored rows needs --replace
    other = J.JudgeConfig("stub", prompt_template="Judge briefly.", batch_size=50)
    with pytest.raises(UserError, match="different judge prompt"):
        J.judge_run(tmp_db, "r1", "stub", other, complete_fn=StubJudge(), show_bar=False)


def test_missing_generations_are_counted_not_judged(tmp_db):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, modes=("coupled",), drop={("m3", "q0", 0, "coupled")})
    s = J.judge_run(tmp_db, "r1", "stub", J.JudgeConfig("stub"), complete_fn=StubJudge(), show_bar=False)
    assert s.n_pairs_missing_generation == 2 and s.n_tasks == (2 * 3 - 2) * 2


def test_bad_inputs(tmp_db):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1",), modes=("coupled",))
    with pytest.raises(UserError, match="one model only"):
        J.judge_run(tmp_db, "r1", "stub", complete_fn=StubJudge(), show_bar=False)
    with pytest.raises(UserError, match="run 'zz' has no generations"):
        J.judge_run(tmp_db, "zz", "stub", complete_fn=StubJudge(), show_bar=False)
    with pytest.raises(UserError, match="unknown combine"):
        J.judgments_to_comparisons(tmp_db, "r1", "stub", combine="avg")


def test_external_command_hook(tmp_db, tmp_path):
    script = tmp_path / "judge.py"
    script.write_text(
        "import sys, json\nfor line in sys.stdin:\n    json.loads(line)\n    print(json.dumps('A'))\n"
    )
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))
    import sys

    fn = J.command_complete_fn(f"{sys.executable} {script}")
    s = J.judge_run(tmp_db, "r1", "ext", J.JudgeConfig("ext"), complete_fn=fn, show_bar=False)
    df = store.query_df(tmp_db, "SELECT presented, winner FROM judgments ORDER BY presented")
    assert s.n_judged_now == 4 and df.winner.tolist() == ["a", "a", "b", "b"]
    with pytest.raises(UserError, match="not found"):
        J.command_complete_fn("/no/such/judge-binary")([[{"role": "user", "content": "x"}]])


def test_end_to_end_with_tiny_model(tmp_db):
    """A real (random, tiny) model judges through engine.generation.complete: every output is
    stored raw, parsed or counted unparseable; nothing is lost."""
    from engine import generation, models
    from engine.testing import tiny_lm

    lm = models.from_objects("tiny", *tiny_lm(0))
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled", "independent"))

    def complete(msgs):
        return generation.complete(lm, msgs, max_new_tokens=4, temperature=0.0)

    # a short system prompt: the char-level tiny tokenizer would make the paper's ~1,700 tokens
    cfg = J.JudgeConfig("tiny", prompt_template="Say A, B or tie.", batch_size=3)
    s = J.judge_run(tmp_db, "r1", "tiny", cfg, complete_fn=complete, show_bar=False)
    df = store.query_df(tmp_db, "SELECT raw, parsed, winner, presented FROM judgments")
    assert s.n_tasks == 8 == len(df) and df.raw.notna().all()
    assert sum(s.stored_verdicts.values()) == 8
    assert s.n_unparseable == int(df.parsed.isna().sum())
    assert [J.parse_verdict(r) for r in df.raw] == [p if isinstance(p, str) else None for p in df.parsed]


def test_local_judge_stores_its_resolved_model_and_batch_latency(tmp_db, tmp_path):
    """The transformers judge ``--judge FOLDER`` builds (``model_complete_fn``, a tiny model saved as a
    folder): every verdict stores the folder it resolved to as its reported model and the wall time
    of its batch as its latency (one value per batch of ``batch_size``, all within the run's time)."""
    import time

    from engine.commands._judges import model_complete_fn
    from engine.testing import tiny_lm

    folder = tmp_path / "tiny-judge"
    m, t = tiny_lm(0)
    m.save_pretrained(folder)
    t.save_pretrained(folder)
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled", "independent"))
    cfg = J.JudgeConfig(str(folder), prompt_template="Say A, B or tie.", batch_size=3, max_new_tokens=4)
    fn = model_complete_fn(str(folder), max_new_tokens=4, batch_size=3)
    t0 = time.perf_counter()
    s = J.judge_run(tmp_db, "r1", "tiny", cfg, complete_fn=fn, show_bar=False)
    elapsed = time.perf_counter() - t0
    df = store.query_df(tmp_db, "SELECT reported_model, latency_s, attempts FROM judgments")
    assert s.n_tasks == 8 == len(df)
    assert (df.reported_model == str(folder.resolve())).all() and (df.attempts == 1).all()
    assert df.latency_s.notna().all() and (df.latency_s > 0).all()
    per_batch = df.latency_s.value_counts()
    assert sorted(per_batch.tolist()) == [2, 3, 3]  # batches of 3, 3 and 2 verdicts
    assert per_batch.index.to_series().sum() <= elapsed
    assert s.stored_usage.mean_latency_s == pytest.approx(df.latency_s.mean())


def test_batch_judge_latency_is_the_batch_wall_time(tmp_db, monkeypatch):
    """A stub that takes a known time per batch on a fake clock (no timing window that a loaded
    machine can break): each verdict's latency is exactly its batch's call time; a function
    without ``reported_model`` (a command, a stub) stores NULL as the model."""
    from types import SimpleNamespace

    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(J, "time", SimpleNamespace(perf_counter=lambda: clock.now))

    class Slow:
        reported_model = "slow-judge"

        def __call__(self, msgs):
            clock.now += 0.25 * len(msgs)  # exact in binary floating point
            return ["A"] * len(msgs)

    J.judge_run(
        tmp_db, "r1", "slow", J.JudgeConfig("slow", batch_size=3), complete_fn=Slow(), show_bar=False
    )
    df = store.query_df(tmp_db, "SELECT reported_model, latency_s FROM judgments WHERE judge = 'slow'")
    assert (df.reported_model == "slow-judge").all()
    assert sorted(df.latency_s) == [0.25, 0.75, 0.75, 0.75]  # batches of 3 and 1
    J.judge_run(
        tmp_db,
        "r1",
        "plain",
        J.JudgeConfig("plain"),
        complete_fn=lambda msgs: ["B"] * len(msgs),
        show_bar=False,
    )
    plain = store.query_df(
        tmp_db, "SELECT reported_model, latency_s FROM judgments WHERE judge = 'plain'"
    )
    assert plain.reported_model.isna().all() and (plain.latency_s == 0.0).all()  # the clock did not move


def test_resolved_model_of_a_registry_name_keeps_its_variant():
    from engine.commands._judges import resolved_model

    assert resolved_model("smollm2-135m-int8") == "smollm2-135m-int8"


def test_cli_score_judge_cluster_and_from_judge(tmp_db, tmp_path, capsys):
    import json
    import sys

    from engine.cli import main

    make_judge_run(tmp_db, n_prompts=2, repeats=2, models=("m1", "m2"), modes=("coupled",))
    script = tmp_path / "judge.py"
    script.write_text("import sys, json\nfor line in sys.stdin:\n    print(json.dumps('Tie'))\n")
    assert (
        main(
            [
                "judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "ext",
                "--judge-command",
                f"{sys.executable} {script}",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["n_judged_now"] == 8 and out["stored_verdicts"]["tie"] == 8
    assert (
        main(
            [
                "comparisons",
                "from-judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "ext",
                "--mode",
                "coupled",
                "--name",
                "j",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_rows"] == 8
    # its prompts carry no gold answers: score refuses in one line and stores nothing (judge it instead)
    assert main(["score", "--db", str(tmp_db), "--run", "r1", "--rule", "exact", "--json"]) == 2
    assert "has no gold answers" in capsys.readouterr().err
    assert (
        main(
            [
                "cluster",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--method",
                "answer",
                "--rule",
                "exact",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_groups"] == 4
    # refused again with --out: nothing is written
    out_file = tmp_path / "score.json"
    assert (
        main(["score", "--db", str(tmp_db), "--run", "r1", "--rule", "exact", "--out", str(out_file)])
        == 2
    )
    assert "has no gold answers" in capsys.readouterr().err and not out_file.exists()
    assert (
        main(
            [
                "judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "ext",
                "--judge-command",
                f"{sys.executable} {script}",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "0 judged now, 8 already stored" in text and "coupled" in text and "{" not in text
    assert (
        main(["cluster", "--db", str(tmp_db), "--run", "r1", "--method", "answer", "--rule", "exact"])
        == 0
    )
    assert "into 4 groups" in capsys.readouterr().out
    assert main(["score", "--db", str(tmp_db), "--run", "nope"]) == 2
    assert "unknown run 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_text("{question} only")
    assert (
        main(
            [
                "judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "x",
                "--user-template-file",
                str(bad),
            ]
        )
        == 2
    )
    assert "exactly the fields" in capsys.readouterr().err


def test_position_bias_cancels_with_both_orders_and_averages_out_with_random(tmp_db):
    """A judge that always answers 'A' (pure position bias, no preference): judging both orders
    gives model_a exactly half the wins; seeded random orders give about half (binomial)."""
    make_judge_run(tmp_db, n_prompts=60, repeats=1, models=("m1", "m2"), modes=("coupled",))
    always_a = lambda msgs: ["A"] * len(msgs)  # noqa: E731
    J.judge_run(
        tmp_db, "r1", "both", J.JudgeConfig("both", batch_size=64), complete_fn=always_a, show_bar=False
    )
    both = J.judgments_to_comparisons(tmp_db, "r1", "both")
    assert (both.winner == "a").sum() == (both.winner == "b").sum() == 60
    assert set(J.judgments_to_comparisons(tmp_db, "r1", "both", combine="agree").winner) == {"tie"}
    J.judge_run(
        tmp_db,
        "r1",
        "rand",
        J.JudgeConfig("rand", orders="random", seed=11, batch_size=64),
        complete_fn=always_a,
        show_bar=False,
    )
    rand = J.judgments_to_comparisons(tmp_db, "r1", "rand")
    assert (
        len(rand) == 60 and 15 <= (rand.winner == "a").sum() <= 45
    )  # P(outside) < 1e-4 under Bin(60, 1/2)


@pytest.mark.parametrize(
    "raw,expected",
    [
        # reasoning first, the final verdict last (the last mark / statement / line counts)
        ("Assistant A is longer, but Assistant B is correct.\n\nFinal verdict: B", "B"),
        ("A makes an error; B does not. So the answer is B.\n\n[[B]]", "B"),
        ("At first [[A]] seemed right, but on reflection [[B]]", "B"),
        ("Both are fine.\n\n**Tie**", "tie"),
        ("Comparing the two...\n\nAssistant A", "A"),
        ("A.", "A"),
        ("**Tie**", "tie"),
        ("Assistant A", "A"),
        ("[[Tie]]", "tie"),
        ("My verdict is Assistant B.", "B"),
        ("Reasoning about A and B here.\nMy final verdict is [[A=B]].", "tie"),
    ],
)
def test_parse_final_verdict_after_reasoning(raw, expected):
    assert J.parse_verdict(raw) == expected


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("...\nMy final verdict is [[A>>B]]", "A"),
        ("[[A>B]]", "A"),
        ("[[A=B]]", "tie"),
        ("[[B>A]]", "B"),
        ("[[B>>A]]", "B"),
        ("[[A<B]]", "B"),
        ("first [[A>B]], then after all [[B>A]]", "B"),
        ("A", None),
        ("[[A]]", None),
        ("Tie", None),
        (None, None),
    ],
)
def test_arena_hard_format_maps_five_labels_to_win_tie(raw, expected):
    assert J.parse_verdict(raw, "arena-hard") == expected
    with pytest.raises(UserError, match="unknown judge format 'x'; allowed: paper, arena-hard"):
        J.parse_verdict("A", "x")
