"""The paper's model (MATH.md §1) as a TransformerLens :class:`HookedTransformer`.

The residual stream lives in vocabulary space, so every TransformerLens weight is either one of
the paper's parameters or a frozen identity / zero:

==========================  =====================================  ==========
TransformerLens weight      paper                                  trainable
==========================  =====================================  ==========
``blocks.l.attn.W_Q[0]``    ``W^(l)`` (score ``x_t W x_jᵀ``)       yes
``blocks.l.attn.W_V[0]``    ``V^(l)``                              yes
``blocks.l.attn.P``         ``P^(l)``, one scalar per offset       yes
``unembed.W_U``             ``W_O``                                yes
``embed.W_E``               identity (one-hot input)               no
``blocks.l.attn.W_K[0]``    identity                               no
``blocks.l.attn.W_O[0]``    identity (no separate projection)      no
``pos_embed.W_pos``         zero (positions act only through P)    no
all biases                  zero                                   no
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

from tl_leadterms.errors import LeadTermsError

__all__ = ["PaperAttention", "PaperModel", "paper_model"]

# parameter names (relative to the model) that the paper trains, in a stable order
PAPER_PARAMETERS = ("W_Q", "W_V", "P", "W_U")


class PaperAttention(Attention):
    """One-head attention whose scores get the paper's learned relative positional bias ``P``."""

    def __init__(self, cfg: HookedTransformerConfig, attn_type: str = "global", layer_id=None):
        super().__init__(cfg, attn_type, layer_id)
        self.P = nn.Parameter(torch.zeros(cfg.n_ctx, dtype=cfg.dtype))

    def relative_bias(self, query_ctx: int, key_ctx: int) -> Float[Tensor, "query_pos key_pos"]:
        """``DM(P)`` for the last ``query_ctx`` queries of ``key_ctx`` keys (0 above the diagonal)."""
        if key_ctx > self.cfg.n_ctx:
            raise LeadTermsError(
                f"sequence length {key_ctx} exceeds the paper model's n_ctx={self.cfg.n_ctx}: P "
                "has one scalar per offset 0..n_ctx-1; build the model with a larger n_ctx"
            )
        query = torch.arange(key_ctx - query_ctx, key_ctx, device=self.P.device)
        key = torch.arange(key_ctx, device=self.P.device)
        offset = query[:, None] - key[None, :]
        return torch.where(offset >= 0, self.P[offset.clamp(min=0)], 0.0)

    def calculate_attention_scores(self, q, k):
        scores = super().calculate_attention_scores(q, k)
        return scores + self.relative_bias(scores.shape[-2], scores.shape[-1]).to(scores.dtype)


class PaperModel(HookedTransformer):
    """The paper's one-hot, attention-only transformer; see the module docstring for its weights.

    Besides the usual TransformerLens weights it exposes the paper's names: :attr:`W`, :attr:`V`,
    :attr:`P` (one entry per layer) and :attr:`W_O_paper` (the output matrix, ``unembed.W_U``).
    """

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


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LeadTermsError(f"{name} must be a positive int, got {value!r}")
    return value


def paper_model(
    d_vocab: int,
    n_ctx: int,
    n_layers: int,
    *,
    tokenizer=None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> PaperModel:
    """Build the paper's model (MATH.md §1), zero-initialised, as a HookedTransformer.

    Args:
        d_vocab: vocabulary size ``|V|``; the residual stream has this width.
        n_ctx: context length ``T`` (input positions per sample; a sample has ``T + 1`` tokens).
        n_layers: number of attention layers ``L`` (one head each).
        tokenizer: optional tokenizer for ``to_tokens``/``to_string``; its length must be
            ``d_vocab``.
        device: where to put the weights.
        dtype: parameter dtype (``torch.float32`` or ``torch.float64``).

    Example:
        >>> import torch
        >>> from tl_leadterms import paper_model
        >>> model = paper_model(d_vocab=10, n_ctx=6, n_layers=2)
        >>> sorted(n for n, p in model.named_parameters() if p.requires_grad)[:4]
        ['blocks.0.attn.P', 'blocks.0.attn.W_Q', 'blocks.0.attn.W_V', 'blocks.1.attn.P']
        >>> model(torch.tensor([[1, 2, 3]])).shape  # zero init: uniform logits
        torch.Size([1, 3, 10])
    """
    d_vocab = _positive_int("d_vocab", d_vocab)
    n_ctx = _positive_int("n_ctx", n_ctx)
    n_layers = _positive_int("n_layers", n_layers)
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
    model.setup()  # re-register the hook points of the new attention modules
    _paper_init(model)
    # nn.Module.to: HookedTransformer.to would print a 'Moving model' line
    return torch.nn.Module.to(model, device)


@torch.no_grad()
def _paper_init(model: PaperModel) -> None:
    """Zero the paper's parameters; set the frozen weights to identity / zero."""
    eye = torch.eye(model.cfg.d_model, dtype=model.cfg.dtype)
    for name, param in model.named_parameters():
        param.zero_()
        param.requires_grad_(name.rsplit(".", 1)[-1] in PAPER_PARAMETERS)
    model.embed.W_E.copy_(eye)
    for block in model.blocks:
        block.attn.W_K[0].copy_(eye)
        block.attn.W_O[0].copy_(eye)
