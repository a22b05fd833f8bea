"""The checks every public entry point applies to its arguments, written once.

One rule per kind of argument (``lr``, ``steps``, ``s_lr``, ``layers``, option strings,
``stats``, counts, ``ci``, ``tokens``), the same everywhere, set out in
docs/guides/conventions.md#how-arguments-are-checked; every failure is a
:class:`~tl_leadterms.errors.LeadTermsError` that names the value and says what to pass instead.

>>> check_layers([np.int64(1), 0], n_layers=3)
[1, 0]
>>> check_steps(4.0), check_lr(np.float32(0.5))
(4, 0.5)
"""

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, check_choice, positive_int, positive_number
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.tokens import id_range

__all__ = [
    "Layers",
    "check_bool",
    "check_choice",
    "check_count",
    "check_layers",
    "check_level",
    "check_lr",
    "check_s_lr",
    "check_stats",
    "check_steps",
    "check_tokens",
    "check_vocab",
    "check_windows",
    "positive_int",
    "positive_number",
]


#: what every ``layers=`` argument accepts (see the module docstring)
Layers = int | np.integer | Sequence[int | np.integer] | np.ndarray | Tensor | None


def _real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _integer(value: Any) -> int | None:
    """``value`` as an int if it is an integer (or an integral float), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if _real(value) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def check_lr(lr: Any, name: str = "lr") -> float:
    """``lr`` as a float if it is finite and ``> 0``."""
    if not _real(lr) or not math.isfinite(lr) or lr <= 0:
        raise LeadTermsError(
            f"{name} must be a finite number > 0 (the learning rate η), got {lr!r}"
        )
    return float(lr)


def check_steps(steps: Any, name: str = "steps") -> int:
    """``steps`` as an int if it is an integer ``>= 0`` (GD steps from zero initialisation)."""
    value = _integer(steps)
    if value is None or value < 0:
        hint = (
            "; for a real s·η pass s_lr= instead"
            if _real(steps) and math.isfinite(steps) and steps >= 0
            else ""
        )
        raise LeadTermsError(
            f"{name} must be an integer >= 0 (GD steps from zero init), got {steps!r}{hint}"
        )
    return value


def check_s_lr(s_lr: Any, name: str = "s_lr") -> float:
    """``s_lr`` (the product ``s·η``) as a float if it is finite and ``>= 0``."""
    if not _real(s_lr) or not math.isfinite(s_lr) or s_lr < 0:
        raise LeadTermsError(f"{name} must be a finite number >= 0 (the product s·η), got {s_lr!r}")
    return float(s_lr)


def check_count(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int if it is an integer ``>= minimum``."""
    count = _integer(value)
    if count is None or count < minimum:
        raise LeadTermsError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return count


def check_level(name: str, value: Any) -> float | None:
    """``None``, or a confidence level in ``(0, 1)`` as a float (e.g. ``ci=0.95``)."""
    if value is None:
        return None
    if not _real(value) or not 0 < value < 1:
        raise LeadTermsError(
            f"{name} must be None or a confidence level between 0 and 1 (e.g. 0.95), got {value!r}"
        )
    return float(value)


