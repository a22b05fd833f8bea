"""token_maps (the token-as-sequence protocol, docs/math.md#pythia-protocol, step 2) against
manual forwards."""

import numpy as np
import pytest
import torch

from tests.conftest import unchecked
from tests.factories import HookedTransformer, random_attn_only
from tl_leadterms import LeadTermsError, paper_model
from tl_leadterms.analyses.covariance.token_maps import TokenMaps, token_maps

V = 17


def _attn_only(seed: int = 0) -> HookedTransformer:
    return random_attn_only(V, 6, seed=seed, n_layers=3)


@pytest.mark.hooked
def test_matches_a_forward_of_each_token_alone():
    model = _attn_only(1)
    ids = [5, 0, 16, 5, 3]
    maps = token_maps(model, ids, layers=[0, 2], batch_size=2, progress=False)
    assert isinstance(maps, TokenMaps) and maps.layers == [0, 2] and maps.n == 5
    assert maps.resid_pre.shape == (2, 5, 12) and maps.resid_pre.device.type == "cpu"
    for row, token in enumerate(ids):
        _, cache = model.run_with_cache(torch.tensor([[token]]))
        for i, layer in enumerate([0, 2]):
            pre = cache[f"blocks.{layer}.hook_resid_pre"][0, 0]
            post = cache[f"blocks.{layer}.hook_resid_post"][0, 0]
            attn = pre + cache[f"blocks.{layer}.hook_attn_out"][0, 0]
            torch.testing.assert_close(maps.resid_pre[i, row], pre)
            torch.testing.assert_close(maps.resid_post[i, row], post)
            torch.testing.assert_close(maps.resid_attn[i, row], attn)
            torch.testing.assert_close(maps.get("attn", layer)[row], attn)


@pytest.mark.hooked
def test_by_hand_for_an_attention_only_model():
    """A token alone attends to itself: attn_out = Σ_h (x W_V^h + b_V^h) W_O^h + b_O."""
    model = _attn_only(2)
    maps = token_maps(model, None, progress=False)  # every id
    assert torch.equal(maps.token_ids, torch.arange(V))
    x = model.W_E.detach().double() + model.W_pos[0].detach().double()
    for layer in range(3):
        a = model.blocks[layer].attn
        out = a.b_O.detach().double() + sum(
            (x @ a.W_V[h].double() + a.b_V[h].double()) @ a.W_O[h].double() for h in range(3)
        )
        torch.testing.assert_close(maps.resid_pre[layer].double(), x, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(maps.resid_attn[layer].double(), x + out, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(maps.resid_post[layer].double(), x + out, atol=1e-5, rtol=1e-5)
        x = x + out


def test_paper_model_embeddings_are_one_hot():
    model = paper_model(d_vocab=9, n_ctx=4, n_layers=2)
    with torch.no_grad():
        model.blocks[0].attn.W_V.normal_()
    maps = token_maps(model, np.array([2, 7]), progress=False)
    eye = torch.eye(9)[[2, 7]]
    torch.testing.assert_close(maps.resid_pre[0], eye)
    torch.testing.assert_close(maps.resid_post[0] - eye, model.V[0].detach()[[2, 7]])
    torch.testing.assert_close(maps.resid_pre[1], maps.resid_post[0])


def test_bad_input():
    model = paper_model(d_vocab=9, n_ctx=4, n_layers=2)
    call = unchecked(token_maps)
    with pytest.raises(LeadTermsError, match=r"token ids \[9\] are outside \[0, d_vocab=9\)"):
        call(model, [1, 9], progress=False)
    with pytest.raises(LeadTermsError, match=r"\[-1\]"):
        call(model, torch.tensor([-1, 2]), progress=False)
    with pytest.raises(LeadTermsError, match="integer"):
        call(model, torch.tensor([1.0]), progress=False)
    with pytest.raises(LeadTermsError, match="non-empty"):
        call(model, [], progress=False)
    with pytest.raises(LeadTermsError, match="layers \\[2\\] out of range"):
        call(model, [1], layers=[0, 2], progress=False)
    with pytest.raises(LeadTermsError, match="batch_size"):
        call(model, [1], batch_size=0, progress=False)
    with pytest.raises(LeadTermsError, match="the model lives on cpu"):
        call(model, [1], device="meta", progress=False)
    maps = token_maps(model, [1], layers=1, progress=False)
    with pytest.raises(LeadTermsError, match="layer 0 is not in these maps"):
        maps.get("pre", 0)
    assert "TokenMaps(n=1 tokens, layers=[1]" in repr(maps)
