"""How wide the permutation nulls are as the kept vocabulary grows: the evidence for the
negligible excess of ``tl_leadterms.results.null.NEGLIGIBLE`` (docs/guides/effect-sizes.md).

A random-initialised tiny GPT-NeoX (d_model 32, 2 layers, 4 heads) over a Markov-chain corpus
of ``k`` tokens (all kept), ``null=19``: the median ``null_sd`` of ``decompose``'s per-head
``W`` and value rows and of ``covariance_similarity``'s raw and token-specific rows, per ``k``.
One run on the project's shared 2-core CPU machine; the seconds are not the point::

    python benchmarks/bench_null_spread.py --k 100 500 2000 \
        --out benchmarks/results/null_spread.json
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.markov import markov_tokens


def spreads(k: int, folder: Path) -> dict:
    from tl_leadterms import corpus_stats, covariance_similarity, decompose, load_model
    from tl_leadterms.loading.tiny import save_tiny_model

    stats = corpus_stats(markov_tokens(2048, 33, k, seed=k), d_vocab=k, progress=False)
    path = save_tiny_model("gpt_neox", folder / f"neox{k}", d_vocab=k, n_layers=2, d_model=32,
                           n_heads=4, n_ctx=32, seed=0)  # fmt: skip
    model = load_model(str(path), device="cpu")
    start = time.perf_counter()
    d = decompose(model, stats, null=19, per_head=True, progress=False)
    cov = covariance_similarity(model, stats, null=19, progress=False)
    out = {"k": k, "seconds": round(time.perf_counter() - start, 1)}
    for name, rows in (
        ("decompose_W", [r for r in d.rows if r["weight"] == "W"]),
        ("decompose_value", [r for r in d.rows if r["weight"] in ("V", "V·W_O")]),
        ("covariance_raw", [r for r in cov.rows if not r["score"].endswith("_specific")]),
        ("covariance_specific", [r for r in cov.rows if r["score"].endswith("_specific")]),
    ):
        sd = [r["null_sd"] for r in rows if r.get("null_sd") == r.get("null_sd")]
        out[name] = {"rows": len(sd), "median_null_sd": statistics.median(sd), "max_null_sd":
                     max(sd)}  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[100, 500, 2000])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        results = [spreads(k, Path(tmp)) for k in args.k]
    text = json.dumps({"case": "null_spread", "null": 19, "results": results}, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
