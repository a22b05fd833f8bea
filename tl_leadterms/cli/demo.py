"""``tl-leadterms demo``: the embedded corpus -> statistics -> association lists -> a short
training run (decomposed where the theory holds, attention shown later) -> report.html.

The decomposition is read twice: against the model's own training windows (exact, no
interval: the statistics are the data it learned) and against held-out windows of the same
corpus (an estimate of the distribution-level cosine, with its bootstrap interval)."""

import argparse
import textwrap
import time
from pathlib import Path

from tl_leadterms.cli.inputs import positive_int_arg
from tl_leadterms.cli.output import human_size
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import terminal_text

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

#: the demo's sizes. ``quick`` (the default) keeps everything the demo shows at about half a
#: minute of CPU on 2 cores (``benchmarks/bench_demo.py``): a 500-word vocabulary (training
#: costs about |V|² per step), and η = 2 so that s·η = 16 (every cosine ≥ 0.99) takes 8 steps
#: and 48 steps leave attention visibly non-uniform. ``full`` is the former full-size run
#: (|V| = 900 words of a 2,000-word budget, η = 1, 24 and 128 steps).
PRESETS = {
    "quick": {"stories": 1500, "vocab": 500, "n_ctx": 128, "train_steps": 8,
              "attention_steps": 48, "train_lr": 2.0, "train_n_ctx": 32, "train_windows": 64,
              "held_out_windows": 1024},
    "full": {"stories": 4000, "vocab": 2000, "n_ctx": 128, "train_steps": 24,
             "attention_steps": 128, "train_lr": 1.0, "train_n_ctx": 32, "train_windows": 64,
             "held_out_windows": 1024},
}  # fmt: skip
#: blocks of the held-out sample (the bootstrap resamples them)
HELD_OUT_BLOCKS = 16
#: about how much CPU each preset costs after the install (2 cores, quiet machine; measured)
PRESET_CPU = {"quick": "about half a minute", "full": "about 2 minutes"}


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
                neighbours = stats.top(kind, word, n=k, tokenizer=tokenizer,
                                       scoring=DEMO_SCORING, exclude="special")  # fmt: skip
            except LeadTermsError as err:
                print(f"  {word:>8s}: ({err})")
                continue
            listed = ", ".join(terminal_text(str(n.token)) for n in neighbours)
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


def _apply_preset(args: argparse.Namespace) -> str:
    """Fill the options left unset from ``--preset``; the preset's name, or ``"custom"``."""
    preset = PRESETS[args.preset]
    custom = [name for name in preset if getattr(args, name) is not None
              and getattr(args, name) != preset[name]]  # fmt: skip
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return "custom" if custom else args.preset


def _plan(args: argparse.Namespace, which: str) -> str:
    """The demo's plan and about how long it takes, printed before anything runs."""
    steps = max(args.train_steps, args.attention_steps)
    train = (f"train the paper's 3-layer model for {steps} full-batch GD steps (η = "
             f"{args.train_lr:g}; decomposed at step {args.train_steps}), "
             if args.train_steps else "")  # fmt: skip
    cost = PRESET_CPU.get(which, "a time that grows with the training steps × vocabulary²")
    other = "--preset full for the full-size run" if which == "quick" else "--preset quick"
    return (
        f"tl-leadterms demo ({which} preset): generate {args.stories:,} stories, count their "
        f"statistics (word vocabulary of at most {args.vocab:,}, T = {args.n_ctx}), print "
        f"association lists, {train}write {Path(args.out) / 'report.html'}.\n"
        f"  This takes {cost} of CPU on 2 cores ({other})."
    )


def cmd_demo(args: argparse.Namespace) -> int:
    which = _apply_preset(args)
    print(_plan(args, which), flush=True)
    from tl_leadterms import corpus_stats, make_windows
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start, cpu = time.perf_counter(), time.process_time()
    print(f"Generating {args.stories} stories (seed {args.seed}) ...")
    stories = generate_stories(args.stories, seed=args.seed)
    tokenizer = train_word_tokenizer(stories, args.vocab)
    windows = make_windows(stories, n_ctx=args.n_ctx, tokenizer=tokenizer)
    n_words = sum(len(s.split()) for s in stories)
    print(
        f"  {sum(map(len, stories)) / 1e6:.1f} MB of text, {n_words:,} words; word-level "
        f"vocabulary {len(tokenizer)}; {windows.shape[0]:,} windows of T+1 = {args.n_ctx + 1}"
    )
    stats = corpus_stats(
        windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=not args.quiet
    )
    print(textwrap.indent(repr(stats), "  "))
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
    print(f"\nDone in {time.perf_counter() - start:.0f} s ({time.process_time() - cpu:.0f} s of "
          f"CPU after the imports; {which} preset)")  # fmt: skip
    return 0