def check_spec(name: str, value: Any, spec: type, count: str) -> Any:
    """``value`` if it is a ``spec`` (a dataclass that checks itself), else an int count as
    ``spec(**{count: value})``."""
    if isinstance(value, spec):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise LeadTermsError(
            f"{name} must be a number of {count} (an int >= 2) or a {spec.__name__}, got {value!r}"
        )
    return spec(**{count: int(value)})


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is True or False (numpy booleans included)."""
    if not isinstance(value, (bool, np.bool_)):
        raise LeadTermsError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_layers(layers: Any, n_layers: int) -> list[int]:
    """``None`` -> every layer; an int or a non-empty sequence of distinct ints in range."""
    if layers is None:
        return list(range(n_layers))
    if _integer(layers) is not None and not isinstance(layers, float):
        layers = [layers]
    if isinstance(layers, (Tensor, np.ndarray)):
        layers = layers.tolist() if layers.ndim == 1 else [layers]
    if isinstance(layers, (str, bytes)) or not isinstance(layers, (Sequence, range)):
        raise LeadTermsError(
            f"layers must be None, an int or a sequence of ints, got {type(layers).__name__} "
            f"{layers!r}"
        )
    chosen = [_integer(i) if not isinstance(i, float) else None for i in layers]
    if any(i is None for i in chosen):
        raise LeadTermsError(f"layers must be ints (numpy integers are fine), got {layers!r}")
    if not chosen:
        raise LeadTermsError(
            f"layers is empty: pass None for every layer, or layer indices in 0..{n_layers - 1}"
        )
    bad = [i for i in chosen if not 0 <= i < n_layers]
    if bad:
        raise LeadTermsError(
            f"layers {bad} out of range: the model has {n_layers} layers (0..{n_layers - 1})"
        )
    if len(set(chosen)) != len(chosen):
        raise LeadTermsError(f"layers lists a layer twice: {chosen}; pass each layer once")
    return chosen


def check_stats(stats: Any) -> CorpusStats:
    """``stats`` if it is a :class:`CorpusStats`."""
    if not isinstance(stats, CorpusStats):
        raise LeadTermsError(
            "stats must be a CorpusStats (from tl_leadterms.corpus_stats or CorpusStats.load), "
            f"got {type(stats).__name__}"
        )
    return stats


def check_vocab(
    stats: CorpusStats,
    *,
    d_vocab: int | None = None,
    tokenizer: Any = None,
    what: str = "the model",
) -> None:
    """Refuse statistics of another vocabulary than the model's or tokenizer's.

    Compares ``d_vocab``, refuses a tokenizer with more tokens than the statistics' ``d_vocab``
    and, when the statistics record the vocabulary hash of the tokenizer they were computed
    with and ``tokenizer`` is given, compares the two hashes.
    """
    if d_vocab is not None and d_vocab != stats.d_vocab:
        raise LeadTermsError(
            f"the statistics were computed for d_vocab={stats.d_vocab} but {what} has "
            f"d_vocab={d_vocab}; compute them with {what}'s tokenizer "
            f"(corpus_stats(tokens, d_vocab={d_vocab}))"
        )
    size = len(tokenizer) if tokenizer is not None and hasattr(tokenizer, "__len__") else None
    if size is not None and size > stats.d_vocab:
        raise LeadTermsError(
            f"{what}'s tokenizer has {size} tokens but the statistics were computed for "
            f"d_vocab={stats.d_vocab}: they are of another vocabulary; compute them with "
            f"{what}'s tokenizer"
        )
    recorded = stats.metadata.get("tokenizer_vocab_hash")
    if tokenizer is None or recorded is None:
        return
    from tl_leadterms.data.tokenizers import vocab_hash

    try:
        actual = vocab_hash(tokenizer)
    except Exception:  # a tokenizer without a readable vocabulary cannot be compared
        return
    if actual != recorded:
        raise LeadTermsError(
            f"the statistics were computed with another tokenizer than {what}'s (vocabulary hash "
            f"{recorded[:12]}… vs {actual[:12]}…): recompute them with {what}'s tokenizer"
        )


def check_tokens(
    tokens: Any,
    d_vocab: int,
    *,
    min_len: int = 1,
    max_len: int | None = None,
    layout: str = "[batch, pos]",
    max_len_hint: str = "",
    name: str = "tokens",
) -> Tensor:
    """``tokens`` as a ``[batch, pos]`` int64 tensor of ids in ``[0, d_vocab)``.

    A 1-D input becomes one sequence. ``min_len``/``max_len`` bound ``pos``; ``max_len_hint``
    says where the upper bound comes from; ``name`` is the argument's name in the messages.
    """
    if not isinstance(tokens, Tensor):
        try:
            tokens = torch.as_tensor(np.asarray(tokens))
        except (TypeError, ValueError, RuntimeError) as err:
            raise LeadTermsError(
                f"{name} must be a {layout} tensor of token ids, got {type(tokens).__name__}"
            ) from err
    shape = tuple(tokens.shape)
    tokens = tokens[None] if tokens.dim() == 1 else tokens
    if (
        tokens.dim() != 2
        or tokens.is_floating_point()
        or tokens.is_complex()
        or (tokens.dtype == torch.bool)
    ):
        raise LeadTermsError(
            f"{name} must be a {layout} integer tensor, got shape {shape} and dtype {tokens.dtype}"
        )
    n, length = tokens.shape
    if n < 1 or length < min_len:
        raise LeadTermsError(
            f"{name} has shape {tuple(tokens.shape)}: need at least one sequence of {min_len} or "
            f"more tokens ({layout})"
        )
    if max_len is not None and length > max_len:
        raise LeadTermsError(
            f"sequences have {length} positions but at most {max_len} fit{max_len_hint}; cut them "
            f"to {max_len}"
        )
    low, high = id_range(tokens)
    if low < 0 or high >= d_vocab:
        raise LeadTermsError(
            f"{name}: token ids must lie in [0, {d_vocab}) (d_vocab); found "
            f"{low if low < 0 else high}"
        )
    return tokens.long()


def check_windows(tokens: Any, d_vocab: int, n_ctx: int) -> Tensor:
    """Training/evaluation windows ``[n_sequences, T + 1]`` for a model of context ``n_ctx``.

    Inputs are ``tokens[:, :-1]`` and targets ``tokens[:, 1:]``, so a window needs at least two
    tokens and at most ``n_ctx + 1``.
    """
    return check_tokens(
        tokens,
        d_vocab,
        min_len=2,
        max_len=n_ctx + 1,
        layout="[n_sequences, T + 1]",
        max_len_hint=f" (T = n_ctx = {n_ctx} inputs plus one target; make_windows cuts them)",
    )
