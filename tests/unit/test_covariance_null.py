"""The permutation null of covariance_similarity against plain materialised computations."""

import pytest
import torch

from tests.factories import markov_tokens, random_attn_only
from tests.unit.test_covariance import _plain
from tl_leadterms import corpus_stats
from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.results.null import NullSpec, permutations

pytestmark = pytest.mark.hooked

V, T = 20, 8


@pytest.mark.parametrize("normalize", ["theory", "both"])
@pytest.mark.parametrize("d_head", [4, 8])  # concatenated heads, and the E·W·Eᵀ route
def test_null_draws_match_relabelled_plain_scores(normalize, d_head):
    tokens = markov_tokens(120, T + 1, V, seed=8)
    stats = corpus_stats(tokens, d_vocab=V, vocab=14, progress=False)
    model = random_attn_only(V, T, seed=1, d_head=d_head)
    sim = covariance_similarity(model, stats, normalize=normalize, per_head=True,
                                progress=False, null=NullSpec(4, seed=2))  # fmt: skip
    perms = permutations(stats.k, 4, 2)
    _, cache = model.run_with_cache(stats.kept[:, None])
    Q, TV = stats.Q_bar, stats.B_bar_Phi_bar.T
    for r in sim.rows:  # the raw rows (the specific rows' null: test_effect_sizes)
        if r["score"].endswith("_specific"):
            continue
        layer, h = r["layer"], r["head"]
        pre = cache[f"blocks.{layer}.hook_resid_pre"][:, 0].double()
        W_Q, W_K = model.W_Q[layer].detach().double(), model.W_K[layer].detach().double()
        if r["score"] == "attention":
            W = W_Q[h] @ W_K[h].T if h is not None else sum(W_Q[i] @ W_K[i].T for i in range(3))
            M, target = pre @ W @ pre.T, Q
            draws = [_plain(M[p][:, p], target, normalize) for p in perms]
        else:
            hook = "hook_resid_post" if r["score"] == "value_post" else "hook_attn_out"
            M = cache[f"blocks.{layer}.{hook}"][:, 0].double()
            M = M if r["score"] == "value_post" else pre + M
            draws = [_plain(M[p], TV, normalize) for p in perms]
        draws = torch.tensor(draws)
        assert r["null_mean"] == pytest.approx(float(draws.mean()), abs=1e-6), r
        assert r["null_sd"] == pytest.approx(float(draws.std()), abs=1e-6), r
        want_p = (1 + int((draws >= r["value"]).sum())) / 5
        assert r["p"] == want_p
    df = sim.to_pandas()
    assert {"null_mean", "null_sd", "z", "p"} <= set(df.columns)
    assert list(df["score"].unique()) == [
        "attention", "attention_specific", "value_post", "value_post_specific", "value_attn",
        "value_attn_specific",
    ]  # fmt: skip
