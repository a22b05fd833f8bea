"""Corpus statistics and leading terms on the embedded story corpus (the paper's Figure 5 view).

    python examples/corpus_statistics.py [--stories 4000] [--n-ctx 128] [--keep 1000]

Generates the embedded children's-story corpus, trains the paper's word-level tokenizer on it,
cuts windows of T + 1 tokens, computes B̄, Σ_B̄, Φ̄, Ḡ, Q̄, Δ, prints the strongest associations
of a few words, saves and reloads the statistics, and prints the leading-term predictions for a
3-layer model after 100 steps at η = 0.005 (the paper's Table 1 learning rate).
"""

import argparse
import tempfile
from pathlib import Path

from tl_leadterms import CorpusStats, corpus_stats, leading_terms, make_windows
from tl_leadterms.data import PLANTED, generate_stories, train_word_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stories", type=int, default=4000)
    parser.add_argument("--n-ctx", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2000, help="tokenizer vocabulary size")
    parser.add_argument("--keep", type=int, default=0, help="keep only the k most frequent ids")
    args = parser.parse_args()

    stories = generate_stories(args.stories, seed=0)
    tokenizer = train_word_tokenizer(stories, args.vocab)
    windows = make_windows(stories, n_ctx=args.n_ctx, tokenizer=tokenizer)
    stats = corpus_stats(
        windows, d_vocab=len(tokenizer), vocab=args.keep or None, tokenizer=tokenizer, progress=True
    )
    print(stats)

    def show(kind: str, word: str, k: int = 6) -> None:
        neighbours = stats.top(kind, word, n=k)
        print(f"  {word:>7s} -> " + ", ".join(f"{n.token} ({n.score:.2e})" for n in neighbours))

    print("\nB̄ (next token):")
    for adjective in PLANTED["bigram"]:
        show("bigram", adjective)
    print("\nΣ_B̄ (interchangeable):")
    for word in ("he", "happy", "lily"):
        show("interchangeability", word)
    print("\nΦ̄ (earlier in the same window):")
    for topic in PLANTED["context"].values():
        show("context", topic[0])

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stats.safetensors"
        stats.save(path)
        again = CorpusStats.load(path, tokenizer=tokenizer)
        print(f"\nsaved and reloaded {path.stat().st_size / 1e6:.1f} MB: {again}")

    lt = leading_terms(stats, lr=0.005, steps=100, n_layers=3)
    print(f"\n{lt}")
    print(
        "predicted Frobenius norms:",
        {
            "W_O": f"{lt.W_O.norm():.3e}",
            "V": f"{lt.V[0].norm():.3e}",
            "W": f"{lt.W[0].norm():.3e}",
            "P": f"{lt.P[0].norm():.3e}",
        },
    )


if __name__ == "__main__":
    main()
