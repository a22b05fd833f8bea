"""``tl-leadterms top``: the tokens most associated with given tokens, read from a statistics
file (dense tables are scanned in row blocks, never read whole; TransformerLens is not
imported)."""

import argparse

from tl_leadterms.cli.inputs import (
    is_block_file,
    positive_int_arg,
    read_stats,
    tokenizer_from_spec,
)
from tl_leadterms.errors import LeadTermsError

__all__ = ["add_parser", "cmd_top"]

_STREAMED = ("Phi_bar", "G_bar", "Q_bar")  # dense tables: ``top`` reads their rows in blocks


def cmd_top(args: argparse.Namespace) -> int:
    from tl_leadterms.stats.corpus import ALIASES, MATRICES

    key = ALIASES.get(args.matrix, args.matrix)
    if key not in MATRICES:
        raise LeadTermsError(
            f"unknown --matrix {args.matrix!r}; choose one of {sorted([*MATRICES, *ALIASES])}"
        )
    tokenizer = tokenizer_from_spec(args.tokenizer, None) if args.tokenizer else None
    stats = read_stats(
        args.stats,
        tokenizer,
        want=("B_bar",) if key in _STREAMED else (key,),  # the sparse counts (and kept ids)
        check_vocab=not args.allow_vocab_mismatch,
    )
    tokens = [int(w) if w.isdigit() and tokenizer is None else w for w in args.tokens]
    if key in _STREAMED and not is_block_file(args.stats):  # a block file's are in memory
        lines = _top_streamed(args.stats, key, stats, tokens, args.k, tokenizer)
    else:
        lines = [_top_line(stats.top(key, token, n=args.k, tokenizer=tokenizer))
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
    from tl_leadterms.stats.neighbours import RowScorer, no_associations

    positions = [stats.vocab.position(stats.token_id_of(t, tokenizer)) for t in tokens]
    scorer = RowScorer(stats.k, positions, "raw", symmetric_gram=False)
    scan_table(path, key, scorer.update)
    lines = []
    for token, i in zip(tokens, positions, strict=True):
        row = scorer.raw(i)
        note = stats.degenerate_note(key) or no_associations(
            token, float(stats.unigram_counts[i]), row
        )
        lines.append(note or _top_line(stats.ranked(row, n=k, tokenizer=tokenizer)))
    return lines


def add_parser(sub) -> None:
    """The ``top`` subcommand's arguments."""
    top = sub.add_parser("top", help="the tokens most associated with given tokens")
    top.add_argument("stats", help="a statistics file")
    top.add_argument("tokens", nargs="+", help="tokens (strings with --tokenizer, else ids)")
    top.add_argument("--matrix", default="bigram", help="bigram, interchangeability, context, ...")
    top.add_argument("--tokenizer", help="tokenizer folder or name")
    top.add_argument(
        "-n", "-k", dest="k", type=positive_int_arg, default=10, help="how many tokens to list"
    )
    top.add_argument(
        "--allow-vocab-mismatch",
        action="store_true",
        help="use a tokenizer other than the statistics' (experts: the hash check is skipped)",
    )
    top.set_defaults(func=cmd_top)
