"""covariance_similarity against plain materialised computations written from
docs/math.md#pythia-protocol."""

import doctest
import gc
import importlib
import math

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import HookedTransformer, markov_tokens, random_attn_only
from tl_leadterms import LeadTermsError, corpus_stats, paper_model, train
from tl_leadterms.analyses.covariance import algebra as covariance_algebra
from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.analyses.covariance.token_maps import token_maps
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.tiny import save_tiny_model

V, T = 30, 8
SCORES = ("attention", "value_post", "value_attn")


@pytest.fixture(scope="module")
def tokens():
    return markov_tokens(200, T + 1, V, seed=5)  # every token is a query somewhere


@pytest.fixture(scope="module")
def stats(tokens):
    return corpus_stats(tokens, d_vocab=V, progress=False)


@pytest.fixture(scope="module")
def kept_stats(tokens):
    kept = torch.randperm(V, generator=torch.Generator().manual_seed(3))[:19].tolist()
    return corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)


def _cov(M: torch.Tensor, scale_rows: bool) -> torch.Tensor:
    """Cov(M) = M̃M̃ᵀ/(m−1), M̃ = rows minus their means, Frobenius-normalised."""
    M = M.detach().double()
    if scale_rows:
        norms = M.norm(dim=1, keepdim=True)
        M = torch.where(norms > 0, M / norms, torch.zeros_like(M))
    Mc = M - M.mean(dim=1, keepdim=True)
    C = Mc @ Mc.T / (M.shape[1] - 1)
    return C / C.norm()


def _plain(model_map: torch.Tensor, theory: torch.Tensor, normalize: str) -> float:
    return float((_cov(model_map, normalize == "both") * _cov(theory, True)).sum())


def _reference(model, stats, normalize: str, value_map: str, per_head: bool, protocol="theorem"):
    """Every score from one forward of all kept tokens as length-1 sequences (run_with_cache).

    The attention map is compared with Q̄ [query, key], or with Q̄ᵀ under the paper's code.
    """
    ids = stats.kept if stats.kept is not None else torch.arange(stats.d_vocab)
    _, cache = model.run_with_cache(ids[:, None])
    Q = stats.Q_bar.T if protocol == "paper-code" else stats.Q_bar
    TV = stats.B_bar_Phi_bar.T  # Φ̄ᵀB̄ᵀ
    out = {}
    for layer in range(model.cfg.n_layers):
        pre = cache[f"blocks.{layer}.hook_resid_pre"][:, 0].double()
        post = cache[f"blocks.{layer}.hook_resid_post"][:, 0].double()
        attn = pre + cache[f"blocks.{layer}.hook_attn_out"][:, 0].double()
        if value_map == "write":
            post, attn = post - pre, attn - pre
        W_Q, W_K = model.W_Q[layer].detach().double(), model.W_K[layer].detach().double()
        H = W_Q.shape[0]
        W = sum(W_Q[h] @ W_K[h].T for h in range(H)) / H
        out[("attention", layer, None)] = _plain(pre @ W @ pre.T, Q, normalize)
        out[("value_post", layer, None)] = _plain(post, TV, normalize)
        out[("value_attn", layer, None)] = _plain(attn, TV, normalize)
        for h in range(H if per_head else 0):
            A = pre @ W_Q[h] @ W_K[h].T @ pre.T
            out[("attention", layer, h)] = _plain(A, Q, normalize)
    return out


def _check_against_reference(model, stats, normalize, value_map, per_head, **kw):
    sim = covariance_similarity(
        model, stats, normalize=normalize, value_map=value_map, per_head=per_head,
        progress=False, **kw,
    )  # fmt: skip
    ref = _reference(model, stats, normalize, value_map, per_head, kw.get("protocol", "theorem"))
    got = {(r["score"], r["layer"], r["head"]): r["value"] for r in sim.rows}
    # each map's token-specific row beside its raw one (its numbers: test_effect_sizes)
    assert got.keys() == ref.keys() | {(f"{s}_specific", *rest) for s, *rest in ref}
    for key, value in ref.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key
    return sim


def _attn_only(seed: int) -> HookedTransformer:
    # n_heads·d_head = 24 > d_model = 12: the layer map takes the E·W·Eᵀ route
    return random_attn_only(V, T, seed=seed, d_head=8)


@pytest.mark.hooked
@pytest.mark.parametrize("normalize", ["theory", "both"])
@pytest.mark.parametrize("value_map", ["post", "write"])
@pytest.mark.parametrize("per_head", [False, True])
def test_attention_only_model_matches_plain_computation(stats, normalize, value_map, per_head):
    _check_against_reference(_attn_only(4), stats, normalize, value_map, per_head)


@pytest.fixture(scope="module")
def neox(tmp_path_factory):
    folder = save_tiny_model(
        "gpt_neox",
        tmp_path_factory.mktemp("neox"),
        d_vocab=V,
        n_layers=2,
        d_model=32,
        n_heads=4,
        n_ctx=T,
    )
    return load_model(folder, device="cpu")


