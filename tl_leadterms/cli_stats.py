"""The ``tl-leadterms`` subcommands ``stats`` (texts, datasets or token arrays -> a statistics
file, in one process or on Ray) and ``top`` (association lists read from a file)."""

import argparse
import tempfile
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import atomic_set
from tl_leadterms.cli_commands import (
    TOKEN_SUFFIXES,
    is_block_file,
    load_stats,
    load_tokenizer,
)
from tl_leadterms.cli_inputs import ArrayWindows, check_output, first_line, open_token_array
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.filesystem import is_special


# -- stats inputs ---------------------------------------------------------------------------
def _dataset(name: str, args: argparse.Namespace):
    import datasets

    if Path(name).is_dir():
        try:
            ds = datasets.load_from_disk(name)
        except (FileNotFoundError, ValueError) as err:
            raise LeadTermsError(
                f"{name!r} is a folder but not a dataset saved with Dataset.save_to_disk "
                f"({first_line(err)})"
            ) from err
    else:
        try:
            ds = datasets.load_dataset(name, split=args.split)
        except Exception as err:  # hub, network and builder errors come in many types
            raise LeadTermsError(
                f"no such file or folder {name!r}, and loading it as a hub dataset failed "
                f"({first_line(err)}); offline, save the dataset with Dataset.save_to_disk "
                "and pass that folder"
            ) from err
    if isinstance(ds, datasets.DatasetDict):
        if args.split not in ds:
            raise LeadTermsError(
                f"dataset {name!r} has splits {list(ds)}, not --split {args.split}"
            )
        ds = ds[args.split]
    if args.text_column in ds.column_names:
        return "texts", [str(t) for t in ds[args.text_column]]
    if "input_ids" in ds.column_names:
        return "ids", [list(map(int, ids)) for ids in ds["input_ids"]]
    raise LeadTermsError(
        f"dataset {name!r} has columns {ds.column_names}: no text column {args.text_column!r} "
        "(set --text-column) and no input_ids"
    )


def read_inputs(args: argparse.Namespace) -> tuple[str, Any]:
    """The inputs of ``stats`` as ``("texts", [str])``, ``("ids", [[int]])`` or
    ``("windows", ArrayWindows)`` (memory-mapped token arrays, streamed in int64 batches)."""
    from tl_leadterms.data import read_corpus
    from tl_leadterms.stats.tokens import default_batch_size

    parts: dict[str, list] = {"texts": [], "ids": [], "windows": []}
    for name in args.inputs:
        path = Path(name)
        if path.is_file() and path.suffix in TOKEN_SUFFIXES:
            parts["windows"].append(open_token_array(path))
        elif path.is_file():
            parts["texts"].extend(read_corpus(path))  # documents are separated by blank lines
        elif path.is_dir():
            kind, docs = _dataset(name, args)
            parts[kind].extend(docs)
        elif path.suffix in TOKEN_SUFFIXES:
            raise LeadTermsError(f"no such token file: {name}")
        elif path.suffix or name.startswith(("/", ".", "~")):
            raise LeadTermsError(f"no such text file: {name}")
        else:
            kind, docs = _dataset(name, args)
            parts[kind].extend(docs)
    kinds = [k for k, v in parts.items() if v]
    if len(kinds) != 1:
        raise LeadTermsError(
            "the inputs hold no documents" if not kinds else f"the inputs mix {kinds}; give "
            "texts, token-id datasets or token arrays, one kind per run"
        )  # fmt: skip
    kind = kinds[0]
    if kind != "windows":
        return kind, parts[kind]
    width = int(parts["windows"][0].shape[1])
    batch = default_batch_size(max(width - 1, 1))
    return kind, ArrayWindows(parts["windows"], args.max_windows, batch)