def _demo_training(args: argparse.Namespace, stories: list[str], tokenizer) -> dict:
    """Train the paper's model on the same corpus: decompose it at step ``--train-steps``
    (where the leading terms hold) against its training windows and against held-out ones,
    and keep training to ``--attention-steps``, where its attention is visibly non-uniform,
    for the attention views."""
    import copy
    import math

    from tl_leadterms import (
        Schedule,
        block_stats,
        corpus_stats,
        decompose,
        head_atlas,
        make_windows,
        paper_model,
        train,
    )

    start = time.perf_counter()
    n_ctx = args.train_n_ctx
    every_window = make_windows(stories, n_ctx=n_ctx, tokenizer=tokenizer)
    windows = every_window[: args.train_windows]
    # held-out windows from the other end of the corpus (other stories): a sample of the same
    # distribution that the model never saw, for the interval of the distribution-level cosine.
    # Much larger than the 64 training windows: a sample that small scores far below the truth
    # and its intervals cover it half the time (benchmarks/bench_coverage.py --part population)
    held_out = every_window[args.train_windows :][-args.held_out_windows :]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    lr, steps = args.train_lr, args.train_steps
    total = max(steps, args.attention_steps)
    print(
        f"\nTraining the paper's 3-layer model (|V| = {len(tokenizer)}, T = {n_ctx}) on "
        f"{windows.shape[0]} windows: full-batch GD, η = {lr}, from zero; decomposed at step "
        f"{steps} (s·η = {lr * steps:g}), attention shown at step {total} ..."
    )
    model = paper_model(d_vocab=len(tokenizer), n_ctx=n_ctx, n_layers=3)
    early: dict = {}

    def keep(step: int, current, loss: float) -> None:
        if step == steps:
            early["model"] = copy.deepcopy(current)

    history = train(model, windows, lr=lr, steps=total, track=stats, every=math.gcd(steps, 8),
                    progress=not args.quiet, callback=keep)  # fmt: skip
    print(f"  {history!r}")
    early_model = early["model"]
    # the training windows' statistics: each cosine is exact for that data (ci= says why there
    # is no interval); each score beside its permutation null (99 relabellings)
    print(
        f"\nAgainst its own {windows.shape[0]} training windows (exact: the statistics are the "
        "data it was trained on):"
    )
    run = Schedule(lr=lr, steps=steps)
    decomposition = decompose(early_model, stats, schedule=run, per_head=True, null=99, ci=0.95,
                              progress=False)  # fmt: skip
    print(decomposition)
    held = None
    if held_out.shape[0] >= HELD_OUT_BLOCKS:
        blocks = block_stats(held_out, d_vocab=len(tokenizer), blocks=HELD_OUT_BLOCKS,
                             tokenizer=tokenizer, progress=False)  # fmt: skip
        held = decompose(early_model, blocks, schedule=run, ci=0.95, progress=False)
        print(
            f"\nAgainst {held_out.shape[0]} held-out windows of the same corpus (an estimate of "
            f"the distribution-level cosine, with its 95% bootstrap interval over "
            f"{HELD_OUT_BLOCKS} blocks; at the quick preset's size such intervals held the "
            "truth 95-96% of the time over 900 held-out samples, docs/guides/intervals.md):"
        )
        print(held)
    atlas = head_atlas(early_model, stats, windows[:8, :n_ctx], null=99, schedule=run)
    print(f"\n{atlas}")
    print(f"  ({time.perf_counter() - start:.1f} s)")
    later = model if total > steps else None
    return {"model": early_model, "later": later, "later_step": total if later else None,
            "stats": stats, "history": history, "decomposition": decomposition,
            "held_out": held, "atlas": atlas}  # fmt: skip


