"""The paper's model (docs/math.md#model) as a TransformerLens :class:`HookedTransformer`.

The residual stream lives in vocabulary space. The model's parameters are exactly the paper's;
every other TransformerLens weight is a fixed buffer (not saved in the ``state_dict``):

==========================  =====================================  ==========
TransformerLens weight      paper                                  kind
==========================  =====================================  ==========
``blocks.l.attn.W_Q[0]``    ``W^(l)`` (score ``x_t W x_jᵀ``)       parameter
``blocks.l.attn.W_V[0]``    ``V^(l)``                              parameter
``blocks.l.attn.P``         ``P^(l)``, one scalar per offset       parameter
``unembed.W_U``             ``W_O``                                parameter
``embed.W_E``               identity (one-hot input)               buffer
``blocks.l.attn.W_K[0]``    identity                               buffer
``blocks.l.attn.W_O[0]``    identity (no separate projection)      buffer
``pos_embed.W_pos``         zero (positions act only through P)    buffer
all biases                  zero                                   buffer
==========================  =====================================  ==========

Attention scores are not scaled (``use_attn_scale=False``); ``P`` is added to the scores as
``DM(P)[t, t−d] = P[d]`` before the causal mask and before ``hook_attn_scores``, so every hook
sees the paper's scores.
"""

import torch
from jaxtyping import Float
from torch import Tensor, nn
from transformer_lens import HookedTransformer, HookedTransformerConfig
from transformer_lens.components import Attention

from tl_leadterms.errors import LeadTermsError, positive_int

__all__ = ["PaperAttention", "PaperModel", "paper_model"]


class PaperAttention(Attention):
    """The paper's one-head attention: ``S(Mask(h W hᵀ + DM(P))) h V`` with hooks in TL's places.

    ``W_Q[0]`` is ``W``, ``W_V[0]`` is ``V`` and ``P`` the relative bias. ``W_K`` and ``W_O`` are
    identity buffers and the biases zero buffers, kept so that TransformerLens' circuit properties
    (``QK``, ``OV``) and weight accessors work; the forward pass skips multiplying by them.
    """

    def __init__(self, cfg: HookedTransformerConfig, attn_type: str = "global", layer_id=None):
        super().__init__(cfg, attn_type, layer_id)
        eye = torch.eye(cfg.d_model, dtype=cfg.dtype)[None]
        for name in ("W_K", "W_O", "b_Q", "b_K", "b_V", "b_O"):
            fixed = eye.clone() if name.startswith("W") else torch.zeros_like(getattr(self, name))
            delattr(self, name)
            self.register_buffer(name, fixed, persistent=False)
        with torch.no_grad():
            self.W_Q.zero_()
            self.W_V.zero_()
        self.P = nn.Parameter(torch.zeros(cfg.n_ctx, dtype=cfg.dtype))

    def relative_bias(self, query_ctx: int, key_ctx: int) -> Float[Tensor, "query_pos key_pos"]:
        """``DM(P)`` for the last ``query_ctx`` of ``key_ctx`` positions (0 above the diagonal)."""
        if key_ctx > self.cfg.n_ctx:
            raise LeadTermsError(
                f"sequence length {key_ctx} exceeds the paper model's n_ctx={self.cfg.n_ctx}: P "
                "has one scalar per offset 0..n_ctx-1; build the model with a larger n_ctx"
            )
        query = torch.arange(key_ctx - query_ctx, key_ctx, device=self.P.device)
        key = torch.arange(key_ctx, device=self.P.device)
        offset = query[:, None] - key[None, :]
        return torch.where(offset >= 0, self.P[offset.clamp(min=0)], 0.0)

    def forward(
        self,
        query_input: Float[Tensor, "batch pos d_model"],
        key_input: Float[Tensor, "batch kv_pos d_model"],
        value_input: Float[Tensor, "batch kv_pos d_model"],
        past_kv_cache_entry=None,
        additive_attention_mask=None,
        attention_mask=None,
        position_bias=None,
    ) -> Float[Tensor, "batch pos d_model"]:
        if query_input.dim() != 3:
            raise LeadTermsError(
                "the paper model's attention takes the residual stream [batch, pos, d_vocab] as "
                "its input; turn off use_split_qkv_input / use_attn_in "
                "(model.set_use_split_qkv_input(False), model.set_use_attn_in(False))"
            )
        # squeeze/unsqueeze, not indexing: a select's backward writes a zero-filled full tensor
        q = self.hook_q((query_input @ self.W_Q.squeeze(0)).unsqueeze(2))  # [batch, pos, 1, V]
        k = self.hook_k(key_input.unsqueeze(2))  # W_K = I
        v = self.hook_v((value_input @ self.W_V.squeeze(0)).unsqueeze(2))
        offset = 0
        if past_kv_cache_entry is not None:
            offset = past_kv_cache_entry.past_keys.size(1)
            k, v = past_kv_cache_entry.append(k, v)
        scores = q.squeeze(2) @ k.squeeze(2).transpose(-1, -2)
        scores = scores + self.relative_bias(scores.shape[-2], scores.shape[-1]).to(scores.dtype)
        scores = self.apply_causal_mask(scores.unsqueeze(1), offset, attention_mask)
        if additive_attention_mask is not None:
            scores = scores + additive_attention_mask
        scores = self.hook_attn_scores(scores)  # [batch, 1, query_pos, key_pos]
        pattern = torch.softmax(scores, dim=-1)
        pattern = self.hook_pattern(torch.where(torch.isnan(pattern), 0.0, pattern))
        z = self.hook_z((pattern.squeeze(1) @ v.squeeze(2)).unsqueeze(2))
        if self.cfg.use_attn_result:  # W_O = I: each head's result is its z
            return self.hook_result(z).sum(dim=2)
        return z.squeeze(2)