@pytest.mark.hooked
@pytest.mark.parametrize("normalize", ["theory", "both"])
@pytest.mark.parametrize("value_map", ["post", "write"])
def test_neox_restricted_matches_plain_computation(neox, kept_stats, normalize, value_map):
    sim = _check_against_reference(neox, kept_stats, normalize, value_map, per_head=True)
    assert sim.metadata["fold_ln"] is True and sim.metadata["n_tokens"] == 19
    assert sim.metadata["restricted"] is True


@pytest.fixture(scope="module")
def paper_code_stats(tokens, kept_stats):
    return corpus_stats(
        tokens, d_vocab=V, vocab=kept_stats.kept.tolist(), last_target="paper-code", progress=False
    )


@pytest.mark.hooked
@pytest.mark.parametrize("normalize", ["theory", "both"])
def test_paper_code_protocol_compares_with_Q_bar_transposed(neox, paper_code_stats, normalize):
    sim = _check_against_reference(
        neox, paper_code_stats, normalize, "post", per_head=True, protocol="paper-code"
    )
    assert sim.metadata["protocol"] == "paper-code"
    assert sim.metadata["theory"]["attention"] == "Q_bar^T"
    assert sim.metadata["stats"]["last_target"] == "paper-code"
    assert sim.metadata["stats"]["q_targets"] == "centred"
    # the transpose matters (Q̄ is not symmetric) and the value scores do not depend on it
    theorem = covariance_similarity(neox, paper_code_stats, normalize=normalize, progress=False)
    assert abs(sim.value("attention", 1) - theorem.value("attention", 1)) > 1e-3
    assert sim.value("value_post", 1) == theorem.value("value_post", 1)
    assert theorem.metadata["protocol"] == "theorem"


@pytest.mark.hooked
def test_paper_code_protocol_needs_paper_code_statistics(neox, kept_stats, tokens):
    with pytest.raises(LeadTermsError, match="last_target='paper-code'"):
        covariance_similarity(neox, kept_stats, protocol="paper-code", progress=False)
    one_hot = corpus_stats(
        tokens, d_vocab=V, vocab=kept_stats.kept.tolist(), last_target="paper-code",
        q_targets="one-hot", progress=False,
    )  # fmt: skip
    with pytest.raises(LeadTermsError, match="'q_targets': 'one-hot'"):
        covariance_similarity(neox, one_hot, protocol="paper-code", progress=False)
    with pytest.raises(LeadTermsError, match="protocol must be one of"):
        unchecked(covariance_similarity)(neox, kept_stats, protocol="paper", progress=False)


@pytest.mark.hooked
def test_blockwise_products_and_float32(neox, kept_stats, monkeypatch):
    """Tiny blocks exercise the blockwise theory norm and cross products; float32 stays close."""
    exact = covariance_similarity(neox, kept_stats, per_head=True, normalize="both", progress=False)
    monkeypatch.setattr(covariance_algebra, "_BLOCK_ELEMENTS", 40)
    monkeypatch.setattr(
        covariance_algebra, "_THEORY_CACHE", covariance_algebra.weakref.WeakKeyDictionary()
    )
    blocked = covariance_similarity(
        neox, kept_stats, per_head=True, normalize="both", progress=False
    )
    single = covariance_similarity(
        neox, kept_stats, per_head=True, normalize="both", dtype=torch.float32, progress=False
    )
    for a, b, c in zip(exact.rows, blocked.rows, single.rows, strict=True):
        assert b["value"] == pytest.approx(a["value"], abs=1e-10)
        assert c["value"] == pytest.approx(a["value"], abs=1e-4)


def test_theory_norm_is_cached_without_keeping_stats_alive():
    tokens = markov_tokens(60, T + 1, V, seed=5)  # short: a token is never a query
    s = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    with torch.no_grad():
        model.blocks[0].attn.W_V.normal_()
    covariance_similarity(model, s, progress=False)
    cached = covariance_algebra._THEORY_CACHE[s]
    norms = s.Q_bar.norm(dim=1, keepdim=True)
    assert (norms == 0).any()  # a zero row (a token never seen as a query) stays 0
    Qc = torch.where(norms > 0, s.Q_bar / norms, 0.0)
    Qc = Qc - Qc.mean(dim=1, keepdim=True)
    expected = float(((Qc @ Qc.T) ** 2).sum())
    key = covariance_algebra.cache_key("Q_bar", torch.float64, "cpu", None)
    assert cached[key].norm2 == pytest.approx(expected, rel=1e-10)
    n_before = len(covariance_algebra._THEORY_CACHE)
    del s, cached
    gc.collect()
    assert len(covariance_algebra._THEORY_CACHE) == n_before - 1


@pytest.fixture(scope="module")
def trained(tokens):
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=8, progress=False)
    return model


def _random_paper_model(seed: int):
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in range(2):
            attn = model.blocks[layer].attn
            attn.W_Q.copy_(torch.randn(attn.W_Q.shape, generator=gen, dtype=torch.float64))
            attn.W_V.copy_(torch.randn(attn.W_V.shape, generator=gen, dtype=torch.float64))
    return model


