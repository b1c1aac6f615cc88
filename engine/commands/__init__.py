"""CLI commands: one module per group, each with ``register(subparsers)``."""
