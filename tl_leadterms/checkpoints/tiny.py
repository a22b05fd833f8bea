"""Pythia-architecture (GPT-NeoX) HookedTransformers built and loaded fully offline.

Real Pythia checkpoints go through TransformerLens directly::

    HookedTransformer.from_pretrained("pythia-1.4b", checkpoint_value=512)

:func:`save_tiny_neox` writes a small randomly initialised ``GPTNeoXForCausalLM`` to a local
folder and :func:`load_neox` converts such a folder with TransformerLens' own GPT-NeoX config and
weight conversion, so tests and examples exercise the Pythia code path without the hub.
"""

import json
from pathlib import Path
from typing import Any

import torch
from transformer_lens import HookedTransformer
from transformer_lens import loading_from_pretrained as loading

from tl_leadterms.errors import LeadTermsError, positive_int

__all__ = ["load_neox", "save_tiny_neox", "tiny_neox_model"]


def tiny_neox_model(
    *,
    d_vocab: int,
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    n_ctx: int = 64,
    d_mlp: int | None = None,
    seed: int = 0,
    tokenizer: Any = None,
    randomise_norms: bool = True,
    attn_implementation: str | None = None,
):
    """A randomly initialised Pythia-style ``GPTNeoXForCausalLM`` (see :func:`save_tiny_neox`).

    With ``randomise_norms=False`` the LayerNorm gains stay 1 and all biases 0, as at Hugging
    Face (and Pythia) initialisation. ``attn_implementation`` (e.g. ``"eager"``) picks
    Hugging Face's attention kernel for training the model directly.
    """
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    d_vocab = positive_int("d_vocab", d_vocab)
    for name, value in (("n_layers", n_layers), ("d_model", d_model), ("n_heads", n_heads)):
        positive_int(name, value)
    positive_int("n_ctx", n_ctx)
    d_mlp = 4 * d_model if d_mlp is None else positive_int("d_mlp", d_mlp)
    if d_model % n_heads:
        raise LeadTermsError(f"d_model={d_model} must be a multiple of n_heads={n_heads}")
    if tokenizer is not None and len(tokenizer) > d_vocab:
        raise LeadTermsError(
            f"the tokenizer has {len(tokenizer)} tokens but d_vocab={d_vocab}; pass "
            "d_vocab=len(tokenizer) or more"
        )
    config = GPTNeoXConfig(
        vocab_size=d_vocab,
        hidden_size=d_model,
        num_hidden_layers=n_layers,
        num_attention_heads=n_heads,
        intermediate_size=d_mlp,
        max_position_embeddings=n_ctx,
        rotary_pct=0.25,
        use_parallel_residual=True,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=0,
        **({} if attn_implementation is None else {"attn_implementation": attn_implementation}),
    )
    torch.manual_seed(seed)
    hf_model = GPTNeoXForCausalLM(config)
    if not randomise_norms:
        return hf_model
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if "norm" in name.split(".")[-2]:  # input_, post_attention_, final_layer_norm
                if name.endswith("weight"):
                    param.add_(0.1 * torch.randn(param.shape, generator=g))
                else:
                    param.copy_(0.02 * torch.randn(param.shape, generator=g))
            elif name.endswith("bias"):
                param.copy_(0.02 * torch.randn(param.shape, generator=g))
    return hf_model