def stats_on_ray(args: argparse.Namespace) -> int:
    """``stats --ray``: each input file is a shard read by a worker (the driver reads no data,
    except the texts a ``word:N``/``bpe:N`` tokenizer is trained on)."""
    import torch

    from tl_leadterms.distributed import corpus_stats, parse_target

    if args.max_windows:
        raise LeadTermsError("--max-windows is not supported with --ray; pass fewer files")
    if args.accumulate_dtype:
        raise LeadTermsError(
            "--accumulate-dtype is not supported with --ray (shards always sum in float64); "
            "drop it (--dtype float32 still halves the result)"
        )
    texts = [
        p for p in args.inputs if Path(p).suffix not in (*TOKEN_SUFFIXES, ".parquet", ".arrow")
    ]
    tokenizer = None
    if args.tokenizer or (texts and not Path(texts[0]).is_dir()):
        from tl_leadterms.data import read_corpus

        spec = args.tokenizer or "word:3000"
        trains = spec.partition(":")[0] in ("word", "bpe")
        tokenizer = load_tokenizer(
            spec, [d for p in texts for d in read_corpus(p)] if trains else None
        )
    d_vocab = args.d_vocab or (len(tokenizer) if tokenizer is not None else None)
    if d_vocab is None:
        raise LeadTermsError("token ids need the vocabulary size: pass --d-vocab or --tokenizer")
    address, num_cpus = parse_target(args.ray)
    stats = corpus_stats(
        args.inputs,
        d_vocab,
        vocab=args.keep,
        n_ctx=args.n_ctx or (128 if tokenizer is not None else None),
        mode=args.mode,
        text_column=args.text_column,
        tokenizer=tokenizer,
        address=address,
        num_cpus=num_cpus,
        progress=not args.quiet,
        dtype=getattr(torch, args.dtype),
        want=tuple(args.only) if args.only else None,
        check_memory=not args.no_memory_check,
    )
    stats.save(args.output)
    print(f"{stats!r}\nwrote {args.output}")
    return 0


