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
    tl-leadterms sweep series_dir s.safetensors --null 99 --seed 0   # + null_mean, z, p columns
    tl-leadterms sweep series_dir b.safetensors --ci 0.95   # block statistics: + lo, hi columns
    tl-leadterms report s.safetensors --model ckpt_dir --text "..." --words red fish -o r.html

Every subcommand has ``--help``. Exit codes: 0 success, 2 bad arguments or input.
"""

import argparse
import sys
import time
from pathlib import Path

from tl_leadterms import cli_commands as commands
from tl_leadterms.cli_inputs import check_device, positive_int_arg
from tl_leadterms.errors import LeadTermsError

DEMO_WORDS = {
    "bigram": ["red", "shiny", "fluffy"],
    "interchangeability": ["he", "happy", "lily"],
    "context": ["fish", "cow", "rocket"],
}
_HEADINGS = {
    "bigram": "Bigram B̄: most likely next tokens",
    "interchangeability": "Interchangeability Σ_B̄: tokens preceded by the same tokens",
    "context": "Context Φ̄: tokens that appear earlier in the same window",
}


#: the scoring of the demo's association lists (and of its report): cosine reads best here
DEMO_SCORING = "cosine"


def _print_associations(stats, tokenizer, words: dict[str, list[str]], k: int = 5) -> None:
    print(
        f"\nAssociation lists, {DEMO_SCORING} scoring (row/column normalised: a neighbour ranks "
        "by the share of its own mass it has with the word, not by its frequency; special "
        "tokens left out)"
    )
    for kind, tokens in words.items():
        print(f"\n{_HEADINGS[kind]}")
        for word in tokens:
            try:
                neighbours = stats.top(kind, word, k=k, tokenizer=tokenizer,
                                       scoring=DEMO_SCORING, exclude="special")  # fmt: skip
            except LeadTermsError as err:
                print(f"  {word:>8s}: ({err})")
                continue
            listed = ", ".join(str(n.token) for n in neighbours)
            print(f"  {word:>8s} -> {listed}")


def _sample_text(stories: list[str], words: list[str], max_words: int = 24) -> str:
    """A short sentence of the corpus holding the most of ``words`` (for the attention views)."""
    wanted = set(words)
    best, best_count = stories[0][:120], 0
    for story in stories[:200]:
        for sentence in story.replace("\n", " ").split(". "):
            tokens = sentence.lower().replace(",", " ").split()
            count = len(wanted.intersection(tokens))
            if count > best_count and len(tokens) <= max_words:
                best, best_count = sentence.strip().rstrip(".") + ".", count
    return best


def cmd_demo(args: argparse.Namespace) -> int:
    from tl_leadterms import corpus_stats, make_windows
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    print(f"Generating {args.stories} stories (seed {args.seed}) ...")
    stories = generate_stories(args.stories, seed=args.seed)
    tokenizer = train_word_tokenizer(stories, args.vocab)
    windows = make_windows(stories, args.n_ctx, tokenizer=tokenizer)
    n_words = sum(len(s.split()) for s in stories)
    print(
        f"  {sum(map(len, stories)) / 1e6:.1f} MB of text, {n_words:,} words; word-level "
        f"vocabulary {len(tokenizer)}; {windows.shape[0]:,} windows of T+1 = {args.n_ctx + 1}"
    )
    stats = corpus_stats(windows, len(tokenizer), tokenizer=tokenizer, progress=not args.quiet)
    print(f"  {stats!r}")
    _print_associations(stats, tokenizer, DEMO_WORDS)
    path = out / "demo_stats.safetensors"
    stats.save(path)
    tokenizer.save_pretrained(out / "tokenizer")
    print(f"\nSaved {path} and {out / 'tokenizer'} ({time.perf_counter() - start:.1f} s)")
    trained = _demo_training(args, stories, tokenizer) if args.train_steps else {}
    if trained:
        words = [w for ws in DEMO_WORDS.values() for w in ws]
        trained["text"] = _sample_text(stories, words)
        _print_agreement(trained, tokenizer, args.train_lr, args.train_steps)
    if not args.no_report:
        _demo_report(args, stats, tokenizer, stories, trained)
    return 0


def _demo_training(args: argparse.Namespace, stories: list[str], tokenizer) -> dict:
    """Train the paper's model on the same corpus: decompose it at step ``--train-steps``
    (where the leading terms hold) and keep training to ``--attention-steps``, where its
    attention is visibly non-uniform, for the attention views."""
    import copy
    import math

    from tl_leadterms import block_stats, decompose, head_atlas, make_windows, paper_model, train

    start = time.perf_counter()
    n_ctx = args.train_n_ctx
    windows = make_windows(stories, n_ctx, tokenizer=tokenizer)[: args.train_windows]
    # statistics kept per block of windows: the whole corpus for training, resamples for the CIs
    blocks = block_stats(windows, len(tokenizer), blocks=8, tokenizer=tokenizer, progress=False)
    stats = blocks.full()
    lr, steps = args.train_lr, args.train_steps
    total = max(steps, args.attention_steps)
    print(
        f"\nTraining the paper's 3-layer model (|V| = {len(tokenizer)}, T = {n_ctx}) on "
        f"{windows.shape[0]} windows: full-batch GD, η = {lr}, from zero; decomposed at step "
        f"{steps} (s·η = {lr * steps:g}), attention shown at step {total} ..."
    )
    model = paper_model(len(tokenizer), n_ctx, 3)
    early: dict = {}

    def keep(step: int, current, loss: float) -> None:
        if step == steps:
            early["model"] = copy.deepcopy(current)

    history = train(model, windows, lr=lr, steps=total, track=stats, every=math.gcd(steps, 8),
                    progress=not args.quiet, callback=keep)  # fmt: skip
    print(f"  {history!r}")
    early_model = early["model"]
    # each score beside its permutation null (99 relabellings) and a 95% bootstrap interval
    decomposition = decompose(early_model, blocks, lr=lr, steps=steps, null=99, ci=0.95)
    print(f"\n{decomposition}")
    atlas = head_atlas(early_model, blocks, windows[:8, :n_ctx], null=49, lr=lr, steps=steps)
    print(f"\n{atlas}")
    print(f"  ({time.perf_counter() - start:.1f} s)")
    later = model if total > steps else None
    return {"model": early_model, "later": later, "later_step": total if later else None,
            "stats": stats, "history": history, "decomposition": decomposition,
            "atlas": atlas}  # fmt: skip


def _print_agreement(trained: dict, tokenizer, lr: float, steps: int) -> None:
    """Each head's attention on the sample text against the prediction, and how far both are
    from uniform attention (total variation)."""
    import torch

    from tl_leadterms import attention_agreement, predict_attention
    from tl_leadterms.report.sections import tv_from_uniform

    later = trained["later"]
    model = trained["model"] if later is None else later
    stats, text = trained["stats"], trained["text"]
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)[: stats.n_ctx]])
    _, cache = model.run_with_cache(ids)
    run = {"lr": lr, "steps": steps} if later is None else {}  # later: c fitted per head
    rows = attention_agreement(model, stats, ids, cache=cache, progress=False, **run).rows
    how = f"s·η = {lr * steps:g}" if later is None else "scale c fitted per head"
    step = steps if later is None else trained["later_step"]
    print(f"\nAttention at step {step} on {text!r} against the leading-term prediction ({how}):")
    for r in rows:
        actual = tv_from_uniform(cache["pattern", r["layer"]][0, r["head"]])
        predicted = tv_from_uniform(predict_attention(stats, ids, scale=r["scale"])[0])
        print(
            f"  {r['label']}: rank correlation {r['rank_correlation']:.3f}, JS divergence "
            f"{r['js_divergence']:.2e}, c = {r['scale']:.3g}; largest distance from uniform "
            f"(total variation): head {actual:.3f}, predicted {predicted:.3f}"
        )


def _demo_report(args, stats, tokenizer, stories: list[str], trained: dict) -> None:
    """report.html: the decompose table, association lists, attention views, history figure."""
    from tl_leadterms.report import report

    start = time.perf_counter()
    text = trained.get("text")
    path = report(
        Path(args.out) / "report.html",
        stats=trained.get("stats", stats),
        association_stats=stats,
        model=trained.get("model"),
        tokenizer=tokenizer,
        text=text,
        history=trained.get("history"),
        decomposition=trained.get("decomposition"),
        head_atlas=trained.get("atlas"),
        words=DEMO_WORDS,
        title="tl_leadterms demo: the embedded stories corpus",
        lr=args.train_lr if trained else None,
        steps=args.train_steps if trained else None,
        associations=DEMO_SCORING,
        attention_model=trained.get("later"),
        attention_step=trained.get("later_step"),
        progress=not args.quiet,
    )
    size = path.stat().st_size / 1e6
    print(
        f"\nWrote {path} ({size:.1f} MB, {time.perf_counter() - start:.1f} s): open it in a browser"
    )


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tl-leadterms",
        description="Corpus statistics and gradient leading terms of transformer weights.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="embedded corpus -> statistics -> a short training run -> report.html"
    )
    demo.add_argument("--stories", type=_positive, default=4000, help="stories to generate")
    demo.add_argument("--vocab", type=_positive, default=2000, help="word-level vocabulary size")
    demo.add_argument("--n-ctx", type=_positive, default=128, help="window length T")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default="out", help="folder for the outputs")
    demo.add_argument(
        "--train-steps",
        type=int,
        default=24,
        help="GD steps before the decomposition (0: no training); s·η = 24 keeps "
        "every cosine with its leading term above 0.99 on this corpus, 48 does not",
    )
    demo.add_argument(
        "--attention-steps",
        type=int,
        default=128,
        help="GD steps of the checkpoint whose attention the report shows (the run goes on "
        "after the decomposition; at s·η = 24 attention is within 1e-4 of uniform, by 128 it "
        "is visibly not); at most --train-steps: the decomposed model",
    )
    demo.add_argument("--train-lr", type=float, default=1.0, help="learning rate η")
    demo.add_argument(
        "--train-n-ctx", type=_positive, default=32, help="window length for training"
    )
    demo.add_argument("--train-windows", type=_positive, default=64, help="training windows")
    demo.add_argument("--no-report", action="store_true", help="do not write report.html")
    _add_common(demo, device=False)
    demo.set_defaults(func=cmd_demo)

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
    stats.set_defaults(func=commands.cmd_stats)

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
    top.set_defaults(func=commands.cmd_top)

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
        help="a permutation null of R draws per score: columns null_mean, null_sd, z, p",
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
    return parser


_positive = positive_int_arg


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
