"""The paper model (``docs/math.md#model``) as a standalone TransformerLens ``HookedRootModule``.

Its parameters are exactly the paper's ``W^(l)`` (``blocks.l.attn.W_Q[0]``), ``V^(l)``
(``W_V[0]``), ``P^(l)`` (``blocks.l.attn.P``, added to the unscaled scores before the causal
mask and ``hook_attn_scores``) and ``W_O`` (``unembed.W_U``); every other weight is a fixed
identity or zero buffer (the table in docs/math.md#model).
"""

from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import ActivationCache, FactoredMatrix, HookedRootModule
from transformer_lens.hook_points import HookPoint

from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.models.paper_config import PaperConfig
from tl_leadterms.models.paper_parts import (
    PaperAttention,
    PaperBlock,
    PaperEmbed,
    PaperPosEmbed,
    PaperUnembed,
)

__all__ = ["PaperAttention", "PaperConfig", "PaperModel", "paper_model"]

# hooks an attention-only model without split inputs never runs: a hook on one would never fire
_IDLE_HOOKS = ("hook_attn_in", "hook_q_input", "hook_k_input", "hook_v_input", "hook_mlp_in",
               "hook_mlp_out")  # fmt: skip


class PaperModel(HookedRootModule):
    """The paper's one-hot, attention-only transformer; see the module docstring for its weights.

    Besides the TransformerLens-style weights (``W_E``, ``W_Q``..., ``W_U``) it exposes the
    paper's names: :attr:`W`, :attr:`V`, :attr:`P` (one entry per layer) and :attr:`W_O_paper`
    (the output matrix, ``unembed.W_U``). Build it with :func:`paper_model`.
    """

    def __init__(self, cfg: PaperConfig, tokenizer=None) -> None:
        super().__init__()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.embed = PaperEmbed(cfg)
        self.hook_embed = HookPoint()
        self.pos_embed = PaperPosEmbed(cfg)
        self.hook_pos_embed = HookPoint()
        self.blocks = nn.ModuleList(PaperBlock(cfg, layer) for layer in range(cfg.n_layers))
        self.unembed = PaperUnembed(cfg)
        self.setup()

    def check_hooks_to_add(self, hook_point, hook_point_name, hook, dir="fwd", **kwargs) -> None:
        if hook_point_name.endswith("attn.hook_result") and not self.cfg.use_attn_result:
            raise LeadTermsError(
                f"{hook_point_name} runs only with model.cfg.use_attn_result=True; call "
                "model.set_use_attn_result(True) first (or hook attn.hook_z: W_O is the identity)"
            )
        if hook_point_name.endswith(_IDLE_HOOKS):
            raise LeadTermsError(
                f"{hook_point_name} never runs in the paper model (attention-only, one residual "
                "input); hook blocks.l.hook_resid_pre instead"
            )

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Run ``attn.hook_result`` (each head's output; here its ``z``) or not."""
        self.cfg.use_attn_result = bool(use_attn_result)

    def forward(
        self,
        input: Int[Tensor, "batch pos"] | Float[Tensor, "batch pos d_model"] | str | list[str],
        return_type: str | None = "logits",
        loss_per_token: bool = False,
        prepend_bos: bool | None = None,
        padding_side: str | None = None,
        start_at_layer: int | None = None,
        tokens: Int[Tensor, "batch pos"] | None = None,
        attention_mask: Int[Tensor, "batch pos"] | None = None,
        stop_at_layer: int | None = None,
        past_kv_cache=None,
    ):
        """Logits, loss (``return_type`` ``"logits"``, ``"loss"``, ``"both"``, ``None``) or,
        with ``stop_at_layer``, the residual stream before that block; as HookedTransformer's."""
        if start_at_layer is None:
            residual, tokens, attention_mask = self._embed(
                input, prepend_bos, padding_side, attention_mask, past_kv_cache
            )
        else:
            residual = input
        for i, block in list(enumerate(self.blocks))[start_at_layer:stop_at_layer]:
            entry = past_kv_cache[i] if past_kv_cache is not None else None
            residual = block(residual, entry, attention_mask)
        if stop_at_layer is not None:
            return residual
        if return_type is None:
            return None
        logits = self.unembed(residual)
        if return_type == "logits":
            return logits
        if tokens is None:
            raise LeadTermsError(f"return_type={return_type!r} needs tokens=; pass the token ids")
        loss = _lm_loss(logits, tokens, attention_mask, loss_per_token)
        if return_type == "loss":
            return loss
        if return_type == "both":
            return logits, loss
        raise LeadTermsError(
            f"return_type must be 'logits', 'loss', 'both' or None, got {return_type!r}"
        )

    def _embed(self, input, prepend_bos, padding_side, attention_mask, past_kv_cache):
        tokens = self.to_tokens(input, prepend_bos, padding_side) if _is_text(input) else input
        if tokens.ndim == 1:
            tokens = tokens[None]
        if not tokens.is_floating_point() and tokens.shape[-1] > self.cfg.n_ctx:
            raise LeadTermsError(
                f"sequence length {tokens.shape[-1]} exceeds the paper model's "
                f"n_ctx={self.cfg.n_ctx}: P has one scalar per offset 0..n_ctx-1; cut the "
                "sequences or build the model with a larger n_ctx"
            )
        tokens = tokens.to(self.unembed.W_U.device)
        offset = 0
        if past_kv_cache is not None:
            if attention_mask is None:
                attention_mask = torch.ones_like(tokens)
            attention_mask = past_kv_cache.append_attention_mask(attention_mask.to(tokens.device))
            offset = past_kv_cache[0].past_keys.shape[1]
        elif attention_mask is not None:
            attention_mask = attention_mask.to(tokens.device)
        embed = self.hook_embed(self.embed(tokens))
        residual = embed + self.hook_pos_embed(self.pos_embed(tokens, offset, attention_mask))
        return residual, tokens, attention_mask

    def run_with_cache(self, *model_args, return_cache_object=True, remove_batch_dim=False,
                       **kwargs):  # fmt: skip
        """``(output, cache)``; the cache is an ``ActivationCache`` (a dict with
        ``return_cache_object=False``), indexed by hook name or ``("pattern", layer)``."""
        out, cache = super().run_with_cache(
            *model_args, remove_batch_dim=remove_batch_dim, **kwargs
        )
        if return_cache_object:
            return out, ActivationCache(cache, self, has_batch_dim=not remove_batch_dim)
        return out, cache

    def to_tokens(self, input: str | list[str], prepend_bos: bool | None = None,
                  padding_side: str | None = None) -> Int[Tensor, "batch pos"]:  # fmt: skip
        """Token ids of a text or texts (right-padded) through :attr:`tokenizer`."""
        if self.tokenizer is None:
            raise LeadTermsError("text input needs a tokenizer: paper_model(..., tokenizer=tok)")
        texts = [input] if isinstance(input, str) else list(input)
        kwargs = {} if padding_side is None else {"padding_side": padding_side}
        ids = self.tokenizer(texts, add_special_tokens=False, padding=True, return_tensors="pt",
                             **kwargs)["input_ids"]  # fmt: skip
        if prepend_bos:
            bos = torch.full((ids.shape[0], 1), self.tokenizer.bos_token_id, dtype=ids.dtype)
            ids = torch.cat([bos, ids], dim=1)
        return ids.to(self.unembed.W_U.device)

    def to_string(self, tokens: Int[Tensor, "... pos"]) -> str | list[str]:
        """The text of ``tokens`` (one string per row of a 2-D tensor)."""
        if self.tokenizer is None:
            raise LeadTermsError("to_string needs a tokenizer: paper_model(..., tokenizer=tok)")
        if tokens.ndim > 1:
            return [self.to_string(row) for row in tokens]
        return self.tokenizer.decode(tokens.tolist())

    def _apply(self, fn, recurse=True):
        out = super()._apply(fn, recurse)
        self.cfg.device = str(self.unembed.W_U.device)  # keep cfg in step with .to / .double
        self.cfg.dtype = self.unembed.W_U.dtype
        return out

    W_E = property(lambda self: self.embed.W_E, doc="``[d_vocab, d_model]`` identity.")
    W_pos = property(lambda self: self.pos_embed.W_pos, doc="``[n_ctx, d_model]`` zeros.")
    W_U = property(lambda self: self.unembed.W_U, doc="``[d_model, d_vocab]`` (``W_O``).")
    b_U = property(lambda self: self.unembed.b_U, doc="``[d_vocab]`` zeros.")

    def _stack(self, name: str) -> Tensor:
        return torch.stack([getattr(block.attn, name) for block in self.blocks], dim=0)

    W_Q = property(lambda self: self._stack("W_Q"), doc="``[n_layers, 1, V, V]`` (``W``).")
    W_K = property(lambda self: self._stack("W_K"), doc="``[n_layers, 1, V, V]`` identities.")
    W_V = property(lambda self: self._stack("W_V"), doc="``[n_layers, 1, V, V]`` (``V``).")
    W_O = property(lambda self: self._stack("W_O"), doc="``[n_layers, 1, V, V]`` identities.")
    b_Q = property(lambda self: self._stack("b_Q"), doc="``[n_layers, 1, V]`` zeros.")
    b_K = property(lambda self: self._stack("b_K"), doc="``[n_layers, 1, V]`` zeros.")
    b_V = property(lambda self: self._stack("b_V"), doc="``[n_layers, 1, V]`` zeros.")
    b_O = property(lambda self: self._stack("b_O"), doc="``[n_layers, V]`` zeros.")

    QK = property(lambda self: FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1)))
    OV = property(lambda self: FactoredMatrix(self.W_V, self.W_O))

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


