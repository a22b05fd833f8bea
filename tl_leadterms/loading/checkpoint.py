"""`load_model`: any checkpoint TransformerLens can convert, as a HookedTransformer or bridge.

A local folder's config is read by TransformerLens, or by :mod:`~tl_leadterms.loading.configs` where
TransformerLens' reader fails on a local folder; its weights are always converted by
TransformerLens' ``convert_*_weights``."""

import json
import os
import shutil
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from tl_leadterms.errors import LeadTermsError, first_line
from tl_leadterms.filesystem import file_kind, looks_like_path
from tl_leadterms.jsontext import parse_json
from tl_leadterms.loading.bridge import (
    boot_bridge,
    check_bridge,
    hub_checkpoint,
    placeholder_tokenizer,
    processing_record,
    quiet_transformers,
)  # fmt: skip
from tl_leadterms.loading.configs import DERIVED

__all__ = ["ARCHITECTURES", "checkpoint_step", "load_model", "load_series", "quiet_transformers"]

CHECKPOINT_FILE = "checkpoint.json"
# the decoder-only language models TransformerLens 3.9 converts (get_pretrained_state_dict)
ARCHITECTURES = (
    "ApertusForCausalLM", "BloomForCausalLM", "GPT2LMHeadModel", "GPTJForCausalLM",
    "GPTNeoForCausalLM", "GPTNeoXForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM",
    "GemmaForCausalLM", "GptOssForCausalLM", "LlamaForCausalLM", "MistralForCausalLM",
    "MixtralForCausalLM", "Olmo2ForCausalLM", "Olmo3ForCausalLM", "OlmoForCausalLM",
    "OlmoeForCausalLM", "OPTForCausalLM", "Phi3ForCausalLM", "PhiForCausalLM",
    "Qwen2ForCausalLM", "Qwen3ForCausalLM",
)  # fmt: skip
# TransformerLens 3 announces HookedTransformer's future removal on every hub load
_DEPRECATED = "HookedTransformer.from_pretrained is deprecated"
# TransformerLens picks these architectures from the name, not the config: keep them out of paths
_NAME_ROUTED = ("llama", "gemma")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def checkpoint_step(folder: Path) -> int | None:
    """A checkpoint folder's step: from its ``checkpoint.json``, else the digits ending its name."""
    info = folder / CHECKPOINT_FILE
    if info.is_file():
        try:
            step = parse_json(info.read_text(), where=str(info)).get("step")
        except (OSError, ValueError, AttributeError, LeadTermsError):
            step = None
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    digits = folder.name[len(folder.name.rstrip("0123456789")) :]
    return int(digits) if digits else None


def load_series(out_dir: str | os.PathLike) -> list[tuple[str, int | None, Path]]:
    """The checkpoints of a series folder as ``(label, step, folder)``, in step order.

    A checkpoint is any sub-folder with a ``config.json``; its step comes from its
    ``checkpoint.json`` or the digits ending its name (``step64`` → 64).
    """
    out_dir = Path(out_dir)
    if not out_dir.is_dir():
        raise LeadTermsError(
            f"{str(out_dir)!r} is not a folder; pass the out_dir of train_neox_series"
        )
    found = [
        (f.name, checkpoint_step(f), f)
        for f in out_dir.iterdir()
        if f.is_dir() and not f.name.startswith(".") and (f / "config.json").is_file()
    ]
    if not found:
        raise LeadTermsError(
            f"{str(out_dir)!r} holds no checkpoint folder (a sub-folder with config.json); "
            "write one with train_neox_series"
        )
    return sorted(found, key=lambda x: (x[1] is None, x[1] if x[1] is not None else 0, x[0]))


def _check_files(folder: Path) -> None:
    """Refuse a checkpoint folder holding a FIFO, device or socket: reading one (a weight shard,
    a config) would block or never end."""
    for entry in folder.iterdir():
        try:
            mode = entry.stat().st_mode
        except OSError:
            continue  # a dangling link: the loader names what is missing
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise LeadTermsError(
                f"{str(entry)!r} is a {file_kind(entry)}, not a file: reading it would block; "
                "save the model again with save_pretrained (a checkpoint holds regular files)"
            )


