"""The explorer of the real-size benchmark model: build time, page size, time to the grid.

The model and statistics are those of ``bench_real_sizes.py`` (30 layers × 9 heads, d_vocab
49,152, statistics restricted to the k most frequent tokens). Measured: ``explore`` (its
decomposition, attention on a 32-token text, pair tables, the word box's table of every kept
token: ``words_s``, ``words_bytes``, timed and sized again on their own), the saved page's size
(goal < 10 MB), and in Debian's chromium (headless, network blocked) the time from navigation
start until the page has drawn the grid (``data-grid-drawn``, goal < 2 s) and until a head's
panel is open after a click. The baseline side by side: the same page's grid time with every
head's data parsed up front (``JSON.parse`` of all the head blocks), what eager loading costs.

    python benchmarks/bench_explorer.py [--k 5000] [--layers 30] [--null 19] [--visits 5]
        [--baseline EARLIER.json] [--out FILE]
    python benchmarks/bench_explorer.py --precision [--k 5000] [--layers 30]

``--precision`` measures the explorer's own pure matrix products, the per-head blocks of the
pair tables (``explorer.data._blocks``, ``pair_tables(gemm_dtype=...)``), in float32 against
float64 on the same model, same run: CPU seconds of all layers' ``W`` and value blocks in
each dtype, the largest difference relative to each block's largest entry (the documented
tolerance is 1e-6, docs/guides/pythia-protocol.md#precision) and whether every head's top
pairs come out the same (``results/explorer_precision.json``).

Browser times are medians over ``--visits`` fresh page loads. The build is timed as wall and
CPU time (``build_cpu_s``, the steadier of the two on a shared machine; the 1-minute load
average before and after is recorded). ``--baseline`` keeps an earlier commit's result of this
script as ``before`` (and ``build_speedup``). About 40% of the build's CPU time is the
permutation null of the decomposition (``--null 0`` leaves it out;
``results/explorer_no_null.json``).
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_real_sizes import model_and_stats  # noqa: E402
from tl_leadterms import explore  # noqa: E402
from tl_leadterms.explorer.data import neighbour_table  # noqa: E402
from tl_leadterms.explorer.page import embed_json  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def _one_visit(browser, path: Path, label: str) -> dict:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
               else r.abort())  # fmt: skip
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-grid-drawn]")
    grid_ms = float(page.get_attribute("body", "data-grid-drawn"))
    start = time.perf_counter()
    page.click(f'td.tl-cell[data-label="{label}"]')
    page.wait_for_selector("#tl-attn-actual canvas, #tl-attn-actual svg")
    panel_s = time.perf_counter() - start
    eager_ms = page.evaluate(
        "() => { const t = performance.now();"
        " document.querySelectorAll('script.tl-head').forEach(n => JSON.parse(n.textContent));"
        " return performance.now() - t; }"
    )
    page.close()
    return {"grid_drawn_s": grid_ms / 1000, "panel_open_s": panel_s,
            "parse_all_heads_s": eager_ms / 1000}  # fmt: skip


def browser_times(path: Path, label: str, visits: int) -> dict:
    """Medians over ``visits`` fresh page loads (each run also listed), one browser."""
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=FLAGS)
        runs = [_one_visit(browser, path, label) for _ in range(visits)]
        browser.close()
    out = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    out["grid_drawn_runs_s"] = [r["grid_drawn_s"] for r in runs]
    return out


def precision(args) -> dict:
    """float32 against float64 for the pair tables' block products (see the docstring)."""
    from tl_leadterms.adapters.convert import weights_for_stats
    from tl_leadterms.explorer.data import _blocks, _candidates

    torch.manual_seed(0)
    load_before = os.getloadavg()[0]
    import functools

    from benchmarks import bench_real_sizes

    full = bench_real_sizes.corpus_stats  # the benchmark's model and statistics, pass one only
    bench_real_sizes.corpus_stats = functools.partial(full, want=("B_bar", "Phi_bar"))
    try:
        model, stats, _ = model_and_stats(args.k, args.layers)
    finally:
        bench_real_sizes.corpus_stats = full
    pw = weights_for_stats(model, stats)
    out = {"benchmark": "explorer_precision", "n_layers": args.layers,
           "n_heads": model.cfg.n_heads, "k": args.k, "d_vocab": model.cfg.d_vocab,
           "baseline": "the same blocks in float64, same run", "tolerance": 1e-6,
           "threads": torch.get_num_threads(), "pair_tokens": {}}  # fmt: skip
    for c in args.pair_tokens:
        _, ids = _candidates(stats, c)
        blocks, cpu = {}, {}
        for dtype in (torch.float64, torch.float32):
            start = time.process_time()
            blocks[dtype] = [_blocks(pw, w, layer, ids, dtype) for layer in range(pw.n_layers)
                             for w in ("W", "V")]  # fmt: skip
            cpu[str(dtype)[6:]] = time.process_time() - start
        worst, same_top = 0.0, True
        for exact, fast in zip(blocks[torch.float64], blocks[torch.float32], strict=True):
            scale = exact.abs().amax(dim=(1, 2))
            rel = (fast - exact).abs().amax(dim=(1, 2)) / scale
            worst = max(worst, float(rel.max()))
            for h in range(exact.shape[0]):
                a = exact[h].flatten().topk(8).indices
                b = fast[h].flatten().topk(8).indices
                same_top &= bool(torch.equal(a, b))
        out["pair_tokens"][str(c)] = {
            "cpu_s": cpu, "speedup": cpu["float64"] / cpu["float32"],
            "max_rel_diff_to_block_max": worst, "below_tolerance": worst < 1e-6,
            "top8_pairs_identical": same_top,
        }  # fmt: skip
    out["load_average_1min"] = {"before": load_before, "after": os.getloadavg()[0]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--k", type=int, default=5000)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--null", type=int, default=19, help="permutations (0: no null)")
    parser.add_argument("--visits", type=int, default=5, help="page loads timed (medians)")
    parser.add_argument("--out", type=Path, default=RESULTS / "explorer.json")
    parser.add_argument(
        "--baseline", type=Path, default=None, help="an earlier commit's result, kept as 'before'"
    )
    parser.add_argument("--precision", action="store_true",
                        help="float32 vs float64 pair-table products only (no page)")  # fmt: skip
    parser.add_argument("--pair-tokens", type=int, nargs="+", default=[300, 1000])
    args = parser.parse_args()
    if args.precision:
        result = precision(args)
        path = RESULTS / "explorer_precision.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
        return
    torch.manual_seed(0)
    model, stats, windows = model_and_stats(args.k, args.layers)
    tokens = windows[0, :32]
    load_before = os.getloadavg()[0]
    start, cpu = time.perf_counter(), time.process_time()
    explorer = explore(model, stats, text=tokens, null=args.null or None,
                       title="benchmark explorer")  # fmt: skip
    build_s, build_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    load_after = os.getloadavg()[0]
    start = time.perf_counter()
    words = neighbour_table(stats, tokens.tolist(), lambda ids: [str(i) for i in ids], 8, None)
    words_s, words_bytes = time.perf_counter() - start, len(embed_json(words).encode())
    assert words == explorer.data["words"]  # the table the page holds
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        path = explorer.save(Path(tmp) / "explorer.html")
        save_s = time.perf_counter() - start
        size = path.stat().st_size
        label = f"L{args.layers - 1}H{model.cfg.n_heads - 1}"
        times = browser_times(path, label, args.visits)
    result = {
        "benchmark": "explorer", "n_layers": args.layers, "n_heads": model.cfg.n_heads,
        "k": args.k, "d_vocab": model.cfg.d_vocab, "text_tokens": len(tokens),
        "null": args.null, "build_s": build_s, "build_cpu_s": build_cpu_s,
        "load_average_1min": [load_before, load_after], "threads": torch.get_num_threads(),
        "save_s": save_s, "page_bytes": size, "words_s": words_s, "words_bytes": words_bytes,
        "page_mb": size / 2**20, "page_goal_mb": 10, "grid_goal_s": 2, **times,
        "grid_vs_parse_all_heads": times["parse_all_heads_s"] / max(times["grid_drawn_s"], 1e-9),
        "python": platform.python_version(), "torch": torch.__version__,
        "machine": platform.machine(),
    }  # fmt: skip
    if args.baseline is not None:
        before = json.loads(args.baseline.read_text())
        result["before"] = {k: v for k, v in before.items() if k != "before"}
        result["build_speedup"] = before["build_s"] / build_s
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from tl_leadterms.atomic import write_bytes

    write_bytes(args.out, (json.dumps(result, indent=2) + "\n").encode())
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
