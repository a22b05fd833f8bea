"""A real notebook front-end in a real browser: JupyterLab on localhost, Debian's chromium.

A tiny notebook (a decomposition, a table, a figure, an explorer) is executed with nbclient,
signed (trusted, so JupyterLab renders its HTML and runs its scripts as it does for a notebook
run in the session) and opened in JupyterLab; playwright drives chromium with every request
outside localhost aborted. Checked in the page JupyterLab drew:

* in every result table, no two cells' boxes overlap and no cell clips its text
  (``scrollWidth <= clientWidth``);
* every cell's text has a contrast ratio of at least 4.5:1 on its background (WCAG's relative
  luminance, computed here from the computed styles; a gradient counts by its worst stop);
* every image is not blank;
* the explorer's frame shows its word box whole, with no scroll inside the frame.

Skips with the reason where chromium, playwright or JupyterLab is missing.
"""

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.skipif(BROWSER is None, reason="needs chromium (apt-get install -y chromium)"),
    pytest.mark.models,
]
playwright = pytest.importorskip(
    "playwright.sync_api",
    reason="needs playwright (pip install playwright; never `playwright install`)",
)
pytest.importorskip("jupyterlab", reason="needs JupyterLab (pip install jupyterlab)")
pytest.importorskip("ipykernel", reason="needs ipykernel")
nbformat = pytest.importorskip("nbformat")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-background-networking", "--disable-component-update"]  # fmt: skip

CELLS = [
    """\
import io
from IPython.display import Image
from tl_leadterms import attention_agreement, corpus_stats, decompose, explore, make_windows
from tl_leadterms import paper_model, train
from tl_leadterms.data import generate_stories, train_word_tokenizer

stories = generate_stories(200, seed=3)
tokenizer = train_word_tokenizer(stories, 300)
windows = make_windows(stories, n_ctx=16, tokenizer=tokenizer)[:64]
stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
model = paper_model(d_vocab=len(tokenizer), n_ctx=16, n_layers=2, tokenizer=tokenizer)
history = train(model, windows, lr=1.0, steps=4, progress=False)""",
    "d = decompose(model, stats, schedule=(1.0, 4), per_head=True, null=9, progress=False)\nd",
    "attention_agreement(model, stats, windows[:8, :16], schedule=(1.0, 4), progress=False)",
    """\
buffer = io.BytesIO()
d.plot().savefig(buffer, format="png")
Image(buffer.getvalue())""",
    """\
explore(model, stats, text="the little girl saw a red ball and she was happy", lr=1.0,
        steps=4, words=["red"], null=None, progress=False)""",
]

