"""Every analysis's ``to_dict()`` on fixed inputs, as one JSON file: run it on two trees and
compare, to show that a change of structure changed no number.

What it computes (seeded, on the CPU, in float64 where the analyses allow):

* the paper model (two layers, trained 4 steps on Markov windows): ``decompose`` per layer and
  per head, with a null and with a bootstrap interval on held-out blocks; ``covariance_similarity``
  with and without a null, under both centrings; ``output_agreement`` with a null;
  ``attention_agreement`` with a null; ``head_atlas``; ``ablate``;
* every tiny family of :data:`tl_leadterms.loading.tiny.MODEL_FAMILIES` (saved, loaded with
  ``load_model``): ``decompose`` per head and ``covariance_similarity``;
* a two-checkpoint ``sweep`` of a small NeoX series with ``decompose`` and ``covariance``.

Calls use the plain keywords (``lr=``, ``steps=``, ``bootstrap=``), which every release of the
package takes, so the same script runs on a tree before and after a change of API::

    python benchmarks/result_equality.py --out /tmp/new.json
    PYTHONPATH=/path/to/old/tree python benchmarks/result_equality.py --out /tmp/old.json
    python benchmarks/result_equality.py --compare /tmp/old.json /tmp/new.json

``--compare`` prints every path whose value differs (numbers equal to 1e-12 relative count as
equal, NaN equals NaN; dictionary order never counts) and exits 1 when there is any.

``--report OLD.html NEW.html`` compares two reports (e.g. ``tl-leadterms demo``'s, written by
two trees): it cuts each page's sections into their pieces (tables, paragraphs, figures, views,
headings, findings), with the random element ids of the circuitsvis views, the dates and the
images' bytes normalised, and prints the pieces found in one page only, whatever their order.
"""

import argparse
import json
import math
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.markov import markov_tokens