def _json_object(file: Path) -> dict[str, Any]:
    """A JSON object file of a checkpoint, or one error naming it (not JSON, nested too deep,
    not an object)."""
    try:
        value = parse_json(file.read_bytes(), where=repr(str(file)))
    except (OSError, LeadTermsError) as err:
        raise LeadTermsError(f"{err}; save the model again with save_pretrained") from None
    if not isinstance(value, dict):
        raise LeadTermsError(
            f"{str(file)!r} holds a JSON {type(value).__name__}, not an object; save the model "
            "again with save_pretrained"
        )
    return value


def _read_config(folder: Path) -> tuple[dict[str, Any], str]:
    """config.json and its architecture, refused unless TransformerLens converts it."""
    _check_files(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise LeadTermsError(
            f"{str(folder)!r} has no config.json: it is not a saved checkpoint; pass a folder "
            "written by save_pretrained, or a series folder with checkpoint=step"
        )
    config = _json_object(config_file)
    architectures = config.get("architectures")
    architectures = architectures if isinstance(architectures, list) else []
    supported = [a for a in architectures if a in ARCHITECTURES]
    if not supported:
        raise LeadTermsError(
            f"{str(folder)!r} holds a model_type={config.get('model_type')!r} checkpoint "
            f"(architectures={architectures}) that TransformerLens cannot convert; supported: "
            f"{', '.join(ARCHITECTURES)}"
        )
    return config, supported[0]


def _hf_model(folder: Path, dtype: torch.dtype):
    """The Hugging Face model, refusing missing, truncated or mis-sized weights."""
    from transformers import AutoModelForCausalLM

    try:
        with quiet_transformers(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hf_model, info = AutoModelForCausalLM.from_pretrained(
                folder, dtype=dtype, attn_implementation="eager", output_loading_info=True
            )
    except Exception as err:  # OSError, safetensors, size mismatches come in many types
        raise LeadTermsError(
            f"cannot read the weights in {str(folder)!r} ({first_line(err)}); "
            "the weight file is missing or truncated, or config.json's sizes do not match it: "
            "save the model again with save_pretrained"
        ) from err
    bad = list(info.get("missing_keys") or []) + list(info.get("mismatched_keys") or [])
    if bad:
        raise LeadTermsError(
            f"the weights in {str(folder)!r} do not match its config.json: missing or mis-sized "
            f"{bad[:5]}; save the model again with save_pretrained"
        )
    return hf_model.eval()


def _tl_config_dict(hf_config: dict[str, Any], fold_ln: bool, device: str, dtype: torch.dtype):
    """TransformerLens' own config reader, on a copy of config.json in a neutrally named folder
    (it routes Llama and Gemma by name, so a path containing 'llama' would misroute)."""
    from transformer_lens import loading_from_pretrained as loading

    tmp = Path(tempfile.mkdtemp(prefix="tl_leadterms_config_"))
    try:
        if any(word in str(tmp).lower() for word in _NAME_ROUTED):
            raise LeadTermsError(
                f"the temporary folder {str(tmp)!r} contains {_NAME_ROUTED}, which makes "
                "TransformerLens pick the architecture by name; set TMPDIR to another folder"
            )
        (tmp / "config.json").write_text(json.dumps(hf_config))
        return loading.get_pretrained_model_config(
            str(tmp), hf_cfg=hf_config, fold_ln=fold_ln, device=device, dtype=dtype
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _config(folder: Path, architecture: str, hf_model, fold_ln: bool, device: str, dtype):
    if architecture in DERIVED:  # finished as get_pretrained_model_config finishes TL's own
        from transformer_lens import HookedTransformerConfig

        raw = DERIVED[architecture](hf_model.config)
        if fold_ln:
            raw["normalization_type"] = {"LN": "LNPre", "RMS": "RMSPre"}[raw["normalization_type"]]
        raw.setdefault("default_prepend_bos", True)
        raw.update(original_architecture=architecture, init_weights=False, from_checkpoint=False)
        cfg = HookedTransformerConfig.from_dict(
            {**raw, "device": device, "n_devices": 1, "dtype": dtype}
        )
    else:
        try:
            cfg = _tl_config_dict(hf_model.config.to_dict(), fold_ln, device, dtype)
        except LeadTermsError:
            raise
        except Exception as err:  # TransformerLens raises many types on configs it cannot read
            raise LeadTermsError(
                f"TransformerLens cannot read the {architecture} config in {str(folder)!r} "
                f"({type(err).__name__}: {err}); check config.json's sizes"
            ) from err
    cfg.model_name = folder.name
    has_tokenizer = any((folder / f).is_file() for f in _TOKENIZER_FILES)
    cfg.tokenizer_name = str(folder) if has_tokenizer else None
    return cfg


def _tokenizer(folder: Path):
    """The folder's own tokenizer, as saved (None when it has none)."""
    files = [folder / f for f in _TOKENIZER_FILES if (folder / f).is_file()]
    if not files:
        return None
    from transformers import AutoTokenizer

    for file in files:
        _json_object(file)
    try:
        with quiet_transformers():
            return AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # tokenizer files that transformers cannot read, of many kinds
        raise LeadTermsError(
            f"cannot load the tokenizer saved in {str(folder)!r} ({first_line(err)}); save it "
            "again with save_pretrained, or remove its files"
        ) from err


def _load_folder(folder: Path, device: str, dtype: torch.dtype, processing: dict[str, bool]):
    from transformer_lens import HookedTransformer
    from transformer_lens import loading_from_pretrained as loading

    _, architecture = _read_config(folder)
    hf_model = _hf_model(folder, dtype)
    cfg = _config(folder, architecture, hf_model, processing["fold_ln"], device, dtype)
    tokenizer = _tokenizer(folder)
    try:
        state_dict = loading.get_pretrained_state_dict(str(folder), cfg, hf_model, dtype=dtype)
        with quiet_transformers():
            model = HookedTransformer(cfg, tokenizer, move_to_device=False)
        model.load_and_process_state_dict(state_dict, **processing)
    except (RuntimeError, ValueError, KeyError, AssertionError) as err:
        raise LeadTermsError(
            f"TransformerLens could not convert the {architecture} weights in {str(folder)!r} "
            f"({type(err).__name__}: {str(err)[:300]}); check config.json against the weights"
        ) from err
    model.eval()
    model.tl_leadterms_loading = processing_record(processing, model)
    # nn.Module.to: HookedTransformer.to would print a 'Moving model' line
    return torch.nn.Module.to(model, device)


def _load_folder_bridge(folder: Path, device: str, dtype, processing: dict[str, bool]):
    """A local folder as a TransformerBridge in compatibility mode (routed by config.json)."""
    _, architecture = _read_config(folder)
    hf_model = _hf_model(folder, dtype)
    tokenizer = _tokenizer(folder) or placeholder_tokenizer(hf_model.config.vocab_size)
    try:
        bridge = boot_bridge(str(folder), hf_model, tokenizer, device, dtype, processing)
    except (RuntimeError, ValueError, KeyError, AssertionError, AttributeError) as err:
        raise LeadTermsError(
            f"TransformerLens' bridge could not wrap the {architecture} model in "
            f"{str(folder)!r} ({type(err).__name__}: {str(err)[:300]})"
        ) from err
    bridge.cfg.model_name = folder.name
    return bridge


def _series_checkpoint(folder: Path, checkpoint: object) -> Path:
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, int):
        raise LeadTermsError(f"checkpoint must be an int step, got {checkpoint!r}")
    if (folder / "config.json").is_file():
        raise LeadTermsError(
            f"{str(folder)!r} is one checkpoint; pass its series folder with "
            f"checkpoint={checkpoint}, or drop checkpoint="
        )
    series = load_series(folder)
    for _, step, sub in series:
        if step == checkpoint:
            return sub
    raise LeadTermsError(
        f"no checkpoint at step {checkpoint} in {str(folder)!r}; its steps: "
        f"{[step for _, step, _ in series]}"
    )


def _load_hub(
    name: str, hub: dict[str, int | None], device: str, dtype, processing: dict[str, bool],
    bridge: bool,
):  # fmt: skip
    try:
        if bridge:
            return boot_bridge(name, None, None, device, dtype, processing, **hub)
        from transformer_lens import HookedTransformer

        with quiet_transformers(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", _DEPRECATED, DeprecationWarning)
            model = HookedTransformer.from_pretrained(
                name, device=device, dtype=dtype, **hub, **processing
            )
        model.tl_leadterms_loading = processing_record(processing, model)
        return model
    except Exception as err:  # network, hub and name errors come in many types
        loader = "TransformerBridge.boot_transformers" if bridge else "from_pretrained"
        raise LeadTermsError(
            f"cannot load model {name!r} with {loader} ({first_line(err)}); offline "
            "(HF_HUB_OFFLINE=1) only cached models load: pass a local checkpoint folder instead"
        ) from err


def load_model(
    path_or_name: str | os.PathLike,
    *,
    checkpoint: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    fold_ln: bool = True,
    center_writing_weights: bool = True,
    center_unembed: bool = True,
    checkpoint_index: int | None = None,
    bridge: bool | None = None,
):
    """Load a checkpoint as a HookedTransformer (TL 3.x) or a TransformerBridge (TL 4.x).

    ``path_or_name`` is a local Hugging Face folder (``save_pretrained``) of any architecture in
    :data:`ARCHITECTURES` (its config.json's ``architectures`` picks TransformerLens' config and
    weight conversion), a series folder (:func:`~tl_leadterms.loading.series.train_neox_series`)
    with ``checkpoint=step``, or an official TransformerLens name such as ``"pythia-160m"``
    (online, or offline from the cache; docs/guides/real-models.md).

    A bridge is put in compatibility mode with the same processing; what loading did is recorded
    in ``model.tl_leadterms_loading``, which ``to_paper`` copies into its metadata
    (docs/guides/bridge-facts.md#loading). ``center_unembed`` shifts every position's logits by a
    constant: compare log-softmax outputs with the Hugging Face model's (raw logits match when it is
    False).

    Args:
        path_or_name: a folder or a TransformerLens model name.
        checkpoint: a training step: of the series folder, or the hub model's checkpoint_value.
        device: where to put the model (default: CUDA when available, else CPU).
        dtype: parameter dtype (default float32).
        fold_ln, center_writing_weights, center_unembed: TransformerLens weight processing,
            as in ``HookedTransformer.from_pretrained``.
        checkpoint_index: a hub model's checkpoint by index (instead of ``checkpoint``).
        bridge: load a TransformerBridge (default: exactly when TransformerLens has no
            HookedTransformer, i.e. 4.x; ``True`` under TL 3.9 too).

    Returns:
        A ``HookedTransformer`` or ``TransformerBridge`` in eval mode, with the folder's
        tokenizer when it has one.

    Example:
        >>> import tempfile, torch
        >>> from tl_leadterms.loading.tiny import save_tiny_model
        >>> folder = save_tiny_model("gpt_neox", tempfile.mkdtemp(), d_vocab=20, d_model=16,
        ...     n_heads=2)
        >>> model = load_model(folder, device="cpu")
        >>> model.cfg.normalization_type, model.cfg.positional_embedding_type
        ('LNPre', 'rotary')
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 20])
    """
    processing = {
        "fold_ln": fold_ln,
        "center_writing_weights": center_writing_weights,
        "center_unembed": center_unembed,
    }
    for name, flag in processing.items():
        if not isinstance(flag, bool):
            raise LeadTermsError(f"{name} must be True or False, got {flag!r}")
    bridge = check_bridge(bridge)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    dtype = torch.float32 if dtype is None else dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise LeadTermsError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if not isinstance(path_or_name, (str, os.PathLike)):
        raise LeadTermsError(
            f"path_or_name must be a folder or a model name, got {type(path_or_name).__name__}"
        )
    path = Path(path_or_name).expanduser()
    load_folder = _load_folder_bridge if bridge else _load_folder
    if path.is_dir():
        if checkpoint_index is not None:
            raise LeadTermsError(
                "checkpoint_index selects a hub model's checkpoint; for a local series folder "
                "pass checkpoint=step"
            )
        if checkpoint is not None:
            return load_folder(_series_checkpoint(path, checkpoint), device, dtype, processing)
        if not (path / "config.json").is_file() and any(path.glob("*/config.json")):
            steps = [step for _, step, _ in load_series(path)]
            raise LeadTermsError(
                f"{str(path)!r} is a series folder; pick a checkpoint with checkpoint=step, "
                f"one of {steps}"
            )
        return load_folder(path, device, dtype, processing)
    if path.exists() or not isinstance(path_or_name, str) or looks_like_path(path_or_name):
        raise LeadTermsError(
            f"no checkpoint folder at {str(path_or_name)!r}; pass a folder written by "
            "save_pretrained, a series folder with checkpoint=step, or a TransformerLens model "
            "name such as pythia-70m"
        )
    hub = hub_checkpoint(checkpoint, checkpoint_index)
    return _load_hub(path_or_name, hub, device, dtype, processing, bridge)
