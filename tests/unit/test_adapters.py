"""to_paper: the paper model's own parameters; plain products for models with embeddings."""

import copy
import doctest
import math

import pytest
import torch
from transformer_lens import FactoredMatrix

from tests.conftest import unchecked
from tests.factories import HookedTransformer, HookedTransformerConfig
from tl_leadterms.adapters import PaperWeights, convert, factored, to_paper, weights
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import paper_model

D_VOCAB, N_CTX, D_MODEL, N_HEADS = 11, 7, 16, 2


def _model(seed=0, zero_biases=True, **overrides):
    """A small HookedTransformer with every weight random (biases zero unless asked)."""
    kwargs = dict(
        d_model=D_MODEL,
        d_head=D_MODEL // N_HEADS,
        n_heads=N_HEADS,
        n_layers=2,
        n_ctx=N_CTX,
        d_vocab=D_VOCAB,
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        act_fn="gelu",
        d_mlp=24,
        seed=seed,
    )
    kwargs.update(overrides)
    model = HookedTransformer(HookedTransformerConfig(**kwargs))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            is_bias = name.rsplit(".", 1)[-1].startswith("b")
            if is_bias and zero_biases:
                param.zero_()
            else:
                param.copy_(0.5 * torch.randn(param.shape, generator=g, dtype=param.dtype))
    return model


# ---------------------------------------------------------------- the paper model


def test_paper_model_maps_are_its_parameters():
    model = paper_model(d_vocab=D_VOCAB, n_ctx=N_CTX, n_layers=2)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.paper_parameters().values():
            p.copy_(torch.randn(p.shape, generator=g))
    pw = to_paper(model)
    assert isinstance(pw, PaperWeights)
    assert pw.W_O is model.unembed.W_U
    for layer, block in enumerate(model.blocks):
        assert pw.V[layer] is block.attn.W_V and pw.V[layer].shape == (1, D_VOCAB, D_VOCAB)
        assert pw.W[layer] is block.attn.W_Q
        assert pw.P[layer].shape == (1, N_CTX)
        assert pw.P[layer].data_ptr() == block.attn.P.data_ptr()
        assert torch.equal(pw.P[layer][0], block.attn.P)
        assert torch.equal(pw.V[layer][0], model.V[layer])  # the paper's V^(l)
        assert torch.equal(pw.layer_map("W", layer), model.W[layer])
        assert torch.equal(pw.layer_map("P", layer), model.P[layer])
    assert (pw.architecture, pw.exact, pw.V_kind) == ("paper", True, "value")
    assert (pw.n_layers, pw.n_heads, pw.d_vocab, pw.n_ctx) == (2, 1, D_VOCAB, N_CTX)
    assert "architecture='paper'" in repr(pw)


def test_paper_model_w_map_gives_its_attention_scores():
    """The paper model's scores are x_t W x_jᵀ + P[t − j]: W and P as returned by to_paper."""
    model = paper_model(d_vocab=D_VOCAB, n_ctx=N_CTX, n_layers=1)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.paper_parameters().values():
            p.copy_(torch.randn(p.shape, generator=g))
    tokens = torch.randint(0, D_VOCAB, (1, N_CTX), generator=g)
    _, cache = model.run_with_cache(tokens)
    scores = cache["blocks.0.attn.hook_attn_scores"][0, 0]
    pw = to_paper(model)
    for t in range(N_CTX):
        for j in range(t + 1):
            want = pw.W[0][0][tokens[0, t], tokens[0, j]] + pw.P[0][0][t - j]
            assert torch.isclose(scores[t, j], want, atol=1e-5)


# ---------------------------------------------------------------- models with embeddings


def _plain_offset_average(M):
    T = M.shape[-1]
    return torch.stack(
        [
            torch.stack([sum(M[h, t, t - d] for t in range(d, T)) / (T - d) for d in range(T)])
            for h in range(M.shape[0])
        ]
    )


