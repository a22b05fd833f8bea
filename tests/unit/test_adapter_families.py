"""to_paper across model families (GQA, MQA, RMSNorm, rotary, gated MLP, biases); extended input."""

import copy
import doctest

import pytest
import torch
import torch.nn.functional as F

from tests.unit.test_adapter_gqa_rotary import D_VOCAB, N_CTX, N_HEADS, make_model
from tl_leadterms.adapters import extended, extended_embedding, factored, to_paper
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import paper_model

pytestmark = pytest.mark.hooked

FAMILIES = {
    "gqa_rms_rotary_gated": dict(
        n_key_value_heads=2,
        normalization_type="RMS",
        positional_embedding_type="rotary",
        rotary_dim=4,
        attn_only=False,
        gated_mlp=True,
        act_fn="silu",
    ),
    "mqa_rmspre": dict(n_key_value_heads=1, normalization_type="RMSPre", attn_only=False),
    "ln_gated_learned": dict(normalization_type="LN", attn_only=False, gated_mlp=True),
    "neox_style": dict(
        normalization_type="LN",
        positional_embedding_type="rotary",
        rotary_dim=6,
        rotary_adjacent_pairs=False,
        parallel_attn_mlp=True,
        attn_only=False,
    ),
    "gptj_style_lnpre": dict(
        normalization_type="LNPre",
        positional_embedding_type="rotary",
        rotary_dim=4,
        rotary_adjacent_pairs=True,
    ),
}


def _plain_inner(X, Y):
    return (X.double() * Y.double()).sum((-2, -1))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_factored_results_equal_materialised(family):
    model = make_model(seed=11, zero_biases=False, **FAMILIES[family])
    pw = to_paper(model)
    S = torch.randn(D_VOCAB, D_VOCAB, generator=torch.Generator().manual_seed(11))
    assert pw.has_P and pw.P[0].shape == (N_HEADS, N_CTX)
    for layer in range(2):
        for name in ("W", "V"):
            M = getattr(pw, name)[layer]
            dense = M.AB
            assert dense.shape == (N_HEADS, D_VOCAB, D_VOCAB)
            scale = dense.double().flatten(1).norm(dim=1) * S.double().norm()
            got, want = factored.inner(M, S), _plain_inner(dense, S)
            assert torch.all((got - want).abs() <= 1e-5 * scale), (name, layer)
            sq = factored.sq_norm(M)
            assert torch.allclose(sq, (dense.double() ** 2).sum((-2, -1)), rtol=1e-5)
            combined = pw.layer_map(name, layer)
            want_comb = dense.mean(0) if name == "W" else dense.sum(0)
            assert torch.allclose(combined.AB, want_comb, atol=1e-5)
        cross = factored.inner_maps(pw.W[layer], pw.V[layer])
        want = _plain_inner(pw.W[layer].AB, pw.V[layer].AB)
        assert torch.allclose(cross, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["gqa_rms_rotary_gated", "ln_gated_learned", "neox_style"])
def test_family_on_the_fly_folding_equals_transformer_lens(family):
    raw = make_model(seed=12, zero_biases=False, **FAMILIES[family])
    folded = copy.deepcopy(raw)
    folded.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    assert folded.cfg.normalization_type.endswith("Pre")
    ours, theirs = to_paper(raw), to_paper(folded)
    assert torch.allclose(ours.W_O.AB, theirs.W_O.AB, atol=1e-5)
    for layer in range(2):
        for name in ("W", "V"):
            got, want = getattr(ours, name)[layer].AB, getattr(theirs, name)[layer].AB
            assert torch.allclose(got, want, atol=1e-5), (name, layer)
        assert torch.allclose(ours.P[layer], theirs.P[layer], atol=1e-5)
    assert ours.metadata["ln_handling"] == "folded by the adapter"
    assert not torch.allclose(to_paper(raw, fold_ln=False).W[1].AB, ours.W[1].AB, atol=1e-3)


