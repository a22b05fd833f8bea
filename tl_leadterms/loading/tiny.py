"""Tiny randomly initialised Hugging Face models of every family the loader converts, offline.

:func:`save_tiny_model` writes a small ``*ForCausalLM`` of one family (``"gpt2"``, ``"gpt_neox"``,
``"llama"``, ...; see :data:`MODEL_FAMILIES`) to a local folder, seeded, so tests, examples and the
guides exercise :func:`~tl_leadterms.loading.checkpoint.load_model` on every architecture
without the hub; :func:`tiny_model` builds one in memory (what the checkpoint series trains).
Real checkpoints go through ``load_model("pythia-1.4b", checkpoint=512)``.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.loading.checkpoint import quiet_transformers

__all__ = ["MODEL_FAMILIES", "save_tiny_model", "tiny_model"]


class Sizes(NamedTuple):
    """The architecture sizes every family builder reads."""

    d_vocab: int
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_mlp: int
    n_ctx: int

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def common(self) -> dict[str, Any]:
        """The Llama-style field names most Hugging Face configs share."""
        return {
            "vocab_size": self.d_vocab,
            "hidden_size": self.d_model,
            "num_hidden_layers": self.n_layers,
            "num_attention_heads": self.n_heads,
            "intermediate_size": self.d_mlp,
            "max_position_embeddings": self.n_ctx,
            "tie_word_embeddings": False,
        }


def _gpt2(s: Sizes) -> tuple[str, dict[str, Any]]:
    kw = {"n_embd": s.d_model, "n_layer": s.n_layers, "n_head": s.n_heads, "n_inner": s.d_mlp}
    return "GPT2", {"vocab_size": s.d_vocab, "n_positions": s.n_ctx, **kw}


def _gpt_neox(s: Sizes) -> tuple[str, dict[str, Any]]:
    pythia = {"rotary_pct": 0.25, "use_parallel_residual": True}
    return "GPTNeoX", {**s.common(), **pythia, "bos_token_id": 0, "eos_token_id": 0}


def _gqa(
    prefix: str, *, head_dim: bool = False, **extra: Any
) -> Callable[[Sizes], tuple[str, dict[str, Any]]]:
    """Llama-style keywords with ``num_key_value_heads`` (and ``head_dim``), plus ``extra``."""

    def build(s: Sizes) -> tuple[str, dict[str, Any]]:
        kwargs = {**s.common(), "num_key_value_heads": s.n_kv_heads, **extra}
        if head_dim:
            kwargs["head_dim"] = s.d_head
        return prefix, kwargs

    return build


def _gemma2(s: Sizes) -> tuple[str, dict[str, Any]]:
    scalar = {"query_pre_attn_scalar": s.d_head, "sliding_window": max(4, s.n_ctx // 4)}
    return "Gemma2", {**_gqa("", head_dim=True)(s)[1], **scalar}


def _opt(s: Sizes) -> tuple[str, dict[str, Any]]:
    sizes = {"ffn_dim": s.d_mlp, "word_embed_proj_dim": s.d_model, "tie_word_embeddings": False}
    common = {k: v for k, v in s.common().items() if k != "intermediate_size"}
    return "OPT", {**common, **sizes}


def _gptj(s: Sizes) -> tuple[str, dict[str, Any]]:
    return "GPTJ", {**_gpt2(s)[1], "n_inner": None, "rotary_dim": s.d_head // 2}


def _phi(s: Sizes) -> tuple[str, dict[str, Any]]:
    return "Phi", {**s.common(), "partial_rotary_factor": 0.5}


def _bloom(s: Sizes) -> tuple[str, dict[str, Any]]:
    return "Bloom", {"vocab_size": s.d_vocab, "hidden_size": s.d_model, "n_layer": s.n_layers,
                     "n_head": s.n_heads, "tie_word_embeddings": False}  # fmt: skip


def _gpt_neo(s: Sizes) -> tuple[str, dict[str, Any]]:
    even = s.n_layers % 2 == 0  # alternate global and local (sliding-window) layers
    types = [[["global", "local"], s.n_layers // 2]] if even else [[["global"], s.n_layers]]
    return "GPTNeo", {
        "vocab_size": s.d_vocab, "hidden_size": s.d_model, "num_layers": s.n_layers,
        "num_heads": s.n_heads, "max_position_embeddings": s.n_ctx, "attention_types": types,
        "window_size": max(4, s.n_ctx // 4), "tie_word_embeddings": False,
    }  # fmt: skip


# family -> builder of (transformers class prefix, config keywords)
MODEL_FAMILIES: dict[str, Callable[[Sizes], tuple[str, dict[str, Any]]]] = {
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "llama": _gqa("Llama"),
    "mistral": _gqa("Mistral", sliding_window=None),
    "qwen2": _gqa("Qwen2"),
    "qwen3": _gqa("Qwen3", head_dim=True),
    "gemma": _gqa("Gemma", head_dim=True),
    "gemma2": _gemma2,
    "opt": _opt,
    "gptj": _gptj,
    "phi": _phi,
    "phi3": _gqa("Phi3", pad_token_id=0),
    "bloom": _bloom,
    "gpt_neo": _gpt_neo,
}
# families whose MLP width is fixed at 4·d_model by the Hugging Face or TransformerLens config
_FIXED_MLP = ("gptj", "bloom", "gpt_neo")


def _sizes(family: str, **raw: Any) -> Sizes:
    if family not in MODEL_FAMILIES:
        raise LeadTermsError(f"unknown family {family!r}; use one of {sorted(MODEL_FAMILIES)}")
    for name in ("d_vocab", "n_layers", "d_model", "n_heads", "n_ctx"):
        positive_int(name, raw[name])
    d_model, n_heads = raw["d_model"], raw["n_heads"]
    if d_model % n_heads:
        raise LeadTermsError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
    n_kv = n_heads if raw["n_kv_heads"] is None else positive_int("n_kv_heads", raw["n_kv_heads"])
    if n_heads % n_kv:
        raise LeadTermsError(f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv}")
    d_mlp = 4 * d_model if raw["d_mlp"] is None else positive_int("d_mlp", raw["d_mlp"])
    if family in _FIXED_MLP and d_mlp != 4 * d_model:
        raise LeadTermsError(f"{family} models have d_mlp = 4·d_model = {4 * d_model}, got {d_mlp}")
    return Sizes(raw["d_vocab"], raw["n_layers"], d_model, n_heads, n_kv, d_mlp, raw["n_ctx"])


def randomise_norms_and_biases(hf_model, seed: int) -> None:
    """Give normalisation gains (1-D weights) and all biases small random values, in place.

    They are 1 (or 0) and 0 at Hugging Face initialisation; random values exercise weight
    folding when the model is converted.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if name.endswith("bias"):
                param.copy_(0.02 * torch.randn(param.shape, generator=g))
            elif param.dim() == 1:
                param.add_(0.1 * torch.randn(param.shape, generator=g))