def _is_text(input) -> bool:
    return isinstance(input, str) or (isinstance(input, list) and bool(input)
                                      and isinstance(input[0], str))  # fmt: skip


def _lm_loss(logits: Tensor, tokens: Tensor, attention_mask: Tensor | None, per_token: bool):
    """Next-token cross-entropy as TransformerLens computes it (padding masked out)."""
    log_probs = F.log_softmax(logits, dim=-1)
    predicted = log_probs[..., :-1, :].gather(dim=-1, index=tokens[..., 1:, None])[..., 0]
    if attention_mask is not None:
        keep = torch.logical_and(attention_mask[:, :-1], attention_mask[:, 1:])
        predicted = predicted.masked_fill(~keep, 0.0)
        n_tokens = keep.sum().item()
    else:
        n_tokens = predicted.numel()
    return -predicted if per_token else -predicted.sum() / n_tokens


def paper_model(
    *,
    d_vocab: int,
    n_ctx: int,
    n_layers: int,
    tokenizer: Any = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> PaperModel:
    """Build the paper's model (``docs/math.md#model``), zero-initialised.

    Args:
        d_vocab: vocabulary size ``|V|``; the residual stream has this width.
        n_ctx: context length ``T`` (input positions per sample; a sample has ``T + 1`` tokens).
        n_layers: number of attention layers ``L`` (one head each).
        tokenizer: optional tokenizer for ``to_tokens``/``to_string``; its length must be
            ``d_vocab``.
        device: where to put the weights (default: the CPU).
        dtype: parameter dtype (``torch.float32`` or ``torch.float64``; half precisions run but
            lose the exactness the tests check).

    Returns:
        A :class:`PaperModel` (a ``HookedRootModule``: ``run_with_hooks``, ``run_with_cache``).

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
    device = "cpu" if device is None else device
    cfg = PaperConfig(d_vocab=d_vocab, n_ctx=n_ctx, n_layers=n_layers, device=str(device),
                      dtype=dtype)  # fmt: skip
    return PaperModel(cfg, tokenizer=tokenizer).to(device)
