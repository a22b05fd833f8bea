"""The ``tl-leadterms`` command.

    tl-leadterms demo                       # embedded corpus -> statistics -> association lists
                                            # -> a short training run -> decompose table
                                            # -> out/report.html
    tl-leadterms stats corpus.txt -o s.safetensors --tokenizer word:3000 --n-ctx 200
    tl-leadterms stats ids.npy -o s.safetensors --d-vocab 50304 --keep 20000 --dtype float32
    tl-leadterms stats my_dataset_dir -o s.safetensors --tokenizer tok_dir --text-column text
    tl-leadterms stats shards/*.npy -o s.safetensors --d-vocab 50304 --ray auto  # a Ray cluster
    tl-leadterms stats ids.npy -o b.safetensors --d-vocab 50304 --blocks 20  # per block of windows
    tl-leadterms top s.safetensors red --tokenizer tok_dir
    tl-leadterms decompose ckpt_dir s.safetensors [--json|--csv] [-o table.json]
    tl-leadterms sweep series_dir s.safetensors [--results r.jsonl] [--out table.csv]
    tl-leadterms sweep pythia-70m s.safetensors --steps 0 1 2 4    # hub checkpoints
    tl-leadterms sweep series_dir s.safetensors --results r.jsonl --ray auto --device cuda
    tl-leadterms sweep series_dir s.safetensors --null 99 --seed 0   # + excess, null_mean, z, p, q
    tl-leadterms sweep series_dir b.safetensors --ci 0.95   # block statistics: + lo, hi columns
    tl-leadterms report s.safetensors --model ckpt_dir --text "..." --words red fish -o r.html

Every subcommand has ``--help``. Exit codes: 0 success, 2 bad arguments or input.
"""

import argparse
import sys

from tl_leadterms import cli_commands as commands
from tl_leadterms import cli_stats
from tl_leadterms.cli_demo import add_demo_parser
from tl_leadterms.cli_inputs import check_device
from tl_leadterms.cli_inputs import positive_int_arg as _positive
from tl_leadterms.errors import LeadTermsError


def _add_common(p: argparse.ArgumentParser, *, device: bool = True) -> None:
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    if device:
        p.add_argument(
            "--device", default="cpu", type=check_device, help="torch device (default: cpu)"
        )


def _add_run(p: argparse.ArgumentParser) -> None:
    p.add_argument("--lr", type=float, help="the training run's learning rate, if known")
    p.add_argument("--steps", type=int, help="the training run's step count, if known")
    p.add_argument("--layers", type=int, nargs="+", help="layers to analyse (default: all)")


def _add_stats(sub) -> None:
    stats = sub.add_parser("stats", help="texts, a dataset or token arrays -> a statistics file")
    stats.add_argument(
        "inputs",
        nargs="+",
        help="UTF-8 text files (documents split by blank lines), .pt/.npy token arrays "
        "[n, T+1], dataset folders (Dataset.save_to_disk) or hub dataset names",
    )
    stats.add_argument("-o", "--output", required=True, help="output .safetensors path")
    stats.add_argument(
        "--tokenizer",
        help="word:N, bpe:N (trained on the texts), a local folder or a hub name "
        "(default for texts: word:3000)",
    )
    stats.add_argument(
        "--d-vocab", type=_positive, help="vocabulary size for token ids (default: tokenizer's)"
    )
    stats.add_argument(
        "--n-ctx", type=_positive, help="window length T (default 128; arrays: their width - 1)"
    )
    stats.add_argument("--mode", choices=["chunk", "truncate"], default="chunk")
    stats.add_argument("--max-windows", type=_positive, help="use at most this many windows")
    stats.add_argument("--keep", type=_positive, help="keep the k most frequent tokens")
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
        type=_positive,
        metavar="B",
        help="keep the statistics of B contiguous blocks of windows (for sweep --ci bootstrap "
        "intervals; every command reads such a file, the others as the whole corpus)",
    )
    stats.add_argument("--text-column", default="text", help="text column of a dataset")
    stats.add_argument("--split", default="train", help="split of a dataset")
    stats.add_argument("--save-tokenizer", help="folder to save the tokenizer to")
    stats.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS|auto|local:N",
        help="run on Ray, one task per input file: a cluster address, auto, or local[:N CPUs]",
    )
    _add_common(stats, device=False)
    stats.set_defaults(func=cli_stats.cmd_stats)


