"""What ``load_model`` needs to give a TransformerBridge (TL 4.x, or 3.9 on request).

``boot_bridge`` boots one with ``TransformerBridge.boot_transformers`` and puts it in
compatibility mode with ``load_model``'s processing; ``processing_record`` records what was
applied; ``placeholder_tokenizer`` stands in for a folder saved without a tokenizer.
"""

import contextlib
import warnings
from typing import Any

from tl_leadterms.errors import LeadTermsError

__all__ = [
    "boot_bridge", "check_bridge", "has_hooked_transformer", "hub_checkpoint",
    "placeholder_tokenizer", "processing_record", "quiet_transformers",
]  # fmt: skip


def has_hooked_transformer() -> bool:
    """Whether the installed TransformerLens has ``HookedTransformer`` (3.x; 4.x removed it)."""
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except ImportError:
        return False
    return True


def placeholder_tokenizer(d_vocab: int):
    """A stand-in word-level tokenizer of ``d_vocab`` tokens ``t0``, ``t1``, ... for a bridge of
    a folder saved without one (``boot_transformers`` needs a tokenizer); the model view
    reports no tokenizer for it."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from tl_leadterms.adapters.view import PLACEHOLDER_TOKENIZER

    vocab = {f"t{i}": i for i in range(d_vocab)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="t0", name_or_path=PLACEHOLDER_TOKENIZER
    )


def processing_record(processing: dict[str, bool], model) -> dict[str, Any]:
    """What loading did to the weights, as the code ran it (centring checked on ``W_U``:
    TransformerLens skips ``center_unembed`` under logit soft-capping, Gemma 2)."""
    from importlib.metadata import version

    from tl_leadterms.adapters.paper_weights import unembed_centred
    from tl_leadterms.adapters.view import is_bridge

    record = dict(processing)
    if processing["center_unembed"]:
        centred = unembed_centred(model.W_U.detach())
        record["center_unembed"] = centred
        if not centred:
            record["center_unembed_skipped"] = "TransformerLens skipped it (logit soft-capping)"
    bridge = is_bridge(model)
    return {
        **record,
        "model_class": "TransformerBridge" if bridge else "HookedTransformer",
        "compatibility_mode": bridge,
        "transformer_lens_version": version("transformer-lens"),
    }


@contextlib.contextmanager
def quiet_transformers():
    """Silence Hugging Face's per-file progress bars (saving, loading) and its log (the load
    report printed before a refusal of ours), and restore them after."""
    from transformers.utils import logging as hf_logging

    enabled, level = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if enabled:
            hf_logging.enable_progress_bar()


def boot_bridge(source: str, hf_model, tokenizer, device, dtype, processing, **hub):
    from transformer_lens.model_bridge import TransformerBridge

    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge = TransformerBridge.boot_transformers(
            source, hf_model=hf_model, tokenizer=tokenizer, device=device, dtype=dtype, **hub
        )
        bridge.enable_compatibility_mode(disable_warnings=True, **processing)
    bridge.eval()
    bridge.tl_leadterms_loading = processing_record(processing, bridge)
    return bridge


def check_bridge(bridge: object) -> bool:
    if bridge is None:
        return not has_hooked_transformer()
    if not isinstance(bridge, bool):
        raise LeadTermsError(f"bridge must be True or False, got {bridge!r}")
    if not bridge and not has_hooked_transformer():
        raise LeadTermsError(
            "bridge=False asks for a HookedTransformer, which TransformerLens 4 removed; pass "
            "bridge=None (a TransformerBridge) or install transformer-lens 3.9"
        )
    return bool(bridge)


def hub_checkpoint(checkpoint: object, index: object) -> dict[str, int | None]:
    for name, value in (("checkpoint", checkpoint), ("checkpoint_index", index)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise LeadTermsError(f"{name} must be an int, got {value!r}")
    if checkpoint is not None and index is not None:
        raise LeadTermsError(
            f"pass checkpoint={checkpoint} (a step) or checkpoint_index={index}, not both"
        )
    named = {"checkpoint_value": checkpoint, "checkpoint_index": index}
    return {name: value for name, value in named.items() if value is not None}
