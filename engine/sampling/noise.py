"""Keyed Gumbel noise: a pure, counter-based function of (seed, unit, step, token key).

docs/METHODS.md 1.3. The reference code draws ``torch.rand(V, generator=rng)`` per step from a per-row
generator, so its noise depends on how rows are batched. Here every Gumbel value is a hash of its
key, computed vectorised in torch on any device, with no generator state:

    h = mix( mix(mix(mix(seed) + unit) + step) + mix(token_key + C) )      splitmix64 finaliser u =
    clamp( (h >>> 11) * 2^-53 , tiny, 1 - 2^-53 )                       float64, 53 random bits g =
    -log(-log(u))                                                       standard Gumbel, cast to float32

* ``unit`` = :func:`unit_key` (prompt id, repeat): a blake2b hash (never Python's ``hash()``,
  which is salted per process).
* ``step`` = index of the generated token (0, 1, ...), not the absolute position, so prompts of
  different lengths (different chat templates) still share noise step by step.
* ``token key`` = the token id when all models share one vocabulary, else a stable hash of the
  token's byte string (:func:`token_keys_for`), so the same string draws the same noise in every
  model, whatever order the models are listed in.

Same key -> bit-identical noise whatever the batch size, order, padding, device or other models.
The float64 -> float32 cast happens last; -log(-log u) is computed in float64 so that the
extreme tails (u near 0 or 1) are accurate before rounding. The integer part (h, u) is exact on
every device; the float64 ``log`` of two libraries (CPU vs CUDA) may differ in the last bit, which
survives the cast to float32 only when a value sits on a float32 rounding boundary (about 2^-29 per
value), so CPU/CUDA identity is "all but never different" rather than proven (tested on CPU only:
no GPU was available to this team).

Integer arithmetic: torch has no uint64, so the hash runs on int64 with two's-complement
wrap-around for ``+`` and ``*`` (what CPU and CUDA kernels do) and *logical* right shifts done as
``(x >> s) & (2^(64-s) - 1)``, because torch's ``>>`` on int64 is arithmetic (sign-extending).
"""

from __future__ import annotations

import hashlib
from typing import Literal

import torch

from engine.errors import UserError

_M64 = (1 << 64) - 1
KEY_MODES = ("token_id", "bytes")


def as_int64(x: int) -> int:
    """An unsigned 64-bit integer as the int64 with the same bits (torch has no uint64)."""
    x &= _M64
    return x - (1 << 64) if x >= (1 << 63) else x


_GOLDEN = as_int64(0x9E3779B97F4A7C15)
_MUL1 = as_int64(0xBF58476D1CE4E5B9)
_MUL2 = as_int64(0x94D049BB133111EB)
_TOKEN_SALT = as_int64(0xD6E8FEB86659FD93)


def _srl(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic on signed ints)."""
    return (x >> s).bitwise_and_((1 << (64 - s)) - 1)  # one temporary, masked in place


def _mix_(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser on int64 (wrap-around arithmetic), IN PLACE: a bijection of 64-bit words.

    In place because the (B, V) call is the cost of the noise: each out-of-place op would
    allocate and stream another B*V*8 bytes.
    """
    x.add_(_GOLDEN)
    x.bitwise_xor_(_srl(x, 30)).mul_(_MUL1)
    x.bitwise_xor_(_srl(x, 27)).mul_(_MUL2)
    return x.bitwise_xor_(_srl(x, 31))


def _mix(x: torch.Tensor) -> torch.Tensor:
    """splitmix64 finaliser on a copy of ``x``."""
    return _mix_(x.clone())


def _mix_int(x: int) -> int:
    """The same finaliser on a Python int (used for scalars; agrees with :func:`_mix`)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _blake64(data: bytes) -> int:
    """A stable 64-bit hash (unsigned) of a byte string."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < (1 << 64):
        raise UserError(f"seed must be an integer in [0, 2^64), got {seed!r}")
    return seed


