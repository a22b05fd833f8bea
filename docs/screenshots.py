"""The README's screenshots of the demo report and of the explorer, taken with headless Chromium.

Each report shot shows one part of the page: a copy of the report gets a style sheet that hides
everything else, then Chromium renders its top ``--height`` pixels. The explorer shot builds the
explorer of the paper model trained on the embedded corpus (or opens ``--explorer PAGE``),
clicks a head and types a word in the word box (playwright driving the same Chromium, network
blocked), then writes ``docs/explorer.png``.

    make demo && python docs/screenshots.py out/report.html   # writes docs/report_*.png
    python docs/screenshots.py --explorer-only                 # writes docs/explorer.png
"""

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent

#: file name -> (CSS that leaves only that part of the page visible, window height)
SHOTS = {
    "report_decompose.png": ("body > :not(#findings):not(#decompose) { display: none; }", 1500),
    "report_attention.png": ("body > :not(#attention) { display: none; }", 1580),
    "report_tokens.png": (
        "body > :not(#associations) { display: none; }"
        ' #associations .association:not([data-word="fluffy"]) { display: none; }',
        680,
    ),
}


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    raise SystemExit("no Chromium found: apt-get install -y chromium")


def shoot(report: Path, css: str, height: int, out: Path) -> None:
    page = report.read_text(encoding="utf-8").replace("</head>", f"<style>{css}</style></head>", 1)
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "page.html"
        copy.write_text(page, encoding="utf-8")
        subprocess.run(
            [browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--proxy-server=127.0.0.1:9",  # a closed port: the page renders with no network
             "--virtual-time-budget=15000",  # the attention views' scripts finish first
             f"--screenshot={out}", f"--window-size=1280,{height}", copy.as_uri()],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"wrote {out}")


def demo_explorer(folder: Path) -> Path:
    """The explorer of the paper model (4 layers) after 12 steps on the embedded corpus."""
    from tl_leadterms import corpus_stats, explore, make_windows, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(1500, seed=0)
    tokenizer = train_word_tokenizer(stories, 600)
    windows = make_windows(stories, n_ctx=32, tokenizer=tokenizer)[:1024]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=32, n_layers=4, tokenizer=tokenizer)
    train(model, windows, lr=1.0, steps=12, batch_size=256, progress=False)
    text = "the little girl saw a red ball and she was happy"
    explorer = explore(model, stats, text=text, schedule=(1.0, 12), words=["fish", "red"],
                       title="tl_leadterms explorer: the paper model after 12 steps",
                       progress=False)  # fmt: skip
    return explorer.save(folder / "explorer.html")


def explorer_shot(page_path: Path | None, out: Path, head: str = "L1H0", word: str = "fish"):
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        page_path = page_path or demo_explorer(Path(folder))
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=browser(), args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"])  # fmt: skip
            page = chromium.new_page(viewport={"width": 1280, "height": 1000})
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                       else r.abort())  # fmt: skip
            page.goto(page_path.as_uri())
            page.click(f'td.tl-cell[data-label="{head}"]')
            page.wait_for_selector("#tl-attn-actual canvas, #tl-attn-actual svg")
            page.fill("#tl-word", word)
            page.wait_for_timeout(500)
            page.screenshot(path=str(out), full_page=True)
            chromium.close()
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, nargs="?", help="the demo's report.html")
    parser.add_argument("--out", type=Path, default=DOCS, help="folder for the PNG files")
    parser.add_argument("--explorer", type=Path, help="a saved explorer page (default: build one)")
    parser.add_argument("--explorer-only", action="store_true", help="only docs/explorer.png")
    args = parser.parse_args()
    if not args.explorer_only:
        if args.report is None:
            parser.error("give the demo's report.html (or --explorer-only)")
        for name, (css, height) in SHOTS.items():
            shoot(args.report, css, height, args.out / name)
    explorer_shot(args.explorer, args.out / "explorer.png")


if __name__ == "__main__":
    main()
