"""``tl-leadterms stats``: texts, datasets or token arrays -> a statistics file, in one process
or on Ray."""

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import atomic_set
from tl_leadterms.cli.arrays import ArrayWindows, open_token_array
from tl_leadterms.cli.inputs import (
    TOKEN_SUFFIXES,
    add_common,
    check_output,
    first_line,
    positive_int_arg,
    tokenizer_from_spec,
)
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.filesystem import is_special

__all__ = ["add_parser", "cmd_stats", "offload_folder", "read_inputs", "stats_on_ray",
           "stats_options"]  # fmt: skip


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
        tokenizer = tokenizer_from_spec(
            spec, [d for p in texts for d in read_corpus(p)] if trains else None
        )
    d_vocab = args.d_vocab or (len(tokenizer) if tokenizer is not None else None)
    if d_vocab is None:
        raise LeadTermsError("token ids need the vocabulary size: pass --d-vocab or --tokenizer")
    address, num_cpus = parse_target(args.ray)
    stats = corpus_stats(
        args.inputs,
        d_vocab=d_vocab,
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
    options["offload"] = offload_folder(Path(args.output))
    return options


def offload_folder(output: Path) -> Path:
    """Where Φ̄ waits during pass two: beside the output, on its file system. Until the folders of
    ``-o`` are created (when the file is written), the nearest existing folder above takes the
    temporary, so a failed run leaves no empty folders; a special file such as /dev/null has no
    folder of ours: the system's temporary one.

    >>> offload_folder(Path("/no/such/folder/s.safetensors"))
    PosixPath('/')
    """
    output = output.resolve()
    if is_special(output):
        return Path(tempfile.gettempdir())
    folder = output.parent
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    return folder


def _compute(windows, d_vocab: int, tokenizer, args: argparse.Namespace):
    """Plain statistics, or with ``--blocks B`` statistics kept per block of windows."""
    if args.blocks is None:
        from tl_leadterms.stats import corpus_stats

        return corpus_stats(windows, d_vocab=d_vocab, vocab=args.keep, tokenizer=tokenizer,
                            progress=not args.quiet, **stats_options(args))  # fmt: skip
    import torch

    from tl_leadterms.stats.blocks import block_stats

    return block_stats(
        windows,
        d_vocab=d_vocab,
        blocks=args.blocks,
        vocab=args.keep,
        tokenizer=tokenizer,
        dtype=getattr(torch, args.dtype),
        eos_id=args.eos_id,
        progress=not args.quiet,
    )


def cmd_stats(args: argparse.Namespace) -> int:
    from tl_leadterms.stats import make_windows

    check_output(args.output, "-o")
    check_output(args.save_tokenizer, "--save-tokenizer", folder=True)
    given = {
        "--ray": getattr(args, "ray", None) is not None,
        "--only": bool(args.only),
        "--accumulate-dtype": bool(args.accumulate_dtype),
    }
    refused = [name for name, on in given.items() if on]
    if args.blocks is not None and refused:  # block_stats: one process, float64, every table
        raise LeadTermsError(
            f"--blocks {args.blocks} cannot be combined with {' '.join(refused)} (block "
            "statistics are read on one process, summed in float64, with every table); drop them"
        )
    if args.blocks is None and args.eos_id is not None:
        raise LeadTermsError(
            f"--eos-id {args.eos_id} cuts blocks of windows where documents end; it needs "
            "--blocks B (plain statistics have no blocks)"
        )
    if getattr(args, "ray", None) is not None:
        return stats_on_ray(args)
    kind, data = read_inputs(args)
    if args.save_tokenizer and kind != "texts" and not args.tokenizer:
        raise LeadTermsError("--save-tokenizer needs a tokenizer (--tokenizer)")
    if kind == "texts":
        tokenizer = tokenizer_from_spec(args.tokenizer or "word:3000", data)
    else:
        tokenizer = tokenizer_from_spec(args.tokenizer, None) if args.tokenizer else None
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
            n_ctx=args.n_ctx or 128,
            mode=args.mode,
            tokenizer=tokenizer if kind == "texts" else None,
            max_windows=args.max_windows,
        )
    stats = _compute(windows, d_vocab, tokenizer, args)
    # the statistics name the tokenizer's hash: both files land together or neither does
    if args.save_tokenizer:  # where top and report find it, relative to the statistics file
        stats.metadata["tokenizer_path"] = os.path.relpath(
            Path(args.save_tokenizer).resolve(), Path(args.output).resolve().parent
        )
    with atomic_set() as out:
        stats.save(out.file(args.output, parents=True))
        if args.save_tokenizer:
            tokenizer.save_pretrained(out.files_in(args.save_tokenizer))
    print(f"{stats!r}\nwrote {args.output}")
    return 0