def unit_key(prompt_id: str, repeat: int) -> int:
    """The int64 key of a unit (prompt id, repeat index): blake2b of the UTF-8 id, then the repeat.

    Stable across processes and machines (Python's ``hash()`` is salted per process).
    """
    if not isinstance(prompt_id, str):
        raise UserError(f"prompt_id must be a string, got {prompt_id!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
        raise UserError(f"repeat must be a non-negative integer, got {repeat!r}")
    h = _blake64(b"prompt:" + prompt_id.encode("utf-8"))
    return as_int64(_mix_int(h ^ _mix_int(repeat)))


def seed_tensor(seeds: list[int], device: torch.device | str | None = None) -> torch.Tensor:
    """LongTensor (B,) of per-row seeds, each the int64 with the seed's 64 bits (for :func:`gumbel`)."""
    return torch.tensor([as_int64(_check_seed(int(s))) for s in seeds], dtype=torch.int64, device=device)


def unit_keys(units: list[tuple[str, int]]) -> torch.Tensor:
    """LongTensor (B,) of :func:`unit_key` for a list of (prompt_id, repeat)."""
    return torch.tensor([unit_key(p, r) for p, r in units], dtype=torch.int64)


def independent_seed(seed: int, model_name: str) -> int:
    """A seed distinct per model and stable across processes, for independent generation.

    blake2b("independent:{seed}:{model_name}") truncated to 63 bits (fits a signed and an
    unsigned 64-bit column alike).
    """
    _check_seed(seed)
    return _blake64(f"independent:{seed}:{model_name}".encode()) >> 1


def gumbel(
    seed: int | torch.Tensor, unit_keys: torch.Tensor, step: int | torch.Tensor, token_keys: torch.Tensor
) -> torch.Tensor:
    """Standard Gumbel noise g[b, v] = G(seed, unit_keys[b], step[b], token_keys[v]).

    Args:
        seed: an integer in [0, 2^64), or a LongTensor (B,) of per-row seeds (same bits).
        unit_keys: LongTensor (B,) from :func:`unit_key`.
        step: generated-token index, an int or LongTensor (B,).
        token_keys: LongTensor (V,) from :func:`token_keys_for`.

    Returns:
        FloatTensor (B, V), float32, on ``token_keys.device``; bit-identical for the same key
        regardless of B, row order, V (for shared keys) or device.
    """
    device = token_keys.device
    unit_keys = unit_keys.to(device=device, dtype=torch.int64)  # (B,)
    if isinstance(seed, torch.Tensor):
        s = _mix(seed.to(device=device, dtype=torch.int64))  # (B,) (copy: never mix the caller's tensor)
    else:
        s = torch.full_like(unit_keys, as_int64(_mix_int(_check_seed(seed))))  # (B,)
    if isinstance(step, torch.Tensor):
        step_t = step.to(device=device, dtype=torch.int64)  # (B,)
    else:
        step_t = torch.full_like(unit_keys, int(step))  # (B,)
    row = _mix_(_mix_(s + unit_keys) + step_t)  # (B,)
    tok = _mix_(token_keys.to(torch.int64) + _TOKEN_SALT)  # (V,)
    B, V = row.shape[0], tok.shape[0]
    out = torch.empty(B, V, dtype=torch.float32, device=device)  # (B, V)
    # Why column chunks on CPU: ~20 elementwise int64/float64 passes; on (32, 49152) each pass
    # streams a 12 MB temporary through memory, while 0.5 MB chunks stay in L2 (32 -> 18 ms).
    # Elementwise, so the values are bit-identical whatever the chunk size.
    step_v = V if device.type != "cpu" else max(1, (1 << 16) // max(B, 1))
    for a in range(0, V, step_v):
        h = _mix_(row[:, None] + tok[None, a : a + step_v])  # (B, c) fresh tensor, mixed in place
        # 53 high bits -> a float64 uniform on the grid k * 2^-53; clamped away from 0 and 1 so that
        # -log(-log u) is finite (u = 0 has probability 2^-53 per value).
        u = _srl(h, 11).to(torch.float64).mul_(2.0**-53)  # (B, c)
        u.clamp_(min=torch.finfo(torch.float64).tiny, max=1.0 - 2.0**-53)
        out[:, a : a + step_v] = u.log_().neg_().log_().neg_()  # -log(-log u), rounded to float32
    return out


def gumbel_at(
    seed: torch.Tensor, unit_keys: torch.Tensor, step: torch.Tensor, token_keys: torch.Tensor
) -> torch.Tensor:
    """The noise of :func:`gumbel` at chosen tokens only: g[b, j] = G(seed[b], unit[b], step[b],
    token_keys[b, j]).

    The same integer hash and float64 logs as :func:`gumbel` on a (B, k) grid of per-row token keys
    (e.g. a row's top-k ids mapped to their keys), so a trace needs no (B, V) noise tensor.

    Args:
        seed, unit_keys, step: LongTensors (B,) (seed bits as in :func:`seed_tensor`).
        token_keys: LongTensor (B, k) of token keys per row.

    Returns:
        FloatTensor (B, k) float32 on ``token_keys.device``.
    """
    device = token_keys.device
    s = _mix(seed.to(device=device, dtype=torch.int64))  # (B,)
    row = _mix_(
        _mix_(s + unit_keys.to(device=device, dtype=torch.int64))
        + step.to(device=device, dtype=torch.int64)
    )
    h = _mix_(row[:, None] + _mix_(token_keys.to(torch.int64) + _TOKEN_SALT))  # (B, k)
    u = _srl(h, 11).to(torch.float64).mul_(2.0**-53)  # (B, k) as in gumbel()
    u.clamp_(min=torch.finfo(torch.float64).tiny, max=1.0 - 2.0**-53)
    return u.log_().neg_().log_().neg_().to(torch.float32)


# --------------------------------------------------------------------------- token keys


def _byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode (byte-level BPE token chars -> raw bytes)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _tokenizer_style(tokenizer) -> str:
    """'byte_level' (GPT-2 style), 'sentencepiece' ('▁' for space) or 'plain'."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        dec = backend.decoder
        text = repr(dec) if dec is not None else ""
        if "ByteLevel" in text:
            return "byte_level"
        if "Metaspace" in text or "▁" in text:
            return "sentencepiece"
        return "plain"
    if hasattr(tokenizer, "sp_model"):
        return "sentencepiece"
    return "plain"


def token_bytes(tokenizer) -> list[bytes]:
    """The normalised byte string of every token id in ``range(len(tokenizer))``.

    Normalisation (what makes the same string get the same key in different tokenizers):
    * special/added-special tokens: ``b"\\xffspecial:" + token string`` (never collides with text);
    * byte-level BPE (GPT-2, Llama-3, SmolLM2): each character mapped back to its byte via the
      inverse of ``bytes_to_unicode``;
    * SentencePiece: ``'▁'`` -> ``' '``, byte-fallback tokens ``<0xNN>`` -> that byte, UTF-8 else;
    * anything else: the token string in UTF-8.
    """
    n = len(tokenizer)
    toks = tokenizer.convert_ids_to_tokens(list(range(n)))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    for tid, added in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            special.add(int(tid))
    style = _tokenizer_style(tokenizer)
    bdec = _byte_decoder() if style == "byte_level" else None
    out: list[bytes] = []
    for i, t in enumerate(toks):
        if t is None:
            out.append(b"\xffnone:%d" % i)
        elif i in special:
            out.append(b"\xffspecial:" + t.encode("utf-8"))
        elif bdec is not None and all(c in bdec for c in t):
            out.append(bytes(bdec[c] for c in t))
        elif style == "sentencepiece":
            if len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
                out.append(bytes([int(t[3:5], 16)]))
            else:
                out.append(t.replace("▁", " ").encode("utf-8"))
        else:
            out.append(t.encode("utf-8"))
    return out


def token_keys_for(
    tokenizer,
    mode: Literal["token_id", "bytes"] = "token_id",
    vocab_size: int | None = None,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """LongTensor (V,) of noise keys per token id.

    Args:
        tokenizer: a Hugging Face tokenizer.
        mode: ``"token_id"`` (models share one vocabulary: key = id) or ``"bytes"`` (key =
            blake2b-64 of :func:`token_bytes`; same string -> same key in every tokenizer).
        vocab_size: width of the model's logits (may exceed ``len(tokenizer)`` when the embedding
            is padded); ids without a token are keyed ``b"\\xffunused:<id>"``.

    Returns:
        LongTensor (V,) on ``device``.
    """
    if mode not in KEY_MODES:
        raise UserError(f"unknown token-key mode {mode!r}; allowed: {', '.join(KEY_MODES)}")
    n_tok = len(tokenizer)
    V = int(vocab_size) if vocab_size is not None else n_tok
    if mode == "token_id":
        return torch.arange(V, dtype=torch.int64, device=device)
    bs = token_bytes(tokenizer)[:V]
    keys = [as_int64(_blake64(b)) for b in bs]
    keys += [as_int64(_blake64(b"\xffunused:%d" % i)) for i in range(len(keys), V)]
    return torch.tensor(keys, dtype=torch.int64, device=device)