def stats_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--dtype``, ``--accumulate-dtype``, ``--only``, ``--no-memory-check`` and the offload
    folder (the output's) as keywords."""
    import torch

    options: dict[str, Any] = {"dtype": getattr(torch, args.dtype)}
    if args.accumulate_dtype:
        options["accumulate_dtype"] = getattr(torch, args.accumulate_dtype)
    if args.only:
        options["want"] = tuple(args.only)
    options["check_memory"] = not args.no_memory_check
    # Φ̄ waits next to the output during pass two: one [k, k] table less at the peak
    # (a special file such as /dev/null has no folder of ours: the system's temporary one)
    output = Path(args.output).resolve()
    options["offload"] = Path(tempfile.gettempdir()) if is_special(output) else output.parent
    return options


def _check_blocks(args: argparse.Namespace) -> None:
    """Refuse the options ``stats --blocks`` cannot honour (block_stats reads on one process,
    sums in float64 and always computes every statistic)."""
    refused = [
        name
        for name, given in (("--ray", getattr(args, "ray", None) is not None),
                            ("--only", bool(args.only)),
                            ("--accumulate-dtype", bool(args.accumulate_dtype)))
        if given
    ]  # fmt: skip
    if refused:
        raise LeadTermsError(
            f"--blocks {args.blocks} cannot be combined with {' '.join(refused)} (block "
            "statistics are read on one process, summed in float64, with every table); drop them"
        )


def _compute(windows, d_vocab: int, tokenizer, args: argparse.Namespace):
    """Plain statistics, or with ``--blocks B`` statistics kept per block of windows."""
    if args.blocks is None:
        from tl_leadterms import corpus_stats

        return corpus_stats(windows, d_vocab, vocab=args.keep, tokenizer=tokenizer,
                            progress=not args.quiet, **stats_options(args))  # fmt: skip
    import torch

    from tl_leadterms import block_stats

    return block_stats(windows, d_vocab, blocks=args.blocks, vocab=args.keep, tokenizer=tokenizer,
                       dtype=getattr(torch, args.dtype), progress=not args.quiet)  # fmt: skip


def cmd_stats(args: argparse.Namespace) -> int:
    from tl_leadterms import make_windows

    check_output(args.output, "-o")
    check_output(args.save_tokenizer, "--save-tokenizer", folder=True)
    if args.blocks is not None:
        _check_blocks(args)
    if getattr(args, "ray", None) is not None:
        return stats_on_ray(args)
    kind, data = read_inputs(args)
    if args.save_tokenizer and kind != "texts" and not args.tokenizer:
        raise LeadTermsError("--save-tokenizer needs a tokenizer (--tokenizer)")
    if kind == "texts":
        tokenizer = load_tokenizer(args.tokenizer or "word:3000", data)
    else:
        tokenizer = load_tokenizer(args.tokenizer, None) if args.tokenizer else None
    d_vocab = args.d_vocab or (len(tokenizer) if tokenizer is not None else None)
    if d_vocab is None:
        raise LeadTermsError("token ids need the vocabulary size: pass --d-vocab or --tokenizer")
    if kind == "windows":
        n_ctx = data.width - 1
        if args.n_ctx is not None and args.n_ctx != n_ctx:
            raise LeadTermsError(
                f"--n-ctx {args.n_ctx} but the token arrays have T + 1 = {n_ctx + 1} columns"
            )
        windows = data  # streamed, at most --max-windows
    else:
        windows = make_windows(
            data,
            args.n_ctx or 128,
            mode=args.mode,
            tokenizer=tokenizer if kind == "texts" else None,
            max_windows=args.max_windows,
        )
    stats = _compute(windows, d_vocab, tokenizer, args)
    # the statistics name the tokenizer's hash: both files land together or neither does
    with atomic_set() as out:
        stats.save(out.file(args.output, parents=True))
        if args.save_tokenizer:
            tokenizer.save_pretrained(out.files_in(args.save_tokenizer))
    print(f"{stats!r}\nwrote {args.output}")
    return 0


_STREAMED = ("Phi_bar", "G_bar", "Q_bar")  # dense tables: ``top`` reads their rows in blocks


def cmd_top(args: argparse.Namespace) -> int:
    from tl_leadterms.stats.corpus import ALIASES, MATRICES

    key = ALIASES.get(args.matrix, args.matrix)
    if key not in MATRICES:
        raise LeadTermsError(
            f"unknown --matrix {args.matrix!r}; choose one of {sorted([*MATRICES, *ALIASES])}"
        )
    tokenizer = load_tokenizer(args.tokenizer, None) if args.tokenizer else None
    stats = load_stats(
        args.stats,
        tokenizer,
        only=("B_bar",) if key in _STREAMED else (key,),  # the sparse counts (and kept ids)
        check_vocab=not args.allow_vocab_mismatch,
    )
    tokens = [int(w) if w.isdigit() and tokenizer is None else w for w in args.tokens]
    if key in _STREAMED and not is_block_file(args.stats):  # a block file's are in memory
        lines = _top_streamed(args.stats, key, stats, tokens, args.k, tokenizer)
    else:
        lines = [_top_line(stats.top(key, token, k=args.k, tokenizer=tokenizer))
                 for token in tokens]  # fmt: skip
    for word, line in zip(args.tokens, lines, strict=True):
        print(f"{word}: {line}")
    return 0


def _top_line(neighbours) -> str:
    if not neighbours and getattr(neighbours, "note", ""):
        return neighbours.note
    return ", ".join(f"{n.token} ({n.score:.3g})" for n in neighbours)


def _top_streamed(path: str, key: str, stats, tokens: list, k: int, tokenizer) -> list[str]:
    """``top`` of a dense table from the rows of ``tokens`` alone: one verified pass over the
    table in row blocks (:func:`~tl_leadterms.stats.scan.scan_table`), never the whole table."""
    from tl_leadterms.stats.neighbours import RowScorer, no_associations
    from tl_leadterms.stats.scan import scan_table

    positions = [stats.vocab.position(stats.token_id_of(t, tokenizer)) for t in tokens]
    scorer = RowScorer(stats.k, positions, "raw", symmetric_gram=False)
    scan_table(path, key, scorer.update)
    lines = []
    for token, i in zip(tokens, positions, strict=True):
        row = scorer.raw(i)
        note = stats.degenerate_note(key) or no_associations(
            token, float(stats.unigram_counts[i]), row
        )
        lines.append(note or _top_line(stats.ranked(row, k, tokenizer)))
    return lines