def add_parser(sub) -> None:
    """The ``stats`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    stats = subparser(sub, "stats", "texts, a dataset or token arrays -> a statistics file",
                      "tl-leadterms stats corpus.txt -o stats.safetensors --tokenizer word:3000 "
                      "--n-ctx 200 --save-tokenizer tokenizer")  # fmt: skip
    stats.add_argument(
        "inputs",
        nargs="+",
        help="UTF-8 text files (documents split by blank lines), .pt/.npy token arrays "
        "[n, T+1], dataset folders (Dataset.save_to_disk) or hub dataset names",
    )
    stats.add_argument("-o", "--output", required=True,
                       help="output .safetensors path (missing folders are created)")  # fmt: skip
    stats.add_argument(
        "--tokenizer",
        help="word:N, bpe:N (trained on the texts), a local folder or a hub name "
        "(default for texts: word:3000)",
    )
    stats.add_argument(
        "--d-vocab",
        type=positive_int_arg,
        help="vocabulary size for token ids (default: tokenizer's)",
    )
    stats.add_argument(
        "--n-ctx",
        type=positive_int_arg,
        help="window length T (default 128; arrays: their width - 1)",
    )
    stats.add_argument("--mode", choices=["chunk", "truncate"], default="chunk",
                       help="chunk: concatenate the documents and cut consecutive windows of T + 1 "
                       "tokens; truncate: each document's first T + 1 tokens (shorter ones "
                       "skipped)")  # fmt: skip
    stats.add_argument("--max-windows", type=positive_int_arg, help="use at most this many windows")
    stats.add_argument("--keep", type=positive_int_arg, help="keep the k most frequent tokens")
    stats.add_argument(
        "--dtype",
        choices=["float64", "float32"],
        default="float64",
        help="dtype of the statistics (float32: half the memory and file; recorded in the file)",
    )
    stats.add_argument(
        "--accumulate-dtype",
        choices=["float64", "float32"],
        help="dtype of the sums (default float64; float32 saves memory, loses digits)",
    )
    stats.add_argument(
        "--only",
        nargs="+",
        choices=["B_bar", "Phi_bar", "G_bar", "Q_bar", "Delta"],
        help="compute only these (B_bar Phi_bar: one pass, no Ḡ/Q̄/Δ; default: all)",
    )
    stats.add_argument(
        "--no-memory-check", action="store_true", help="do not refuse a plan above free memory"
    )
    stats.add_argument(
        "--blocks",
        type=positive_int_arg,
        metavar="B",
        help="keep the statistics of B contiguous blocks of windows (for sweep --ci bootstrap "
        "intervals; every command reads such a file, the others as the whole corpus)",
    )
    stats.add_argument(
        "--eos-id",
        type=int,
        metavar="ID",
        help="with --blocks: cut the blocks where documents end, ID being the token that ends "
        "each document (e.g. the tokenizer's end-of-text id); default: equal blocks",
    )
    stats.add_argument("--text-column", default="text", help="text column of a dataset")
    stats.add_argument("--split", default="train", help="split of a dataset")
    stats.add_argument("--save-tokenizer", metavar="FOLDER",
                       help="folder to save the tokenizer to (the file records it: top and "
                       "report find it there)")  # fmt: skip
    stats.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS|auto|local:N",
        help="run on Ray, one task per input file: a cluster address, auto, or local[:N CPUs]",
    )
    add_common(stats, device=False)
    stats.set_defaults(func=cmd_stats)
