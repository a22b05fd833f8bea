"""``tl-leadterms decompose``: a checkpoint and statistics -> the decompose table (text, JSON or
CSV)."""

import argparse

from tl_leadterms.cli.inputs import (
    add_common,
    add_run,
    add_uncertainty,
    check_output,
    open_model,
    read_scored_stats,
    run_of,
    uncertainty_of,
)
from tl_leadterms.cli.output import emit_text, output_format, to_json

__all__ = ["add_parser", "cmd_decompose"]


def cmd_decompose(args: argparse.Namespace) -> int:
    from tl_leadterms.adapters.view import model_view
    from tl_leadterms.analyses.decompose import decompose
    from tl_leadterms.checks import check_vocab
    from tl_leadterms.sweeps.analyses import full_stats

    check_output(args.output, "-o")
    uncertainty = uncertainty_of(args)
    stats = read_scored_stats(args.stats, args.ci)  # first: the cheaper file to find missing
    model = open_model(args.checkpoint, args.device)
    view = model_view(model, caller="tl-leadterms decompose")
    check_vocab(
        full_stats(stats),
        d_vocab=view.d_vocab,
        tokenizer=view.tokenizer,
        what=f"checkpoint {args.checkpoint!r}",
    )
    d = decompose(model, stats, schedule=run_of(args), layers=args.layers,
                  per_head=not args.per_layer, uncertainty=uncertainty,
                  progress=not args.quiet)  # fmt: skip
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
    add_uncertainty(dec)
    add_common(dec)
    dec.set_defaults(func=cmd_decompose)
