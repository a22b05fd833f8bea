"""``tl-leadterms decompose``: a checkpoint and statistics -> the decompose table (text, JSON or
CSV)."""

import argparse

from tl_leadterms.cli.inputs import add_common, add_run, check_output, open_model, read_stats
from tl_leadterms.cli.output import emit_text, output_format, to_json

__all__ = ["add_parser", "cmd_decompose"]


def cmd_decompose(args: argparse.Namespace) -> int:
    from tl_leadterms.adapters.view import model_view
    from tl_leadterms.analyses.decompose.compute import decompose
    from tl_leadterms.checks import check_vocab

    check_output(args.output, "-o")
    stats = read_stats(args.stats)  # first: the cheaper file to find missing
    model = open_model(args.checkpoint, args.device)
    view = model_view(model, caller="tl-leadterms decompose")
    check_vocab(
        stats,
        d_vocab=view.d_vocab,
        tokenizer=view.tokenizer,
        what=f"checkpoint {args.checkpoint!r}",
    )
    d = decompose(
        model, stats, lr=args.lr, steps=args.steps, layers=args.layers, per_head=not args.per_layer
    )
    fmt = output_format(args.format, args.output)
    if fmt == "json":
        emit_text(to_json(d.to_dict()), args.output)
    elif fmt == "csv":
        emit_text(d.to_pandas().to_csv(index=False), args.output)
    else:
        emit_text(repr(d), args.output)
    return 0


def add_parser(sub) -> None:
    """The ``decompose`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    dec = subparser(
        sub,
        "decompose",
        "a checkpoint + statistics -> the decompose table",
        "tl-leadterms decompose ckpt_dir stats.safetensors --csv -o table.csv",
    )
    dec.add_argument(
        "checkpoint", help="a Hugging Face folder (any architecture TL converts) or a model name"
    )
    dec.add_argument("stats", help="a statistics file over the model's vocabulary")
    fmt = dec.add_mutually_exclusive_group()
    fmt.add_argument(
        "--format", choices=["text", "json", "csv"], help="default: from -o, else text"
    )
    fmt.add_argument("--json", dest="format", action="store_const", const="json")
    fmt.add_argument("--csv", dest="format", action="store_const", const="csv")
    dec.add_argument("-o", "--output", help="file to write (default: stdout)")
    dec.add_argument("--per-layer", action="store_true", help="one row per layer, not per head")
    add_run(dec)
    add_common(dec)
    dec.set_defaults(func=cmd_decompose)
