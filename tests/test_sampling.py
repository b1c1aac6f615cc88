"""The Gumbel-max sampler: exactness (chi-square), masking, counterfactual stability, and the
exact two-answer win-rate example of docs/METHODS.md section 3 simulated with the engine's sampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from engine.errors import UserError
from engine.sampling import noise
from engine.sampling.gumbel import masked_logprobs, sample

N = 20000


def _draws(logits: torch.Tensor, seed: int, n: int = N, **kw) -> torch.Tensor:
    """n samples from one distribution: n units (distinct keys) of one step, one batch."""
    keys = noise.unit_keys([("chi2", r) for r in range(n)])
    g = noise.gumbel(seed, keys, 0, torch.arange(logits.shape[-1]))  # (n, V)
    return sample(logits.expand(n, -1), g, **kw).tokens


@pytest.mark.parametrize(
    "temperature,top_k,top_p,seed",
    [(1.0, 0, 1.0, 1), (0.7, 0, 1.0, 2), (1.3, 4, 1.0, 3), (1.0, 0, 0.8, 4)],
)
def test_empirical_frequencies_match_masked_softmax(temperature, top_k, top_p, seed):
    logits = torch.tensor([[2.0, 1.5, 0.3, 0.0, -0.5, -1.0, -2.0]])
    tokens = _draws(logits, seed, temperature=temperature, top_k=top_k, top_p=top_p)
    p = masked_logprobs(logits, temperature, top_k, top_p).exp()[0].double().numpy()
    counts = np.bincount(tokens.numpy(), minlength=logits.shape[-1])
    keep = p > 0
    assert counts[~keep].sum() == 0  # masked tokens are never drawn
    exp = p[keep] * N
    assert stats.chisquare(counts[keep], exp * counts[keep].sum() / exp.sum()).pvalue > 0.001


def test_masked_logprobs_vectorised_matches_naive_loop():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 30, generator=gen) * 2
    got = masked_logprobs(logits, 0.8, top_k=10, top_p=0.7).exp()
    for b in range(6):  # naive: sort, keep top-k, then smallest prefix with mass >= p
        x = (logits[b] / 0.8).double()
        order = torch.argsort(x, descending=True).tolist()
        kept = order[:10]
        p = torch.softmax(x[kept], 0).tolist()
        cum, final = 0.0, []
        for t, q in zip(kept, p):
            if cum >= 0.7:
                break
            final.append(t)
            cum += q
        want = torch.zeros(30, dtype=torch.float64)
        want[final] = torch.softmax(x[final], 0)
        assert torch.allclose(got[b].double(), want, atol=1e-5)


def test_greedy_ignores_noise_and_top_k_keeps_noise_keying():
    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0], [1.0, 1.0, 5.0, 0.0]])
    assert sample(logits, None, 0.0).tokens.tolist() == [1, 2]
    g = noise.gumbel(0, noise.unit_keys([("a", 0), ("b", 0)]), 0, torch.arange(4))
    full = masked_logprobs(logits, 1.0) + g
    masked = sample(logits, g, 1.0, top_k=2).tokens
    # the top-2 winner is the argmax of the SAME noisy scores restricted to the top-2 tokens
    top2 = torch.topk(logits, 2).indices
    want = top2.gather(1, full.gather(1, top2).argmax(1, keepdim=True)).squeeze(1)
    # (renormalising shifts all kept scores by the same constant, so the argmax is unchanged)
    assert torch.equal(masked, want)


def test_bad_sampling_parameters_raise_user_error():
    logits = torch.zeros(1, 3)
    for kw, word in (
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": 1.0, "top_k": -2}, "top_k"),
        ({"temperature": 1.0, "top_p": 0.0}, "top_p"),
    ):
        with pytest.raises(UserError, match=word):
            sample(logits, torch.zeros(1, 3), **kw)
    with pytest.raises(UserError, match="shape"):
        sample(logits, torch.zeros(1, 4), 1.0)


def test_counterfactual_stability_on_random_distributions():
    # docs/METHODS.md 1.2: if noise makes a win under D, no b with D'[a]/D'[b] >= D[a]/D[b] wins under D'
    rng = np.random.default_rng(7)
    n, V = 4000, 6
    D = torch.tensor(rng.dirichlet(np.ones(V), size=n), dtype=torch.float32)
    D2 = torch.tensor(rng.dirichlet(np.ones(V), size=n), dtype=torch.float32)
    g = noise.gumbel(99, noise.unit_keys([("cf", i) for i in range(n)]), 0, torch.arange(V))
    a = sample(D.log(), g, 1.0).tokens
    b2 = sample(D2.log(), g, 1.0).tokens
    ratio_d = D.gather(1, a[:, None]) / D  # (n, V) D[a]/D[b]
    ratio_d2 = D2.gather(1, a[:, None]) / D2
    stable = ratio_d2 >= ratio_d  # (n, V) b's for which stability forbids b winning under D'
    violated = stable.gather(1, b2[:, None]).squeeze(1) & (b2 != a)
    assert not violated.any()
    assert (b2 != a).any() and (b2 == a).any()  # the check was not vacuous


# Exact test case of docs/METHODS.md section 3 (Proposition 4 / Appendix B.6)
P_PREF = {"m1": (0.4, 1.0), "m2": (0.48, 0.9), "m3": (0.5, 0.89)}


def _exact_avg_winrates() -> dict[str, dict[str, float]]:
    out = {"independent": {}, "coupled": {}}
    for k, (pk, pk2) in P_PREF.items():
        ind = cou = 0.0
        for j, (pj, pj2) in P_PREF.items():
            if j != k:
                ind += pk * (1 - pj) + pk2 * (1 - pj2)
                cou += max(pk - pj, 0) + max(pk2 - pj2, 0)
        out["independent"][k], out["coupled"][k] = ind / 4, cou / 4
    return out


def test_exact_formula_matches_published_numbers():
    ex = _exact_avg_winrates()
    assert np.allclose([ex["coupled"][m] for m in P_PREF], [0.0525, 0.0225, 0.03])
    assert np.allclose(
        [ex["independent"][m] for m in P_PREF], [0.1545, 0.15675, 0.16225]
    )  # m3 ranks first


def test_two_answer_example_converges_with_engine_sampler():
    n = 40000  # units per prompt; prompts q and q' equally likely (half of the units each)
    tk = torch.arange(2)  # token 0 = preferred answer, token 1 = the other
    ex = _exact_avg_winrates()
    for mode in ("coupled", "independent"):
        R = {}
        for m, probs in P_PREF.items():
            seed = 2024 if mode == "coupled" else noise.independent_seed(2024, m)
            rows = []
            for qi, p in enumerate(probs):
                keys = noise.unit_keys([(f"q{qi}", r) for r in range(n)])
                g = noise.gumbel(seed, keys, 0, tk)  # (n, 2)
                logits = torch.log(torch.tensor([[p, 1 - p]])).clamp(min=-1e4).expand(n, 2)
                rows.append((sample(logits, g, 1.0).tokens == 0).numpy())
            R[m] = np.concatenate(rows).astype(float)  # (2n,) score per unit
        for k in P_PREF:
            wins = np.mean([R[k] > R[j] for j in P_PREF if j != k], axis=0)  # (2n,) per-unit avg win
            est, se = wins.mean(), wins.std(ddof=1) / np.sqrt(wins.size)
            assert abs(est - ex[mode][k]) < 5 * se + 1e-9, (mode, k, est, ex[mode][k], se)
