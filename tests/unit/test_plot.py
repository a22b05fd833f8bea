"""Figures and views of every result: offline circuitsvis views, escaping, figures and bad input."""

import html
import json
import re
from decimal import Decimal
from typing import ClassVar

import numpy as np
import pytest
import torch

from tests.conftest import unchecked
from tl_leadterms import LeadTermsError, corpus_stats, paper_model, sweep, train
from tl_leadterms.analyses.attention import plot_attention
from tl_leadterms.data import generate_stories, train_word_tokenizer
from tl_leadterms.explorer import plot_associations
from tl_leadterms.results import style
from tl_leadterms.results.html import View, figure_html, save_html
from tl_leadterms.stats import make_windows
from tl_leadterms.sweeps import plot_sweep
from tl_leadterms.training import plot_history

N_CTX = 12
CALL = re.compile(r'CircuitsVis\.render\("([^"]+)", CircuitsVis\.(\w+), (.*?)\);</script>', re.S)


@pytest.fixture(scope="module")
def setup():
    # a vocabulary with tokens that need escaping: the special token "<b>" and the word "&"
    stories = [s.replace(" the ", " the <b> & ", 4) for s in generate_stories(40, seed=1)]
    tokenizer = train_word_tokenizer(stories, 120, special_tokens=["[UNK]", "[EOS]", "<b>"])
    windows = make_windows(stories, n_ctx=N_CTX, tokenizer=tokenizer)[:96]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=N_CTX, n_layers=2, tokenizer=tokenizer)
    history = train(model, windows, lr=1.0, steps=3, track=stats, progress=False)
    return tokenizer, windows, stats, model, history


def calls(page: str) -> list[tuple[str, str, dict]]:
    """(element id, circuitsvis component, props) of every render call in a page."""
    return [(i, name, json.loads(props)) for i, name, props in CALL.findall(page)]


