"""The README's screenshots of the demo report and of the explorer, taken with headless Chromium.

Each report shot shows one part of the page: a copy of the report gets a style sheet that hides
everything else, then Chromium renders its top ``--height`` pixels. The explorer shot builds the
explorer of the paper model trained on the embedded corpus (or opens ``--explorer PAGE``),
clicks a head and types a word in the word box (playwright driving the same Chromium, network
blocked), then writes ``docs/explorer.png``. The notebook shots put a decomposition's table and
the explorer, as a notebook cell shows them, on a 900 px page carrying JupyterLab's own light
and dark theme variables (read from the installed JupyterLab), the explorer told its host's
theme as in a notebook: ``docs/notebook_light.png`` and ``docs/notebook_dark.png``.

    make demo && python docs/screenshots.py out/report.html   # writes docs/report_*.png
    python docs/screenshots.py --explorer-only                 # writes docs/explorer.png
    python docs/screenshots.py --notebook-only                 # writes docs/notebook_*.png
"""

import argparse
import re
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


def demo_model():
    """The paper model (4 layers) after 12 steps on the embedded corpus, and its statistics."""
    from tl_leadterms import corpus_stats, make_windows, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(1500, seed=0)
    tokenizer = train_word_tokenizer(stories, 600)
    windows = make_windows(stories, n_ctx=32, tokenizer=tokenizer)[:1024]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=32, n_layers=4, tokenizer=tokenizer)
    train(model, windows, lr=1.0, steps=12, batch_size=256, progress=False)
    return model, stats


def demo_explorer(model, stats):
    from tl_leadterms import explore

    text = "the little girl saw a red ball and she was happy"
    return explore(model, stats, text=text, schedule=(1.0, 12), words=["fish", "red"],
                   title="tl_leadterms explorer: the paper model after 12 steps",
                   progress=False)  # fmt: skip


def jupyterlab_variables(theme: str) -> str:
    """The CSS variables of JupyterLab's ``light`` or ``dark`` theme, as installed."""
    import jupyterlab

    css = (Path(jupyterlab.__file__).parent / "themes" / "@jupyterlab"
           / f"theme-{theme}-extension" / "index.css").read_text(encoding="utf-8")  # fmt: skip
    return ";".join(dict.fromkeys(re.findall(r"--(?:jp|md)-[\w-]+:[^;}]+", css)))


def notebook_shots(out: Path, model=None, stats=None) -> None:
    """A decomposition's table and the explorer as notebook outputs, in JupyterLab's light and
    dark themes: ``notebook_light.png``, ``notebook_dark.png``."""
    from playwright.sync_api import sync_playwright

    from tl_leadterms import decompose

    if model is None:
        model, stats = demo_model()
    d = decompose(model, stats, schedule=(1.0, 12), null=19, per_head=True, progress=False)
    outputs = [d._repr_html_(), demo_explorer(model, stats).iframe()]
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser(), args=["--no-sandbox"])
        for theme in ("light", "dark"):
            cells = "".join(f'<div class="output">{o}</div>' for o in outputs)
            page_path = Path(folder) / f"{theme}.html"
            page_path.write_text(
                f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>:root{{'
                f"{jupyterlab_variables(theme)}}} body{{background:var(--jp-layout-color0);"
                "color:var(--jp-content-font-color1);font:13px system-ui,sans-serif;margin:16px}"
                " .output{width:900px;margin:0 0 24px}</style></head>"
                f"<body>{cells}</body></html>", encoding="utf-8")  # fmt: skip
            page = chromium.new_page(viewport={"width": 940, "height": 2800})
            page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                       else r.abort())  # fmt: skip
            page.goto(page_path.as_uri())
            frame = page.frame_locator("iframe.tl-explorer")
            frame.locator('td.tl-cell[data-label="L1H0"]').click()
            frame.locator("#tl-word").fill("fish")
            page.wait_for_timeout(1500)  # the frame gets its theme and posts its height
            page.screenshot(path=str(out / f"notebook_{theme}.png"), full_page=True)
            print(f"wrote {out / f'notebook_{theme}.png'}")
        chromium.close()


def explorer_shot(page_path: Path | None, out: Path, head: str = "L1H0", word: str = "fish"):
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as folder:
        page_path = page_path or demo_explorer(*demo_model()).save(Path(folder) / "explorer.html")
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
    parser.add_argument("--notebook-only", action="store_true", help="only docs/notebook_*.png")
    args = parser.parse_args()
    if not (args.explorer_only or args.notebook_only):
        if args.report is None:
            parser.error("give the demo's report.html (or --explorer-only, --notebook-only)")
        for name, (css, height) in SHOTS.items():
            shoot(args.report, css, height, args.out / name)
    if not args.notebook_only:
        explorer_shot(args.explorer, args.out / "explorer.png")
    if not args.explorer_only:
        notebook_shots(args.out)


if __name__ == "__main__":
    main()
