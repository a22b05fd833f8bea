"""What every ``tl-leadterms`` subcommand shares on the way in: the argparse types that refuse
zero or negative counts, the common flags, output-path checks made before any work, and the
loaders of tokenizers, models and statistics files that turn every failure into one
:class:`~tl_leadterms.errors.LeadTermsError` (exit code 2, one line on stderr).

Nothing heavy is imported at module level: ``tl-leadterms --help`` needs neither torch nor
TransformerLens.
"""

import argparse
from pathlib import Path
from typing import Any

from tl_leadterms.errors import LeadTermsError, first_line
from tl_leadterms.filesystem import is_special, looks_like_path

__all__ = [
    "TOKEN_SUFFIXES",
    "add_common",
    "add_run",
    "add_uncertainty",
    "check_device",
    "check_output",
    "first_line",
    "is_block_file",
    "looks_like_path",
    "open_model",
    "positive_int_arg",
    "read_scored_stats",
    "read_stats",
    "run_of",
    "tokenizer_from_spec",
    "uncertainty_of",
]

#: token-array files (``[n, T + 1]`` integer ids) that ``stats`` maps instead of reading
TOKEN_SUFFIXES = (".pt", ".npy")


def positive_int_arg(text: str) -> int:
    """argparse type: an int >= 1 (zero and negative counts are refused, with the value).

    >>> positive_int_arg("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text}")
    return value


def check_device(spec: str) -> str:
    """argparse type: a device torch knows (``cpu``, ``cuda``, ``cuda:1``, ``mps`` ...)."""
    import torch

    try:
        torch.device(spec)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"{spec!r} is not a torch device; use cpu, cuda, cuda:N or mps"
        ) from None
    return spec


def add_common(p: argparse.ArgumentParser, *, device: bool = True) -> None:
    """``--quiet`` (no progress bars) and, unless ``device=False``, ``--device``."""
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    if device:
        p.add_argument(
            "--device", default="cpu", type=check_device, help="torch device (default: cpu)"
        )


def add_uncertainty(p: argparse.ArgumentParser) -> None:
    """How sure the numbers are (one :class:`~tl_leadterms.results.uncertainty.Uncertainty`):
    ``--null R``, ``--ci LEVEL`` with ``--bootstrap R``, and ``--seed``."""
    p.add_argument(
        "--null",
        type=positive_int_arg,
        metavar="R",
        help="a permutation null of R draws per score: the effect (excess = score - null mean) "
        "first, then the evidence z, p, q (Benjamini-Hochberg) and each row's verdict; 99 lets a "
        "row that beats every draw stand out (with R < 19 none can: the table says so)",
    )
    p.add_argument(
        "--ci",
        type=float,
        metavar="LEVEL",
        help="a bootstrap interval over the blocks of a block statistics file (stats --blocks "
        "B): columns lo, hi and corrected, the estimate of the distribution-level score the "
        "interval is built around (none where the statistics are a model's own training "
        "windows; docs/guides/intervals.md)",
    )
    p.add_argument(
        "--bootstrap", type=positive_int_arg, metavar="R", help="resamples of --ci (default 50)"
    )
    p.add_argument("--seed", type=int, help="seed of the permutations and resamples (default 0)")


def uncertainty_of(args: argparse.Namespace) -> Any:
    """The :class:`~tl_leadterms.results.uncertainty.Uncertainty` of ``add_uncertainty``'s
    flags."""
    from tl_leadterms.results.uncertainty import Uncertainty

    if args.ci is None and args.bootstrap is not None:
        raise LeadTermsError(f"--bootstrap {args.bootstrap} is for --ci; add --ci LEVEL")
    boot = {} if args.bootstrap is None else {"bootstrap": args.bootstrap}
    return Uncertainty(null=args.null, ci=args.ci, seed=args.seed, **boot)


def read_scored_stats(path: str, ci: float | None) -> Any:
    """The statistics a command scores: with ``--ci`` the blocks of a block file, else the
    whole corpus (a block file's ``.full()``)."""
    if ci is None:
        return read_stats(path)
    from tl_leadterms.stats.blocks import BlockStats

    if not is_block_file(path):
        raise LeadTermsError(
            f"--ci {ci} needs statistics kept per block of windows, which {path} does not hold; "
            "write them with tl-leadterms stats ... --blocks B (e.g. 20), or drop --ci"
        )
    return BlockStats.load(path)


def add_run(p: argparse.ArgumentParser) -> None:
    """The training run's ``--lr`` and ``--steps`` (if known) and ``--layers``."""
    p.add_argument("--lr", type=float, help="the training run's learning rate, if known")
    p.add_argument("--steps", type=int, help="the training run's step count, if known")
    p.add_argument("--layers", type=int, nargs="+", help="layers to analyse (default: all)")


def run_of(args: argparse.Namespace) -> Any:
    """The :class:`~tl_leadterms.theory.Schedule` of ``add_run``'s ``--lr`` and ``--steps``."""
    from tl_leadterms.theory import Schedule

    return Schedule(lr=args.lr, steps=args.steps)


def check_output(path: str | None, flag: str, *, folder: bool = False) -> None:
    """Refuse an output path that cannot be written, before any computation.

    The path must not be a folder (or, with ``folder=True``, a file), and its nearest existing
    parent must be a writable folder (missing folders are created when writing).
    """
    import tempfile

    if path is None or path == "-":
        return
    target = Path(path)
    if not folder and is_special(target.resolve()):
        return  # /dev/null, a named pipe: streamed to when written, never replaced
    if not folder and target.is_dir():
        raise LeadTermsError(f"{flag} {path!r} is a folder; pass a file path")
    if folder and target.exists() and not target.is_dir():
        raise LeadTermsError(f"{flag} {path!r} is a file; pass a folder path")
    parent = target.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise LeadTermsError(f"{flag} {path!r}: {str(parent)!r} is a file, not a folder")
    try:  # a real probe: permissions, read-only mounts and pseudo file systems alike
        with tempfile.TemporaryFile(dir=parent, prefix=".tl-leadterms-probe."):
            pass
    except OSError as err:
        raise LeadTermsError(
            f"{flag} {path!r}: folder {str(parent)!r} is not writable ({err.strerror}); "
            "choose another path"
        ) from None


def tokenizer_from_spec(spec: str, texts: list[str] | None) -> Any:
    """``word:N`` / ``bpe:N`` train on the texts; anything else is a name or local folder."""
    from tl_leadterms.data import train_bpe_tokenizer, train_word_tokenizer

    kind, _, size = spec.partition(":")
    if kind in ("word", "bpe") and size.isdigit():
        if texts is None:
            raise LeadTermsError(f"--tokenizer {spec} trains on texts; give text files.")
        train = train_word_tokenizer if kind == "word" else train_bpe_tokenizer
        return train(texts, int(size))
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec)
    except Exception as err:  # missing, unreadable or malformed (tokenizer.json) tokenizers
        raise LeadTermsError(
            f"cannot load tokenizer {spec!r} ({first_line(err)}); pass a local tokenizer folder, "
            "a cached hub name, or word:N / bpe:N to train one on the corpus."
        ) from err


