"""The sha256 of a file's bytes, read in blocks (a leaf module: standard library only, so every layer
may import it; tests/test_layout.py). The weight digest of a model (engine.models.weights) and the
content key of a comparison file (engine.analysis.comparisons) both use it."""

from __future__ import annotations

import hashlib
import os

BLOCK = 1 << 22  # bytes per read: 4 MiB (a weight file is read once, in bounded memory)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of the file at ``path`` (OSError if it cannot be read)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(BLOCK), b""):
            h.update(block)
    return h.hexdigest()


__all__ = ["sha256_file"]
