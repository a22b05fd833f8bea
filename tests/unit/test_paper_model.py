"""The paper model (a standalone HookedRootModule) against the plain-torch reference."""

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import markov_tokens
from tests.reference import gd_train, paper_forward
from tl_leadterms import LeadTermsError, paper_model, train


def _randomise(model, scale: float, seed: int) -> dict:
    """Random paper parameters, written into ``model`` and returned as a reference params dict."""
    gen = torch.Generator().manual_seed(seed)
    dtype, V, T = model.cfg.dtype, model.cfg.d_vocab, model.cfg.n_ctx
    params = {"W": [], "V": [], "P": []}
    with torch.no_grad():
        model.unembed.W_U.copy_(scale * torch.randn(V, V, generator=gen, dtype=dtype))
        params["W_O"] = model.unembed.W_U.detach().clone()
        for block in model.blocks:
            block.attn.W_Q[0].copy_(scale * torch.randn(V, V, generator=gen, dtype=dtype))
            block.attn.W_V[0].copy_(scale * torch.randn(V, V, generator=gen, dtype=dtype))
            block.attn.P.copy_(torch.randn(T, generator=gen, dtype=dtype))
            params["W"].append(block.attn.W_Q[0].detach().clone())
            params["V"].append(block.attn.W_V[0].detach().clone())
            params["P"].append(block.attn.P.detach().clone())
    return params


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_forward_equals_reference(dtype, tol):
    model = paper_model(d_vocab=17, n_ctx=9, n_layers=3, dtype=dtype)
    params = _randomise(model, scale=0.3, seed=0)
    tokens = torch.randint(0, 17, (6, 9), generator=torch.Generator().manual_seed(1))
    expected = paper_forward(
        tokens, {k: v if k == "W_O" else list(v) for k, v in params.items()}, 17
    )
    got = model(tokens)
    assert got.dtype == dtype
    assert (got - expected).abs().max().item() < tol
    # shorter sequences use the leading offsets of P
    assert (model(tokens[:, :4]) - paper_forward(tokens[:, :4], params, 17)).abs().max() < tol


def test_parameters_are_exactly_the_papers():
    model = paper_model(d_vocab=11, n_ctx=5, n_layers=2)
    names = {name for name, _ in model.named_parameters()}
    assert names == {"unembed.W_U"} | {
        f"blocks.{i}.attn.{w}" for i in range(2) for w in ("W_Q", "W_V", "P")
    }
    assert all(float(p.detach().abs().max()) == 0.0 for p in model.parameters())  # zero init
    eye = torch.eye(11)
    assert torch.equal(model.W_E, eye) and torch.equal(model.W_K[1, 0], eye)
    assert torch.equal(model.W_O[0, 0], eye) and float(model.W_pos.abs().max()) == 0.0
    assert model.W[1] is model.blocks[1].attn.W_Q[0] or torch.equal(model.W[1], model.W_Q[1, 0])
    assert model.V[0].shape == (11, 11) and model.P[1].shape == (5,)
    # the fixed buffers are not saved: a state dict holds exactly the paper's parameters
    tl_buffers = {f"blocks.{i}.attn.{b}" for i in range(2) for b in ("mask", "IGNORE")}
    assert set(model.state_dict()) == names | tl_buffers


def test_hooks_see_the_papers_scores():
    model = paper_model(d_vocab=7, n_ctx=6, n_layers=2, dtype=torch.float64)
    params = _randomise(model, scale=0.5, seed=3)
    tokens = torch.tensor([[1, 4, 4, 0, 6]])
    _, cache = model.run_with_cache(tokens)
    h = torch.nn.functional.one_hot(tokens[0], 7).double()
    scores = h @ params["W"][0] @ h.T
    offset = torch.arange(5)[:, None] - torch.arange(5)[None, :]
    scores = scores + torch.where(offset >= 0, params["P"][0][offset.clamp(min=0)], 0.0)
    scores = scores.masked_fill(offset < 0, float("-inf"))
    assert torch.allclose(cache["blocks.0.attn.hook_attn_scores"][0, 0], scores, atol=1e-12)
    pattern = cache["pattern", 1][0, 0]
    assert torch.allclose(pattern.sum(-1), torch.ones(5, dtype=torch.float64))
    assert cache["resid_post", 1].shape == (1, 5, 7)
    # a hook that edits the pattern changes the output (the hooks are on the real computation)
    uniform = torch.tril(torch.ones(5, 5, dtype=torch.float64)) / torch.arange(1, 6)[:, None]
    patched = model.run_with_hooks(
        tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: uniform[None, None])]
    )
    assert not torch.allclose(patched, model(tokens))