class PaperModel(HookedTransformer):
    """The paper's one-hot, attention-only transformer; see the module docstring for its weights.

    Besides the usual TransformerLens weights it exposes the paper's names: :attr:`W`, :attr:`V`,
    :attr:`P` (one entry per layer) and :attr:`W_O_paper` (the output matrix, ``unembed.W_U``).
    """

    def forward(self, input, *args, **kwargs):
        tokens = isinstance(input, Tensor) and not input.is_floating_point()
        if tokens and input.shape[-1] > self.cfg.n_ctx:
            raise LeadTermsError(
                f"sequence length {input.shape[-1]} exceeds the paper model's "
                f"n_ctx={self.cfg.n_ctx}: P has one scalar per offset 0..n_ctx-1; cut the "
                "sequences or build the model with a larger n_ctx"
            )
        return super().forward(input, *args, **kwargs)

    @property
    def W(self) -> list[Tensor]:
        """Key-query matrices ``W^(l)`` [query token, key token], one per layer."""
        return [block.attn.W_Q[0] for block in self.blocks]

    @property
    def V(self) -> list[Tensor]:
        """Value matrices ``V^(l)`` [key token, residual token], one per layer."""
        return [block.attn.W_V[0] for block in self.blocks]

    @property
    def P(self) -> list[Tensor]:
        """Relative positional biases ``P^(l)`` [offset], one per layer."""
        return [block.attn.P for block in self.blocks]

    @property
    def W_O_paper(self) -> Tensor:
        """The paper's output matrix ``W_O`` [current token, next token] (``unembed.W_U``)."""
        return self.unembed.W_U

    def paper_parameters(self) -> dict[str, nn.Parameter]:
        """The trainable parameters by paper name: ``W_O``, ``W.{l}``, ``V.{l}``, ``P.{l}``."""
        params = {"W_O": self.unembed.W_U}
        for layer, block in enumerate(self.blocks):
            params[f"W.{layer}"] = block.attn.W_Q
            params[f"V.{layer}"] = block.attn.W_V
            params[f"P.{layer}"] = block.attn.P
        return params


def paper_model(
    d_vocab: int,
    n_ctx: int,
    n_layers: int,
    *,
    tokenizer=None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> PaperModel:
    """Build the paper's model (docs/math.md#model), zero-initialised, as a HookedTransformer.

    Args:
        d_vocab: vocabulary size ``|V|``; the residual stream has this width.
        n_ctx: context length ``T`` (input positions per sample; a sample has ``T + 1`` tokens).
        n_layers: number of attention layers ``L`` (one head each).
        tokenizer: optional tokenizer for ``to_tokens``/``to_string``; its length must be
            ``d_vocab``.
        device: where to put the weights.
        dtype: parameter dtype (``torch.float32`` or ``torch.float64``; half precisions run but
            lose the exactness the tests check).

    Example:
        >>> import torch
        >>> from tl_leadterms import paper_model
        >>> model = paper_model(d_vocab=10, n_ctx=6, n_layers=2)
        >>> sorted(n for n, _ in model.named_parameters())[:4]
        ['blocks.0.attn.P', 'blocks.0.attn.W_Q', 'blocks.0.attn.W_V', 'blocks.1.attn.P']
        >>> model(torch.tensor([[1, 2, 3]])).shape  # zero init: uniform logits
        torch.Size([1, 3, 10])
    """
    d_vocab = positive_int("d_vocab", d_vocab)
    n_ctx = positive_int("n_ctx", n_ctx)
    n_layers = positive_int("n_layers", n_layers)
    if dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise LeadTermsError(f"dtype must be a floating torch dtype, got {dtype!r}")
    if tokenizer is not None and len(tokenizer) != d_vocab:
        raise LeadTermsError(
            f"the tokenizer has {len(tokenizer)} tokens but d_vocab={d_vocab}; pass "
            f"d_vocab=len(tokenizer)"
        )
    cfg = HookedTransformerConfig(
        d_model=d_vocab,
        d_head=d_vocab,
        n_heads=1,
        n_layers=n_layers,
        n_ctx=n_ctx,
        d_vocab=d_vocab,
        attn_only=True,
        normalization_type=None,
        positional_embedding_type="standard",
        use_attn_scale=False,
        act_fn=None,
        init_weights=False,
        device=str(device),
        dtype=dtype,
        default_prepend_bos=False,
        model_name="tl_leadterms-paper-model",
    )
    model = PaperModel(cfg, tokenizer=tokenizer, move_to_device=False)
    for layer, block in enumerate(model.blocks):
        block.attn = PaperAttention(model.cfg, "global", layer)
    _freeze(model)
    model.setup()  # re-register the hook points of the new attention modules
    # nn.Module.to: HookedTransformer.to would print a 'Moving model' line
    return torch.nn.Module.to(model, device)


def _freeze(model: PaperModel) -> None:
    """Turn the fixed embedding (identity), W_pos (zero) and b_U (zero) into buffers."""
    d_vocab, dtype = model.cfg.d_vocab, model.cfg.dtype
    fixed = {
        model.embed: ("W_E", torch.eye(d_vocab, dtype=dtype)),
        model.pos_embed: ("W_pos", torch.zeros(model.cfg.n_ctx, d_vocab, dtype=dtype)),
        model.unembed: ("b_U", torch.zeros(d_vocab, dtype=dtype)),
    }
    for module, (name, value) in fixed.items():
        delattr(module, name)
        module.register_buffer(name, value, persistent=False)
    with torch.no_grad():
        model.unembed.W_U.zero_()
