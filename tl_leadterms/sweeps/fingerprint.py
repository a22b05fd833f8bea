"""What a sweep analysed, as one string: a replaced checkpoint gets another fingerprint.

* a local folder: SHA-256 over its config.json and index files (content) and its weight files:
  their content when the folder holds at most :data:`CONTENT_LIMIT` bytes, else each file's
  name, size and modification time (hashing gigabytes per checkpoint would cost more than the
  analysis);
* a model in memory: SHA-256 of its config and of every parameter and buffer;
* a hub name with a step: the name and step themselves (published checkpoints do not change).

>>> import torch
>>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
>>> checkpoint_fingerprint(a) == checkpoint_fingerprint(a), checkpoint_fingerprint(a) == checkpoint_fingerprint(b)
(True, False)
"""  # noqa: E501

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import torch

__all__ = ["CONTENT_LIMIT", "checkpoint_fingerprint"]

CONTENT_LIMIT = 512 << 20
_CHUNK = 1 << 22


def _files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )


def _folder(folder: Path) -> str:
    files = _files(folder)
    by_content = sum(p.stat().st_size for p in files) <= CONTENT_LIMIT
    digest = hashlib.sha256(b"folder")
    for path in files:
        stat = path.stat()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{stat.st_size}\0".encode())
        small = path.suffix == ".json" and stat.st_size <= 16 << 20  # config, index, tokenizer
        if by_content or small:
            with open(path, "rb") as f:
                while block := f.read(_CHUNK):
                    digest.update(block)
        else:
            digest.update(str(stat.st_mtime_ns).encode())
    return "folder:" + digest.hexdigest()[:32]


def _model(model: torch.nn.Module) -> str:
    digest = hashlib.sha256(b"model")
    cfg = getattr(model, "cfg", None)
    if cfg is not None:
        as_dict = cfg.to_dict() if hasattr(cfg, "to_dict") else vars(cfg)
        digest.update(json.dumps(as_dict, sort_keys=True, default=repr).encode())
    for name, tensor in model.state_dict().items():
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}\0{flat.dtype}\0{tuple(tensor.shape)}\0".encode())
        if flat.dtype == torch.bfloat16:
            flat = flat.view(torch.int16)
        digest.update(flat.numpy().tobytes())
    return "model:" + digest.hexdigest()[:32]


def checkpoint_fingerprint(source: Any) -> str:
    """The fingerprint of a checkpoint folder, a model (``torch.nn.Module``) or a hub
    ``"name checkpoint=step"`` string (see the module docstring)."""
    if isinstance(source, torch.nn.Module):
        return _model(source)
    if isinstance(source, (str, os.PathLike)) and Path(source).is_dir():
        return _folder(Path(source))
    return "name:" + str(source)
