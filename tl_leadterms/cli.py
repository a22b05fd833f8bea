"""The ``tl-leadterms`` command.

    tl-leadterms demo                       # embedded corpus -> statistics -> association lists
                                            # -> a short training run -> decompose table
    tl-leadterms stats corpus.txt -o s.safetensors --tokenizer word:3000 --n-ctx 200
    tl-leadterms top s.safetensors red --tokenizer tok_dir

Every subcommand has ``--help``. Exit codes: 0 success, 2 bad arguments or input.
"""

import argparse
import sys
import time
from pathlib import Path

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


def _print_associations(stats, tokenizer, words: dict[str, list[str]], k: int = 5) -> None:
    for kind, tokens in words.items():
        print(f"\n{_HEADINGS[kind]}")
        for word in tokens:
            try:
                neighbours = stats.top(kind, word, k=k, tokenizer=tokenizer)
            except LeadTermsError as err:
                print(f"  {word:>8s}: ({err})")
                continue
            listed = ", ".join(str(n.token) for n in neighbours)
            print(f"  {word:>8s} -> {listed}")


def _load_tokenizer(spec: str, texts: list[str] | None):
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
    except (OSError, ValueError) as err:
        raise LeadTermsError(
            f"cannot load tokenizer {spec!r} ({err}); pass a local tokenizer folder, a cached hub "
            "name, or word:N / bpe:N to train one on the corpus."
        ) from err


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
    if args.train_steps:
        _demo_training(args, stories, tokenizer)
    return 0


def _demo_training(args: argparse.Namespace, stories: list[str], tokenizer) -> None:
    """Train the paper's model briefly on the same corpus and print what its weights hold."""
    from tl_leadterms import corpus_stats, decompose, make_windows, paper_model, train

    start = time.perf_counter()
    n_ctx = args.train_n_ctx
    windows = make_windows(stories, n_ctx, tokenizer=tokenizer)[: args.train_windows]
    stats = corpus_stats(windows, len(tokenizer), tokenizer=tokenizer, progress=False)
    lr, steps = args.train_lr, args.train_steps
    print(
        f"\nTraining the paper's 3-layer model (|V| = {len(tokenizer)}, T = {n_ctx}) on "
        f"{windows.shape[0]} windows: full-batch GD, η = {lr}, {steps} steps, from zero ..."
    )
    model = paper_model(len(tokenizer), n_ctx, 3)
    history = train(model, windows, lr=lr, steps=steps, track=stats, progress=not args.quiet)
    print(f"  {history!r}")
    print(f"\n{decompose(model, stats, lr=lr, steps=steps)}")
    print(f"  ({time.perf_counter() - start:.1f} s)")


def cmd_stats(args: argparse.Namespace) -> int:
    from tl_leadterms import corpus_stats, make_windows
    from tl_leadterms.data import read_corpus

    texts = []
    for name in args.inputs:
        if not Path(name).is_file():
            raise LeadTermsError(f"no such text file: {name}")
        texts.extend(read_corpus(name))  # documents are separated by blank lines
    tokenizer = _load_tokenizer(args.tokenizer, texts)
    windows = make_windows(texts, args.n_ctx, mode=args.mode, tokenizer=tokenizer)
    vocab = args.keep if args.keep else None
    stats = corpus_stats(
        windows, len(tokenizer), vocab=vocab, tokenizer=tokenizer, progress=not args.quiet
    )
    stats.save(args.output)
    if args.save_tokenizer:
        tokenizer.save_pretrained(args.save_tokenizer)
    print(f"{stats!r}\nwrote {args.output}")
    return 0


def cmd_top(args: argparse.Namespace) -> int:
    from tl_leadterms import CorpusStats

    tokenizer = _load_tokenizer(args.tokenizer, None) if args.tokenizer else None
    stats = CorpusStats.load(args.stats, tokenizer=tokenizer)
    for word in args.tokens:
        token = int(word) if word.isdigit() and tokenizer is None else word
        neighbours = stats.top(args.matrix, token, k=args.k, tokenizer=tokenizer)
        print(f"{word}: " + ", ".join(f"{n.token} ({n.score:.3g})" for n in neighbours))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tl-leadterms",
        description="Corpus statistics and gradient leading terms of transformer weights.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="embedded corpus -> statistics -> association lists")
    demo.add_argument("--stories", type=int, default=4000, help="stories to generate")
    demo.add_argument("--vocab", type=int, default=2000, help="word-level vocabulary size")
    demo.add_argument("--n-ctx", type=int, default=128, help="window length T")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--out", default="out", help="folder for the outputs")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.add_argument("--train-steps", type=int, default=6, help="GD steps (0: no training)")
    demo.add_argument("--train-lr", type=float, default=1.0, help="learning rate η")
    demo.add_argument("--train-n-ctx", type=int, default=32, help="window length for training")
    demo.add_argument("--train-windows", type=int, default=256, help="training windows")
    demo.set_defaults(func=cmd_demo)

    stats = sub.add_parser("stats", help="text files -> a statistics file")
    stats.add_argument("inputs", nargs="+", help="UTF-8 text files; documents split by blank lines")
    stats.add_argument("-o", "--output", required=True, help="output .safetensors path")
    stats.add_argument(
        "--tokenizer", default="word:3000", help="word:N, bpe:N, a local folder or a hub name"
    )
    stats.add_argument("--n-ctx", type=int, default=128, help="window length T")
    stats.add_argument("--mode", choices=["chunk", "truncate"], default="chunk")
    stats.add_argument("--keep", type=int, default=0, help="keep the k most frequent tokens")
    stats.add_argument("--save-tokenizer", help="folder to save a trained tokenizer to")
    stats.add_argument("--quiet", action="store_true", help="no progress bars")
    stats.set_defaults(func=cmd_stats)

    top = sub.add_parser("top", help="the tokens most associated with given tokens")
    top.add_argument("stats", help="a statistics file")
    top.add_argument("tokens", nargs="+", help="tokens (strings with --tokenizer, else ids)")
    top.add_argument("--matrix", default="bigram", help="bigram, interchangeability, context, ...")
    top.add_argument("--tokenizer", help="tokenizer folder or name")
    top.add_argument("-k", type=int, default=10)
    top.set_defaults(func=cmd_top)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LeadTermsError as err:
        print(f"tl-leadterms {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