def open_model(spec: str, device: str = "cpu") -> Any:
    """A local Hugging Face folder of any architecture TransformerLens converts, or a
    TransformerLens / hub model name (:func:`tl_leadterms.load_model`), any failure as one
    :class:`~tl_leadterms.errors.LeadTermsError`."""
    from tl_leadterms.loading.checkpoint import load_model

    try:
        return load_model(spec, device=device)
    except LeadTermsError:
        raise
    except Exception as err:  # truncated weights, inconsistent configs, unusable devices ...
        raise LeadTermsError(
            f"cannot load model {spec!r} ({first_line(err)}); check the checkpoint folder "
            "(config.json, complete weight files) and --device"
        ) from err


def is_block_file(path: str) -> bool:
    """Whether ``path`` holds statistics per block of windows (``stats --blocks``)."""
    from tl_leadterms.stats.io import BLOCK_FORMAT, read_file

    _, meta = read_file(Path(path), set())  # the header only
    return isinstance(meta, dict) and meta.get("format") == BLOCK_FORMAT


def read_stats(path: str, tokenizer: Any = None, *, want=None, check_vocab: bool = True) -> Any:
    """A statistics file, or the whole-corpus statistics (``.full()``) of a block file."""
    from tl_leadterms.stats import CorpusStats
    from tl_leadterms.stats.blocks import BlockStats

    if is_block_file(path):
        return BlockStats.load(path, tokenizer=tokenizer, check_vocab=check_vocab).full()
    return CorpusStats.load(path, tokenizer=tokenizer, want=want, check_vocab=check_vocab)
