"""The "extended embedding": each vocabulary token's residual stream after block 0.

For models with MLPs the field often reads later layers through the *extended* (or *effective*)
embedding instead of ``W_E``: ``x_v = resid_post⁰([v])``, the residual stream after block 0 when the
token is the whole input — the embedding (times any embedding scale, plus ``W_pos[0]`` for learned
positions), block 0's attention on the length-1 sequence (the token itself) and block 0's MLP, with
LayerNorms, biases and gating exactly as the model runs them, computed by the model's own forward
pass (``stop_at_layer=1``).

Cost: ``d_vocab`` one-token forward passes, batched ``batch_size`` tokens at a time (activation
memory ``batch_size × d_mlp``), and a ``[d_vocab, d_model]`` result in the model's dtype (50k × 768
floats ≈ 150 MiB for GPT-2 small), once per ``to_paper`` call."""

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from tl_leadterms.adapters.view import model_view
from tl_leadterms.errors import LeadTermsError, positive_int

__all__ = ["extended_embedding"]


@torch.no_grad()
def extended_embedding(model: Any, *, batch_size: int = 1024) -> Float[Tensor, "d_vocab d_model"]:
    """Every token's residual stream after block 0 of the model, on a length-1 input.

    Args:
        model: a HookedTransformer or TransformerBridge (or its view) with at least one block.
        batch_size: tokens per forward pass.

    Example:
        >>> from transformer_lens import HookedTransformer, HookedTransformerConfig
        >>> cfg = HookedTransformerConfig(d_model=8, d_head=4, n_layers=2, n_ctx=5, d_vocab=6,
        ...                               d_mlp=16, act_fn="relu", seed=0)
        >>> model = HookedTransformer(cfg)
        >>> E = extended_embedding(model)
        >>> E.shape
        torch.Size([6, 8])
        >>> _, cache = model.run_with_cache(torch.tensor([[4]]))
        >>> torch.allclose(E[4], cache["blocks.0.hook_resid_post"][0, 0])
        True
    """
    positive_int("batch_size", batch_size)
    view = model_view(model, caller="extended_embedding")
    if view.n_layers < 1:
        raise LeadTermsError("the extended embedding needs a model with at least one block")
    device = view.device
    parts = []
    for start in range(0, view.d_vocab, batch_size):
        stop = min(start + batch_size, view.d_vocab)
        tokens = torch.arange(start, stop, device=device)[:, None]
        parts.append(view.run(tokens, stop_at_layer=1)[:, 0])
    return torch.cat(parts)
