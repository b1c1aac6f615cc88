"""vLLM backend checks that need no vLLM: refusals, version range, and the sampler as a logits
transform against engine.sampling. They run in the main environment and in the vLLM one."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from engine.errors import UserError
from engine.generation.vllm_backend import (
    EXTRA_KEY,
    TOKEN_KEYS,
    TRACES,
    RowArgs,
    apply_rows,
    check_engine_kwargs,
    check_sampling_params,
    check_vllm_version,
    installed_vllm_version,
    keyed_scores,
    require_vllm,
    resolve_model,
)
from engine.sampling import noise
from engine.sampling.gumbel import sample


def _params(**kw):
    base = dict(n=1, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, presence_penalty=0.0,
                frequency_penalty=0.0, repetition_penalty=1.0, logit_bias=None, bad_words=None,
                allowed_token_ids=None, min_tokens=0)
    return SimpleNamespace(**{**base, **kw})


def test_neutral_params_pass():
    check_sampling_params(_params())
    check_sampling_params(_params(top_k=-1))


@pytest.mark.parametrize("name, value", [("presence_penalty", 0.5), ("frequency_penalty", 0.1),
                                         ("repetition_penalty", 1.1), ("n", 2), ("temperature", 0.7),
                                         ("top_k", 5), ("top_p", 0.9), ("min_p", 0.05),
                                         ("logit_bias", {3: 1.0}), ("bad_words", ["x"]), ("min_tokens", 2)])
def test_coupling_breaking_params_refused(name, value):
    with pytest.raises(UserError) as e:
        check_sampling_params(_params(**{name: value}))
    msg = str(e.value)
    assert "\n" not in msg and name in msg and repr(value) in msg


@pytest.mark.parametrize("kw", [{"speculative_config": {"method": "ngram", "num_speculative_tokens": 3}},
                                {"tensor_parallel_size": 2}, {"logits_processors": ["x:Y"]}])
def test_engine_kwargs_refused(kw):
    with pytest.raises(UserError) as e:
        check_engine_kwargs(kw)
    assert next(iter(kw)) in str(e.value) and "\n" not in str(e.value)


def test_engine_kwargs_allowed():
    assert check_engine_kwargs({"enforce_eager": True, "tensor_parallel_size": 1}) == {
        "enforce_eager": True, "tensor_parallel_size": 1}


@pytest.mark.parametrize("version, ok", [("0.32.0", True), ("0.32.3+cpu", True), ("0.31.2", False),
                                         ("0.33.0", False), ("1.0.0", False)])
def test_version_range(version, ok):
    if ok:
        assert check_vllm_version(version) == version
    else:
        with pytest.raises(UserError, match=r"not supported .*vllm>=0\.32\.0,<0\.33"):
            check_vllm_version(version)


def test_missing_vllm_says_what_to_install(monkeypatch):
    import engine.generation.vllm_backend as vb
    monkeypatch.setattr(vb, "installed_vllm_version", lambda: None)
    with pytest.raises(UserError, match="not installed; install it with scripts/install_vllm.sh"):
        require_vllm()


def test_real_install_state_is_reported_cleanly():
    """In the main venv (no vLLM) the backend refuses in one line; in the vLLM venv it imports."""
    if installed_vllm_version() is None:
        with pytest.raises(UserError, match="not installed"):
            require_vllm()
    else:
        assert require_vllm().__version__.startswith("0.32")


def test_unknown_model_refused(tmp_path):
    with pytest.raises(UserError, match="neither a registry name"):
        resolve_model("no-such-model")
    with pytest.raises(UserError, match="no config.json"):
        resolve_model(str(tmp_path))


@pytest.mark.parametrize("temperature, top_k, top_p", [(1.0, 0, 1.0), (0.7, 5, 1.0), (0.7, 0, 0.8),
                                                       (1.3, 7, 0.9), (0.0, 0, 1.0), (0.0, 3, 0.5)])
def test_keyed_scores_argmax_is_the_gumbel_max_sample(temperature, top_k, top_p):
    """Two implementations that must agree: argmax of the processor's scores = engine.sampling.sample."""
    gen = torch.Generator().manual_seed(3)
    B, V = 16, 50
    logits = torch.randn(B, V, generator=gen) * 3
    seeds = torch.tensor([noise.as_int64(s) for s in [5, 2**63 + 11] * (B // 2)])
    units = noise.unit_keys([(f"p{i}", i % 3) for i in range(B)])
    steps = torch.arange(B) % 4
    keys = torch.arange(V)
    scores, logp, g = keyed_scores(logits, seeds, units, steps, keys, temperature, top_k, top_p)
    ref_g = noise.gumbel(seeds, units, steps, keys) if temperature > 0 else None
    ref = sample(logits, ref_g, temperature, top_k, top_p)
    assert torch.equal(scores.argmax(-1), ref.tokens)
    assert torch.equal(logp, ref.logprobs)
    assert (g is None) == (temperature == 0)


def test_apply_rows_replaces_only_its_rows_and_records_traces():
    V = 30
    TOKEN_KEYS["t"] = torch.arange(V)
    try:
        logits = torch.randn(4, V, generator=torch.Generator().manual_seed(0))
        before = logits.clone()
        args = [RowArgs("a", 7, noise.unit_key("q", 0), 1.0, 0, 1.0, 3, "t"),
                RowArgs("b", 7, noise.unit_key("q", 1), 1.0, 0, 1.0, 3, "t")]
        apply_rows(logits, [1, 3], args, [0, 5])
        assert torch.equal(logits[0], before[0]) and torch.equal(logits[2], before[2])
        g = noise.gumbel(7, noise.unit_keys([("q", 0), ("q", 1)]), torch.tensor([0, 5]), torch.arange(V))
        ref = sample(before[[1, 3]], g, 1.0)
        assert torch.equal(logits[[1, 3]].argmax(-1), ref.tokens)
        tr = TRACES.pop("a")[0]
        assert tr.token == int(ref.tokens[0]) and len(tr.top_ids) == 3 and len(tr.top_gumbels) == 3
        assert tr.prob == pytest.approx(float(ref.logprobs[0, ref.tokens[0]].exp()))
        assert 5 in TRACES.pop("b")
    finally:
        TOKEN_KEYS.pop("t", None)


def test_row_args_ignore_foreign_requests():
    assert RowArgs.from_params(SimpleNamespace(extra_args=None)) is None
    assert RowArgs.from_params(SimpleNamespace(extra_args={"other": 1})) is None
    a = RowArgs.from_params(SimpleNamespace(extra_args={EXTRA_KEY: dict(
        tag="x", seed=-3, unit=9, temperature=0.5, top_k=2, top_p=0.9, trace_k=0, keys="k")}))
    assert a == RowArgs("x", -3, 9, 0.5, 2, 0.9, 0, "k")
