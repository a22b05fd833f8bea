"""to_paper on grouped-query attention and rotary positions, against plain references."""

import doctest

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import HookedTransformer, HookedTransformerConfig
from tl_leadterms.adapters import folding, rotary, to_paper
from tl_leadterms.errors import LeadTermsError

pytestmark = pytest.mark.hooked

D_VOCAB, N_CTX, D_MODEL, N_HEADS, D_HEAD = 9, 6, 32, 4, 8


def make_model(seed=0, zero_biases=True, **overrides):
    """A small HookedTransformer with every weight random (biases zero unless asked)."""
    kwargs = dict(
        d_model=D_MODEL,
        d_head=D_HEAD,
        n_heads=N_HEADS,
        n_layers=2,
        n_ctx=N_CTX,
        d_vocab=D_VOCAB,
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        act_fn="relu",
        d_mlp=24,
        seed=seed,
    )
    kwargs.update(overrides)
    model = HookedTransformer(HookedTransformerConfig(**kwargs))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            is_bias = name.rsplit(".", 1)[-1].lstrip("_").startswith("b")
            if is_bias and zero_biases:
                param.zero_()
            elif name.endswith(".w"):  # norm weights: positive, away from 1
                param.copy_(0.5 + torch.rand(param.shape, generator=g))
            else:
                param.copy_(0.3 * torch.randn(param.shape, generator=g))
    return model


