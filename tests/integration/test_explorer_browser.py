"""A saved explorer in a real headless chromium (Debian's), driven by playwright, no network.

Opens the page, clicks a head cell, types a word in the word box and reads the DOM the page
built: the head's label and scores (against the numbers the explorer computed), the attention
views, the association list (against ``stats.top``), and a screenshot that is not blank.
"""

import copy
import io
import shutil

import pytest

from tl_leadterms.results.style import colour, number

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip(
    "playwright.sync_api",
    reason="needs playwright (pip install "
    "playwright; never `playwright install`: it uses Debian's chromium)",
)
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="needs chromium (apt-get install -y chromium; .ci/run installs it)"
)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
TEXT = "the little girl saw a red ball and she was happy"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from tl_leadterms import corpus_stats, explore, make_windows, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(200, seed=3)
    tokenizer = train_word_tokenizer(stories, 300)
    windows = make_windows(stories, n_ctx=16, tokenizer=tokenizer)[:64]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=16, n_layers=2, tokenizer=tokenizer)
    train(model, windows, lr=1.0, steps=4, progress=False)
    explorer = explore(model, stats, text=TEXT, schedule=(1.0, 4), words=["he"], null=9,
                       title="explorer <test> & page")  # fmt: skip
    path = explorer.save(tmp_path_factory.mktemp("explorer") / "explorer.html")
    return path, explorer, stats


def test_click_a_head_and_type_a_word(saved):
    from PIL import Image

    path, explorer, stats = saved
    blocked = []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})

        def route(r):
            if r.request.url.startswith("file:"):
                return r.continue_()
            blocked.append(r.request.url)
            return r.abort()

        page.route("**/*", route)
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_selector("td.tl-cell")
        assert page.title() == "explorer <test> & page"  # escaped in the source, read back whole
        assert page.locator("td.tl-cell").count() == 2  # 2 layers × 1 head
        page.click('td.tl-cell[data-label="L1H0"]')
        assert page.inner_text("#tl-head-label") == "L1H0"
        want = explorer.data["heads"]["L1H0"]["W"]
        cosine = page.inner_text('#tl-head-scores td[data-key="cosine"]')
        assert float(cosine) == pytest.approx(want["cosine"], rel=1e-3)
        assert page.inner_text('#tl-head-scores td[data-key="character"]') == want["character"]
        page.wait_for_selector("#tl-attn-actual canvas, #tl-attn-actual svg")
        assert page.locator("#tl-attn-predicted canvas, #tl-attn-predicted svg").count() >= 1
        assert page.locator("tr.tl-pair").count() >= 4  # model and theory pairs, W and value
        # a word that is neither in the text nor in words=, answered offline with its three
        # lists as CorpusStats.top ranks them, under the scoring's name
        ids, words = explorer.data["summary"]["tokens"], explorer.data["words"]
        assert "balloon" not in ids and "balloon" in words["tokens"]
        word = words["tokens"].index("balloon")
        page.fill("#tl-word", "balloon")
        assert "Scoring: cosine" in page.inner_text("#tl-word-scoring")
        for kind in ("bigram", "interchangeability", "context"):
            shown = page.locator(f'ul.tl-assoc[data-kind="{kind}"] li')
            top = stats.top(kind, "balloon", n=8)
            assert shown.locator(".tl-token").all_text_contents() == [n.token for n in top]
            assert len(top) == 8, kind
            scale = words["kinds"][kind]["scale"][word]  # the row's largest |score|
            values = [float(v) for v in shown.locator("small").all_text_contents()]
            assert values == pytest.approx([n.score / scale for n in top], abs=0.006)
        # the text shaded by the same scores (the kind shown first: context)
        row = words["kinds"]["context"]["text"][word]
        want = [number(row[c] / 100) if c >= 0 and row[c] is not None else None
                for c in words["text"]]  # fmt: skip
        titles = page.locator("#tl-word-text span").evaluate_all("s => s.map(x => x.title)")
        assert len(titles) == len(ids) and any(want)
        assert [t if w is not None else None for t, w in zip(titles, want, strict=True)] == want
        page.fill("#tl-word", "fish")  # kept, but not in these windows
        assert "never occurs in the corpus" in page.inner_text("#tl-word-lists")
        page.fill("#tl-word", "zebra")  # not a kept token
        assert "is not one of the 300 tokens" in page.inner_text("#tl-word-unknown")
        shot = page.screenshot(full_page=True)
        browser.close()
    assert not errors and not blocked
    image = Image.open(io.BytesIO(shot)).convert("L")
    low, high = image.getextrema()
    assert high - low > 100 and len(image.resize((64, 64)).getcolors(4096)) > 8  # not blank


def test_grid_prints_small_scores_by_magnitude_in_the_maps_colours(saved, tmp_path):
    """A GPT-2's scale (±0.0058) in the grid: the page's numbers are Python's ``number`` (the
    script mirrors it; never 0.00 or -0.00) and its colours matplotlib's (red positive)."""
    from tl_leadterms.explorer.build import Explorer

    _, explorer, _ = saved
    data = copy.deepcopy(explorer.data)
    small = {"L0H0": 0.0058, "L1H0": -0.00041}
    for head in data["summary"]["heads"]:
        head["scores"]["cosine"] = small[head["label"]]
    path = Explorer(data, "small").save(tmp_path / "small.html")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                   else r.abort())  # fmt: skip
        page.goto(path.as_uri())
        cells = page.locator("td.tl-cell").evaluate_all("""cs => cs.map(c => [c.dataset.label,
            c.textContent, getComputedStyle(c).backgroundColor])""")
        browser.close()
    for label, text, background in cells:
        value = small[label]
        assert text == number(value, 2), (label, text)
        rgb = "rgb({}, {}, {})".format(*(int(colour(value / 0.0058)[i : i + 2], 16)
                                         for i in (1, 3, 5)))  # fmt: skip
        assert background == rgb, (label, background, rgb)
    assert [t for _, t, _ in cells] == ["0.0058", "-0.00041"]


def test_result_table_sorts_on_click(tmp_path):
    from tl_leadterms.results.table import ResultTable

    rows = [{"layer": 0, "head": h, "score": s} for h, s in enumerate([0.2, -0.5, 0.9])]
    path = tmp_path / "table.html"
    path.write_text(ResultTable(rows)._repr_html_(), encoding="utf-8")
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=BROWSER, args=FLAGS)
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                   else r.abort())  # fmt: skip
        page.goto(path.as_uri())
        column = "table.tl-main tbody tr td:nth-child(3)"
        page.click("table.tl-main thead th:nth-child(3)")
        ascending = [float(t.split()[-1]) for t in page.locator(column).all_inner_texts()]
        page.click("table.tl-main thead th:nth-child(3)")
        descending = [float(t.split()[-1]) for t in page.locator(column).all_inner_texts()]
        browser.close()
    assert ascending == [-0.5, 0.2, 0.9] and descending == [0.9, 0.2, -0.5]