def paper_results() -> dict[str, Any]:
    from tl_leadterms import (
        ablate,
        attention_agreement,
        block_stats,
        corpus_stats,
        covariance_similarity,
        decompose,
        head_atlas,
        output_agreement,
        paper_model,
        train,
    )

    V, T = 20, 8
    tokens = markov_tokens(96, T + 1, V, seed=3, power=4)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    held = markov_tokens(64, T + 1, V, seed=4, power=4)
    blocks = block_stats(held, d_vocab=V, blocks=8, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    train(model, tokens, lr=1.0, steps=4, progress=False)
    run = {"lr": 1.0, "steps": 4}
    quiet = {"progress": False}
    return {
        "decompose_layers": decompose(model, stats, **run, **quiet),
        "decompose_heads_null": decompose(model, stats, **run, null=9, per_head=True, **quiet),
        "decompose_held_out_ci": decompose(model, blocks, **run, ci=0.9, bootstrap=6,
                                           per_head=True, **quiet),
        "covariance": covariance_similarity(model, stats, per_head=True, **quiet),
        "covariance_null_tokens": covariance_similarity(model, stats, null=9, centre="tokens",
                                                        **quiet),
        "output": output_agreement(model, stats, held[:16, :T], **run, null=5, **quiet),
        "attention": attention_agreement(model, stats, held[:4, :T], **run, null=5, **quiet),
        "atlas": head_atlas(model, stats, held[:4, :T], null=9, **run),
        "ablation": ablate(model, stats, tokens, **quiet),
    }  # fmt: skip


def family_results(folder: Path) -> dict[str, Any]:
    from tl_leadterms import corpus_stats, covariance_similarity, decompose, load_model
    from tl_leadterms.loading.tiny import MODEL_FAMILIES, save_tiny_model

    V, T = 96, 32
    tokens = markov_tokens(64, T + 1, V, seed=5, power=4)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    out = {}
    for family in MODEL_FAMILIES:
        kv = {"llama": 2, "mistral": 2, "qwen2": 2, "qwen3": 2, "gemma": 1, "gemma2": 2,
              "phi3": 2}.get(family)  # fmt: skip
        path = save_tiny_model(family, folder / family, d_vocab=V, n_layers=2, d_model=32,
                               n_heads=4, n_kv_heads=kv, n_ctx=T, seed=1)  # fmt: skip
        model = load_model(path, dtype=torch.float64)
        out[f"{family}_decompose"] = decompose(model, stats, per_head=True, progress=False)
        out[f"{family}_covariance"] = covariance_similarity(model, stats, progress=False)
    return out


def sweep_results(folder: Path) -> dict[str, Any]:
    from tl_leadterms import corpus_stats, sweep
    from tl_leadterms.loading.series import load_windows, train_neox_series

    out = folder / "series"
    train_neox_series(out, n_stories=60, vocab_size=120, n_ctx=16, d_model=16, n_layers=2,
                      n_heads=2, steps=4, checkpoints=[0, 4], batch_size=8, lr=3e-3,
                      progress=False)  # fmt: skip
    d_vocab = json.loads((out / "series.json").read_text())["d_vocab"]
    stats = corpus_stats(load_windows(out), d_vocab=d_vocab, progress=False)
    table = sweep(out, stats, analyses=["decompose", "covariance"], null=5, progress=False)
    return {"sweep": table}


def _plain(value: Any) -> Any:
    """``value`` as JSON: NaN and infinities as strings, tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _drop_volatile(value: Any) -> Any:
    """Times, dates and temporary paths, which differ on every run."""
    if isinstance(value, dict):
        return {k: _drop_volatile(v) for k, v in value.items()
                if k not in ("seconds", "results", "date", "source", "timings")}  # fmt: skip
    if isinstance(value, list):
        return [_drop_volatile(v) for v in value]
    return value


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """The paths at which ``old`` and ``new`` differ (numbers to 1e-12 relative)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}/{k}: only in the old" for k in old.keys() - new.keys()]
        out += [f"{path}/{k}: only in the new" for k in new.keys() - old.keys()]
        for k in sorted(old.keys() & new.keys()):
            out += differences(old[k], new[k], f"{path}/{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items against {len(new)}"]
        pairs = enumerate(zip(old, new, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{path}/{i}")]
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (old, new))
    if numbers and math.isclose(old, new, rel_tol=1e-12, abs_tol=1e-300):
        return []
    if old != new:
        return [f"{path}: {old!r} -> {new!r}"]
    return []


def report_pieces(page: str) -> list[str]:
    """The pieces of a report's sections (see the module docstring), normalised."""
    volatile = {r"tl-leadterms-cv-[0-9a-f]+": "CV", r"data:image/png;base64,[^\"]+": "PNG",
                r"\d{4}-\d\d-\d\d \d\d:\d\d UTC": "DATE"}  # fmt: skip
    for pattern, same in volatile.items():
        page = re.sub(pattern, same, page)
    bodies = re.findall(r'<section id="[^"]+"><h2>[^<]*</h2>\n(.*?)\n</section>', page, re.S)
    piece = (
        r"(<table.*?</table>|<p[ >].*?</p>|<figure.*?</figure>|<pre.*?</pre>"
        r"|<h3>.*?</h3>|<li>.*?</li>)"
    )
    return [p for body in bodies for p in re.findall(piece, body, re.S)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="the JSON file to write")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument("--parts", nargs="+", default=["paper", "families", "sweep"])
    parser.add_argument("--report", nargs=2, metavar=("OLD", "NEW"))
    args = parser.parse_args()
    if args.report:
        old, new = (Counter(report_pieces(Path(p).read_text())) for p in args.report)
        for name, only in (("old", old - new), ("new", new - old)):
            for piece, count in only.items():
                print(f"only in the {name} ({count}×): {piece[:240]}")
        print(f"{sum(old.values())} pieces in the old page, {sum(new.values())} in the new")
        return 0
    if args.compare:
        old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        found = differences(old, new)
        print("\n".join(found) if found else "no differences")
        keys = sum(len(v) for v in new.values())
        print(f"compared {keys} results in {len(new)} parts")
        return 1 if found else 0
    torch.manual_seed(0)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for part, make in (("paper", paper_results), ("families", family_results),
                           ("sweep", sweep_results)):  # fmt: skip
            if part not in args.parts:
                continue
            made = make() if part == "paper" else make(Path(tmp))
            results[part] = {k: _drop_volatile(_plain(v.to_dict())) for k, v in made.items()}
            print(f"{part}: {len(made)} results", file=sys.stderr)
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
