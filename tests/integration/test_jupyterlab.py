"""A real notebook front-end in a real browser: JupyterLab on localhost, Debian's chromium.

examples/quickstart.ipynb is executed with nbclient, signed (trusted, so JupyterLab renders its
HTML and runs its scripts as it does for a notebook run in the session) and opened in
JupyterLab in its light and its dark theme; its outputs are also written into a plain page with
VS Code's dark theme variables on ``body`` (the reader's own preference left light, so that only
the host's variables can make it dark). playwright drives chromium with every request outside
localhost aborted. In each of the three, for every output:

* every text has a contrast ratio of at least 4.5:1 on its actual background (WCAG's relative
  luminance of the computed colours: the text's colour, its alpha and its ancestors' opacity
  over the backgrounds of its ancestors up to the first opaque one, a gradient by its worst
  stop); the lowest ratio found is printed and written to ``contrast.json``;
* in every table no two cells' boxes overlap, no cell clips its text, and no marking (an SVG
  bar or whisker, a border, an outline) crosses a number's text box;
* every result table's key columns lie inside the visible output box, which is about 900 px
  wide, with nothing to scroll to see them;
* the explorer's page draws in the host's theme on its own background, with the same contrast,
  and its word box answers a word that is not on the page;
* every image is not blank.

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
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
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
#: JupyterLab's theme names; the viewport that leaves the notebook's output box about 900 px
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
VIEWPORT = {"width": 1332, "height": 1000}
OUTPUT_WIDTH = 900
#: VS Code's Dark+ colours, as its notebook outputs see them
VSCODE_DARK = {"--vscode-editor-foreground": "#cccccc", "--vscode-editor-background": "#1e1e1e",
               "--vscode-editorWidget-border": "#454545",
               "--vscode-textLink-foreground": "#3794ff"}  # fmt: skip
OUTPUTS = {"light": ".jp-OutputArea-output", "dark": ".jp-OutputArea-output",
           "vscode": "div.output"}  # fmt: skip

#: in a document: every visible text under ``root`` (contrast), every table's cells (overlap,
#: clipping, markings) and every result table's key columns (inside the output's box)
CHECKS = """([root, base]) => {
  function rgba(text) {  // rgb(), rgba() or color(srgb ...) (what color-mix() computes to)
    const m = (text || '').match(/(rgba?|color)\\(([^)]+)\\)/);
    if (!m) return null;
    const p = m[2].replace('srgb', '').split(/[ ,/]+/).filter(Boolean).map(Number);
    const k = m[1] === 'color' ? 255 : 1;
    return [p[0] * k, p[1] * k, p[2] * k, p.length > 3 ? p[3] : 1];
  }
  function over(top, below) {  // top composited over an opaque colour
    const a = top[3];
    return [0, 1, 2].map(i => top[i] * a + below[i] * (1 - a)).concat([1]);
  }
  function luminance(c) {
    const v = c.slice(0, 3).map(u => { u /= 255;
      return u <= 0.04045 ? u / 12.92 : Math.pow((u + 0.055) / 1.055, 2.4); });
    return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
  }
  function ratio(a, b) {
    const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  }
  function backgrounds(node) {  // the colours behind node's text, from the page down to it
    const chain = [];
    for (let e = node; e; e = e.parentElement) chain.push(e);
    let bg = base.concat([1]);
    const layers = [];
    for (const e of chain.reverse()) {
      const s = getComputedStyle(e);
      const own = rgba(s.backgroundColor);
      if (own && own[3] > 0) { bg = over(own, bg); layers.length = 0; }
      const stops = (s.backgroundImage.match(/(rgba?|color)\\([^)]+\\)/g) || []).map(rgba);
      if (stops.length) layers.push(stops);
    }
    if (!layers.length) return [bg];
    return layers[layers.length - 1].map(c => over(c, bg));
  }
  function opacity(e) {
    let o = 1;
    for (; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o;
  }
  function textRects(node) {
    const r = document.createRange();
    r.selectNodeContents(node);
    return [...r.getClientRects()].filter(b => b.width > 0 && b.height > 0);
  }
  function meets(a, b) {
    return Math.min(a.right, b.right) - Math.max(a.left, b.left) > 0.5
      && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 0.5;
  }
  function inflate(r, d) {
    return {left: r.left - d, top: r.top - d, right: r.right + d, bottom: r.bottom + d};
  }
  function inside(a, b) {
    return a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5
      && a.bottom <= b.bottom + 0.5;
  }
  const out = {texts: 0, lowest: Infinity, lowest_text: '', contrast: [], overlaps: [],
               clipped: [], crossed: [], keys: [], tables: 0};
  const roots = [...document.querySelectorAll(root)];
  for (const area of roots) {
    const walker = document.createTreeWalker(area, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const text = n.textContent.trim(), e = n.parentElement;
      if (!text || !e || e.closest('script, style') || !textRects(n).length) continue;
      const s = getComputedStyle(e);
      if (s.visibility === 'hidden') continue;
      const ink = rgba(s.color);
      ink[3] *= opacity(e);
      const worst = Math.min(...backgrounds(e).map(bg => ratio(over(ink, bg), bg)));
      out.texts += 1;
      if (worst < out.lowest) { out.lowest = worst; out.lowest_text = text.slice(0, 40); }
      if (worst < 4.5) out.contrast.push([text.slice(0, 40), Math.round(worst * 100) / 100]);
    }
    for (const table of area.querySelectorAll('table')) {
      const cells = [...table.querySelectorAll('td, th')].filter(c => c.getClientRects().length);
      if (!cells.length) continue;
      out.tables += 1;
      const boxes = cells.map(c => c.getBoundingClientRect());
      for (let i = 0; i < cells.length; i++) {
        for (let j = i + 1; j < cells.length; j++)
          if (meets(boxes[i], boxes[j]) && !cells[i].contains(cells[j])
              && !cells[j].contains(cells[i]))
            out.overlaps.push([cells[i].textContent, cells[j].textContent]);
        const c = cells[i], s = getComputedStyle(c), box = boxes[i];
        if (c.scrollWidth > c.clientWidth + 0.5 && c.clientWidth > 0)
          out.clipped.push([c.textContent.slice(0, 30), c.scrollWidth, c.clientWidth]);
        const texts = [];
        const w = document.createTreeWalker(c, NodeFilter.SHOW_TEXT);
        for (let n = w.nextNode(); n; n = w.nextNode())
          if (n.textContent.trim()) texts.push(...textRects(n));
        const padding = {left: box.left + parseFloat(s.borderLeftWidth),
                         right: box.right - parseFloat(s.borderRightWidth),
                         top: box.top + parseFloat(s.borderTopWidth),
                         bottom: box.bottom - parseFloat(s.borderBottomWidth)};
        const width = parseFloat(s.outlineWidth) || 0, offset = parseFloat(s.outlineOffset) || 0;
        const outlined = s.outlineStyle !== 'none' && width > 0;
        const marks = [...c.querySelectorAll('svg, canvas, img')]
          .map(m => m.getBoundingClientRect());
        for (const t of texts) {
          const what = c.textContent.trim().slice(0, 30);
          if (!inside(t, padding)) out.crossed.push([what, 'border']);
          const band = inflate(box, offset + width), within = inflate(box, offset);
          if (outlined && meets(t, band) && !inside(t, within)) out.crossed.push([what, 'outline']);
          if (marks.some(m => meets(t, m))) out.crossed.push([what, 'marking']);
        }
      }
    }
    for (const table of area.querySelectorAll('table.tl-main[data-key]:not(.tl-detail)')) {
      const edge = area.getBoundingClientRect(), scroll = table.parentElement;
      const keys = table.getAttribute('data-key').split(',');
      for (const th of table.querySelectorAll('thead th')) {
        if (!keys.includes(th.textContent.trim())) continue;
        const r = th.getBoundingClientRect();
        if (r.left < edge.left - 0.5 || r.right > edge.right + 0.5
            || r.right > scroll.getBoundingClientRect().right + 0.5)
          out.keys.push([th.textContent.trim(), Math.round(r.right), Math.round(edge.right)]);
      }
      if (scroll.scrollWidth > scroll.clientWidth + 1)
        out.keys.push(['scrolls', scroll.scrollWidth, scroll.clientWidth]);
    }
  }
  out.outputs = roots.length;
  out.widest = Math.max(...roots.map(r => r.getBoundingClientRect().width));
  out.lowest = Math.round(out.lowest * 100) / 100;
  return out;
}"""

#: the colour behind an element (its own or its ancestors'), as [r, g, b]
BEHIND = """e => { let bg = [255, 255, 255];
  const chain = []; for (; e; e = e.parentElement) chain.push(e);
  for (const x of chain.reverse()) {
    const c = getComputedStyle(x).backgroundColor, k = c.startsWith('color(') ? 255 : 1;
    const m = c.match(/[\\d.]+/g).map((v, i) => Number(v) * (i < 3 ? k : 1));
    if (m.length < 4 || m[3] > 0) { const a = m.length > 3 ? m[3] : 1;
      bg = [0, 1, 2].map(i => m[i] * a + bg[i] * (1 - a)); }
  }
  return bg; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _theme(folder: Path, name: str) -> None:
    """JupyterLab's theme for the next page that opens (its user settings file)."""
    themes = folder / "settings" / "@jupyterlab" / "apputils-extension"
    themes.mkdir(parents=True, exist_ok=True)
    (themes / "themes.jupyterlab-settings").write_text(json.dumps({"theme": name}))


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
    nb = nbformat.read(NOTEBOOK, as_version=4)
    os.environ.update({k: env[k] for k in ("PYTHONPATH", "HF_HUB_OFFLINE")})
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(folder)}}).execute()  # fmt: skip
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    (folder / "data").mkdir()
    NotebookNotary(data_dir=str(folder / "data")).sign(nb)  # trusted, as in the session
    nbformat.write(nb, folder / "quickstart.ipynb")
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
        yield base, token, folder, nb
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        yield chromium
        chromium.close()


