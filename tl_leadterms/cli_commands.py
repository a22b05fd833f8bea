"""The ``tl-leadterms`` subcommands stats, top, decompose, sweep and report, and their loaders.

:mod:`tl_leadterms.cli` builds the parser and runs ``demo``. Every user mistake becomes a
:class:`~tl_leadterms.errors.LeadTermsError` (exit code 2, one line on stderr).
"""

import argparse
import json
import math
import os
from pathlib import Path
from typing import Any

from tl_leadterms import atomic
from tl_leadterms.cli_inputs import ArrayWindows, check_output, open_token_array
from tl_leadterms.errors import LeadTermsError

_TOKEN_SUFFIXES = (".pt", ".npy")


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
            f"cannot load tokenizer {spec!r} ({_first_line(err)}); pass a local tokenizer folder, "
            "a cached hub name, or word:N / bpe:N to train one on the corpus."
        ) from err


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][:200] if lines else ''}"


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
            f"cannot load model {spec!r} ({_first_line(err)}); check the checkpoint folder "
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


# -- stats inputs ---------------------------------------------------------------------------
def _dataset(name: str, args: argparse.Namespace):
    import datasets

    if Path(name).is_dir():
        try:
            ds = datasets.load_from_disk(name)
        except (FileNotFoundError, ValueError) as err:
            raise LeadTermsError(
                f"{name!r} is a folder but not a dataset saved with Dataset.save_to_disk "
                f"({_first_line(err)})"
            ) from err
    else:
        try:
            ds = datasets.load_dataset(name, split=args.split)
        except Exception as err:  # hub, network and builder errors come in many types
            raise LeadTermsError(
                f"no such file or folder {name!r}, and loading it as a hub dataset failed "
                f"({_first_line(err)}); offline, save the dataset with Dataset.save_to_disk "
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
        if path.is_file() and path.suffix in _TOKEN_SUFFIXES:
            parts["windows"].append(open_token_array(path))
        elif path.is_file():
            parts["texts"].extend(read_corpus(path))  # documents are separated by blank lines
        elif path.is_dir():
            kind, docs = _dataset(name, args)
            parts[kind].extend(docs)
        elif path.suffix in _TOKEN_SUFFIXES:
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
        p for p in args.inputs if Path(p).suffix not in (*_TOKEN_SUFFIXES, ".parquet", ".arrow")
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
    options["offload"] = Path(args.output).resolve().parent
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
    stats.save(args.output)
    if args.save_tokenizer:
        tokenizer.save_pretrained(args.save_tokenizer)
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
    table in row blocks (:func:`~tl_leadterms.stats.io.scan_table`), never the whole table."""
    from tl_leadterms.stats.io import scan_table
    from tl_leadterms.stats.neighbours import RowScorer, best, no_associations

    positions = [stats.vocab.position(stats.token_id_of(t, tokenizer)) for t in tokens]
    scorer = RowScorer(stats.k, positions, "raw", symmetric_gram=False)
    scan_table(path, key, scorer.update)
    lines = []
    for token, i in zip(tokens, positions, strict=True):
        row = scorer.raw(i)
        note = no_associations(token, float(stats.unigram_counts[i]), row)
        if note:
            lines.append(note)
            continue
        found = []
        for score, j in best(row, k):
            tid = stats.vocab.token_id(j)
            found.append(
                f"{tokenizer.decode([tid]) if tokenizer is not None else tid} ({score:.3g})"
            )
        lines.append(", ".join(found))
    return lines


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