def test_full_batch_train_equals_reference_gd():
    tokens = markov_tokens(12, 7, 9, seed=4)
    model = paper_model(d_vocab=9, n_ctx=6, n_layers=2, dtype=torch.float64)
    history = train(model, tokens, lr=0.5, steps=4, progress=False)
    ref, losses = gd_train(tokens, 9, 2, lr=0.5, steps=4, return_losses=True)
    assert torch.allclose(model.unembed.W_U, ref["W_O"], atol=1e-12)
    for layer in range(2):
        assert torch.allclose(model.W[layer], ref["W"][layer], atol=1e-12)
        assert torch.allclose(model.V[layer], ref["V"][layer], atol=1e-12)
        assert torch.allclose(model.P[layer], ref["P"][layer], atol=1e-12)
    assert history.steps == [1, 2, 3, 4]
    assert history.loss == pytest.approx(losses, abs=1e-12)


def test_chunked_batches_equal_one_pass():
    tokens = markov_tokens(10, 6, 8, seed=5)
    one = paper_model(d_vocab=8, n_ctx=5, n_layers=1, dtype=torch.float64)
    chunked = paper_model(d_vocab=8, n_ctx=5, n_layers=1, dtype=torch.float64)
    train(one, tokens, lr=1.0, steps=3, progress=False)
    train(chunked, tokens, lr=1.0, steps=3, chunk_size=3, progress=False)
    for a, b in zip(one.parameters(), chunked.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-12)


def test_mini_batches_cover_each_epoch_once():
    tokens = markov_tokens(8, 5, 6, seed=6)
    seen = []
    model = paper_model(d_vocab=6, n_ctx=4, n_layers=1)
    original = model.forward

    def spy(inputs, *args, **kwargs):
        seen.append(inputs.clone())
        return original(inputs, *args, **kwargs)

    model.forward = spy
    history = train(model, tokens, lr=0.1, steps=4, batch_size=4, every=2, progress=False)
    assert history.steps == [2, 4] and len(seen) == 4
    epoch = torch.cat(seen[:2])
    assert sorted(map(tuple, epoch.tolist())) == sorted(map(tuple, tokens[:, :-1].tolist()))


def test_bad_input():
    model = paper_model(d_vocab=6, n_ctx=4, n_layers=1)
    good = torch.randint(0, 6, (3, 5))
    cases = [
        (dict(tokens=torch.randint(0, 6, (3, 7))), "n_ctx"),
        (dict(tokens=torch.full((2, 5), 6)), r"\[0, 6\)"),
        (dict(tokens=torch.zeros(3, 5)), "integer"),
        (dict(lr=-1.0), "lr"),
        (dict(steps=-1), "steps"),
        (dict(steps=2.5), "steps"),
        (dict(batch_size=0), "batch_size"),
        (dict(track="stats"), "CorpusStats"),
    ]
    for overrides, message in cases:
        kwargs = dict(tokens=good, lr=0.1, steps=1, progress=False) | overrides
        with pytest.raises(LeadTermsError, match=message):
            unchecked(train)(model, **kwargs)
    for args, message in [((0, 4, 1), "d_vocab"), ((5, 4, 1.5), "n_layers")]:
        sizes = dict(zip(("d_vocab", "n_ctx", "n_layers"), args, strict=True))
        with pytest.raises(LeadTermsError, match=message):
            unchecked(paper_model)(**sizes)
    with pytest.raises(LeadTermsError, match="n_ctx=4"):
        model(torch.zeros(1, 6, dtype=torch.long))
    with pytest.raises(LeadTermsError, match="lower the learning rate"):
        train(paper_model(d_vocab=6, n_ctx=4, n_layers=1), good, lr=1e30, steps=3, progress=False)


def test_kv_cache_and_start_at_layer_match_the_full_forward():
    from transformer_lens.cache.key_value_cache import TransformerLensKeyValueCache

    model = paper_model(d_vocab=9, n_ctx=7, n_layers=2, dtype=torch.float64)
    _randomise(model, scale=0.5, seed=8)
    tokens = torch.randint(0, 9, (2, 6), generator=torch.Generator().manual_seed(9))
    full = model(tokens)
    cache = TransformerLensKeyValueCache.init_cache(model.cfg, "cpu", batch_size=2)
    parts = [tokens[:, :4], tokens[:, 4:5], tokens[:, 5:6]]
    first, *rest = [
        model(part, past_kv_cache=cache, attention_mask=torch.ones_like(part)) for part in parts
    ]
    assert torch.allclose(torch.cat([first, *rest], dim=1), full, atol=1e-12)
    # a residual-stream input (start_at_layer) is not mistaken for over-long token ids
    _, act = model.run_with_cache(tokens)
    resumed = model(act["resid_pre", 1], start_at_layer=1, tokens=tokens)
    assert torch.allclose(resumed, full, atol=1e-12)


def test_history_repr_before_attention_moves():
    from tl_leadterms import corpus_stats

    tokens = markov_tokens(16, 6, 7, seed=10)
    stats = corpus_stats(tokens, d_vocab=7, progress=False)
    history = train(
        paper_model(d_vocab=7, n_ctx=5, n_layers=1),
        tokens,
        lr=0.5,
        steps=2,
        track=stats,
        progress=False,
    )
    text = repr(history)
    assert "min cos W -" in text and "min cos W_O 0.99" in text
