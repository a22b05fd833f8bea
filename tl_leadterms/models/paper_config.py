"""The paper model's configuration: the ``cfg`` attributes TransformerLens-style code reads.

The paper model is a standalone :class:`transformer_lens.HookedRootModule`, so it cannot use
``HookedTransformerConfig`` (gone in TL 4.0); this dataclass carries the same attribute names and
values, so code written against a HookedTransformer's ``cfg`` reads it unchanged."""

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

__all__ = ["PaperConfig"]


@dataclass
class PaperConfig:
    """Configuration of the paper's one-hot, attention-only model (one head per layer).

    ``d_model``, ``d_head`` and ``d_vocab_out`` always equal ``d_vocab`` (the residual stream
    lives in vocabulary space); the fixed fields describe what the model computes: no
    normalisation, no MLP, unscaled scores (``use_attn_scale=False``, ``attn_scale=1.0``), a
    zero absolute position embedding (positions act through ``P``) and causal attention.

    Example:
        >>> cfg = PaperConfig(d_vocab=6, n_ctx=4, n_layers=2)
        >>> cfg.d_model, cfg.d_head, cfg.n_heads, cfg.normalization_type
        (6, 6, 1, None)
        >>> cfg.to_dict()["positional_embedding_type"]
        'standard'
    """

    d_vocab: int
    n_ctx: int
    n_layers: int
    device: str = "cpu"
    dtype: torch.dtype = torch.float32
    model_name: str = "tl_leadterms-paper-model"
    tokenizer_name: str | None = None
    seed: int | None = None
    use_attn_result: bool = False
    # fixed by the paper's architecture
    n_heads: int = field(default=1, init=False)
    d_model: int = field(init=False)
    d_head: int = field(init=False)
    d_vocab_out: int = field(init=False)
    n_key_value_heads: int | None = field(default=None, init=False)
    attn_only: bool = field(default=True, init=False)
    normalization_type: str | None = field(default=None, init=False)
    positional_embedding_type: str = field(default="standard", init=False)
    use_attn_scale: bool = field(default=False, init=False)
    attn_scale: float = field(default=1.0, init=False)
    attention_dir: str = field(default="causal", init=False)
    act_fn: str | None = field(default=None, init=False)
    original_architecture: str | None = field(default=None, init=False)
    default_prepend_bos: bool = field(default=False, init=False)
    use_split_qkv_input: bool = field(default=False, init=False)
    use_attn_in: bool = field(default=False, init=False)
    use_hook_mlp_in: bool = field(default=False, init=False)
    use_hook_tokens: bool = field(default=False, init=False)
    use_qk_norm: bool = field(default=False, init=False)
    clip_qkv: float | None = field(default=None, init=False)
    attn_scores_soft_cap: float = field(default=-1.0, init=False)
    output_logits_soft_cap: float = field(default=-1.0, init=False)
    post_embedding_ln: bool = field(default=False, init=False)
    use_normalization_before_and_after: bool = field(default=False, init=False)
    scale_attn_by_inverse_layer_idx: bool = field(default=False, init=False)
    parallel_attn_mlp: bool = field(default=False, init=False)
    rotary_dim: int | None = field(default=None, init=False)
    rotary_base: int = field(default=10000, init=False)

    def __post_init__(self) -> None:
        self.d_model = self.d_head = self.d_vocab_out = self.d_vocab
        self.device = str(self.device)

    def to_dict(self) -> dict[str, Any]:
        """All attributes by name (as ``HookedTransformerConfig.to_dict``)."""
        return asdict(self)
