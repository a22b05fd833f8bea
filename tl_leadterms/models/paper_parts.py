"""The paper model's modules: fixed embeddings, the one-head attention, a block, the unembedding.

Each module keeps the parameter, buffer and hook names a TransformerLens ``HookedTransformer``
gives the same weights, so hooks, caches and state dicts read the same under TL 3.9 and 4.x.
"""

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import FactoredMatrix
from transformer_lens.hook_points import HookPoint

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper_config import PaperConfig

__all__ = ["PaperAttention", "PaperBlock", "PaperEmbed", "PaperPosEmbed", "PaperUnembed"]


class PaperEmbed(nn.Module):
    """One-hot input: ``W_E`` is a fixed identity buffer (not in the state dict)."""

    def __init__(self, cfg: PaperConfig) -> None:
        super().__init__()
        self.register_buffer("W_E", torch.eye(cfg.d_vocab, dtype=cfg.dtype), persistent=False)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_model"]:
        return self.W_E[tokens, :]


class PaperPosEmbed(nn.Module):
    """The absolute position embedding, a fixed zero buffer: positions act only through ``P``."""

    def __init__(self, cfg: PaperConfig) -> None:
        super().__init__()
        zeros = torch.zeros(cfg.n_ctx, cfg.d_vocab, dtype=cfg.dtype)
        self.register_buffer("W_pos", zeros, persistent=False)

    def forward(
        self, tokens: Int[Tensor, "batch pos"], offset: int = 0, attention_mask=None
    ) -> Float[Tensor, "batch pos d_model"]:
        n = tokens.shape[-1]
        if attention_mask is None:
            return self.W_pos[offset : offset + n].expand(tokens.shape[0], -1, -1).clone()
        # left padding: positions count the unpadded tokens; pad positions get zero
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)[:, offset : offset + n]
        pad = ~attention_mask.bool()[:, offset : offset + n, None]
        return torch.where(pad, 0.0, self.W_pos[positions])


