"""A digest of a model's weight files, recorded with every run that loads it (the report's design
section).

sha256 over the weight files' own sha256 digests (name and digest per file, sorted by name). A file in a
Hugging Face cache is a link to a blob named by its sha256 (large files): that name is used, nothing is
read; any other file is hashed once per (path, size, modification time) in this process. None when the
source is not a local file or folder (e.g. a hub id that is not cached here).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

from engine.filehash import sha256_file

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@lru_cache(maxsize=64)
def _file_sha256(path: str, size: int, mtime: float) -> str:
    """sha256_file, once per (path, size, modification time) in a process."""
    return sha256_file(path)


def file_sha256(path: Path) -> str:
    """A weight file's sha256: its Hugging Face blob name when it links to one, else computed."""
    real = path.resolve()
    if _HEX64.match(real.name):
        return real.name
    st = real.stat()
    return _file_sha256(str(real), st.st_size, st.st_mtime)


def weights_digest(source: str | None) -> str | None:
    """sha256 of ``source``'s weight files (a file, or the weight files in a folder), or None."""
    if not source:
        return None
    p = Path(source)
    if p.is_file():
        files = [p]
    elif p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in WEIGHT_SUFFIXES and f.is_file())
    else:
        return None
    if not files:
        return None
    if len(files) == 1:
        return file_sha256(files[0])
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.name}:{file_sha256(f)}\n".encode())
    return h.hexdigest()
