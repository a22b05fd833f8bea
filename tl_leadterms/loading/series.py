"""A real, offline checkpoint series: a tiny model trained on the embedded corpus.

:func:`train_neox_series` trains a randomly initialised ``*ForCausalLM`` of any family of
:data:`~tl_leadterms.loading.tiny.MODEL_FAMILIES` on the CPU and saves checkpoints at Pythia-like
steps ``0, 1, 2, 4, ..., steps`` as folders ``out_dir/step{N}`` that
:func:`~tl_leadterms.loading.checkpoint.load_model` reads offline, with the training windows and
tokenizer beside them; :func:`load_series` lists the checkpoints for
:func:`tl_leadterms.sweeps.run.sweep`.
"""

import json
import math
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from tl_leadterms.atomic import atomic_folder, atomic_path, write_text
from tl_leadterms.errors import LeadTermsError, positive_int, positive_number
from tl_leadterms.loading.checkpoint import checkpoint_step, load_series, quiet_transformers
from tl_leadterms.loading.tiny import MODEL_FAMILIES, tiny_model
from tl_leadterms.progress import progress_bar

__all__ = ["load_series", "load_windows", "pythia_steps", "train_neox_series"]

SERIES_FILE = "series.json"
WINDOWS_FILE = "windows.pt"
TOKENIZER_DIR = "tokenizer"
_OPTIMIZERS = ("adamw", "sgd")


def pythia_steps(steps: int) -> list[int]:
    """Pythia's early checkpoint steps up to ``steps``: ``0, 1, 2, 4, 8, ...`` and ``steps``.

    Example:
        >>> pythia_steps(20)
        [0, 1, 2, 4, 8, 16, 20]
    """
    steps = positive_int("steps", steps)
    out, s = [0], 1
    while s < steps:
        out.append(s)
        s *= 2
    return [*out, steps]


def _checkpoint_steps(checkpoints: object, steps: int) -> list[int]:
    if checkpoints is None:
        return pythia_steps(steps)
    if isinstance(checkpoints, (str, bytes)) or not hasattr(checkpoints, "__iter__"):
        raise LeadTermsError(f"checkpoints must be a list of steps, got {checkpoints!r}")
    out = list(checkpoints)
    bad = [s for s in out if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= steps]
    if bad or not out:
        raise LeadTermsError(
            f"checkpoints must be ints in [0, steps={steps}], got {out!r}; pass e.g. "
            f"checkpoints=[0, 1, 2, 4, ..., {steps}] or raise steps"
        )
    return sorted(set(out))


def _save_checkpoint(hf_model, tokenizer, folder: Path, info: dict[str, Any]) -> Path:
    """Save one checkpoint folder atomically (:func:`tl_leadterms.atomic.atomic_folder`)."""
    with atomic_folder(folder) as tmp, quiet_transformers():
        hf_model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        # a plain write: the whole folder is swapped in at the end
        (tmp / "checkpoint.json").write_text(json.dumps(info, indent=2))
    return folder


def _check_training(
    *, sizes: dict[str, object], steps: object, checkpoints: object, lr: object,
    init_scale: object, warmup: object, weight_decay: object, optimizer: object,
) -> tuple[int, list[int], float, float]:  # fmt: skip
    """Refuse bad training settings; the step count, the steps to save, lr and init_scale."""
    for name, value in sizes.items():
        positive_int(name, value)
    steps = positive_int("steps", steps)
    saved = _checkpoint_steps(checkpoints, steps)
    lr = positive_number("lr", lr)
    init_scale = positive_number("init_scale", init_scale)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise LeadTermsError(f"warmup must be an int >= 0 (steps), got {warmup!r}")
    ok = isinstance(weight_decay, (int, float)) and not isinstance(weight_decay, bool)
    if not ok or weight_decay < 0:
        raise LeadTermsError(f"weight_decay must be a number >= 0, got {weight_decay!r}")
    if optimizer not in _OPTIMIZERS:
        raise LeadTermsError(f"optimizer must be one of {_OPTIMIZERS}, got {optimizer!r}")
    return steps, saved, lr, init_scale


def _heads(n_heads: object) -> tuple[int, int | None]:
    """``n_heads`` as (query heads, key/value heads or None), checked."""
    if not isinstance(n_heads, tuple):
        return positive_int("n_heads", n_heads), None
    if len(n_heads) == 2:
        query, kv = positive_int("n_heads", n_heads[0]), positive_int("n_kv_heads", n_heads[1])
        if query % kv == 0:
            return query, kv
    raise LeadTermsError(
        f"n_heads must be an int or a (query heads, key/value heads) pair whose first is a "
        f"multiple of the second, got {n_heads!r}"
    )


