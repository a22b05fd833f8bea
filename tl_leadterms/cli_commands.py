"""The ``tl-leadterms`` subcommands decompose, sweep and report, and the loaders all share.

:mod:`tl_leadterms.cli` builds the parser; ``stats`` and ``top`` are in :mod:`.cli_stats`,
``demo`` in :mod:`.cli_demo`. Every user mistake becomes a
:class:`~tl_leadterms.errors.LeadTermsError` (exit code 2, one line on stderr).
"""

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from tl_leadterms import atomic
from tl_leadterms.cli_inputs import check_output, first_line
from tl_leadterms.errors import LeadTermsError

TOKEN_SUFFIXES = (".pt", ".npy")


# -- loaders --------------------------------------------------------------------------------
def load_tokenizer(spec: str, texts: list[str] | None):
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


def _looks_like_path(name: str) -> bool:
    """A name meant as a local path (model names like pythia-1.4b have dots, so no suffix test)."""
    return name.startswith(("/", ".", "~")) or name.endswith(os.sep)


def load_model(spec: str, device: str = "cpu"):
    """A local Hugging Face folder of any architecture TransformerLens converts, or a
    TransformerLens / hub model name (:func:`tl_leadterms.checkpoints.loading.load_model`)."""
    from tl_leadterms.checkpoints.loading import load_model as load

    try:
        return load(spec, device=device)
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


def load_stats(path: str, tokenizer: Any = None, *, only=None, check_vocab: bool = True):
    """A statistics file, or the whole-corpus statistics (``.full()``) of a block file."""
    from tl_leadterms import BlockStats, CorpusStats

    if is_block_file(path):
        return BlockStats.load(path, tokenizer=tokenizer, check_vocab=check_vocab).full()
    return CorpusStats.load(path, tokenizer=tokenizer, only=only, check_vocab=check_vocab)


def write_text(content: str, path: str | None, *, announce: bool = True) -> None:
    """Print ``content``, or write it to ``path`` atomically (and say so if ``announce``)."""
    if path is None or path == "-":
        print(content)
        return
    target = Path(path)
    if target.is_dir():
        raise LeadTermsError(f"-o {path!r} is a folder; pass a file path")
    text = content if content.endswith("\n") else content + "\n"
    atomic.write_text(target, text, parents=True)
    if announce:
        print(f"wrote {target}")


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def to_json(data: Any) -> str:
    """Strict JSON (NaN and infinities become null)."""
    return json.dumps(_json_safe(data), indent=1, allow_nan=False)


def _format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = Path(args.output).suffix.lower() if args.output else ""
    return {".json": "json", ".csv": "csv"}.get(suffix, "text")


