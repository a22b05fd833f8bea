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
    from tl_leadterms import corpus_stats, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.report import report
    from tl_leadterms.stats import make_windows

    stories = generate_stories(200, seed=3)
    tokenizer = train_word_tokenizer(stories, 300)
    windows = make_windows(stories, 24, tokenizer=tokenizer)[:128]
    stats = corpus_stats(windows, len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(len(tokenizer), 24, 2, tokenizer=tokenizer)
    history = train(model, windows, lr=1.0, steps=4, track=stats, progress=False)
    path = tmp_path_factory.mktemp("report") / "report.html"
    report(path, stats=stats, model=model, tokenizer=tokenizer, history=history,
           text="the little girl saw a red ball", words=["red", "he"], lr=1.0, steps=4,
           title="browser <test> & report")  # fmt: skip
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


def test_screenshot_is_not_blank(page, tmp_path):
    import matplotlib.image

    shot = tmp_path / "shot.png"
    _run(f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri())
    pixels = torch.tensor(matplotlib.image.imread(shot)[..., :3])
    assert pixels.std() > 0.05  # not a blank page
    assert (pixels.mean(-1) < 0.5).float().mean() > 0.002  # some dark text/drawing