def _corpus(out_dir: Path, stories: object, n_stories: int, vocab_size: int, n_ctx: int, seed: int):
    """The stories, their word-level tokenizer and training windows, saved under ``out_dir``
    (whose ``step*`` folders of an earlier series are removed first)."""
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.stats import make_windows

    if stories is None:
        stories = generate_stories(n_stories, seed=seed)
    elif isinstance(stories, str) or not isinstance(stories, (list, tuple)):
        raise LeadTermsError(
            f"stories must be a list of texts, got {type(stories).__name__}; wrap a single "
            "text in a list"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("step*"):  # a series is one run: no checkpoints of an earlier one
        if stale.is_dir() and checkpoint_step(stale) is not None:
            shutil.rmtree(stale)
    tokenizer = train_word_tokenizer(list(stories), vocab_size)
    windows = make_windows(list(stories), n_ctx=n_ctx, tokenizer=tokenizer)
    tokenizer.save_pretrained(out_dir / TOKENIZER_DIR)
    with atomic_path(out_dir / WINDOWS_FILE) as tmp:
        torch.save(windows, tmp)
    return stories, tokenizer, windows


class _Batches:
    """Mini-batches of windows drawn without replacement, reshuffled each epoch, seeded."""

    def __init__(self, windows: Tensor, batch_size: int, seed: int) -> None:
        self.windows, self.batch_size, self.seed = windows, batch_size, seed
        self.restart()

    def restart(self) -> None:
        """Back to the first batch (the one scored at step 0 is the first one trained on)."""
        self.rng = random.Random(self.seed)
        self.order: list[int] = []

    def next(self) -> Int[Tensor, "batch n_ctx_plus_1"]:
        if len(self.order) < self.batch_size:
            fresh = list(range(len(self.windows)))
            self.rng.shuffle(fresh)
            self.order = self.order + fresh
        picked, self.order = self.order[: self.batch_size], self.order[self.batch_size :]
        return self.windows[picked]


def _loss(hf_model, tokens: Tensor) -> Tensor:
    """Mean next-token cross-entropy of the windows ``tokens``."""
    logits = hf_model(input_ids=tokens[:, :-1]).logits
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)
    )


def _train(hf_model, opt, batches: _Batches, *, steps, saved, lr, warmup, save, progress):
    """The optimiser loop (linear warm-up, then constant ``lr``); ``save(step, loss, lr)`` at
    every step in ``saved``. Returns the loss of every step."""
    if 0 in saved:
        with torch.no_grad():
            save(0, float(_loss(hf_model, batches.next())), 0.0)
        batches.restart()
    losses: list[float] = []
    for step in progress_bar(range(1, steps + 1), desc="training", disable=not progress):
        step_lr = lr * min(1.0, step / warmup) if warmup else lr
        for group in opt.param_groups:
            group["lr"] = step_lr
        loss = _loss(hf_model, batches.next())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise LeadTermsError(
                f"the training loss is {losses[-1]} at step {step}: lower lr={lr} or init_scale"
            )
        if step in saved:
            save(step, losses[-1], step_lr)
    return losses


