"""The standalone paper model against a frozen copy of the HookedTransformer subclass it replaced.

Until TransformerLens 4 the paper model was a ``HookedTransformer`` subclass. The copy below is
that class as it was (TL 3.x only), kept here as the reference: the new model must give the same
logits, losses, caches, hook effects, state dicts and training history on the same weights.
"""

import pytest
import torch

try:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.components import Attention
except ImportError:  # TransformerLens 4 removed them
    pytest.skip("needs TransformerLens 3.x (HookedTransformer)", allow_module_level=True)

from tests.factories import markov_tokens
from tl_leadterms import paper_model, train

pytestmark = pytest.mark.hooked
TRAIN_SETTINGS = dict(lr=0.5, steps=5, batch_size=4, seed=3, progress=False)


class _OldAttention(Attention):
    def __init__(self, cfg, attn_type="global", layer_id=None):
        super().__init__(cfg, attn_type, layer_id)
        eye = torch.eye(cfg.d_model, dtype=cfg.dtype)[None]
        for name in ("W_K", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            fixed = eye.clone() if name.startswith("W") else torch.zeros_like(getattr(self, name))
            delattr(self, name)
            self.register_buffer(name, fixed, persistent=False)
        self.P = torch.nn.Parameter(torch.zeros(cfg.n_ctx, dtype=cfg.dtype))

    def forward(self, query_input, key_input, value_input, past_kv_cache_entry=None,
                additive_attention_mask=None, attention_mask=None, position_bias=None):  # fmt: skip
        q = self.hook_q((query_input @ self.W_Q.squeeze(0)).unsqueeze(2))
        k = self.hook_k(key_input.unsqueeze(2))
        v = self.hook_v((value_input @ self.W_V.squeeze(0)).unsqueeze(2))
        offset = 0
        if past_kv_cache_entry is not None:
            offset = past_kv_cache_entry.past_keys.size(1)
            k, v = past_kv_cache_entry.append(k, v)
        scores = q.squeeze(2) @ k.squeeze(2).transpose(-1, -2)
        query = torch.arange(scores.shape[-1] - scores.shape[-2], scores.shape[-1])
        dist = query[:, None] - torch.arange(scores.shape[-1])[None, :]
        scores = scores + torch.where(dist >= 0, self.P[dist.clamp(min=0)], 0.0).to(scores.dtype)
        scores = self.hook_attn_scores(self.apply_causal_mask(scores.unsqueeze(1), offset,
                                                              attention_mask))  # fmt: skip
        pattern = torch.softmax(scores, dim=-1)
        pattern = self.hook_pattern(torch.where(torch.isnan(pattern), 0.0, pattern))
        z = self.hook_z((pattern.squeeze(1) @ v.squeeze(2)).unsqueeze(2))
        if self.cfg.use_attn_result:
            return self.hook_result(z).sum(dim=2)
        return z.squeeze(2)


def _old_model(d_vocab: int, n_ctx: int, n_layers: int, dtype=torch.float64):
    cfg = HookedTransformerConfig(
        d_model=d_vocab, d_head=d_vocab, n_heads=1, n_layers=n_layers, n_ctx=n_ctx,
        d_vocab=d_vocab, attn_only=True, normalization_type=None,
        positional_embedding_type="standard", use_attn_scale=False, act_fn=None,
        init_weights=False, device="cpu", dtype=dtype, default_prepend_bos=False,
    )  # fmt: skip
    model = HookedTransformer(cfg, move_to_device=False)
    for layer, block in enumerate(model.blocks):
        block.attn = _OldAttention(model.cfg, "global", layer)
    fixed = {model.embed: ("W_E", torch.eye(d_vocab, dtype=dtype)),
             model.pos_embed: ("W_pos", torch.zeros(n_ctx, d_vocab, dtype=dtype)),
             model.unembed: ("b_U", torch.zeros(d_vocab, dtype=dtype))}  # fmt: skip
    for module, (name, value) in fixed.items():
        delattr(module, name)
        module.register_buffer(name, value, persistent=False)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    model.setup()
    return model


def _pair(d_vocab=7, n_ctx=6, n_layers=2, seed=0):
    """A new and an old model holding the same random weights (through the state dict)."""
    new = paper_model(d_vocab=d_vocab, n_ctx=n_ctx, n_layers=n_layers, dtype=torch.float64)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.copy_(0.7 * torch.randn(p.shape, generator=gen, dtype=torch.float64))
    old = _old_model(d_vocab, n_ctx, n_layers)
    old.load_state_dict(new.state_dict(), strict=True)
    return new, old


def test_state_dicts_load_both_ways():
    new, old = _pair()
    assert list(new.state_dict()) == list(old.state_dict())
    fresh = paper_model(d_vocab=7, n_ctx=6, n_layers=2, dtype=torch.float64)
    fresh.load_state_dict(old.state_dict(), strict=True)
    for key, value in old.state_dict().items():
        assert torch.equal(fresh.state_dict()[key], value), key
    assert list(new.hook_dict) == list(old.hook_dict)


def test_forward_loss_and_stop_at_layer_equal_the_old_model():
    new, old = _pair(seed=1)
    tokens = torch.randint(0, 7, (5, 6), generator=torch.Generator().manual_seed(2))
    assert (new(tokens) - old(tokens)).abs().max().item() <= 1e-12
    assert (new(tokens[:, :3]) - old(tokens[:, :3])).abs().max().item() <= 1e-12
    for kwargs in ({"return_type": "loss"}, {"return_type": "loss", "loss_per_token": True}):
        assert (new(tokens, **kwargs) - old(tokens, **kwargs)).abs().max().item() <= 1e-12
    assert torch.equal(new(tokens, stop_at_layer=1), old(tokens, stop_at_layer=1))
    assert new(tokens, return_type=None) is None and old(tokens, return_type=None) is None


def test_caches_equal_hook_by_hook():
    new, old = _pair(seed=3)
    tokens = torch.randint(0, 7, (3, 5), generator=torch.Generator().manual_seed(4))
    _, new_cache = new.run_with_cache(tokens)
    _, old_cache = old.run_with_cache(tokens)
    assert sorted(new_cache.keys()) == sorted(old_cache.keys())
    for name in old_cache:
        # -inf above the diagonal of the scores: assert_close treats equal infinities as equal
        torch.testing.assert_close(new_cache[name], old_cache[name], rtol=0, atol=1e-12)
    assert torch.equal(new_cache["pattern", 1], new_cache["blocks.1.attn.hook_pattern"])
    new.set_use_attn_result(True)
    old.set_use_attn_result(True)
    _, new_cache = new.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_result"))
    _, old_cache = old.run_with_cache(tokens, names_filter=lambda n: n.endswith("hook_result"))
    assert sorted(new_cache.keys()) == sorted(old_cache.keys()) == [
        "blocks.0.attn.hook_result", "blocks.1.attn.hook_result"
    ]  # fmt: skip
    assert torch.equal(
        new_cache["blocks.1.attn.hook_result"], old_cache["blocks.1.attn.hook_result"]
    )


def test_hooks_act_the_same():
    new, old = _pair(seed=5)
    tokens = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(6))

    def flatten(pattern, hook):
        return (
            torch.tril(torch.ones_like(pattern)) / torch.arange(1, 7, dtype=pattern.dtype)[:, None]
        )

    hooks = [("blocks.0.attn.hook_pattern", flatten)]
    patched = new.run_with_hooks(tokens, fwd_hooks=hooks)
    assert (patched - old.run_with_hooks(tokens, fwd_hooks=hooks)).abs().max().item() <= 1e-12
    assert not torch.allclose(patched, new(tokens))