class PaperAttention(nn.Module):
    """The paper's one-head attention: ``S(Mask(h W hᵀ + DM(P))) h V`` with hooks in TL's places.

    ``W_Q[0]`` is ``W``, ``W_V[0]`` is ``V`` and ``P`` the relative bias (parameters, zero
    initialised). ``W_K`` and ``W_O`` are identity buffers and the biases zero buffers, kept so
    that circuit properties (``QK``, ``OV``) and weight accessors work; the forward pass skips
    multiplying by them. ``mask`` and ``IGNORE`` are the (persistent) buffers a TransformerLens
    attention saves, kept so that state dicts load either way.
    """

    def __init__(self, cfg: PaperConfig, layer_id: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.layer_id = layer_id
        V, dtype = cfg.d_vocab, cfg.dtype
        self.W_Q = nn.Parameter(torch.zeros(1, V, V, dtype=dtype))
        self.W_V = nn.Parameter(torch.zeros(1, V, V, dtype=dtype))
        self.P = nn.Parameter(torch.zeros(cfg.n_ctx, dtype=dtype))
        eye = torch.eye(V, dtype=dtype)[None]
        self.register_buffer("W_K", eye.clone(), persistent=False)
        self.register_buffer("W_O", eye.clone(), persistent=False)
        for name in ("b_Q", "b_K", "b_V"):
            self.register_buffer(name, torch.zeros(1, V, dtype=dtype), persistent=False)
        self.register_buffer("b_O", torch.zeros(V, dtype=dtype), persistent=False)
        self.register_buffer("mask", torch.empty((0, 0), dtype=torch.bool))
        self.register_buffer("IGNORE", torch.tensor(-torch.inf))
        for name in ("k", "q", "v", "z", "attn_scores", "pattern", "result"):
            setattr(self, f"hook_{name}", HookPoint())

    @property
    def QK(self) -> FactoredMatrix:
        """``W_Q W_Kᵀ`` per head, ``[1, d_model, d_model]`` (here ``W``)."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def OV(self) -> FactoredMatrix:
        """``W_V W_O`` per head, ``[1, d_model, d_model]`` (here ``V``)."""
        return FactoredMatrix(self.W_V, self.W_O)

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

    def _causal(self, scores: Tensor, offset: int, attention_mask: Tensor | None) -> Tensor:
        """Keys after the query (and padded keys) get ``IGNORE`` (-inf)."""
        query = torch.arange(offset, offset + scores.shape[-2], device=scores.device)
        key = torch.arange(scores.shape[-1], device=scores.device)
        keep = (key[None, :] <= query[:, None])[None, None]
        if attention_mask is not None:
            keep = keep & attention_mask[:, None, None, :].bool()
        return torch.where(keep, scores, self.IGNORE.to(scores.device))

    def forward(
        self,
        x: Float[Tensor, "batch pos d_model"],
        past_kv_cache_entry=None,
        attention_mask: Int[Tensor, "batch key_pos"] | None = None,
    ) -> Float[Tensor, "batch pos d_model"]:
        # squeeze/unsqueeze, not indexing: a select's backward writes a zero-filled full tensor
        q = self.hook_q((x @ self.W_Q.squeeze(0)).unsqueeze(2))  # [batch, pos, 1, V]
        k = self.hook_k(x.unsqueeze(2))  # W_K = I
        v = self.hook_v((x @ self.W_V.squeeze(0)).unsqueeze(2))
        offset = 0
        if past_kv_cache_entry is not None:
            offset = past_kv_cache_entry.past_keys.size(1)
            k, v = past_kv_cache_entry.append(k, v)
        scores = q.squeeze(2) @ k.squeeze(2).transpose(-1, -2)
        scores = scores + self.relative_bias(scores.shape[-2], scores.shape[-1]).to(scores.dtype)
        scores = self.hook_attn_scores(self._causal(scores.unsqueeze(1), offset, attention_mask))
        pattern = torch.softmax(scores, dim=-1)  # [batch, 1, query_pos, key_pos]
        pattern = self.hook_pattern(torch.where(torch.isnan(pattern), 0.0, pattern))
        z = self.hook_z((pattern.squeeze(1) @ v.squeeze(2)).unsqueeze(2))
        if self.cfg.use_attn_result:  # W_O = I: each head's result is its z
            return self.hook_result(z).sum(dim=2)
        return z.squeeze(2)


class PaperBlock(nn.Module):
    """One residual block: ``resid_post = resid_pre + attn(resid_pre)`` (no norm, no MLP).

    The TransformerLens block hooks that an attention-only model never runs (``hook_attn_in``,
    ``hook_q_input``... ``hook_mlp_out``) exist so that hook names match; adding a hook to one of
    them raises (see ``PaperModel.check_hooks_to_add``).
    """

    def __init__(self, cfg: PaperConfig, layer: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.ln1 = nn.Identity()
        self.attn = PaperAttention(cfg, layer)
        names = ("attn_in", "q_input", "k_input", "v_input", "mlp_in", "attn_out", "mlp_out")
        for name in (*names, "resid_pre", "resid_post"):
            setattr(self, f"hook_{name}", HookPoint())

    def forward(
        self,
        resid_pre: Float[Tensor, "batch pos d_model"],
        past_kv_cache_entry=None,
        attention_mask: Int[Tensor, "batch key_pos"] | None = None,
    ) -> Float[Tensor, "batch pos d_model"]:
        resid_pre = self.hook_resid_pre(resid_pre)
        attn_out = self.hook_attn_out(self.attn(resid_pre, past_kv_cache_entry, attention_mask))
        return self.hook_resid_post(resid_pre + attn_out)


class PaperUnembed(nn.Module):
    """``logits = residual W_U + b_U``: ``W_U`` is the paper's ``W_O``; ``b_U`` a zero buffer."""

    def __init__(self, cfg: PaperConfig) -> None:
        super().__init__()
        V, dtype = cfg.d_vocab, cfg.dtype
        self.W_U = nn.Parameter(torch.zeros(V, V, dtype=dtype))
        self.register_buffer("b_U", torch.zeros(V, dtype=dtype), persistent=False)
        self.hook_in = HookPoint()
        self.hook_out = HookPoint()

    def forward(self, residual: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos V"]:
        residual = self.hook_in(residual)
        return self.hook_out(F.linear(residual, self.W_U.T.contiguous(), self.b_U))