def _add_top(sub) -> None:
    top = sub.add_parser("top", help="the tokens most associated with given tokens")
    top.add_argument("stats", help="a statistics file")
    top.add_argument("tokens", nargs="+", help="tokens (strings with --tokenizer, else ids)")
    top.add_argument("--matrix", default="bigram", help="bigram, interchangeability, context, ...")
    top.add_argument("--tokenizer", help="tokenizer folder or name")
    top.add_argument("-k", type=_positive, default=10)
    top.add_argument(
        "--allow-vocab-mismatch",
        action="store_true",
        help="use a tokenizer other than the statistics' (experts: the hash check is skipped)",
    )
    top.set_defaults(func=cli_stats.cmd_top)


def _add_decompose(sub) -> None:
    dec = sub.add_parser("decompose", help="a checkpoint + statistics -> the decompose table")
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
    _add_run(dec)
    _add_common(dec)
    dec.set_defaults(func=commands.cmd_decompose)


def _add_sweep(sub) -> None:
    sw = sub.add_parser("sweep", help="checkpoints + statistics -> a table over training")
    sw.add_argument(
        "checkpoints",
        nargs="+",
        help="a series folder, checkpoint folders, or a hub name with --steps",
    )
    sw.add_argument("stats", help="a statistics file over the models' vocabulary")
    sw.add_argument("--steps", type=int, nargs="+", help="checkpoint steps (a hub name needs them)")
    sw.add_argument("--results", help="a .jsonl file: finished checkpoints are kept, reruns resume")
    sw.add_argument("--out", help="write the table to a .csv or .json file")
    sw.add_argument(
        "--analyses",
        nargs="+",
        default=["decompose"],
        choices=["decompose", "covariance"],
        help="default: decompose",
    )
    sw.add_argument("--layers", type=int, nargs="+", help="layers to analyse (default: all)")
    sw.add_argument("--per-head", action="store_true", help="scores per head as well")
    sw.add_argument(
        "--null",
        type=_positive,
        metavar="R",
        help="a permutation null of R draws per score: columns excess (score - null mean, "
        "shown first), null_mean, null_sd, z, p, q (Benjamini-Hochberg)",
    )
    sw.add_argument(
        "--centre",
        choices=["features", "tokens"],
        help="covariance: 'tokens' double-centres both covariances (the token-specific "
        "score; the paper's is then the raw column); default features",
    )
    sw.add_argument(
        "--ci",
        type=float,
        metavar="LEVEL",
        help="a bootstrap interval (columns lo, hi) over the blocks of a block statistics "
        "file (stats --blocks B)",
    )
    sw.add_argument(
        "--bootstrap",
        type=_positive,
        metavar="R",
        help="bootstrap resamples of --ci (default 50)",
    )
    sw.add_argument("--seed", type=int, help="seed of the null's permutations (default 0)")
    sw.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS|auto|local:N",
        help="one Ray task per checkpoint (a GPU each with --device cuda, else a CPU): a "
        "cluster address, auto, or local[:N CPUs]",
    )
    _add_common(sw)
    sw.set_defaults(func=commands.cmd_sweep)


def _add_report(sub) -> None:
    rep = sub.add_parser("report", help="statistics (+ a model) -> one self-contained report.html")
    rep.add_argument("stats", help="a statistics file")
    rep.add_argument(
        "--model", help="a Hugging Face folder (any architecture TL converts) or a model name"
    )
    rep.add_argument("--text", help="a sample text for the attention views (needs --model)")
    rep.add_argument("--text-file", help="read the sample text from a file")
    rep.add_argument("--words", nargs="+", help="words for the association lists")
    rep.add_argument("--tokenizer", help="tokenizer folder or name (default: the model's)")
    rep.add_argument("--sweep-results", help="a sweep --results .jsonl file to plot")
    rep.add_argument("-o", "--output", default="report.html", help="default: report.html")
    rep.add_argument("--title", help="the page title")
    rep.add_argument("--lr", type=float, help="the training run's learning rate, if known")
    rep.add_argument("--steps", type=int, help="the training run's step count, if known")
    _add_common(rep)
    rep.set_defaults(func=commands.cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tl-leadterms",
        description="Corpus statistics and gradient leading terms of transformer weights.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    add_demo_parser(sub)

    _add_stats(sub)
    _add_top(sub)
    _add_decompose(sub)
    _add_sweep(sub)
    _add_report(sub)
    return parser


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``): files were written before printing; stop
    quietly, with Python's own flush at exit pointed at nowhere."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"tl-leadterms {args.command}: interrupted", file=sys.stderr)
        return 130  # temporaries are removed by the atomic writer on the way out
    except BrokenPipeError:
        return _stdout_closed()
    except (LeadTermsError, OSError, UnicodeDecodeError) as err:
        # bad input and unreadable or unwritable files: one line, whatever the message held
        message = " ".join(str(err).split())
        print(f"tl-leadterms {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
