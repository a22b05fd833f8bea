"""``tl-leadterms report``: statistics (and a model) -> one self-contained report.html."""

import argparse
from pathlib import Path

from tl_leadterms.cli.inputs import (
    add_common,
    check_output,
    open_model,
    read_stats,
    run_of,
    tokenizer_from_spec,
)
from tl_leadterms.cli.output import human_size
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import parse_json

__all__ = ["add_parser", "cmd_report"]


def cmd_report(args: argparse.Namespace) -> int:
    from tl_leadterms.reports import report, statistics_needed

    check_output(args.output, "-o")
    if not Path(args.stats).is_file():  # fail before loading a model
        raise LeadTermsError(
            f"no statistics file at {args.stats}; write one with tl-leadterms stats"
        )
    text = args.text
    if args.text_file:
        if not Path(args.text_file).is_file():
            raise LeadTermsError(f"no such text file: {args.text_file}")
        text = Path(args.text_file).read_text(encoding="utf-8")
    if not (args.model or args.words or args.sweep_results):
        raise LeadTermsError(
            "nothing to report: pass --model (its decomposition, and with --text its attention), "
            "--words (association lists) or --sweep-results"
        )
    tokenizer = tokenizer_from_spec(args.tokenizer, None) if args.tokenizer else None
    model = open_model(args.model, args.device) if args.model else None
    if tokenizer is None and model is not None:
        from tl_leadterms.adapters.view import model_view

        tokenizer = model_view(model, caller="tl-leadterms report").tokenizer
    needed = statistics_needed(model=model is not None, words=bool(args.words))
    stats = read_stats(args.stats, tokenizer, want=needed)  # only the tables it shows
    results = _results(args, stats, model, tokenizer, text)
    path = report(args.output, *results, stats=stats, model=model, title=args.title,
                  progress=not args.quiet)  # fmt: skip
    print(f"wrote {path} ({human_size(path.stat().st_size)})")
    return 0


def _results(args: argparse.Namespace, stats, model, tokenizer, text) -> list:
    """What the report shows, computed once each: the model's decomposition and its attention
    on the text, the words' association lists, the sweep table."""
    from tl_leadterms.adapters.view import model_view
    from tl_leadterms.analyses.attention import ATTENTION_VIEWS, plot_attention
    from tl_leadterms.analyses.decompose import decompose
    from tl_leadterms.explorer import associations

    results: list = []
    run = run_of(args)
    if model is not None:
        results.append(decompose(model, stats, schedule=run, per_head=True,
                                 progress=not args.quiet))  # fmt: skip
        view = model_view(model, caller="tl-leadterms report")
        many = view.n_layers * view.n_heads > ATTENTION_VIEWS
        if text is not None:
            results.append(plot_attention(model, stats, text, tokenizer=tokenizer, schedule=run,
                                          heads=ATTENTION_VIEWS if many else None))  # fmt: skip
    elif text is not None:
        raise LeadTermsError("--text shows the attention of a model: add --model")
    if args.words:
        results.append(associations(stats, args.words, text=text, tokenizer=tokenizer))
    if args.sweep_results:
        results.append(_read_sweep(args.sweep_results))
    return results


def _read_sweep(path: str):
    from tl_leadterms.sweeps.table import SweepTable

    if not Path(path).is_file():
        raise LeadTermsError(f"no sweep results file at {path!r} (from sweep --results)")
    records = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = parse_json(line, where=f"line {number} of {path!r}", torn_ok=True)
        if not isinstance(record, dict) or not {"checkpoint", "step", "rows"} <= set(record):
            raise LeadTermsError(f"line {number} of {path!r} is not a sweep record")
        records.append(record)
    return SweepTable.from_records(records, metadata={"results": path})


def add_parser(sub) -> None:
    """The ``report`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    rep = subparser(sub, "report", "statistics (+ a model) -> one self-contained report.html",
                    'tl-leadterms report stats.safetensors --model ckpt_dir --text "Once upon a '
                    'time" --words red fish -o report.html')  # fmt: skip
    rep.add_argument("stats", help="a statistics file")
    rep.add_argument(
        "--model", help="a Hugging Face folder (any architecture TL converts) or a model name"
    )
    rep.add_argument("--text", help="a sample text for the attention views (needs --model)")
    rep.add_argument("--text-file", help="read the sample text from a file")
    rep.add_argument("--words", nargs="+", help="words for the association lists")
    rep.add_argument("--tokenizer", help="tokenizer folder or name (default: the model's)")
    rep.add_argument("--sweep-results", help="a sweep --results .jsonl file to plot")
    rep.add_argument("-o", "--output", default="report.html", help="the HTML file to write")
    rep.add_argument("--title", help="the page title")
    rep.add_argument("--lr", type=float, help="the training run's learning rate, if known")
    rep.add_argument("--steps", type=int, help="the training run's step count, if known")
    add_common(rep)
    rep.set_defaults(func=cmd_report)