def _vscode_page(nb) -> str:
    """The notebook's outputs in a page as VS Code's dark theme gives them: its variables on
    ``body`` (each output 900 px wide)."""
    import html

    parts = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if "text/html" in data:
                parts.append(f'<div class="output">{data["text/html"]}</div>')
            elif "image/png" in data:
                parts.append(f'<div class="output"><img src="data:image/png;base64,'
                             f'{data["image/png"].strip()}"></div>')  # fmt: skip
            elif "text/plain" in data:
                parts.append(
                    f'<div class="output"><pre>{html.escape(data["text/plain"])}</pre></div>'
                )
    style = ";".join(f"{k}:{v}" for k, v in VSCODE_DARK.items())
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body class="vscode-dark" '
            f'style="{style};background:#1e1e1e;color:#cccccc;font:13px sans-serif">'
            f'<style>div.output{{width:{OUTPUT_WIDTH}px;margin:8px 0}}</style>{"".join(parts)}'
            "</body></html>")  # fmt: skip


@pytest.fixture(scope="module", params=["light", "dark", "vscode"])
def view(request, lab, browser):
    """One tab showing the executed quickstart: JupyterLab light, dark, or VS Code's dark."""
    base, token, folder, nb = lab
    theme = request.param
    blocked = []
    scheme = "light" if theme == "vscode" else None
    tab = browser.new_page(viewport=VIEWPORT, color_scheme=scheme)

    def route(r):
        url = r.request.url
        if url.startswith((base, "data:", "blob:", "about:")):
            return r.continue_()
        blocked.append(url)
        return r.abort()

    tab.route("**/*", route)
    if theme == "vscode":
        tab.set_content(_vscode_page(nb))
    else:
        _theme(folder, THEMES[theme])
        tab.goto(f"{base}/lab/tree/quickstart.ipynb?token={token}")
        tab.wait_for_selector(
            f'body[data-jp-theme-name="{THEMES[theme]}"]', state="attached", timeout=90_000
        )
    tab.wait_for_selector("iframe.tl-explorer", timeout=90_000)
    tab.wait_for_selector(f"{OUTPUTS[theme]} img", timeout=30_000)
    tab.wait_for_timeout(1500)  # the frame posts its height and gets its theme; circuitsvis draws
    yield tab, theme, blocked, folder
    tab.close()