def test_trained_paper_model_scores_high_with_both_normalised(trained, stats):
    sim = covariance_similarity(trained, stats, normalize="both", value_map="write", progress=False)
    rand = covariance_similarity(
        _random_paper_model(0), stats, normalize="both", value_map="write", progress=False
    )
    for layer in range(2):
        for name in SCORES:
            assert sim.value(name, layer) >= 0.99, (name, layer, sim)
            assert rand.value(name, layer) < 0.9, (name, layer, rand)
    _check_against_reference(trained, stats, "both", "write", per_head=True)


def test_trained_paper_model_default_protocol(trained, stats):
    """The paper's asymmetric protocol, against the plain computation; it scores lower."""
    sim = _check_against_reference(trained, stats, "theory", "post", per_head=False)
    both = covariance_similarity(
        trained, stats, normalize="both", value_map="write", progress=False
    )
    for layer in range(2):
        assert sim.value("value_post", layer) < both.value("value_post", layer) - 0.05
    assert sim.metadata["normalize"] == "theory" and sim.metadata["value_map"] == "post"


@pytest.mark.hooked
def test_precomputed_maps_and_result_object(neox, kept_stats):
    maps = token_maps(neox, kept_stats.kept, progress=False)
    sim = covariance_similarity(neox, kept_stats, maps=maps, per_head=True, progress=False)
    again = covariance_similarity(neox, kept_stats, per_head=True, progress=False)
    assert [r["value"] for r in sim.rows] == pytest.approx([r["value"] for r in again.rows])
    assert len(sim) == 2 * 2 * (3 + 4)  # raw and specific rows of 3 scores and 4 heads
    df = sim.to_pandas()
    assert list(df.columns) == ["layer", "head", "score", "value", "common_share"]
    assert len(df) == len(sim)
    specific = [f"{s}_specific" for s in SCORES]
    assert list(sim.table().columns) == [*SCORES, *specific] and sim.table().shape == (2, 6)
    assert sim.table(heads=True).shape == (2, 4)
    assert sim.to_dict()["metadata"]["normalization_type"] == "LNPre"
    text = repr(sim)
    assert "normalize='theory'" in text and "L1 heads (attention):" in text
    assert sim.value("attention", 1, 3) == sim.table(heads=True).loc[1, 3]
    with pytest.raises(LeadTermsError, match="no score 'value_post' for layer=0, head=1"):
        sim.value("value_post", 0, 1)
    one = covariance_similarity(neox, kept_stats, layers=[1], maps=maps, progress=False)
    assert one.value("attention", 1) == pytest.approx(sim.value("attention", 1))


def test_zero_map_gives_nan(stats):
    sim = covariance_similarity(paper_model(d_vocab=V, n_ctx=T, n_layers=1), stats, progress=False)
    assert math.isnan(sim.value("attention", 0))  # W = 0
    assert not math.isnan(sim.value("value_post", 0))  # E_post = one-hot rows
    assert repr(sim).splitlines()[2].split() == ["0", "attention", "–", "–"]  # no number


@pytest.mark.hooked
def test_bad_input(neox, stats, kept_stats, tokens):
    call = unchecked(covariance_similarity)
    other = corpus_stats(tokens, d_vocab=V + 3, progress=False)
    with pytest.raises(LeadTermsError, match=r"d_vocab=33 but the model has d_vocab=30"):
        call(neox, other, progress=False)
    with pytest.raises(LeadTermsError, match=r"normalize must be one of 'theory'.*got 'rows'"):
        call(neox, stats, normalize="rows", progress=False)
    with pytest.raises(LeadTermsError, match=r"value_map must be one of 'post'.*got 'pre'"):
        call(neox, stats, value_map="pre", progress=False)
    with pytest.raises(LeadTermsError, match="stats must be a CorpusStats"):
        call(neox, stats.Q_bar, progress=False)
    with pytest.raises(LeadTermsError, match="layers \\[5\\] out of range"):
        call(neox, stats, layers=[5], progress=False)
    with pytest.raises(LeadTermsError, match="dtype must be"):
        call(neox, stats, dtype=torch.float16, progress=False)
    maps = token_maps(neox, None, layers=[0], progress=False)
    with pytest.raises(LeadTermsError, match="not the statistics' 19 kept tokens"):
        call(neox, kept_stats, maps=maps, progress=False)
    with pytest.raises(LeadTermsError, match=r"maps lack layers \[1\]"):
        call(neox, stats, maps=maps, progress=False)
    with pytest.raises(LeadTermsError, match="device must be a torch device"):
        call(neox, stats, device="nowhere", progress=False)
    broken = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    with torch.no_grad():
        broken.blocks[0].attn.W_Q[0, 2, 3] = float("nan")
    with pytest.raises(LeadTermsError, match=r"the weight blocks\.0\.attn\.W_Q holds NaN"):
        call(broken, stats, progress=False)


@pytest.mark.parametrize(
    "name",
    ["tl_leadterms.analyses.covariance.compute", "tl_leadterms.analyses.covariance.token_maps"],
)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
