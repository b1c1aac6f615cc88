"""engine.filehash.sha256_file: an exact tiny case, and a file read in many blocks against hashlib on
the whole bytes (the two callers, the weight digest and the comparison files' key, rely on it)."""

from __future__ import annotations

import hashlib

import pytest

from engine import filehash


def test_sha256_of_abc_is_the_published_digest(tmp_path):
    p = tmp_path / "abc"
    p.write_bytes(b"abc")
    assert filehash.sha256_file(p) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_file_read_in_many_blocks_equals_one_read(tmp_path, monkeypatch):
    data = bytes(range(256)) * 41 + b"tail"
    p = tmp_path / "w.bin"
    p.write_bytes(data)
    monkeypatch.setattr(filehash, "BLOCK", 7)  # 1,500 reads, the last one short
    assert filehash.sha256_file(str(p)) == hashlib.sha256(data).hexdigest()
    with pytest.raises(OSError):
        filehash.sha256_file(tmp_path / "missing")
