"""Small models shared by the tests.

``HookedTransformer``/``HookedTransformerConfig`` are re-exported from here (``None`` under
TransformerLens 4, where every test that builds one carries the ``hooked`` mark and skips).
"""

import torch

try:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
except ImportError:  # TransformerLens 4 removed them; the tests using them are marked hooked
    HookedTransformer = HookedTransformerConfig = None


def random_attn_only(
    d_vocab: int,
    n_ctx: int,
    *,
    seed: int,
    n_layers: int = 2,
    d_model: int = 12,
    d_head: int = 4,
    n_heads: int = 3,
    positional: str = "standard",
) -> "HookedTransformer":
    """An attention-only HookedTransformer with embeddings, learned positions and no LayerNorm,
    every weight (biases included) drawn from N(0, 0.5²)."""
    cfg = HookedTransformerConfig(
        d_model=d_model, d_head=d_head, n_heads=n_heads, n_layers=n_layers, n_ctx=n_ctx,
        d_vocab=d_vocab, attn_only=True, normalization_type=None, act_fn=None, seed=seed,
        positional_embedding_type=positional,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model