def _record(folder: Path, theme: str, where: str, found: dict) -> None:
    """The lowest contrast found, per theme, in ``contrast.json`` and on the test's output."""
    path = folder / "contrast.json"
    seen = json.loads(path.read_text()) if path.exists() else {}
    seen.setdefault(theme, {})[where] = {k: found[k] for k in ("lowest", "lowest_text", "texts")}
    path.write_text(json.dumps(seen, indent=1))
    print(f"{theme} {where}: {found['texts']} texts, lowest contrast {found['lowest']} "
          f"({found['lowest_text']!r})")  # fmt: skip


def test_outputs_read_fit_and_keep_markings_off_the_digits(view):
    tab, theme, _, folder = view
    found = tab.evaluate(CHECKS, [OUTPUTS[theme], [255, 255, 255]])
    _record(folder, theme, "outputs", found)
    print(f"{theme}: {found['outputs']} outputs, {found['tables']} tables, widest output "
          f"{found['widest']:.0f} px")  # fmt: skip
    assert found["outputs"] >= 8 and found["tables"] >= 6 and found["texts"] > 200, found
    assert abs(found["widest"] - OUTPUT_WIDTH) <= 10, found["widest"]  # the box the keys fit
    assert not found["contrast"], found["contrast"][:8]
    assert not found["overlaps"], found["overlaps"][:5]
    assert not found["clipped"], found["clipped"][:5]
    assert not found["crossed"], found["crossed"][:5]
    assert not found["keys"], found["keys"][:5]