def train_neox_series(
    out_dir: str | os.PathLike,
    *,
    family: str = "gpt_neox",
    stories: object = None,
    n_stories: int = 2000,
    vocab_size: int = 500,
    n_ctx: int = 64,
    d_model: int = 64,
    n_layers: int = 2,
    n_heads: int | tuple[int, int] = 4,
    steps: int = 256,
    checkpoints: object = None,
    lr: float = 1e-3,
    warmup: int = 0,
    batch_size: int = 32,
    weight_decay: float = 0.0,
    init_scale: float = 1.0,
    optimizer: str = "adamw",
    seed: int = 0,
    progress: bool = True,
) -> list[Path]:
    """Train a tiny model (a Pythia-style GPT-NeoX by default) on the embedded corpus and save
    a checkpoint series.

    A word-level tokenizer of ``vocab_size`` tokens is trained on the stories, which are cut into
    windows of ``n_ctx + 1`` tokens; the randomly initialised ``family`` (matrices scaled by
    ``init_scale``, unit norm gains, zero biases) is trained with AdamW or plain SGD on next-token
    loss. Under ``out_dir``: ``step{N}/`` per checkpoint (weights, config, tokenizer and
    ``checkpoint.json``), ``windows.pt``, ``tokenizer/`` and ``series.json``, each written
    atomically. The recipe and the files in full:
    docs/guides/real-models.md#a-trained-series-offline.

    Args:
        out_dir: the folder to write (created if missing; the ``step*`` folders of an earlier
            series there are removed).
        family: the architecture, a key of :data:`~tl_leadterms.loading.tiny.MODEL_FAMILIES`.
        stories: the training texts (default: the embedded stories).
        n_stories, vocab_size, n_ctx, d_model, n_layers: corpus and model sizes.
        n_heads: attention heads, or ``(query heads, key/value heads)`` for grouped-query
            attention (families that have it, e.g. ``"llama"``).
        steps: optimiser steps.
        checkpoints: the steps to save (default :func:`pythia_steps`: ``0, 1, 2, 4, ...``).
        lr, warmup, batch_size, weight_decay: optimiser settings.
        optimizer: ``"adamw"`` or ``"sgd"``.
        init_scale: factor on the initial random matrices (1 = Hugging Face's std 0.02).
        seed: seeds the corpus, the initial weights and the batch order.
        progress: tqdm progress bar over the steps.

    Returns:
        The checkpoint folders, in step order.

    Example:
        >>> import tempfile
        >>> from tl_leadterms.loading.series import load_series, train_neox_series
        >>> out = tempfile.mkdtemp()
        >>> folders = train_neox_series(out, n_stories=30, vocab_size=60, n_ctx=16, d_model=16,
        ...     n_heads=2, n_layers=1, steps=4, batch_size=8, progress=False)
        >>> [(label, step) for label, step, _ in load_series(out)]
        [('step0', 0), ('step1', 1), ('step2', 2), ('step4', 4)]
    """
    n_heads, n_kv_heads = _heads(n_heads)
    if family not in MODEL_FAMILIES:
        raise LeadTermsError(f"unknown family {family!r}; use one of {sorted(MODEL_FAMILIES)}")
    steps, saved, lr, init_scale = _check_training(
        sizes={"n_stories": n_stories, "vocab_size": vocab_size, "n_ctx": n_ctx,
               "d_model": d_model, "n_layers": n_layers, "n_heads": n_heads,
               "batch_size": batch_size},
        steps=steps, checkpoints=checkpoints, lr=lr, init_scale=init_scale, warmup=warmup,
        weight_decay=weight_decay, optimizer=optimizer,
    )  # fmt: skip
    out_dir = Path(out_dir)
    started = time.perf_counter()
    stories, tokenizer, windows = _corpus(out_dir, stories, n_stories, vocab_size, n_ctx, seed)
    d_vocab = len(tokenizer)
    # like Pythia: unit norm gains and zero biases (save_tiny_model randomises them)
    hf_model = tiny_model(
        family, d_vocab=d_vocab, n_layers=n_layers, d_model=d_model, n_heads=n_heads,
        n_kv_heads=n_kv_heads, n_ctx=n_ctx, seed=seed, randomise_norms=False,
        attn_implementation="eager",
    )  # fmt: skip
    with torch.no_grad():  # the random matrices scaled; norm gains and biases keep their values
        for param in hf_model.parameters():  # (zero init is the limit init_scale -> 0)
            if param.dim() == 2 and init_scale != 1.0:
                param.mul_(init_scale)
    hf_model.train()
    meta = {"d_vocab": d_vocab, "n_ctx": n_ctx, "seed": seed, "init_scale": init_scale}
    folders: list[Path] = []

    def save(step: int, loss: float, step_lr: float) -> None:
        info = {"step": step, "loss": loss, "lr": step_lr, **meta}
        folders.append(_save_checkpoint(hf_model, tokenizer, out_dir / f"step{step}", info))

    params = hf_model.parameters()
    opt = (
        torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=weight_decay)
        if optimizer == "adamw"  # Pythia's betas
        else torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    )
    losses = _train(
        hf_model, opt,
        _Batches(windows, batch_size, seed), steps=steps, saved=saved, lr=lr, warmup=warmup,
        save=save, progress=progress,
    )  # fmt: skip
    series = json.dumps(
        {
            "checkpoints": [f.name for f in folders],
            "family": family,
            "steps": steps,
            "n_stories": len(stories),
            "vocab_size": vocab_size,
            "n_windows": len(windows),
            "d_model": d_model,
            "n_layers": n_layers,
            "n_heads": n_heads,
            "n_kv_heads": n_kv_heads or n_heads,
            "lr": lr,
            "warmup": warmup,
            "batch_size": batch_size,
            "weight_decay": weight_decay,
            "optimizer": "AdamW(betas=(0.9, 0.95))" if optimizer == "adamw" else "SGD",
            "losses": losses,
            "seconds": time.perf_counter() - started,
            **meta,
        },
        indent=2,
    )
    write_text(out_dir / SERIES_FILE, series)
    return folders


def load_windows(out_dir: str | os.PathLike) -> Int[Tensor, "n_windows n_ctx_plus_1"]:
    """The training windows of a series (``out_dir/windows.pt``), for ``corpus_stats``."""
    path = Path(out_dir) / WINDOWS_FILE
    if not path.is_file():
        raise LeadTermsError(f"{str(path)!r} does not exist; pass the out_dir of train_neox_series")
    return torch.load(path, weights_only=True)
