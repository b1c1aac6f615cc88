"""The Token traces view shows decoded text, not raw tokenizer pieces."""

from __future__ import annotations

import json

from engine import store
from engine.analysis.traces import decode_pieces, trace_view


def test_decode_pieces_byte_level_sentencepiece_and_plain():
    assert decode_pieces(["I", "Ġactually", "Ġthink", "Ċ"]) == ["I", " actually", " think", "\n"]
    assert decode_pieces(["cafÃ©", "Ġ"]) == ["café", " "]  # UTF-8 bytes of é as byte-level characters
    assert decode_pieces(["▁hello", "▁world", "<0x0A>"]) == [" hello", " world", "\n"]
    # a character-level tokenizer's pieces are already text: unchanged (é stays é)
    assert decode_pieces(["é", " ", "a", None]) == ["é", " ", "a", ""]


def test_trace_view_names_tokens_by_their_text(tmp_db):
    with store.writer(tmp_db) as con:
        con.begin()
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status, key_mode) VALUES "
            "('r', 'd', ?, 'done', 'bytes')",
            [json.dumps({"temperature": 1.0})],
        )
        rows = [
            ("m1", 0, 40, "I", [40, 2631]),
            ("m1", 1, 1200, "Ġactually", [1200, 2631]),
            ("m2", 0, 40, "I", [40, 2631]),
            ("m2", 1, 2631, "Ġreally", [2631, 1200]),
        ]
        for m, step, tok, piece, top in rows:
            con.execute(
                "INSERT INTO token_traces VALUES ('r', ?, 'p', 0, 'coupled', ?, ?, ?, 0.5, ?, [0.5, 0.3], "
                "[0.1, 0.2])",
                [m, step, tok, piece, top],
            )
        con.commit()
    view = trace_view(tmp_db, "r", "p", 0, "coupled", ("m1", "m2"))
    assert view.steps["token_text"].tolist() == ["I", "I", " actually", " really"]
    # an alternative another model generated is named by its text, not "#2631" or "Ġreally"
    assert view.token_names[2631] == " really" and view.token_names[1200] == " actually"
    assert view.alignment.first_divergence == 1
    dec = view.decisions
    assert dec["chosen"].tolist() == [" actually", " really"] and dec["runner_up"].tolist() == [
        " really",
        " actually",
    ]
