"""The coupling gain of a real lm-eval run through ``engine serve`` (docs/SERVE.md; the figures:
docs/REPRODUCTION.md, "Coupling through engine serve: a real lm-eval run").

Two models (default: the packaged SmolLM2-135M-Instruct and its int8 variant), one lm-eval task (the
project's 40 demo questions as a generative task with the paper's MMLU prompt and system prompt,
temperature 0.7, ``--repeats`` per question: :data:`TASK_YAML`), run unchanged by
lm-eval's ``local-chat-completions`` against a coupled server and then against a ``--noise
independent`` server (same database, two served runs). Both servers' logs go through ``engine import
harness`` into one run; ``engine summary`` then gives, per mode, the agreement of the two models'
answers on the same unit and the paired difference's standard error, and the variance saving
1 - SE²_coupled / SE²_independent.

    python bench/serve_lm_eval_gain.py [--models A B] [--repeats 5] [--out DIR] [--clients .venv-clients]
        [--threads N]

Needs the clients' venv (scripts/install_clients.sh). ``--smoke``: prints the commands it would run
(no server, no lm-eval).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "engine" / "data" / "demo_mcq.jsonl"
# the paper's MMLU user prompt (docs/METHODS.md 1.4) on the demo questions; the answer scored with
# lm-eval's exact_match after deleting every character but A-D (a reply "B. 43" reads "B"); 4 tokens
TASK_YAML = """task: demo_mcq_gen
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "{{{{question}}}}\\nA. {{{{A}}}}\\nB. {{{{B}}}}\\nC. {{{{C}}}}\\nD. {{{{D}}}}\\nAnswer:"
doc_to_target: answer
repeats: {repeats}
generation_kwargs:
  until: ["\\n"]
  do_sample: true
  temperature: 0.7
  max_gen_toks: 4
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    regexes_to_ignore: ["[^A-D]"]
metadata:
  version: 1.0
"""
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
SYSTEM = (
    "You will be given multiple choice questions. Please reply with a single character 'A', 'B', "
    "'C', or 'D' only. DO NOT explain your reply."
)  # docs/METHODS.md 1.4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cmd(
    models: list[str], db: Path, run: str, noise: str, port: int, threads: int | None = None
) -> list[str]:
    return [
        sys.executable, "-m", "engine", "serve", "--models", *models, "--db", str(db), "--run", run,
        "--noise", noise, "--port", str(port), "--traces",
        *(["--threads", str(threads)] if threads else []),
    ]  # fmt: skip


def lm_eval_cmd(clients: Path, url: str, model: str, tasks: Path, out: Path) -> list[str]:
    args = f"model={model},base_url={url}/chat/completions,num_concurrent=8,max_retries=2,timeout=600"
    return [
        str(clients / "bin" / "lm_eval"), "--model", "local-chat-completions", "--model_args", args,
        "--tasks", "demo_mcq_gen", "--include_path", str(tasks), "--apply_chat_template",
        "--system_instruction", SYSTEM, "--log_samples", "--output_path", str(out),
    ]  # fmt: skip


def write_task(folder: Path, repeats: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "demo_mcq_gen.yaml").write_text(TASK_YAML.format(data=DEMO, repeats=repeats))
    return folder


def _wait(url: str, proc: subprocess.Popen, timeout_s: float = 900) -> None:
    end = time.time() + timeout_s
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"engine serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise SystemExit(f"engine serve not ready after {timeout_s} s")


def phase(args, db: Path, run: str, noise: str, out: Path) -> list[Path]:
    """One server (coupled or independent) and lm-eval once per model against it."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with open(out / f"serve-{run}.log", "w") as log:
        proc = subprocess.Popen(
            serve_cmd(args.models, db, run, noise, port, args.threads),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **OFFLINE},
        )
    logs = []
    try:
        _wait(url, proc)
        for m in args.models:
            dest = out / f"{run}-{m}"
            t0 = time.perf_counter()
            subprocess.run(
                lm_eval_cmd(args.clients, url, m, out / "tasks", dest),
                cwd=ROOT,
                check=True,
                env={**os.environ, **OFFLINE, "HF_HOME": str(out / "hf")},
                stdout=subprocess.DEVNULL,
            )
            print(f"{run}: lm-eval on {m}: {time.perf_counter() - t0:.0f} s", flush=True)
            logs.append(dest)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
    return logs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs=2, default=["smollm2-135m", "smollm2-135m-int8"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--out", default=None, help="folder for the logs and the database (default: a temp folder)"
    )
    ap.add_argument(
        "--clients", type=Path, default=Path(os.environ.get("CLIENTS_VENV", ROOT / ".venv-clients"))
    )
    ap.add_argument("--threads", type=int, default=None, help="the servers' torch CPU threads")
    ap.add_argument("--smoke", action="store_true", help="print the commands only")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="serve_gain_"))
    db = out / "gain.duckdb"
    if args.smoke:
        print(" ".join(serve_cmd(args.models, db, "cpl", "coupled", 8000, args.threads)))
        print(" ".join(lm_eval_cmd(args.clients, "http://127.0.0.1:8000/v1", args.models[0], out, out)))
        print(TASK_YAML.format(data=DEMO, repeats=args.repeats))
        return 0
    if not (args.clients / "bin" / "lm_eval").exists():
        raise SystemExit(f"no lm_eval in {args.clients}: run scripts/install_clients.sh")
    out.mkdir(parents=True, exist_ok=True)
    write_task(out / "tasks", args.repeats)
    t0 = time.perf_counter()
    logs = phase(args, db, "cpl", "coupled", out) + phase(args, db, "ind", "independent", out)
    from engine.analysis.summary import run_summary
    from engine.tasks.harness_import import import_harness

    res = import_harness(db, [str(p) for p in logs], name="lm-eval-gain")
    s = run_summary(db, "lm-eval-gain")
    print(
        f"linked: {[(d['model'], d['mode'], d['matched']) for d in res.served]}; unmatched: {res.unmatched}"
    )
    print(f"{s.n_questions} questions x {s.n_repeats} repeats; total {time.perf_counter() - t0:.0f} s")
    for a in s.accuracy:
        print(f"accuracy {a.model} {a.mode}: {a.accuracy:.3f} [{a.ci_low:.3f}, {a.ci_high:.3f}]")
    for p in s.pairs:
        for mode, ag in p.agreement.items():
            d = p.diff[mode]
            print(
                f"{p.model_a} vs {p.model_b} {mode}: agreement {ag.mean:.3f} [{ag.ci_low:.3f}, "
                f"{ag.ci_high:.3f}]; difference {d.diff:+.3f} (SE {d.se:.4f}, variance of the "
                f"per-question difference x n: {d.se**2 * d.n_questions:.4f})"
            )
        print(
            f"variance saving {p.variance_saving} (CI {p.variance_saving_ci}); factor {p.questions_factor}"
        )
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    else:
        (out / "summary.json").write_text(json.dumps(s.to_dict(), indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