def test_training_history_and_weights_equal_the_old_model():
    tokens = markov_tokens(12, 7, 7, seed=7)
    new = paper_model(d_vocab=7, n_ctx=6, n_layers=2, dtype=torch.float64)
    old = _old_model(7, 6, 2)
    new_history = train(new, tokens, **TRAIN_SETTINGS)
    old_history = train(old, tokens, **TRAIN_SETTINGS)
    assert new_history.steps == old_history.steps
    assert new_history.loss == pytest.approx(old_history.loss, abs=1e-12, rel=0)
    assert new_history.loss[0] != new_history.loss[-1]  # the weights moved
    for key, value in old.named_parameters():
        assert (new.get_parameter(key) - value).abs().max().item() <= 1e-12, key


def write_saved_outputs(path) -> None:
    """Outputs of the old model for tests/unit/test_paper_model_saved.py (which runs under TL 4).

    Regenerate (TL 3.x only) with ``python -m tests.unit.test_paper_model_legacy``.
    """
    _, old = _pair(seed=11)
    tokens = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(12))
    _, cache = old.run_with_cache(tokens)
    train_tokens = markov_tokens(12, 7, 7, seed=13)
    trained = _old_model(7, 6, 2)
    history = train(trained, train_tokens, **TRAIN_SETTINGS)
    torch.save(
        {
            "state_dict": old.state_dict(),
            "tokens": tokens,
            "logits": old(tokens),
            "loss_per_token": old(tokens, return_type="loss", loss_per_token=True),
            "cache": dict(cache.items()),
            "train_tokens": train_tokens,
            "train_loss": torch.tensor(history.loss, dtype=torch.float64),
            "trained": {k: v.detach() for k, v in trained.named_parameters()},
        },
        path,
    )


if __name__ == "__main__":
    from pathlib import Path

    write_saved_outputs(Path(__file__).resolve().parents[1] / "data" / "paper_model_tl39.pt")
