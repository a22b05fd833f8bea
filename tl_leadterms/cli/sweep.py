"""``tl-leadterms sweep``: checkpoints and statistics -> a table over training (resumable
results, nulls, bootstrap intervals, one Ray task per checkpoint)."""

import argparse
from pathlib import Path
from typing import Any

from tl_leadterms.cli.inputs import (
    add_common,
    add_uncertainty,
    check_output,
    looks_like_path,
    read_scored_stats,
    uncertainty_of,
)
from tl_leadterms.cli.output import emit_text, to_json
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.registry import sweepable

__all__ = ["add_parser", "cmd_sweep"]


def cmd_sweep(args: argparse.Namespace) -> int:
    from tl_leadterms.sweeps.results import check_results_path
    from tl_leadterms.sweeps.run import sweep

    if args.out and Path(args.out).suffix.lower() not in (".csv", ".json"):
        raise LeadTermsError(f"--out {args.out!r} must end in .csv or .json")
    check_output(args.out, "--out")
    check_output(args.results, "--results")
    if args.results:
        check_results_path(args.results)  # a FIFO or device: refused before any work
    uncertainty = uncertainty_of(args)
    stats = read_scored_stats(args.stats, args.ci)
    names = args.checkpoints
    if len(names) == 1 and not Path(names[0]).exists():
        if looks_like_path(names[0]) or args.steps is None:
            raise LeadTermsError(
                f"no checkpoint folder at {names[0]!r}; pass a series folder, checkpoint folders "
                "or a hub name with --checkpoint-steps (e.g. pythia-70m --checkpoint-steps 0 1 2)"
            )
        checkpoints: Any = names[0]
    else:
        missing = [n for n in names if not Path(n).is_dir()]
        if missing:
            raise LeadTermsError(f"no checkpoint folder at {missing}; pass existing folders")
        checkpoints = names[0] if len(names) == 1 else names
    executor: Any = "local"
    if getattr(args, "ray", None) is not None:
        from tl_leadterms.distributed import parse_target
        from tl_leadterms.sweeps import RayExecutor

        address, num_cpus = parse_target(args.ray)
        executor = RayExecutor(address=address, num_cpus=num_cpus)
    table = sweep(
        checkpoints,
        stats,
        analyses=args.analyses,
        checkpoint_steps=args.steps,
        results=args.results,
        layers=args.layers,
        per_head=args.per_head,
        uncertainty=uncertainty,
        device=args.device,
        progress=not args.quiet,
        executor=executor,
        **({} if args.centre is None else {"centre": args.centre}),
    )
    if args.out:  # on disk first: a closed stdout pipe cannot lose it
        if Path(args.out).suffix.lower() == ".csv":
            emit_text(table.to_pandas().to_csv(index=False), args.out, announce=False)
        else:
            emit_text(to_json(table.to_dict()), args.out, announce=False)
    print(repr(table))
    if args.out:
        print(f"wrote {args.out}")
    return 0


def add_parser(sub) -> None:
    """The ``sweep`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    sw = subparser(sub, "sweep", "checkpoints + statistics -> a table over training",
                   "tl-leadterms sweep series_dir stats.safetensors --results r.jsonl --out "
                   "table.csv")  # fmt: skip
    sw.add_argument(
        "checkpoints",
        nargs="+",
        help="a series folder, checkpoint folders, or a hub name with --steps",
    )
    sw.add_argument("stats", help="a statistics file over the models' vocabulary")
    sw.add_argument(
        "--checkpoint-steps",
        "--steps",
        dest="steps",
        type=int,
        nargs="+",
        help="checkpoint steps (a hub name needs them)",
    )
    sw.add_argument("--results", help="a .jsonl file: finished checkpoints are kept, reruns resume")
    sw.add_argument("--out", help="write the table to a .csv or .json file")
    sw.add_argument(
        "--analyses",
        nargs="+",
        default=["decompose"],
        choices=sweepable(tokens=False),
        help="default: decompose",
    )
    sw.add_argument("--layers", type=int, nargs="+", help="layers to analyse (default: all)")
    sw.add_argument("--per-head", action="store_true", help="scores per head as well")
    sw.add_argument(
        "--centre",
        choices=["features", "tokens"],
        help="covariance: 'tokens' double-centres both covariances (the token-specific "
        "score; the paper's is then the raw column); default features",
    )
    add_uncertainty(sw)
    sw.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS|auto|local:N",
        help="one Ray task per checkpoint (a GPU each with --device cuda, else a CPU): a "
        "cluster address, auto, or local[:N CPUs]",
    )
    add_common(sw)
    sw.set_defaults(func=cmd_sweep)