def cmd_decompose(args: argparse.Namespace) -> int:
    from tl_leadterms.analyzers.decompose import decompose
    from tl_leadterms.checks import check_vocab

    check_output(args.output, "-o")
    stats = load_stats(args.stats)  # first: the cheaper file to find missing
    model = load_model(args.checkpoint, args.device)
    check_vocab(
        stats,
        d_vocab=model.cfg.d_vocab,
        tokenizer=getattr(model, "tokenizer", None),
        what=f"checkpoint {args.checkpoint!r}",
    )
    d = decompose(
        model, stats, lr=args.lr, steps=args.steps, layers=args.layers, per_head=not args.per_layer
    )
    fmt = _format(args)
    if fmt == "json":
        write_text(to_json(d.to_dict()), args.output)
    elif fmt == "csv":
        write_text(d.to_pandas().to_csv(index=False), args.output)
    else:
        write_text(repr(d), args.output)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from tl_leadterms.checkpoints.sweep import sweep

    if args.out and Path(args.out).suffix.lower() not in (".csv", ".json"):
        raise LeadTermsError(f"--out {args.out!r} must end in .csv or .json")
    check_output(args.out, "--out")
    check_output(args.results, "--results")
    stats = _sweep_stats(args)
    names = args.checkpoints
    if len(names) == 1 and not Path(names[0]).exists():
        if _looks_like_path(names[0]) or args.steps is None:
            raise LeadTermsError(
                f"no checkpoint folder at {names[0]!r}; pass a series folder, checkpoint folders "
                "or a hub name with --steps (e.g. pythia-70m --steps 0 1 2)"
            )
        checkpoints: Any = names[0]
    else:
        missing = [n for n in names if not Path(n).is_dir()]
        if missing:
            raise LeadTermsError(f"no checkpoint folder at {missing}; pass existing folders")
        checkpoints = names[0] if len(names) == 1 else names
    on_ray: dict[str, Any] = {}
    if getattr(args, "ray", None) is not None:
        from tl_leadterms.distributed import parse_target

        address, num_cpus = parse_target(args.ray)
        on_ray = {"executor": "ray", "address": address, "num_cpus": num_cpus}
    table = sweep(
        checkpoints,
        stats,
        analyses=args.analyses,
        steps=args.steps,
        results=args.results,
        layers=args.layers,
        per_head=args.per_head,
        null=args.null,
        ci=args.ci,
        **({} if args.bootstrap is None else {"bootstrap": args.bootstrap}),
        seed=args.seed,
        device=args.device,
        progress=not args.quiet,
        **on_ray,
        **({} if getattr(args, "centre", None) is None else {"centre": args.centre}),
    )
    if args.out:  # on disk first: a closed stdout pipe cannot lose it
        if Path(args.out).suffix.lower() == ".csv":
            write_text(table.to_pandas().to_csv(index=False), args.out, announce=False)
        else:
            write_text(to_json(table.to_dict()), args.out, announce=False)
    print(repr(table))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _sweep_stats(args: argparse.Namespace):
    """The statistics of ``sweep``: with ``--ci`` the blocks of a block file, else the whole
    corpus (a block file's ``.full()``)."""
    from tl_leadterms import BlockStats

    if args.ci is None:
        if args.bootstrap is not None:
            raise LeadTermsError(f"--bootstrap {args.bootstrap} is for --ci; add --ci LEVEL")
        return load_stats(args.stats)
    if not is_block_file(args.stats):
        raise LeadTermsError(
            f"--ci {args.ci} needs statistics kept per block of windows, which {args.stats} does "
            "not hold; write them with tl-leadterms stats ... --blocks B (e.g. 20), or drop --ci"
        )
    return BlockStats.load(args.stats)


def cmd_report(args: argparse.Namespace) -> int:
    from tl_leadterms.report import report, statistics_needed

    check_output(args.output, "-o")
    text = args.text
    if args.text_file:
        if not Path(args.text_file).is_file():
            raise LeadTermsError(f"no such text file: {args.text_file}")
        text = Path(args.text_file).read_text(encoding="utf-8")
    tokenizer = load_tokenizer(args.tokenizer, None) if args.tokenizer else None
    if not Path(args.stats).is_file():  # fail before loading a model
        raise LeadTermsError(
            f"no statistics file at {args.stats}; write one with tl-leadterms stats"
        )
    model = load_model(args.model, args.device) if args.model else None
    if tokenizer is None and model is not None:
        tokenizer = getattr(model, "tokenizer", None)
    needed = statistics_needed(model=model is not None, words=bool(args.words))
    stats = load_stats(args.stats, tokenizer, only=needed)  # only the tables it shows
    sweep_table = _read_sweep(args.sweep_results) if args.sweep_results else None
    path = report(
        args.output,
        stats=stats,
        model=model,
        tokenizer=tokenizer,
        text=text,
        words=args.words or None,
        sweep_table=sweep_table,
        title=args.title,
        lr=args.lr,
        steps=args.steps,
        progress=not args.quiet,
    )
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


def _read_sweep(path: str):
    from tl_leadterms.checkpoints.sweep_table import SweepTable

    if not Path(path).is_file():
        raise LeadTermsError(f"no sweep results file at {path!r} (from sweep --results)")
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not {"checkpoint", "step", "rows"} <= set(record):
            raise LeadTermsError(f"line {number} of {path!r} is not a sweep record")
        records.append(record)
    return SweepTable.from_records(records, metadata={"results": path})
