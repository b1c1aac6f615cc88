"""An installable package (the `coupled-eval` console command, package data, the CLI
from any folder), `export` writes a named file, and Streamlit does not watch .venv or data/.

Installing into a venv is not done here (it needs a build backend from PyPI): the declared entry
point is checked against the CLI's `main`, and `python -m engine` is run from another folder with
the package importable, which is what the editable install gives."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pandas as pd

from engine.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_console_script_is_declared_and_points_at_the_cli():
    proj = _pyproject()
    target = proj["project"]["scripts"]["coupled-eval"]
    module, func = target.split(":")
    assert getattr(importlib.import_module(module), func) is main
    setuptools = proj["tool"]["setuptools"]
    assert "engine*" in setuptools["packages"]["find"]["include"]
    data = setuptools["package-data"]["engine"]
    assert data == ["data/*"] and any((ROOT / "engine").glob(data[0]))  # the built-in datasets ship
    assert "-e ." in (ROOT / "scripts" / "install.sh").read_text()  # both README commands run install.sh


def test_install_sh_refuses_an_unknown_option_before_it_touches_anything(tmp_path):
    """scripts/install.sh takes dev or torch (scripts/test.sh's first step, before the side stages
    start); anything else is one line naming the allowed options, before a venv is made or pip runs.
    A copy of the script in an empty folder: were the option not refused first, it would create
    .venv there."""
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "install.sh"
    script.write_text((ROOT / "scripts" / "install.sh").read_text())
    r = subprocess.run(["bash", str(script), "--quick"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip() == "install.sh: unknown option --quick; allowed: dev, torch"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scripts"]


def test_python_m_engine_works_from_another_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COUPLED_EVAL_DB": str(tmp_path / "x.duckdb")}
    r = subprocess.run(
        [sys.executable, "-m", "engine", "datasets", "demo", "--limit", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("demo: multiple_choice, 1 prompts")  # package data found from elsewhere
    r = subprocess.run(
        [sys.executable, "-m", "engine", "db", "check"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0 and "does not exist" in r.stdout, r.stderr


def test_export_without_out_writes_a_named_file(tmp_db, tmp_path, monkeypatch, capsys):
    from engine import store

    with store.transaction(tmp_db) as con:
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status) VALUES ('r1', 'd', '{}', 'done')"
        )
        con.execute(
            "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, token_ids) "
            "VALUES ('r1', 'a', 'p', 0, 'coupled', 1, 'hi', [1, 2])"
        )
    out_dir = tmp_path / "here"
    out_dir.mkdir()
    monkeypatch.chdir(out_dir)
    capsys.readouterr()
    for expected in ("generations-r1.csv", "generations-r1-1.csv"):  # never overwrites
        assert main(["export", "generations", "--db", str(tmp_db), "--run", "r1"]) == 0
        out = capsys.readouterr().out
        assert out.strip() == f"wrote 1 generations to {out_dir / expected}"
        assert pd.read_csv(out_dir / expected)["text"].tolist() == ["hi"]
    assert main(["export", "generations", "--db", str(tmp_db), "--out", "-"]) == 0
    assert "hi" in capsys.readouterr().out  # '-' still pipes CSV
    assert main(["export", "generations", "--db", str(tmp_db), "--format", "parquet"]) == 0
    assert (out_dir / "generations-all.parquet").is_file()


def test_streamlit_watches_no_venv_and_no_data(tmp_path):
    from streamlit import config
    from streamlit.watcher import path_watcher
    from streamlit.watcher.folder_black_list import FolderBlackList
    from streamlit.watcher.polling_path_watcher import PollingPathWatcher

    server = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())["server"]
    # "poll" watches single files by mtime: no recursive inotify watch of the repository root (and so
    # of data/ and .venv), which is what overflowed the inotify queue
    config.set_option("server.fileWatcherType", server["fileWatcherType"])
    try:
        assert path_watcher.get_default_path_watcher_class() is PollingPathWatcher
    finally:
        config.set_option("server.fileWatcherType", "auto")
    black = FolderBlackList(server["folderWatchBlacklist"])
    for root in (ROOT, tmp_path / "clone"):
        for p in (
            ".venv/lib/python3.11/site-packages/torch/__init__.py",
            ".venv-vllm/lib/python3.11/x.py",
            ".venv/bin/x.py",
        ):
            assert black.is_blacklisted(str(root / p)), p
        assert not black.is_blacklisted(str(root / "engine" / "cli.py"))
        assert not black.is_blacklisted(str(root / "app_pages" / "home.py"))
