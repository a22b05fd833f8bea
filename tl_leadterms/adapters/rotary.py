"""The content-independent positional score of a rotary attention head (mean-field ``P``).

``P_h[d] = (R_d q̄_h) · (R_0 k̄_h) / attn_scale`` for offsets ``d = 0 .. n_ctx − 1``, with ``q̄``
and ``k̄`` the query and key vectors averaged over the tokens (``π``: ``token_weights``), rotated
by the model's own tables: the score of a query and a key that both carry the *average* token.
What it leaves out (the content-position interaction, norms, length-dependent rescaling):
docs/guides/transformerlens.md#the-mean-field-p-of-a-rotary-head.
"""

from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from tl_leadterms.errors import LeadTermsError

__all__ = ["check_token_weights", "rotary_profile"]


def check_token_weights(token_weights: Any, d_vocab: int) -> Float[Tensor, " d_vocab"] | None:
    """``token_weights`` as float64 frequencies summing to 1, or ``None`` (uniform).

    Example:
        >>> check_token_weights(torch.tensor([1, 3]), 2)
        tensor([0.2500, 0.7500], dtype=torch.float64)
    """
    if token_weights is None:
        return None
    if not isinstance(token_weights, Tensor):
        raise LeadTermsError(
            f"token_weights must be a 1-D torch.Tensor of {d_vocab} token frequencies (e.g. "
            f"unigram counts over the model's vocabulary), got {type(token_weights).__name__}"
        )
    if token_weights.shape != (d_vocab,):
        raise LeadTermsError(
            f"token_weights must have shape ({d_vocab},) (one weight per vocabulary token of the "
            f"model), got {tuple(token_weights.shape)}; map kept-vocabulary statistics back to the "
            "model's token ids first"
        )
    w = token_weights.detach().to(torch.float64)
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or float(w.sum()) <= 0:
        raise LeadTermsError(
            "token_weights must be finite, non-negative and not all zero (frequencies or counts); "
            f"got min {float(w.min())}, sum {float(w.sum())}"
        )
    return w / w.sum()


def _rotate(
    x: Float[Tensor, "heads d_head"], cos: Tensor, sin: Tensor, adjacent: bool
) -> Float[Tensor, "n_ctx heads d_head"]:
    """``x`` rotated to every position: ``x_rot·cos + flip(x_rot)·sin`` on the rotary dims."""
    rd = cos.shape[-1]
    x_rot, x_pass = x[:, :rd], x[:, rd:]
    flip = torch.empty_like(x_rot)
    if adjacent:  # GPT-J: pairs (2i, 2i + 1)
        flip[:, ::2], flip[:, 1::2] = -x_rot[:, 1::2], x_rot[:, ::2]
    else:  # GPT-NeoX: pairs (i, i + rd/2)
        n = rd // 2
        flip[:, :n], flip[:, n:] = -x_rot[:, n:], x_rot[:, :n]
    rotated = x_rot[None] * cos[:, None] + flip[None] * sin[:, None]
    return torch.cat([rotated, x_pass[None].expand(len(cos), -1, -1)], dim=-1)


@torch.no_grad()
def rotary_profile(
    view: Any,
    layer: int,
    q_mean: Float[Tensor, "n_heads d_head"],
    k_mean: Float[Tensor, "n_heads d_head"],
    n_ctx: int,
    attn_scale: float,
) -> Float[Tensor, "n_heads n_ctx"]:
    """``P[h, d] = (R_d q̄_h)·(R_0 k̄_h) / attn_scale`` with the rotary tables of ``layer``.

    Args:
        view: the model's view (:func:`tl_leadterms.adapters.view.model_view`); its
            ``rotary_tables`` are the model's own.
        layer: the layer whose tables to use (local and global layers may differ).
        q_mean, k_mean: mean query and key vector per query head (keys already mapped to the
            query heads' groups).
        n_ctx: number of offsets.
        attn_scale: the score divisor.

    Computed in float64; returned in ``q_mean``'s dtype.
    """
    sin, cos, adjacent = view.rotary_tables(layer, n_ctx)
    sin, cos = sin.to(q_mean.device), cos.to(q_mean.device)
    q = _rotate(q_mean.to(torch.float64), cos, sin, adjacent)  # [n_ctx, heads, d_head]
    k0 = _rotate(k_mean.to(torch.float64), cos[:1], sin[:1], adjacent)[0]
    return (torch.einsum("dhe,he->hd", q, k0) / attn_scale).to(q_mean.dtype)