def tiny_model(
    family: str,
    *,
    d_vocab: int = 256,
    n_layers: int = 2,
    d_model: int = 32,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_mlp: int | None = None,
    n_ctx: int = 64,
    seed: int = 0,
    randomise_norms: bool = True,
    attn_implementation: str | None = None,
):
    """A randomly initialised Hugging Face ``*ForCausalLM`` of ``family``, in memory.

    Embeddings are untied. ``n_kv_heads`` (default ``n_heads``) sets grouped-query attention
    where the family has it; ``d_mlp`` defaults to ``4·d_model``. With ``randomise_norms`` the
    normalisation gains and biases get small random values (see
    :func:`randomise_norms_and_biases`).
    """
    import transformers

    s = _sizes(
        family, d_vocab=d_vocab, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        n_kv_heads=n_kv_heads, d_mlp=d_mlp, n_ctx=n_ctx,
    )  # fmt: skip
    prefix, kwargs = MODEL_FAMILIES[family](s)
    if attn_implementation is not None:
        kwargs["attn_implementation"] = attn_implementation
    config = getattr(transformers, f"{prefix}Config")(**kwargs)
    model_class = getattr(
        transformers, f"{prefix}LMHeadModel" if family == "gpt2" else f"{prefix}ForCausalLM"
    )
    torch.manual_seed(seed)
    hf_model = model_class(config)
    if randomise_norms:
        randomise_norms_and_biases(hf_model, seed)
    return hf_model.eval()


def save_tiny_model(
    family: str,
    path: str | Path,
    *,
    d_vocab: int = 256,
    n_layers: int = 2,
    d_model: int = 32,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    d_mlp: int | None = None,
    n_ctx: int = 64,
    seed: int = 0,
    tokenizer: Any = None,
) -> Path:
    """Save a seeded random ``family`` model (:func:`tiny_model`) to the folder ``path``.

    Args:
        family: one of :data:`MODEL_FAMILIES` (Hugging Face ``model_type`` names).
        path: folder to write (created if missing).
        d_vocab, n_layers, d_model, n_heads, n_kv_heads, d_mlp, n_ctx: architecture sizes.
        seed: seed of the random weights.
        tokenizer: optional Hugging Face tokenizer saved alongside (``len`` at most ``d_vocab``).

    Returns:
        The folder, as a :class:`~pathlib.Path`.

    Example:
        >>> import tempfile
        >>> from tl_leadterms import load_model
        >>> folder = save_tiny_model("llama", tempfile.mkdtemp(), d_vocab=50, n_kv_heads=2)
        >>> load_model(folder).cfg.n_key_value_heads
        2
    """
    if tokenizer is not None and len(tokenizer) > d_vocab:
        raise LeadTermsError(
            f"the tokenizer has {len(tokenizer)} tokens but d_vocab={d_vocab}; pass "
            "d_vocab=len(tokenizer) or more"
        )
    hf_model = tiny_model(
        family, d_vocab=d_vocab, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        n_kv_heads=n_kv_heads, d_mlp=d_mlp, n_ctx=n_ctx, seed=seed,
    )  # fmt: skip
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    with quiet_transformers():
        hf_model.save_pretrained(path)
        if tokenizer is not None:
            tokenizer.save_pretrained(path)
    return path