def save_tiny_neox(
    path: str | Path,
    *,
    d_vocab: int,
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    n_ctx: int = 64,
    d_mlp: int | None = None,
    seed: int = 0,
    tokenizer: Any = None,
) -> Path:
    """Save a randomly initialised Pythia-style ``GPTNeoXForCausalLM`` to ``path``.

    Pythia's settings: rotary embeddings on a quarter of each head (``rotary_pct=0.25``),
    parallel attention and MLP (``use_parallel_residual=True``), untied embeddings, ``d_mlp``
    defaulting to ``4·d_model``. Besides Hugging Face's initialisation, LayerNorm gains and all
    biases get small random values so that folding them is exercised (they are 1 and 0 at
    Hugging Face init).

    Args:
        path: folder to write (created if missing).
        d_vocab: vocabulary size; ``len(tokenizer)`` must not exceed it.
        n_layers, d_model, n_heads, n_ctx, d_mlp: architecture sizes.
        seed: seed of the random weights.
        tokenizer: optional Hugging Face tokenizer saved alongside.

    Returns:
        The folder, as a :class:`~pathlib.Path`.
    """
    hf_model = tiny_neox_model(
        d_vocab=d_vocab, n_layers=n_layers, d_model=d_model, n_heads=n_heads, n_ctx=n_ctx,
        d_mlp=d_mlp, seed=seed, tokenizer=tokenizer,
    )  # fmt: skip
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    hf_model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def _check_neox_folder(path: Path) -> None:
    if not path.is_dir():
        raise LeadTermsError(
            f"{str(path)!r} is not a folder; pass a folder written by save_tiny_neox or "
            "GPTNeoXForCausalLM.save_pretrained (for hub checkpoints use "
            "HookedTransformer.from_pretrained)"
        )
    config_file = path / "config.json"
    if not config_file.is_file():
        raise LeadTermsError(f"{str(path)!r} has no config.json: it is not a saved checkpoint")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, ValueError) as err:
        raise LeadTermsError(f"{str(config_file)!r} is not readable JSON: {err}") from err
    architectures = config.get("architectures") or []
    if config.get("model_type") != "gpt_neox" or "GPTNeoXForCausalLM" not in architectures:
        raise LeadTermsError(
            f"{str(path)!r} holds a model_type={config.get('model_type')!r} checkpoint "
            f"(architectures={architectures}), not a GPT-NeoX one (GPTNeoXForCausalLM)"
        )


def load_neox(
    path: str | Path,
    *,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> HookedTransformer:
    """Load a local GPT-NeoX folder as a HookedTransformer, converted by TransformerLens.

    The config goes through ``loading.get_pretrained_model_config`` and the weights through
    ``loading.get_pretrained_state_dict`` (TransformerLens' GPT-NeoX conversion), then
    ``load_and_process_state_dict`` applies the requested processing, exactly as
    ``HookedTransformer.from_pretrained`` does for hub names (which it requires). Real Pythia
    checkpoints: ``HookedTransformer.from_pretrained("pythia-1.4b", checkpoint_value=step)``.

    ``center_unembed`` shifts every position's logits by a constant, so compare log-softmax
    outputs with the Hugging Face model's (raw logits match when it is False).

    Args:
        path: a folder written by :func:`save_tiny_neox` or ``save_pretrained``.
        fold_ln, center_writing_weights, center_unembed: TransformerLens weight processing.
        device: where to put the model.
        dtype: parameter dtype.

    Example:
        >>> import tempfile, torch
        >>> from tl_leadterms.models.neox import load_neox, save_tiny_neox
        >>> folder = save_tiny_neox(tempfile.mkdtemp(), d_vocab=20, d_model=16, n_heads=2)
        >>> model = load_neox(folder)
        >>> model.cfg.normalization_type, model.cfg.positional_embedding_type
        ('LNPre', 'rotary')
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 20])
    """
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    path = Path(path)
    _check_neox_folder(path)
    for name, flag in (
        ("fold_ln", fold_ln),
        ("center_writing_weights", center_writing_weights),
        ("center_unembed", center_unembed),
    ):
        if not isinstance(flag, bool):
            raise LeadTermsError(f"{name} must be True or False, got {flag!r}")
    hf_model = GPTNeoXForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    hf_model.eval()
    name = str(path.resolve())
    cfg = loading.get_pretrained_model_config(
        name,
        hf_cfg=hf_model.config.to_dict(),
        fold_ln=fold_ln,
        device=str(device),
        dtype=dtype,
    )
    state_dict = loading.get_pretrained_state_dict(name, cfg, hf_model, dtype=dtype)
    tokenizer = None
    if (path / "tokenizer_config.json").is_file() or (path / "tokenizer.json").is_file():
        tokenizer = AutoTokenizer.from_pretrained(path)
    model = HookedTransformer(cfg, tokenizer, move_to_device=False)
    model.load_and_process_state_dict(
        state_dict,
        fold_ln=fold_ln,
        center_writing_weights=center_writing_weights,
        center_unembed=center_unembed,
    )
    model.eval()
    # nn.Module.to: HookedTransformer.to would print a 'Moving model' line
    return torch.nn.Module.to(model, device)
