"""The CLI commands: one module per command name (``import`` is ``import_``), each with
``register(subparsers)``; the parser it adds sets ``func`` (``args -> int`` exit code).

A new command is a module here plus its name in :data:`COMMANDS` (the order of ``--help``).
Command modules import heavy layers (torch, pandas, the analyses) inside ``run`` only, so that
building the parser stays cheap.
"""

COMMANDS = (
    "benchmark_compare",
    "multigen",
    "import_",
    "generate",
    "export",
    "info",
    "datasets",
    "models",
    "ranksets",
    "winrates",
    "score",
    "judge",
    "cluster",
    "comparisons",
    "summary",
    "db",
    "accuracy_ranks",
    "judge_audit",
    "run_ranksets",
    "sequential",
    "race",
    "report",
    "gate",
    "label",
    "serve",
)
