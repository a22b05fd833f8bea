"""A local Llama-architecture folder, end to end: load, decompose, covariance, attention, report.

    python examples/real_model.py [--out out/real_model] [--layers 6] [--d-model 192]

Writes a seeded random Llama-architecture checkpoint (RMSNorm, rotary, gated MLP, grouped-query
attention: 6 query heads sharing 2 key/value heads) with the embedded corpus' word-level tokenizer
into a Hugging Face folder, as a researcher's local download would be, then runs what
docs/guides/real-models.md shows: ``load_model`` on the folder, statistics of the embedded corpus
with that tokenizer, ``decompose`` per head, ``covariance_similarity``, ``attention_agreement``
with a fitted scale, and the HTML report. Prints the wall time and peak memory of each step. The
weights are random: the scores are what an untrained model gets (the baseline a trained one is
read against), not a finding about Llama.
"""

import argparse
import resource
import time
from pathlib import Path

from tl_leadterms import (
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    load_model,
    make_windows,
    report,
)
from tl_leadterms.data import generate_stories, train_word_tokenizer
from tl_leadterms.loading.tiny import save_tiny_model


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def step(name: str, fn):
    start = time.perf_counter()
    out = fn()
    print(f"[{name}: {time.perf_counter() - start:.1f} s, peak RSS {peak_gib():.2f} GiB]")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/real_model")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--d-model", type=int, default=192)
    parser.add_argument("--stories", type=int, default=3000)
    args = parser.parse_args()
    out = Path(args.out)

    stories = generate_stories(args.stories, seed=0)
    tok = train_word_tokenizer(stories, 1000)
    folder = step(
        "write the Llama folder",
        lambda: save_tiny_model(
            "llama", out / "llama", d_vocab=len(tok), n_layers=args.layers,
            d_model=args.d_model, n_heads=6, n_kv_heads=2, n_ctx=128, seed=0, tokenizer=tok,
        ),
    )  # fmt: skip
    model = step("load_model", lambda: load_model(folder, device="cpu"))
    print(f"  {model.cfg.original_architecture}: {model.cfg.n_layers} layers, "
          f"{model.cfg.n_heads} query heads / {model.cfg.n_key_value_heads} key-value heads, "
          f"d_model {model.cfg.d_model}, {model.cfg.normalization_type}, "
          f"{model.cfg.positional_embedding_type}")  # fmt: skip
    windows = make_windows(stories, n_ctx=128, tokenizer=tok)
    stats = step(
        "corpus_stats",
        lambda: corpus_stats(windows, d_vocab=len(tok), tokenizer=tok, progress=False),
    )
    print(f"  {stats}")
    d = step("decompose (per head)", lambda: decompose(model, stats, per_head=True))
    print("\n".join(repr(d).splitlines()[:8]) + "\n  ...")
    cov = step("covariance_similarity", lambda: covariance_similarity(model, stats, progress=False))
    print("\n".join(repr(cov).splitlines()[:6]) + "\n  ...")
    agree = step(
        "attention_agreement (8 windows, fitted scale)",
        lambda: attention_agreement(model, stats, windows[:8, :128], progress=False),
    )
    print("\n".join(repr(agree).splitlines()[:6]) + "\n  ...")
    page = step(
        "report",
        lambda: report(out / "report.html", d, agree, stats=stats, model=model, progress=False),
    )  # fmt: skip
    print(f"wrote {page} ({page.stat().st_size / 2**20:.1f} MB)")


if __name__ == "__main__":
    main()