#: in the page: every result table's cells (not the explorer's, which lives in its frame)
TABLE_CHECKS = """() => {
  function rgba(text) {
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
  }
  function over(top, below) {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
  }
  function luminance(c) {
    const v = c.slice(0, 3).map(u => { u /= 255;
      return u <= 0.03928 ? u / 12.92 : Math.pow((u + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  function ratio(a, b) {
    const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  }
  function backgrounds(node) {  // the colours behind node's text: its own, else its ancestors'
    const chain = [];
    for (let e = node; e; e = e.parentElement) chain.push(e);
    let base = [255, 255, 255, 1];
    const layers = [];
    for (const e of chain.reverse()) {
      const s = getComputedStyle(e);
      const own = rgba(s.backgroundColor);
      if (own && own[3] > 0) base = over(own, base);
      const stops = (s.backgroundImage.match(/rgba?\\([^)]+\\)/g) || []).map(rgba);
      if (stops.length) layers.push(stops);
      else if (own && own[3] > 0) layers.length = 0;
    }
    if (!layers.length) return [base];
    return layers[layers.length - 1].map(c => over(c, base)).concat([base]);
  }
  const out = [];
  document.querySelectorAll('.jp-OutputArea-output table').forEach((table, t) => {
    const cells = [...table.querySelectorAll('td, th')];
    const boxes = cells.map(c => c.getBoundingClientRect());
    const overlaps = [], clipped = [], contrast = [];
    for (let i = 0; i < cells.length; i++) {
      const a = boxes[i];
      for (let j = i + 1; j < cells.length; j++) {
        const b = boxes[j];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > 0.5 && h > 0.5) overlaps.push([cells[i].textContent, cells[j].textContent]);
      }
      const c = cells[i];
      if (c.scrollWidth > c.clientWidth + 0.5)
        clipped.push([c.textContent, c.scrollWidth, c.clientWidth]);
      const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (!n.textContent.trim()) continue;
        const e = n.parentElement, ink = rgba(getComputedStyle(e).color);
        const worst = Math.min(...backgrounds(e).map(bg => ratio(over(ink, bg), bg)));
        if (worst < 4.5) contrast.push([n.textContent.trim(), Math.round(worst * 100) / 100]);
      }
    }
    let lowest = Infinity;
    cells.forEach(c => {
      const walker = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (!n.textContent.trim()) continue;
        const e = n.parentElement, ink = rgba(getComputedStyle(e).color);
        lowest = Math.min(lowest, ...backgrounds(e).map(bg => ratio(over(ink, bg), bg)));
      }
    });
    out.push({table: t, cls: table.className, cells: cells.length, overlaps, clipped, contrast,
              lowest_contrast: Math.round(lowest * 100) / 100});
  });
  return out;
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from nbclient import NotebookClient
    from nbformat.sign import NotebookNotary

    folder = tmp_path_factory.mktemp("lab")
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path,
           "HF_HUB_OFFLINE": "1", "JUPYTER_CONFIG_DIR": str(folder / "config"),
           "JUPYTER_DATA_DIR": str(folder / "data"), "JUPYTER_RUNTIME_DIR": str(folder / "run"),
           "JUPYTERLAB_SETTINGS_DIR": str(folder / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(folder / "workspaces")}  # fmt: skip
    # every cell drawn, not only those in view (JupyterLab's default draws lazily)
    tracker = folder / "settings" / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True)
    (tracker / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    os.environ.update({k: env[k] for k in ("PYTHONPATH", "HF_HUB_OFFLINE")})
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()  # fmt: skip
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    (folder / "data").mkdir()
    NotebookNotary(data_dir=str(folder / "data")).sign(nb)  # trusted, as in the session
    nbformat.write(nb, folder / "tiny.ipynb")
    port, token = _free_port(), "tl-leadterms-test"
    log = (folder / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", "--allow-root", f"--ServerApp.root_dir={folder}",
         "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, cwd=folder,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail((folder / "server.log").read_text()[-3000:])
                time.sleep(0.5)
        yield base, token, folder
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def page(lab):
    base, token, folder = lab
    blocked = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 1000})

        def route(r):
            url = r.request.url
            if url.startswith((base, "data:", "blob:", "about:")):
                return r.continue_()
            blocked.append(url)
            return r.abort()

        tab.route("**/*", route)
        tab.goto(f"{base}/lab/tree/tiny.ipynb?token={token}")
        tab.wait_for_selector("iframe.tl-explorer", timeout=90_000)
        tab.wait_for_selector(".jp-OutputArea-output img", timeout=30_000)
        tab.wait_for_timeout(1500)  # the frame posts its height; circuitsvis draws
        yield tab, blocked, folder
        browser.close()


def test_result_tables_neither_overlap_nor_clip_and_keep_contrast(page):
    tab, _, folder = page
    tables = tab.evaluate(TABLE_CHECKS)
    (folder / "tables.json").write_text(json.dumps(tables, indent=1))
    print(json.dumps([{k: t[k] for k in ("table", "cls", "cells", "lowest_contrast")}
                      for t in tables]))  # fmt: skip
    assert len(tables) >= 2 and sum(t["cells"] for t in tables) > 20
    for t in tables:
        assert not t["overlaps"], (t["cls"], t["overlaps"][:5])
        assert not t["clipped"], (t["cls"], t["clipped"][:5])
        assert not t["contrast"], (t["cls"], t["contrast"][:5])


def test_images_are_not_blank(page):
    from PIL import Image

    tab = page[0]
    images = tab.locator(".jp-OutputArea-output img")
    assert images.count() >= 1
    for i in range(images.count()):
        shot = Image.open(io.BytesIO(images.nth(i).screenshot())).convert("L")
        low, high = shot.getextrema()
        assert high - low > 100 and len(shot.resize((64, 64)).getcolors(4096)) > 8


def test_explorer_frame_shows_the_word_box_without_a_nested_scroll(page):
    tab, blocked, _ = page
    frame_box = tab.eval_on_selector(
        "iframe.tl-explorer",
        """f => {
        const r = f.getBoundingClientRect(), area = f.closest('.jp-OutputArea-output');
        return {height: r.height, area_scroll: area.scrollHeight, area_client: area.clientHeight};
    }""",
    )
    frame = tab.frame_locator("iframe.tl-explorer")
    frame.locator("#tl-word-lists li").first.wait_for()  # the first of words= is shown
    child = next(f for f in tab.frames if f.parent_frame is not None
                 and f.evaluate("!!document.getElementById('tl-words')"))  # fmt: skip
    # the frame is sized by a script after its page loads: give it that moment (on a loaded
    # machine the first read saw the 15 px frame before it grew); the checks below then say
    # whether it ended up showing everything
    with contextlib.suppress(playwright.TimeoutError):
        child.wait_for_function(
            "() => document.documentElement.scrollHeight <= window.innerHeight + 1", timeout=15_000
        )
    sizes = child.evaluate("""() => ({
        scroll: document.documentElement.scrollHeight, view: window.innerHeight,
        words_bottom: document.getElementById('tl-words').getBoundingClientRect().bottom})""")
    assert sizes["scroll"] <= sizes["view"] + 1, sizes  # nothing to scroll inside the frame
    assert sizes["words_bottom"] <= sizes["view"], sizes  # the word box is whole in the frame
    assert frame_box["area_scroll"] <= frame_box["area_client"] + 1, frame_box
    assert abs(frame_box["height"] - sizes["view"]) <= 4, (frame_box, sizes)
    # a head opened: the frame grows with its page, still with nothing to scroll inside it
    frame.locator('td.tl-cell[data-label="L1H0"]').click()
    frame.locator("#tl-attn-actual canvas, #tl-attn-actual svg").first.wait_for()
    tab.wait_for_timeout(800)
    after = child.evaluate("[document.documentElement.scrollHeight, window.innerHeight]")
    assert after[1] > sizes["view"] and after[0] <= after[1] + 1, after
    assert not blocked, blocked[:5]  # neither JupyterLab nor an output needed the network