def ungrouped_copy(model):
    """The same model with n_key_value_heads unset and K/V repeated per query head by hand."""
    cfg = dict(model.cfg.to_dict())
    group = cfg["n_heads"] // cfg["n_key_value_heads"]
    cfg["n_key_value_heads"] = None
    full = HookedTransformer(HookedTransformerConfig(**cfg))
    grouped = model.state_dict()
    state = {}
    for key in full.state_dict():
        if key in grouped:
            state[key] = grouped[key]
            continue
        head, leaf = key.rsplit(".", 1)  # W_K, W_V, b_K, b_V
        stored = grouped[f"{head}._{leaf}"]
        state[key] = torch.stack([stored[h // group] for h in range(cfg["n_heads"])])
    full.load_state_dict(state)
    return full


# ---------------------------------------------------------------- grouped-query attention


@pytest.mark.parametrize(
    "n_kv, extra",
    [
        (2, {}),
        (1, {}),  # multi-query attention
        (2, dict(normalization_type="RMS", positional_embedding_type="rotary", rotary_dim=4)),
        (1, dict(normalization_type="LN", attn_only=False, gated_mlp=True)),
    ],
)
def test_grouped_maps_equal_the_materialised_model(n_kv, extra):
    model = make_model(seed=1, zero_biases=False, n_key_value_heads=n_kv, **extra)
    full = ungrouped_copy(model)
    tokens = torch.randint(0, D_VOCAB, (2, N_CTX), generator=torch.Generator().manual_seed(1))
    assert torch.allclose(model(tokens), full(tokens), atol=1e-5)  # the reference is right
    pw, ref = to_paper(model), to_paper(full)
    group = N_HEADS // n_kv
    assert pw.kv_group == [h // group for h in range(N_HEADS)] and ref.kv_group == [0, 1, 2, 3]
    assert (pw.n_heads, pw.n_kv_heads) == (N_HEADS, n_kv)
    assert pw.metadata["n_key_value_heads"] == n_kv and pw.metadata["kv_group"] == pw.kv_group
    assert pw.head_label(1, 3) == f"L1H3/KV{3 // group}" and ref.head_label(1, 3) == "L1H3"
    assert torch.allclose(pw.W_O.AB, ref.W_O.AB, atol=1e-6)
    for layer in range(2):
        for name in ("W", "V", "P"):
            got, want = getattr(pw, name)[layer], getattr(ref, name)[layer]
            got = got if name == "P" else got.AB
            want = want if name == "P" else want.AB
            assert got.shape == want.shape
            assert torch.allclose(got, want, atol=1e-6, rtol=0), (name, layer)
    assert pw.metadata["biases_ignored"]  # the grouped _b_K/_b_V are found too, named as a
    assert "blocks.0.attn.b_K" in pw.metadata["biases_ignored"]  # bridge names them


def test_grouped_w_map_gives_the_attention_pattern():
    """No LayerNorm, no positions, no biases: pattern = softmax(causal W[query tok, key tok])."""
    model = make_model(seed=2, n_key_value_heads=2)
    with torch.no_grad():
        model.W_pos.zero_()
    tokens = torch.randint(0, D_VOCAB, (3, N_CTX), generator=torch.Generator().manual_seed(2))
    _, cache = model.run_with_cache(tokens)
    W = to_paper(model).W[0].AB
    causal = torch.ones(N_CTX, N_CTX, dtype=torch.bool).tril()
    for b in range(3):
        for h in range(N_HEADS):
            scores = W[h][tokens[b]][:, tokens[b]].masked_fill(~causal, float("-inf"))
            want = torch.softmax(scores, dim=-1)
            got = cache["blocks.0.attn.hook_pattern"][b, h]
            assert torch.allclose(got, want, atol=1e-6)
    # heads sharing a key group have different patterns: W uses each head's own W_Q
    assert not torch.allclose(W[0], W[1], atol=1e-3)


def test_rejects_uneven_groups():
    model = make_model(n_key_value_heads=2)
    model.cfg.n_key_value_heads = 3
    with pytest.raises(LeadTermsError, match="n_key_value_heads=3 does not divide n_heads=4"):
        to_paper(model)


# ---------------------------------------------------------------- rotary positions


def _mean_hook(model, name, pi, layer=0):
    """Σ_v π_v · (the hook's value on the constant sequence v v ... v), [pos, heads, d_head]."""
    total = 0
    for v in range(D_VOCAB):
        _, cache = model.run_with_cache(torch.full((1, N_CTX), v))
        total = total + pi[v] * cache[f"blocks.{layer}.attn.{name}"][0].double()
    return total


@pytest.mark.parametrize("adjacent", [False, True])
def test_rotary_P_is_the_mean_score_by_offset_through_the_model(adjacent):
    model = make_model(
        seed=3,
        zero_biases=False,
        n_key_value_heads=2,
        positional_embedding_type="rotary",
        rotary_dim=4,  # partial: half of each head rotates
        rotary_adjacent_pairs=adjacent,
        rotary_base=50,
    )
    counts = torch.arange(1.0, D_VOCAB + 1) ** 2
    pi = counts / counts.sum()
    pw = to_paper(model, token_weights=counts)
    P = pw.P[0]
    assert P.shape == (N_HEADS, N_CTX) and pw.metadata["P_kind"] == "rotary_mean_field"
    # layer 0: the rotated queries/keys of the model's own forward pass, averaged over tokens
    rot_q = _mean_hook(model, "hook_rot_q", pi)  # [pos, n_heads, d_head]
    rot_k = _mean_hook(model, "hook_rot_k", pi)  # [pos, n_kv_heads, d_head]
    scale = model.blocks[0].attn.attn_scale
    for h in range(N_HEADS):
        for t in range(N_CTX):
            for j in range(t + 1):
                score = rot_q[t, h] @ rot_k[j, h // 2] / scale
                assert abs(float(P[h, t - j]) - float(score)) < 1e-5, (h, t, j)
    # layer 1 reads W_E too: mean vectors by hand, rotated by the model's apply_rotary
    attn = model.blocks[1].attn
    e = pi.double() @ model.W_E.double()
    q = (e @ attn.W_Q.double() + attn.b_Q.double()).float()  # [n_heads, d_head]
    k = (e @ attn.W_K.double() + attn.b_K.double()).float()  # TL's repeated-per-head W_K
    rq = attn.apply_rotary(q[None, None].expand(1, N_CTX, -1, -1))[0]
    rk = attn.apply_rotary(k[None, None].expand(1, N_CTX, -1, -1))[0]
    want = torch.stack([rq[d] @ rk[0].T for d in range(N_CTX)]).diagonal(dim1=1, dim2=2).T
    assert torch.allclose(pw.P[1], want / attn.attn_scale, atol=1e-5)
    # the token weights matter (the test would notice uniform weights)
    assert not torch.allclose(to_paper(model).P[0], P, atol=1e-3)
    assert to_paper(model).metadata["token_weights"] == "uniform"
    assert pw.metadata["token_weights"] == "given"
    assert pw.metadata["rotary"]["rotary_adjacent_pairs"] is adjacent


@pytest.mark.parametrize("norm", ["LN", "RMS"])
def test_rotary_P_folding_matches_transformer_lens(norm):
    """Unfolded LN/RMS (LN bias included) gives the P of the process_weights_-folded model."""
    raw = make_model(
        seed=5,
        zero_biases=False,
        normalization_type=norm,
        attn_only=False,
        positional_embedding_type="rotary",
        rotary_dim=6,
        n_key_value_heads=2,
    )
    folded = ungrouped_copy(raw)  # TL's fold handles both; the ungrouped copy is a second check
    folded.process_weights_(fold_ln=True, center_writing_weights=False, center_unembed=False)
    counts = torch.rand(D_VOCAB, generator=torch.Generator().manual_seed(5))
    ours, theirs = to_paper(raw, token_weights=counts), to_paper(folded, token_weights=counts)
    for layer in range(2):
        assert torch.allclose(ours.P[layer], theirs.P[layer], atol=1e-5)
    unfolded = to_paper(raw, fold_ln=False, token_weights=counts)
    assert not torch.allclose(unfolded.P[0], ours.P[0], atol=1e-3)


def test_token_weights_are_checked():
    model = make_model(positional_embedding_type="rotary", rotary_dim=4)
    with pytest.raises(LeadTermsError, match=r"shape \(9,\).*got \(3,\)"):
        to_paper(model, token_weights=torch.ones(3))
    with pytest.raises(LeadTermsError, match="non-negative and not all zero"):
        to_paper(model, token_weights=-torch.ones(D_VOCAB))
    with pytest.raises(LeadTermsError, match="got list"):
        unchecked(to_paper)(model, token_weights=[1.0] * D_VOCAB)


@pytest.mark.parametrize("module", [folding, rotary])
def test_docstring_examples(module):
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
