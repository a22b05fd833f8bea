"""The HTML report in a real headless browser (Debian's chromium), with no network.

`.ci/run` installs chromium when it is missing; elsewhere these tests skip with the reason.
"""

import re
import shutil
import subprocess

import pytest
import torch

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    BROWSER is None,
    reason="needs headless chromium (apt-get install -y chromium; .ci/run installs it)",
)
# every request goes to a closed local port: the page must not need the network
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--virtual-time-budget=15000",
    "--hide-scrollbars",
]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from tl_leadterms import corpus_stats, decompose, head_atlas, paper_model, train
    from tl_leadterms.analyses.attention import plot_attention
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.explorer import associations
    from tl_leadterms.reports import report
    from tl_leadterms.stats import make_windows

    stories = generate_stories(200, seed=3)
    tokenizer = train_word_tokenizer(stories, 300)
    windows = make_windows(stories, n_ctx=24, tokenizer=tokenizer)[:128]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=24, n_layers=2, tokenizer=tokenizer)
    history = train(model, windows, lr=1.0, steps=4, track=stats, progress=False)
    decomposition = decompose(model, stats, schedule=(1.0, 4), per_head=True)
    if "lo" not in decomposition.rows[0]:  # the CI and null columns, written here by hand
        for row in decomposition.rows:
            row.update(score=row["cosine"], lo=row["cosine"] - 0.01, hi=row["cosine"] + 0.01,
                       null_mean=0.1, null_sd=0.05, z=17.0, p=0.001, q=0.001,
                       excess=row["cosine"] - 0.1, verdict="stands out")  # fmt: skip
    path = tmp_path_factory.mktemp("report") / "report.html"
    text = "the little girl saw a red ball"
    results = [
        decomposition,
        head_atlas(model, stats, null=5, schedule=history),
        plot_attention(model, stats, text, tokenizer=tokenizer, schedule=history),
        associations(stats, ["red", "he"], text=text, tokenizer=tokenizer),
        history,
    ]
    report(path, *results, stats=stats, model=model, title="browser <test> & report",
           progress=False)  # fmt: skip
    return path


def _run(*args, timeout=120):
    return subprocess.run([BROWSER, *FLAGS, *args], capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


def test_dom_holds_tables_and_head_labels(page):
    dom = _run("--dump-dom", page.as_uri()).stdout
    assert "browser &lt;test&gt; &amp; report" in dom  # the title, escaped
    rows = re.findall(r'<tr[^>]*class="[^"]*decompose-row', dom)
    assert len(rows) == 1 + 3 * 2  # W_O, and V, W, P for each of the 2 layers
    for label in ("L0H0", "L1H0"):
        assert label in dom
    assert "<canvas" in dom or "<svg" in dom  # circuitsvis drew its views
    findings = re.search(r'<section id="findings">.*?<ul class="findings">(.*?)</ul>', dom, re.S)
    assert findings is not None and "Of the 7 scores with a null, 7 stand out" in findings.group(1)
    assert len(re.findall(r'<table class="heatmap"', dom)) == 3 * 3  # V, W, P × 3 metrics
    assert '<div class="head-atlas">' in dom
    for column in ("lo", "hi", "z", "p"):
        assert f"<th>{column}</th>" in dom
    assert dom.count('class="agreement"') == 2  # one caption per layer, with the agreement
    # each shown head's distance from uniform and agreement, in a table above the views
    heads = re.findall(r'<tr class="attention-row" data-head="(L\dH0)"', dom)
    assert heads == ["L0H0", "L1H0"]
    assert "TV from uniform: head" in dom and "rank correlation" in dom
    # the association lists say which scoring ranks them
    caption = re.search(r'<p class="association-scoring" data-scoring="(\w+)">(.*?)</p>', dom, re.S)
    assert caption is not None and caption.group(1) == "cosine"
    assert "<strong>cosine</strong> scoring" in caption.group(2)
    assert len(re.findall(r'<div class="view association"', dom)) == 2  # "red" and "he"


def test_screenshot_is_not_blank(page, tmp_path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    _run(f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    pixels = torch.tensor(matplotlib.image.imread(shot)[..., :3])
    assert pixels.std() > 0.05  # not a blank page
    assert (pixels.mean(-1) < 0.5).float().mean() > 0.002  # some dark text/drawing


def test_report_fits_a_1280_px_window(page):
    """No page-level sideways scroll at 1,280 px: the full decomposition table (wider than the
    window) scrolls inside its own box."""
    why = "needs playwright (pip install playwright; never `playwright install`)"
    sync = pytest.importorskip("playwright.sync_api", reason=why).sync_playwright
    with sync() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS[1:4])
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                  else r.abort())  # fmt: skip
        tab.goto(page.as_uri())
        tab.wait_for_selector("table.decompose")
        widths = tab.evaluate("""() => {
            const box = document.querySelector('table.decompose').parentElement;
            return {page: document.documentElement.scrollWidth,
                    window: document.documentElement.clientWidth,
                    box: box.className, inner: box.scrollWidth, outer: box.clientWidth,
                    scrolls: getComputedStyle(box).overflowX};
        }""")
        browser.close()
    assert widths["page"] <= widths["window"] <= 1280, widths
    assert widths["box"] == "table-scroll" and widths["scrolls"] == "auto", widths
    assert widths["outer"] <= 1280 and widths["inner"] >= widths["outer"], widths