def assert_offline(page: str) -> None:
    assert not re.search(r"""src\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"""(import|from)\s*\(?\s*["']https?://""", page)
    assert "unpkg.com" not in page and "cdn.jsdelivr" not in page
    assert "<script crossorigin" not in page  # circuitsvis's own wrappers are not copied


def test_attention_page_is_offline_with_heads_and_prediction(setup, tmp_path):
    _, windows, stats, model, _ = setup
    view = plot_attention(model, stats, windows[0, :-1])
    path = view.save(tmp_path / "attention.html")
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    unid = re.compile(r"tl-leadterms-cv-[0-9a-f]+")  # element ids are fresh for every render
    assert unid.sub("", page) == unid.sub("", view.html())
    assert_offline(page)
    assert page.count("var CircuitsVis") == 1  # the bundle is inlined once
    found = calls(page)
    assert [name for _, name, _ in found] == ["AttentionHeads", "AttentionHeads"]
    for layer, (element, _, props) in enumerate(found):
        assert f'<div id="{element}"' in page
        assert props["attentionHeadNames"] == [f"L{layer}H0", f"L{layer} predicted"]
        attention = torch.tensor(props["attention"], dtype=torch.float64)
        assert attention.shape == (2, N_CTX, N_CTX)
        expected = view.data["predicted"][layer].to(torch.float64)
        assert torch.allclose(attention[1], expected, atol=1e-5)
        assert torch.allclose(attention[0], view.data["actual"][layer], atol=1e-5)
    assert "L0H0" in page and "L1H0" in page and "L0 predicted" in page
    assert view.data["fitted"] and all(c > 0 for c in view.data["scale"].values())


def test_attention_with_lr_steps_matches_predict_attention(setup):
    from tl_leadterms import predict_attention

    tokenizer, windows, stats, model, _ = setup
    text = "the <b> & the dog"
    view = plot_attention(model, stats, text, layers=[1], schedule=(1.0, 3))
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert view.data["tokens"] == ids and view.data["layers"] == [1]
    expected = predict_attention(stats, torch.tensor([ids]), schedule=(1.0, 3))[0]
    assert torch.allclose(view.data["predicted"][1], expected)
    (_, _, props), = calls(view.html())  # fmt: skip
    assert props["tokens"][1:3] == ["\u00a0&lt;b&gt;", "\u00a0&amp;"]  # with their spaces
    # too long a sequence is cut to the statistics' n_ctx
    long = plot_attention(model, stats, windows[:2].flatten(), layers=0, schedule=(1.0, 3))
    assert len(long.data["tokens"]) == N_CTX


def test_token_strings_are_escaped(setup):
    _, _, stats, model, _ = setup
    text = "the <b> & the cat"
    pages = [
        plot_attention(model, stats, text).html(),
        plot_associations(stats, "&", text=text).html(),
        plot_associations(stats, "<b>", text=text).html(),
    ]
    for page in pages:
        assert "<b>" not in page  # the raw token never reaches the markup
        assert "&lt;b&gt;" in page
        for _, _, props in calls(page):
            assert "\u00a0&" not in props["tokens"] and "\u00a0&amp;" in props["tokens"]
            assert "<b>" not in props["tokens"]
    assert "<strong>&amp;</strong>" in pages[1] and "<strong>&lt;b&gt;</strong>" in pages[2]


def test_two_views_in_one_page_have_distinct_ids(setup, tmp_path):
    _, windows, stats, model, history = setup
    attention = plot_attention(model, stats, windows[1, :-1], schedule=(1.0, 3))
    words = plot_associations(stats, "the", text="the dog saw the cat")
    combined = View([attention, "<p>between</p>", words, attention, plot_history(history)],
                    title="report <b> & co")  # fmt: skip
    page = save_html(combined, tmp_path / "sub" / "report.html").read_text(encoding="utf-8")
    assert_offline(page)
    assert page.count("var CircuitsVis") == 1
    ids = re.findall(r'<div id="([^"]+)"', page)
    assert len(ids) == 2 + 2 and len(set(ids)) == len(ids)  # the same view twice, too
    assert [i for i, _, _ in calls(page)] == ids  # each call renders into its own div
    assert "data:image/png;base64," in page
    assert "<title>report &lt;b&gt; &amp; co</title>" in page
    # fragments of separate views concatenated: still one id per element, no unclosed <div/>
    joined = attention.fragment() + words.fragment() + attention.fragment()
    ids = re.findall(r'<div id="([^"]+)"', joined)
    assert len(set(ids)) == len(ids) == 4
    assert not re.search(r"<div[^>]*/>", joined)
    assert attention._repr_html_().count("var CircuitsVis") == 1
    assert "var CircuitsVis" not in attention.fragment(library=False)


def test_save_html_of_a_rendered_circuitsvis_object(tmp_path):
    import circuitsvis.tokens

    rendered = circuitsvis.tokens.colored_tokens(tokens=["a", "b"], values=[0.1, 0.9])
    page = save_html(rendered, tmp_path / "tokens.html").read_text(encoding="utf-8")
    assert_offline(page)
    (_, name, props), = calls(page)  # fmt: skip
    assert name == "ColoredTokens" and props["values"] == [0.1, 0.9]
    assert list(tmp_path.iterdir()) == [tmp_path / "tokens.html"]  # no temporary file left


def test_unexpected_circuitsvis_layout_is_kept_but_closed():
    class Rendered:  # a future circuitsvis whose local_src we cannot split
        local_src = '<div id="cv-1" style="x"/>\n<script type="module">draw("cv-1")</script>'

    fragment = View([Rendered(), Rendered()]).fragment()
    ids = re.findall(r'<div id="([^"]+)" style="x"></div>', fragment)
    assert len(ids) == 2 and len(set(ids)) == 2 and '"cv-1"' not in fragment
    assert all(f'draw("{i}")' in fragment for i in ids)


@pytest.mark.parametrize("kind", ["bigram", "interchangeability", "context"])
def test_associations_neighbours_and_colours(setup, kind):
    tokenizer, _, stats, _, _ = setup
    text = "the girl saw the big dog"
    view = plot_associations(stats, "the", k=5, text=text, kind=kind, scoring="raw", exclude=None)
    token_id = tokenizer.convert_tokens_to_ids("the")
    names = {"bigram": "B_bar", "interchangeability": "Sigma_B", "context": "Phi_bar"}
    for kd, name in names.items():
        expected = stats.top(name, token_id, n=5, tokenizer=tokenizer, scoring="raw", exclude=None)
        assert view.data["neighbours"][kd] == expected
    page = view.html()
    for n in view.data["neighbours"]["bigram"]:
        assert f"<td>{html.escape(n.token, quote=False)} <small>" in page
    ids = tokenizer.encode(text, add_special_tokens=False)
    row = stats.matrix(names[kind])[stats.vocab.position(token_id)]
    expected = [float(row[stats.vocab.position(i)]) for i in ids]
    assert view.data["values"] == pytest.approx(expected, rel=1e-12, abs=0)
    assert view.data["scale"] == pytest.approx(float(row.abs().max()), rel=1e-12)
    # the words with the spaces between them (a no-break space before every word but the first)
    words = [html.escape(tokenizer.decode([i])) for i in ids]  # [UNK] for words not kept
    assert view.data["labels"] == [words[0]] + ["\u00a0" + w for w in words[1:]]
    spans = re.findall(r'<span class="tok" title="([^"]+)" style="background:#(\w\w)(\w\w)'
                       r'(\w\w);color:(#\w{6})">([^<]*)</span>', page)  # fmt: skip
    if spans:  # shaded: each token's title is its value; red for > 0, blue for < 0, white at 0
        assert [float(t) for t, *_ in spans] == pytest.approx(expected, rel=1e-3)
        for (_, r, g, b, ink, _), value in zip(spans, expected, strict=True):
            r, g, b = int(r, 16), int(g, 16), int(b, 16)
            assert (r > b) if value > 0 else (b > r) if value < 0 else (r, g, b) == (247, 246, 246)
            assert ink == style.ink(f"#{r:02x}{g:02x}{b:02x}")  # text that reads on its colour
        assert 'class="shade-legend"' in page
    else:  # nothing in this text reaches 1% of the row's largest value
        assert max(abs(v) for v in expected) < 0.01 * view.data["scale"]
        assert "No association in this text" in page


def test_associations_outside_kept_vocabulary_are_zero(setup):
    tokenizer, windows, _, _, _ = setup
    stats = corpus_stats(
        windows, d_vocab=len(tokenizer), vocab=30, tokenizer=tokenizer, progress=False
    )
    kept = stats.kept.tolist()
    dropped = next(i for i in range(len(tokenizer)) if i not in kept)
    text = tokenizer.decode([kept[0], dropped, kept[1]])
    view = plot_associations(
        stats, kept[0], k=3, text=text, kind="Phi_bar", scoring="raw", exclude=None
    )
    assert view.data["text_tokens"] == [kept[0], dropped, kept[1]]
    row = stats.Phi_bar[0]
    assert view.data["values"] == [float(row[0]), 0.0, float(row[1])]
    with pytest.raises(LeadTermsError, match="not in the kept vocabulary"):
        plot_associations(stats, dropped)


def test_bad_input(setup):
    tokenizer, windows, stats, model, _ = setup
    with pytest.raises(LeadTermsError, match="unknown kind 'colour'"):
        unchecked(plot_associations)(stats, "the", kind="colour")
    with pytest.raises(LeadTermsError, match="outside"):
        plot_associations(stats, 10_000)
    with pytest.raises(LeadTermsError, match="2 tokens"):
        plot_associations(stats, "the dog")
    bare = corpus_stats(windows, d_vocab=len(tokenizer), progress=False)  # no tokenizer attached
    with pytest.raises(LeadTermsError, match="tokenizer"):
        plot_associations(bare, 5, text="the dog")
    with pytest.raises(LeadTermsError, match="tokenizer"):
        plot_associations(bare, "the")
    with pytest.raises(LeadTermsError, match="k must be"):
        plot_associations(stats, 5, k=0)
    bare_model = paper_model(d_vocab=len(tokenizer), n_ctx=N_CTX, n_layers=1)
    with pytest.raises(LeadTermsError, match="tokenizer"):
        plot_attention(bare_model, bare, "the dog")
    with pytest.raises(LeadTermsError, match=r"lr=1\.0 alone"):
        plot_attention(model, stats, windows[0, :-1], lr=1.0)
    with pytest.raises(LeadTermsError, match="d_vocab"):
        plot_attention(paper_model(d_vocab=7, n_ctx=N_CTX, n_layers=1), stats, [1, 2, 3])
    with pytest.raises(LeadTermsError, match="one non-empty sequence"):
        plot_attention(model, stats, windows[:2])
    with pytest.raises(LeadTermsError, match="out of range"):
        plot_attention(model, stats, [1, 2, 3], layers=[5])
    with pytest.raises(LeadTermsError, match="CorpusStats"):
        unchecked(plot_attention)(model, "stats", [1, 2, 3])
    with pytest.raises(LeadTermsError, match="View or a circuitsvis"):
        save_html("<p>hi</p>", "x.html")
    with pytest.raises(LeadTermsError, match="part 0"):
        View([3])
    with pytest.raises(LeadTermsError, match="TrainHistory"):
        plot_history({"steps": [1]})
    with pytest.raises(LeadTermsError, match="matplotlib Figure"):
        figure_html("fig")


def _png_varies(path) -> bool:
    import matplotlib.image

    pixels = np.asarray(matplotlib.image.imread(path))[..., :3]
    return pixels.ndim == 3 and float(pixels.std()) > 0.05


def test_plot_history_png(setup, tmp_path):
    *_, history = setup
    fig = plot_history(history, path=tmp_path / "history.png")
    assert _png_varies(tmp_path / "history.png")
    top, bottom = fig.axes[:2]
    assert {line.get_label() for line in top.get_lines()} == set(history.cosines)
    # 1 - cosine on a log axis, no "1e-6+9.9999e-1" offset labels
    assert top.get_yscale() == "log"
    fig.canvas.draw()
    assert top.yaxis.get_offset_text().get_text() == ""
    for line in top.get_lines():
        gaps = [max(1 - c, 1e-12) for c in history.cosines[line.get_label()]]  # NaN stays NaN
        assert list(line.get_ydata()) == pytest.approx(gaps, rel=1e-12, nan_ok=True)
    assert list(bottom.get_lines()[0].get_ydata()) == history.loss
    assert figure_html(fig).startswith('<img src="data:image/png;base64,')
    with pytest.raises(LeadTermsError, match=r"\.png"):
        plot_history(history, path=tmp_path / "history.pdf")


def test_plot_sweep_png(setup, tmp_path):
    tokenizer, windows, stats, _, _ = setup
    models = {}
    for steps in (2, 4):  # V is still zero (cosine NaN) after one step
        model = paper_model(d_vocab=len(tokenizer), n_ctx=N_CTX, n_layers=2, tokenizer=tokenizer)
        train(model, windows, lr=1.0, steps=steps, progress=False)
        models[f"step{steps}"] = model
    table = sweep(list(models.items()), stats, analyses=["decompose"], progress=False)
    analysis, score = "decompose", "cos_V"
    fig = plot_sweep(table, score, analysis=analysis, path=tmp_path / "sweep.png")
    assert _png_varies(tmp_path / "sweep.png")
    (ax, *_) = fig.axes
    grid = table.pivot(score, analysis=analysis).to_numpy(dtype=float)
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
             for t in ax.texts}  # fmt: skip
    assert len(texts) == grid.size
    for (i, j), text in texts.items():  # each number is its cell's value, to its last digit
        last = Decimal(text).as_tuple().exponent
        assert abs(float(text) - grid[i, j]) <= 0.5 * 10.0**last + 1e-15
    distinct = {round(v, 12) for v in grid.ravel()}
    assert len(set(texts.values())) == len(distinct)  # values that differ read apart
    with pytest.raises(LeadTermsError, match="no rows"):
        plot_sweep(table, "no such score")


def test_token_labels_keep_their_spaces_and_shading_has_a_floor():
    from tl_leadterms.results.tokens import SHADE_FLOOR, shaded_tokens, token_labels

    class Words:  # a word-level decoder: tokens joined by single spaces
        def decode(self, ids):
            return " ".join(["the", "<b>", "dog"][i] for i in ids)

    assert token_labels([0, 1, 2], Words()) == ["the", "\u00a0&lt;b&gt;", "\u00a0dog"]
    assert token_labels([2, 0], None) == ["2", "0"]
    flat = shaded_tokens(["a", "b"], [1e-9, -2e-9], scale=1.0)
    assert "No association in this text" in flat and "background" not in flat
    assert "No association" in shaded_tokens(["a"], [0.5], scale=0.0)
    edge = shaded_tokens(["a", "b", "c"], [SHADE_FLOOR, -1.0, 0.0], scale=1.0)
    assert "No association" not in edge
    assert re.findall(r"background:(#\w{6})", edge) == [
        style.colour(SHADE_FLOOR),  # the diverging map, 1% of the way to red: still white
        "#053061",  # full blue
        style.colour(0.0),  # its white middle
    ]


def test_attention_views_of_chosen_heads_with_agreement(setup):
    from tl_leadterms import attention_agreement
    from tl_leadterms.analyses.attention.views import extreme_heads

    _, windows, stats, model, _ = setup
    tokens = windows[0, :-1]
    view = plot_attention(model, stats, tokens, heads=["L1H0"], schedule=(1.0, 3))
    (_, _, props), = calls(view.html())  # fmt: skip
    assert props["attentionHeadNames"] == ["L1H0", "L1 predicted"]
    assert view.data["layers"] == [1] and view.data["heads"] == ["L1H0"]
    expected = attention_agreement(model, stats, tokens[None], layers=[1], schedule=(1.0, 3),
                                   progress=False).rows[0]  # fmt: skip
    page = view.html()
    assert f"rank correlation {expected['rank_correlation']:.3f}" in page
    assert f"JS divergence {expected['js_divergence']:.3g}" in page
    both = plot_attention(model, stats, tokens, heads=2, schedule=(1.0, 3))
    assert sorted(both.data["heads"]) == ["L0H0", "L1H0"] and len(calls(both.html())) == 2
    rows = [{"label": f"L{i}H0", "rank_correlation": r} for i, r in enumerate([0.2, float("nan"),
            0.9, 0.5])]  # fmt: skip
    assert extreme_heads(rows, 3) == ["L1H0", "L2H0", "L3H0"]  # best two, and the NaN one
    for bad in (["L9H0"], ["L0H7"], ["head0"], []):
        with pytest.raises(LeadTermsError, match="head"):
            plot_attention(model, stats, tokens, heads=bad)


def test_plot_scores_bands(setup):
    from tl_leadterms.analyses.decompose import plot_scores

    class Rows:
        rows: ClassVar = [{"weight": "V", "layer": i, "label": f"L{i}", "score": 0.5 + i / 10,
                 "lo": 0.4 + i / 10, "hi": 0.6 + i / 10, "null_mean": 0.1, "null_sd": 0.05}
                for i in range(3)]  # fmt: skip

    fig = plot_scores(Rows())
    (ax,) = fig.axes  # one panel per weight, no second axis
    assert ax.get_legend() is None  # the legend is outside the panels
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == sorted(
        ["null mean ± 2 sd", "CI", "score"])  # fmt: skip
    # heads and layers are categories: no line joins them (the whiskers' caps are markers)
    assert all(line.get_linestyle() == "None" for line in ax.get_lines())
    points = next(c for c in ax.collections if c.get_label() == "score")
    assert np.asarray(points.get_offsets()).ravel().tolist() == pytest.approx(
        [0, 0.5, 1, 0.6, 2, 0.7])  # fmt: skip
    band = [y for p in ax.patches for y in (p.get_y(), p.get_y() + p.get_height())]
    assert band == pytest.approx([0.0, 0.2] * 3)  # null_mean ± 2 null_sd
    whiskers = next(c for c in ax.collections if type(c).__name__ == "LineCollection")
    ends = [y for seg in whiskers.get_segments() for y in sorted(seg[:, 1])]
    assert ends == pytest.approx([0.4, 0.6, 0.5, 0.7, 0.6, 0.8])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["L0", "L1", "L2"]
    with pytest.raises(LeadTermsError, match="Decomposition"):
        plot_scores([1, 2])