@pytest.mark.hooked
def test_attention_only_maps_are_the_plain_products():
    model = _model()
    pw = to_paper(model)
    E, U, pos = model.W_E, model.W_U, model.W_pos
    scale = math.sqrt(D_MODEL // N_HEADS)
    assert isinstance(pw.W_O, FactoredMatrix)
    assert torch.allclose(pw.W_O.AB, E @ U, atol=1e-5)
    for layer, block in enumerate(model.blocks):
        a = block.attn
        V, W, P = pw.V[layer], pw.W[layer], pw.P[layer]
        assert isinstance(V, FactoredMatrix) and V.shape == (N_HEADS, D_VOCAB, D_VOCAB)
        assert isinstance(W, FactoredMatrix) and W.shape == (N_HEADS, D_VOCAB, D_VOCAB)
        for h in range(N_HEADS):
            assert torch.allclose(V.AB[h], E @ a.W_V[h] @ a.W_O[h] @ U, atol=1e-4)
            want_W = E @ a.W_Q[h] @ a.W_K[h].T @ E.T / scale
            assert torch.allclose(W.AB[h], want_W, atol=1e-5)
        M = torch.stack([pos @ a.W_Q[h] @ a.W_K[h].T @ pos.T / scale for h in range(N_HEADS)])
        assert torch.allclose(P, _plain_offset_average(M), atol=1e-5)
        # heads combined: W and P averaged, V summed
        assert torch.allclose(pw.layer_map("W", layer).AB, W.AB.mean(0), atol=1e-5)
        assert torch.allclose(pw.layer_map("V", layer).AB, V.AB.sum(0), atol=1e-4)
        assert torch.allclose(pw.layer_map("P", layer), P.mean(0))
    assert (pw.architecture, pw.exact, pw.V_kind) == ("attn_only", True, "value_output")
    assert pw.metadata["attn_scale"] == [pytest.approx(scale)] * 2
    assert pw.metadata["biases_ignored"] == []


@pytest.mark.hooked
def test_scores_decompose_into_token_position_and_cross_terms():
    """Layer-0 scores = W[a, b] + M_pos[t, j] + the two cross terms, exactly (no biases)."""
    model = _model(seed=3)
    tokens = torch.randint(0, D_VOCAB, (1, N_CTX), generator=torch.Generator().manual_seed(3))
    _, cache = model.run_with_cache(tokens)
    scores = cache["blocks.0.attn.hook_attn_scores"][0]
    pw = to_paper(model)
    W = pw.W[0].AB
    a, E, pos = model.blocks[0].attn, model.W_E, model.W_pos
    scale = a.attn_scale
    for h in range(N_HEADS):
        QK = a.W_Q[h] @ a.W_K[h].T / scale
        M = pos @ QK @ pos.T
        for t in range(N_CTX):
            for j in range(t + 1):
                ta, tb = tokens[0, t], tokens[0, j]
                cross = E[ta] @ QK @ pos[j] + pos[t] @ QK @ E[tb]
                assert torch.isclose(scores[h, t, j], W[h, ta, tb] + M[t, j] + cross, atol=1e-4)


@pytest.mark.hooked
def test_scores_are_the_w_map_without_positions():
    model = _model(seed=4)
    with torch.no_grad():
        model.W_pos.zero_()
    tokens = torch.randint(0, D_VOCAB, (2, N_CTX), generator=torch.Generator().manual_seed(4))
    _, cache = model.run_with_cache(tokens)
    W = to_paper(model).W[0].AB
    for b in range(2):
        want = W[:, tokens[b]][:, :, tokens[b]]  # [head, query token, key token]
        got = cache["blocks.0.attn.hook_attn_scores"][b]
        causal = torch.ones(N_CTX, N_CTX, dtype=torch.bool).tril()
        assert torch.allclose(got[:, causal], want[:, causal], atol=1e-5)
        assert not torch.allclose(got[:, causal], want.transpose(-1, -2)[:, causal], atol=1e-3)


@pytest.mark.hooked
@pytest.mark.parametrize("norm", ["LN", "RMS"])
def test_on_the_fly_ln_folding_equals_transformer_lens_fold_ln(norm):
    raw = _model(seed=5, normalization_type=norm, attn_only=False)
    before = {k: v.clone() for k, v in raw.state_dict().items()}
    folded = copy.deepcopy(raw)
    folded.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    assert folded.cfg.normalization_type == norm + "Pre"
    ours, theirs = to_paper(raw), to_paper(folded)
    assert all(torch.equal(v, raw.state_dict()[k]) for k, v in before.items())  # untouched
    assert torch.allclose(ours.W_O.AB, theirs.W_O.AB, atol=1e-5)
    for layer in range(2):
        for name in ("V", "W"):
            got, want = getattr(ours, name)[layer].AB, getattr(theirs, name)[layer].AB
            assert torch.allclose(got, want, atol=1e-4), (name, layer)
        assert torch.allclose(ours.P[layer], theirs.P[layer], atol=1e-5)
    # and folding does change the maps: LN weights are not the identity here
    unfolded = to_paper(raw, fold_ln=False)
    assert not torch.allclose(unfolded.W[0].AB, ours.W[0].AB, atol=1e-3)
    assert ours.metadata["ln_handling"] == "folded by the adapter"
    assert theirs.metadata["ln_handling"] == "already folded by TransformerLens"
    assert unfolded.metadata["ln_handling"].startswith("not folded")
    assert (ours.metadata["ln_centring"] is not None) == (norm == "LN")
    assert ours.metadata["ln_scale_ignored"] is True
    assert (ours.architecture, ours.exact) == ("full", False)
    assert ours.metadata["fold_ln"] is True and unfolded.metadata["fold_ln"] is False


@pytest.mark.hooked
def test_ln_folding_matches_plain_formula():
    """LN: x ↦ (x − mean x)·w, so the W map is Ẽ diag(w) W_Q W_Kᵀ diag(w) Ẽᵀ / scale."""
    model = _model(seed=6, normalization_type="LN")
    pw = to_paper(model)
    E = model.W_E - model.W_E.mean(-1, keepdim=True)  # LayerNorm centring of each embedding
    a, w = model.blocks[1].attn, model.blocks[1].ln1.w
    Uw = model.ln_final.w[:, None] * model.W_U
    for h in range(N_HEADS):
        want = (E * w) @ a.W_Q[h] @ a.W_K[h].T @ (E * w).T / a.attn_scale
        assert torch.allclose(pw.W[1].AB[h], want, atol=1e-4)
        want_V = (E * w) @ a.W_V[h] @ a.W_O[h]
        want_V = (want_V - want_V.mean(-1, keepdim=True)) @ Uw  # ln_final centres the write
        assert torch.allclose(pw.V[1].AB[h], want_V, atol=1e-4)
    assert torch.allclose(pw.W_O.AB, E @ Uw, atol=1e-5)


@pytest.mark.hooked
def test_nonzero_biases_are_recorded():
    pw = to_paper(_model(seed=7, zero_biases=False))
    assert "blocks.0.attn.b_Q" in pw.metadata["biases_ignored"]
    assert "unembed.b_U" in pw.metadata["biases_ignored"]


@pytest.mark.hooked
def test_layer_indexing():
    pw = to_paper(_model())
    assert len(pw.W) == 2 and len(list(pw.V)) == 2
    assert torch.allclose(pw.W[-1].AB, pw.W[1].AB)
    with pytest.raises(LeadTermsError, match=r"W\[2\]: layer out of range, the model has 2"):
        pw.W[2]
    with pytest.raises(LeadTermsError, match="weight must be one of"):
        pw.layer_map("Q", 0)


# ---------------------------------------------------------------- bad input


def test_rejects_non_models():
    with pytest.raises(LeadTermsError, match="HookedTransformer or TransformerBridge, got dict"):
        unchecked(to_paper)({})


@pytest.mark.hooked
def test_rejects_nan_weights():
    model = _model()
    with torch.no_grad():
        model.blocks[1].attn.W_K[0, 0, 0] = float("nan")
    with pytest.raises(LeadTermsError, match=r"blocks\.1\.attn\.W_K holds NaN or inf"):
        to_paper(model)
    paper = paper_model(d_vocab=5, n_ctx=4, n_layers=1)
    with torch.no_grad():
        paper.blocks[0].attn.P[2] = float("inf")
    with pytest.raises(LeadTermsError, match=r"the weight blocks\.0\.attn\.P holds NaN or inf"):
        to_paper(paper)


@pytest.mark.hooked
def test_alibi_models_have_no_P():
    model = _model(positional_embedding_type="alibi")
    pw = to_paper(model)
    assert not pw.has_P and pw.metadata["P_kind"] is None
    assert pw.W[0].shape == (N_HEADS, D_VOCAB, D_VOCAB)
    with pytest.raises(LeadTermsError, match=r"P is not defined for.*'alibi'.*linear distance"):
        pw.P
    assert "P[l]:   undefined" in repr(pw)


@pytest.mark.hooked
def test_rejects_bidirectional_attention():
    with pytest.raises(LeadTermsError, match="attention_dir='bidirectional'"):
        to_paper(_model(attention_dir="bidirectional"))


@pytest.mark.hooked
def test_rejects_bad_fold_ln():
    with pytest.raises(LeadTermsError, match="fold_ln must be True or False, got 'yes'"):
        unchecked(to_paper)(_model(), fold_ln="yes")


@pytest.mark.parametrize("module", [convert, weights, factored])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


@pytest.mark.hooked
def test_lnpre_maps_do_not_depend_on_centring_the_reading_weights():
    """LNPre centres its input, so centring W_Q/W_K/W_V/W_U changes neither outputs nor maps."""
    raw = _model(seed=8, normalization_type="LNPre")
    centred = copy.deepcopy(raw)
    with torch.no_grad():
        for block in centred.blocks:
            for name in ("W_Q", "W_K", "W_V"):
                W = getattr(block.attn, name)
                W -= W.mean(-2, keepdim=True)
        centred.unembed.W_U -= centred.unembed.W_U.mean(0, keepdim=True)
    tokens = torch.arange(N_CTX)[None] % D_VOCAB
    assert torch.allclose(raw(tokens), centred(tokens), atol=1e-4)
    a, b = to_paper(raw), to_paper(centred)
    assert torch.allclose(a.W[1].AB, b.W[1].AB, atol=1e-5)
    assert torch.allclose(a.V[0].AB, b.V[0].AB, atol=1e-5)
    assert torch.allclose(a.W_O.AB, b.W_O.AB, atol=1e-5)
    attn, E = raw.blocks[1].attn, raw.W_E
    uncentred = E @ attn.W_Q[0] @ attn.W_K[0].T @ E.T / attn.attn_scale
    assert not torch.allclose(a.W[1].AB[0], uncentred, atol=1e-2)
