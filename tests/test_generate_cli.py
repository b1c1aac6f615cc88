"""``generate`` on the command line: refusals that come before anything is loaded or written."""

from __future__ import annotations

import hashlib
import sys

import pytest

from engine import store
from engine.cli import main as cli_main


def _fingerprint(folder):
    """Every path under ``folder`` with its size, mtime and content hash (files)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st = p.stat()
        out[str(p)] = (
            p.is_dir(),
            st.st_size,
            st.st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None,
        )
    return out


@pytest.mark.parametrize("flag", [["--workers", "2"], ["--ray-address", "auto"]])
@pytest.mark.parametrize("existing", [False, True])
def test_workers_without_ray_refuse_in_one_line_before_anything(
    tmp_path, monkeypatch, capsys, flag, existing
):
    """With ``ray`` unimportable, ``--workers`` / ``--ray-address`` exit 2 with one line naming what to
    install, before the dataset or the models are loaded (both are missing here: their errors would
    come first otherwise) and before the database, its folder or a run lock are written."""
    db = tmp_path / "data" / "g.duckdb"
    db.parent.mkdir()
    if existing:
        with store.writer(db):
            pass
    before = _fingerprint(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    rc = cli_main(
        [
            "generate",
            "--models",
            str(tmp_path / "no-such-model"),
            "--dataset",
            str(tmp_path / "no-such-dataset.csv"),
            "--repeats",
            "1",
            "--db",
            str(db),
            *flag,
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "pip install ray" in lines[0], err
    assert "no-such" not in err  # refused before the dataset and the models were looked at
    assert _fingerprint(tmp_path) == before  # the database unchanged (or still absent), no lock folder
    assert db.exists() is existing


def test_without_workers_the_ray_check_does_not_apply(tmp_path, monkeypatch, capsys):
    """The check is tied to the Ray flags: a plain run with ray unimportable goes on to load its
    dataset (here a missing file, so the error names it)."""
    monkeypatch.setitem(sys.modules, "ray", None)
    rc = cli_main(
        [
            "generate",
            "--models",
            "x",
            "--dataset",
            str(tmp_path / "no-such-dataset.csv"),
            "--db",
            str(tmp_path / "g.duckdb"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "no-such-dataset" in err and "pip install ray" not in err