def test_unmodelled_features_are_recorded():
    pw = to_paper(make_model(use_qk_norm=True, attn_scores_soft_cap=30.0))
    assert any("use_qk_norm" in item for item in pw.metadata["unmodelled"])
    assert "attn_scores_soft_cap=30.0" in pw.metadata["unmodelled"]
    assert to_paper(make_model()).metadata["unmodelled"] == []


# ---------------------------------------------------------------- the extended embedding


@pytest.mark.parametrize("gated", [False, True])
def test_extended_embedding_is_the_residual_after_block_0(gated):
    model = make_model(
        seed=13,
        zero_biases=False,
        normalization_type="LN",
        attn_only=False,
        gated_mlp=gated,
        n_key_value_heads=2,
    )
    E = extended_embedding(model, batch_size=4)  # several batches
    for v in range(D_VOCAB):
        _, cache = model.run_with_cache(torch.tensor([[v]]))
        assert torch.allclose(E[v], cache["blocks.0.hook_resid_post"][0, 0], atol=1e-5)


def test_extended_embedding_by_hand():
    """No norms: x = W_E[v] + W_pos[0]; r = x + Σ_h (x W_V + b_V) W_O + b_O; r + MLP(r)."""
    model = make_model(seed=14, zero_biases=False, attn_only=False)
    a, mlp = model.blocks[0].attn, model.blocks[0].mlp
    E = extended_embedding(model)
    for v in range(D_VOCAB):
        x = model.W_E[v] + model.W_pos[0]
        attn = sum((x @ a.W_V[h] + a.b_V[h]) @ a.W_O[h] for h in range(N_HEADS)) + a.b_O
        r = x + attn
        want = r + F.relu(r @ mlp.W_in + mlp.b_in) @ mlp.W_out + mlp.b_out
        assert torch.allclose(E[v], want, atol=1e-5)


def test_extended_input_map_feeds_layers_after_block_0():
    model = make_model(seed=15, normalization_type=None, attn_only=False, n_key_value_heads=2)
    pw, plain = to_paper(model, input_map="extended"), to_paper(model)
    E_ext, E = extended_embedding(model), model.W_E
    assert torch.allclose(pw.W_O.AB, E_ext @ model.W_U, atol=1e-5)
    for h in range(N_HEADS):
        for layer, X in ((0, E), (1, E_ext)):
            a = model.blocks[layer].attn
            want_W = X @ a.W_Q[h] @ a.W_K[h].T @ X.T / a.attn_scale
            assert torch.allclose(pw.W[layer].AB[h], want_W, atol=1e-4)
            want_V = X @ a.W_V[h] @ a.W_O[h] @ model.W_U
            assert torch.allclose(pw.V[layer].AB[h], want_V, atol=1e-4)
    assert torch.allclose(pw.W[0].AB, plain.W[0].AB)
    assert not torch.allclose(pw.W[1].AB, plain.W[1].AB, atol=1e-3)
    meta = pw.metadata
    assert meta["input_map"] == "extended" and meta["input_map_by_layer"] == ["W_E", "extended"]
    assert plain.metadata["input_map_by_layer"] == ["W_E", "W_E"]
    assert pw.exact is False


def test_input_map_is_checked():
    with pytest.raises(LeadTermsError, match=r"input_map must be one of .*got 'mlp'"):
        to_paper(make_model(), input_map="mlp")
    with pytest.raises(LeadTermsError, match="the paper model reads one-hot tokens"):
        to_paper(paper_model(d_vocab=4, n_ctx=3, n_layers=1), input_map="extended")
    with pytest.raises(LeadTermsError, match="batch_size must be a positive int, got 0"):
        extended_embedding(make_model(), batch_size=0)


def test_docstring_examples():
    assert doctest.testmod(extended, optionflags=doctest.ELLIPSIS).failed == 0