def test_images_are_not_blank(view):
    from PIL import Image

    tab, theme, _, _ = view
    images = tab.locator(f"{OUTPUTS[theme]} img")
    assert images.count() >= 3
    for i in range(images.count()):
        shot = Image.open(io.BytesIO(images.nth(i).screenshot())).convert("L")
        low, high = shot.getextrema()
        assert high - low > 100 and len(shot.resize((64, 64)).getcolors(4096)) > 8


def _explorer(tab):
    """The explorer's frame (playwright's Frame) and its locator."""
    frame = tab.frame_locator("iframe.tl-explorer")
    frame.locator("#tl-word-lists li").first.wait_for()  # the first of words= is shown
    child = next(f for f in tab.frames if f.parent_frame is not None
                 and f.evaluate("!!document.getElementById('tl-words')"))  # fmt: skip
    return child, frame


def test_explorer_draws_in_the_hosts_theme_and_answers_a_new_word(view):
    tab, theme, blocked, folder = view
    child, frame = _explorer(tab)
    dark = theme != "light"
    child.wait_for_function(f"document.documentElement.getAttribute('data-tl-theme') === "
                            f"'{'dark' if dark else 'light'}'", timeout=15_000)  # fmt: skip
    own = child.eval_on_selector("body", BEHIND)  # the page's own background, opaque
    assert (max(own) < 80) if dark else (min(own) > 200), own
    # a word that is not on the page: the most frequent kept word not in its text or lists
    word = child.evaluate("""() => {
        const W = JSON.parse(document.getElementById('tl-words-data').textContent);
        const seen = new Set(document.body.innerText.toLowerCase().split(/[^a-z]+/));
        let best = -1;
        W.tokens.forEach((t, p) => { const w = t.trim().toLowerCase();
          if (/^[a-z]{3,}$/.test(w) && !seen.has(w) && (best < 0 || W.counts[p] > W.counts[best]))
            best = p; });
        return W.tokens[best].trim(); }""")
    frame.locator("#tl-word").fill(word)
    frame.locator("#tl-word-lists ul.tl-assoc li:not(.tl-note)").first.wait_for()
    assert frame.locator("#tl-word-text .tl-shaded span").count() > 5
    frame.locator('td.tl-cell[data-label="L1H0"]').click()
    frame.locator("#tl-attn-actual canvas, #tl-attn-actual svg").first.wait_for()
    host = tab.eval_on_selector("iframe.tl-explorer", BEHIND)
    found = child.evaluate(CHECKS, ["body", host])
    _record(folder, theme, "explorer", found)
    print(f"{theme} explorer: answered {word!r}")
    assert not found["contrast"], found["contrast"][:8]
    assert not found["overlaps"] and not found["clipped"], (found["overlaps"], found["clipped"])
    assert not found["crossed"], found["crossed"][:5]
    assert not blocked, blocked[:5]  # neither JupyterLab nor an output needed the network


def test_explorer_frame_shows_the_word_box_without_a_nested_scroll(view):
    tab, theme, _, _ = view
    if theme == "vscode":
        pytest.skip("the frame's height is JupyterLab's to give")
    tab.reload()
    tab.wait_for_selector("iframe.tl-explorer", timeout=90_000)
    child, frame = _explorer(tab)
    frame_box = tab.eval_on_selector(
        "iframe.tl-explorer",
        """f => {
        const r = f.getBoundingClientRect(), area = f.closest('.jp-OutputArea-output');
        return {height: r.height, area_scroll: area.scrollHeight, area_client: area.clientHeight};
    }""",
    )
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
    height = tab.eval_on_selector("iframe.tl-explorer", "f => f.getBoundingClientRect().height")
    assert abs(height - sizes["view"]) <= 4, (height, sizes)
    # a head opened: the frame grows with its page, still with nothing to scroll inside it
    frame.locator('td.tl-cell[data-label="L1H0"]').click()
    frame.locator("#tl-attn-actual canvas, #tl-attn-actual svg").first.wait_for()
    tab.wait_for_timeout(800)
    after = child.evaluate("[document.documentElement.scrollHeight, window.innerHeight]")
    assert after[1] > sizes["view"] and after[0] <= after[1] + 1, after