def _print_agreement(trained: dict, tokenizer, lr: float, steps: int) -> None:
    """Each head's attention on the sample text against the prediction, and how far both are
    from uniform attention (total variation)."""
    import torch

    from tl_leadterms import attention_agreement, predict_attention
    from tl_leadterms.analyses.attention import scale_text, tv_from_uniform

    later = trained["later"]
    model = trained["model"] if later is None else later
    stats, text = trained["stats"], trained["text"]
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)[: stats.n_ctx]])
    _, cache = model.run_with_cache(ids)
    run = (lr, steps) if later is None else None  # later: c fitted per head
    rows = attention_agreement(model, stats, ids, cache=cache, progress=False,
                               schedule=run).rows  # fmt: skip
    how = f"s·η = {lr * steps:g}" if later is None else "scale c fitted per head"
    step = steps if later is None else trained["later_step"]
    print(f"\nAttention at step {step} on {text!r} against the leading-term prediction ({how}):")
    for r in rows:
        actual = tv_from_uniform(cache["pattern", r["layer"]][0, r["head"]])
        predicted = tv_from_uniform(predict_attention(stats, ids, scale=r["scale"])[0])
        shown = "uniform" if r["scale_at_bound"] == "lower" else f"{predicted:.3f}"
        print(
            f"  {r['label']}: rank correlation {r['rank_correlation']:.3f}, JS divergence "
            f"{r['js_divergence']:.2e}, {scale_text(r['scale'], r['scale_at_bound'])}; largest "
            f"distance from uniform (total variation): head {actual:.3f}, predicted {shown}"
        )


def _demo_report(args, stats, tokenizer, stories: list[str], trained: dict) -> None:
    """report.html: the decompositions, the head atlas, the attention views, the association
    lists and the training history, each computed once above or here."""
    from tl_leadterms.analyses.attention import plot_attention
    from tl_leadterms.explorer import associations
    from tl_leadterms.reports import report

    start = time.perf_counter()
    text = trained.get("text")
    results = [
        trained[k] for k in ("decomposition", "held_out", "atlas") if trained.get(k) is not None
    ]
    if trained:  # the attention of the later checkpoint (scale fitted), else the early one's
        later = trained["later"]
        run = None if later else (args.train_lr, args.train_steps)
        results.append(plot_attention(later or trained["model"], trained["stats"], text,
                                      tokenizer=tokenizer, schedule=run,
                                      step=trained["later_step"] if later else None))  # fmt: skip
    results.append(associations(stats, DEMO_WORDS, text=text, tokenizer=tokenizer,
                                scoring=DEMO_SCORING))  # fmt: skip
    results += [trained["history"]] if trained else []
    path = report(Path(args.out) / "report.html", *results, stats=trained.get("stats", stats),
                  model=trained.get("model"), progress=not args.quiet,
                  title="tl_leadterms demo: the embedded stories corpus")  # fmt: skip
    size = human_size(path.stat().st_size)
    print(f"\nWrote {path} ({size}, {time.perf_counter() - start:.1f} s): open it in a browser")


def add_parser(sub) -> None:
    """The ``demo`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    demo = subparser(sub, "demo",
                     "embedded corpus -> statistics -> a short training run -> report.html",
                     "tl-leadterms demo --out out")  # fmt: skip
    quick, full = PRESETS["quick"], PRESETS["full"]
    demo.add_argument(
        "--preset",
        choices=tuple(PRESETS),
        default="quick",
        help="sizes of the run: quick (default, about half a minute of CPU on 2 cores) or full "
        "(the full-size run, about 2 minutes of CPU); the options below override single sizes",
    )

    def sized(flag: str, kind, text: str) -> None:
        name = flag.removeprefix("--").replace("-", "_")
        demo.add_argument(flag, type=kind, default=None,
                          help=f"{text} (quick: {quick[name]}, full: {full[name]})")  # fmt: skip

    sized("--stories", positive_int_arg, "stories to generate")
    sized("--vocab", positive_int_arg, "word-level vocabulary size")
    sized("--n-ctx", positive_int_arg, "window length T of the statistics")
    demo.add_argument("--seed", type=int, default=0, help="seed of the stories and the model")
    demo.add_argument("--out", default="out", help="folder for the outputs")
    sized(
        "--train-steps",
        int,
        "GD steps before the decomposition (0: no training); s·η "
        "≤ 24 keeps every cosine with its leading term above 0.99 on this corpus",
    )
    sized(
        "--attention-steps",
        int,
        "GD steps of the checkpoint whose attention the report "
        "shows (the run goes on after the decomposition until attention is visibly "
        "non-uniform); at most --train-steps: the decomposed model",
    )
    sized("--train-lr", float, "learning rate η")
    sized("--train-n-ctx", positive_int_arg, "window length for training")
    sized("--train-windows", positive_int_arg, "training windows")
    sized("--held-out-windows", positive_int_arg,
          f"held-out windows (other stories) for the distribution-level reading, in "
          f"{HELD_OUT_BLOCKS} blocks")  # fmt: skip
    demo.add_argument("--no-report", action="store_true", help="do not write report.html")
    demo.add_argument("--quiet", action="store_true", help="no progress bars")
    demo.set_defaults(func=cmd_demo)
