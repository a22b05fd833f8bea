"""`report`: one self-contained HTML file; every part optional; user strings escaped."""

import doctest
import re

import pytest

from tests.conftest import unchecked
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.reports import report
from tl_leadterms.sweeps.table import SweepTable

N_LAYERS = 2
EVIL = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def trained():
    from tl_leadterms import corpus_stats, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.stats import make_windows

    stories = generate_stories(200, seed=3)
    tokenizer = train_word_tokenizer(stories, 300)
    windows = make_windows(stories, n_ctx=16, tokenizer=tokenizer)[:96]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=16, n_layers=N_LAYERS)
    history = train(model, windows, lr=1.0, steps=3, track=stats, progress=False)
    return {"stats": stats, "model": model, "history": history, "tokenizer": tokenizer}


def _external(page: str) -> list[str]:
    """Anything the page would fetch: src/href to a URL, module imports from a URL."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page)
    found += re.findall(r"""import[^;]*?from\s*["']https?://[^"']*""", page)
    found += re.findall(r"<link\b[^>]*>", page)
    return found


def _by_heading(page: str, css: str) -> list[dict[str, str]]:
    """Each row of ``<table class=css>`` as heading -> cell text."""
    table = re.search(rf'<table class="{css}">(.*?)</table>', page, re.S).group(1)
    heads = re.findall(r"<th>(.*?)</th>", table)
    rows = re.findall(rf'<tr class="{css}-row".*?</tr>', table, re.S)
    return [dict(zip(heads, re.findall(r"<td[^>]*>(.*?)</td>", r), strict=True)) for r in rows]


def _results(trained, text="the little girl saw a red ball", words=("red", "he")):
    from tl_leadterms import decompose
    from tl_leadterms.analyses.attention import plot_attention
    from tl_leadterms.explorer import associations

    model, stats, history = trained["model"], trained["stats"], trained["history"]
    return [decompose(model, stats, schedule=history, per_head=True),
            plot_attention(model, stats, text, schedule=history),
            associations(stats, list(words), text=text), history]  # fmt: skip


def test_full_report_is_self_contained(trained, tmp_path):
    path = report(tmp_path / "sub" / "report.html", *_results(trained), stats=trained["stats"],
                  model=trained["model"], progress=False)  # fmt: skip
    assert path == tmp_path / "sub" / "report.html"
    page = path.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert _external(page) == []
    # one decompose row per weight, layer and head, each with a stable label
    labels = re.findall(r'<tr class="decompose-row"[^>]*data-label="([^"]+)"', page)
    assert labels == ["W_O"] + ["L0H0", "L1H0"] * 3  # W_O; V, W, P per layer
    assert 'id="decompose-W-L1H0"' in page
    # association lists for each word, with its neighbours
    assert re.findall(r'class="view association" data-word="([^"]+)"', page) == ["red", "he"]
    assert "ball" in page and "balloon" in page
    # attention views: actual heads next to the prediction, one circuitsvis bundle for all
    assert "L0H0" in page and "L1H0" in page and "predicted" in page
    assert page.count("CircuitsVis=") == 1 and page.count("CircuitsVis.render(") == N_LAYERS
    # the findings on top, then the sections in the order the results were given
    order = [
        page.index(f'<section id="{s}">')
        for s in ("findings", "provenance", "decompose", "attention", "associations", "history")
    ]
    assert order == sorted(order)
    assert page.count('<table class="heatmap"') == 3 * 3  # V, W, P × cosine, explained, character
    assert '<details class="decompose-details" open>' in page  # 2 layers: the table is open
    assert "Training history: every weight keeps cosine ≥ 0.9" in page
    assert page.count("data:image/png;base64,") == 1  # the training history
    # provenance
    for key in ("n_sequences", "tokenizer_name", "tl_leadterms-word-level", "ln_handling"):
        assert key in page
    assert len(list(tmp_path.joinpath("sub").iterdir())) == 1  # no temporary file left


def test_the_report_computes_nothing_it_is_given(trained, tmp_path, monkeypatch):
    """Composing a page runs no analysis and converts no model: each result renders itself."""
    import importlib

    compute = importlib.import_module("tl_leadterms.analyses.decompose.compute")
    convert = importlib.import_module("tl_leadterms.adapters.convert")

    results = _results(trained)

    def refuse(*args, **kwargs):
        raise AssertionError("the report computed what it was given")

    monkeypatch.setattr(compute, "weights_for_stats", refuse)  # what every decompose does first
    monkeypatch.setattr(convert, "to_paper", refuse)
    page = report(tmp_path / "r.html", *results, stats=trained["stats"], model=trained["model"],
                  progress=False).read_text()  # fmt: skip
    assert page.count('class="decompose-row"') == 7


def test_user_strings_are_escaped(trained, tmp_path):
    results = _results(trained, text=f"the red ball {EVIL}", words=("red", EVIL))
    page = report(tmp_path / "r.html", *results, stats=trained["stats"], title=EVIL,
                  progress=False).read_text()  # fmt: skip
    assert EVIL not in page and 'alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert f"<title>{EVIL}" not in page


def test_only_what_is_given_gets_a_section(trained, tmp_path):
    from tl_leadterms.explorer import associations

    lists = associations(trained["stats"], ["red"])
    page = report(tmp_path / "r.html", lists, progress=False).read_text()
    sections = re.findall(r'<section id="([^"]+)">', page)
    assert sections == ["findings", "provenance", "associations"]
    assert "decompose-row" not in page and "CircuitsVis" not in page and "data:image" not in page
    assert "No statistics given: pass stats=" in page and "No model given" in page
    with pytest.raises(LeadTermsError, match="report needs at least one result"):
        report(tmp_path / "e.html", stats=trained["stats"], progress=False)


def test_given_decomposition_and_sweep_table(trained, tmp_path):
    from tl_leadterms import decompose
    from tl_leadterms.explorer import associations

    d = decompose(trained["model"], trained["stats"], per_head=False)
    records = [
        {
            "checkpoint": f"step{s}",
            "step": s,
            "rows": [
                {"layer": None, "score": "cos_W_O", "value": 0.5 + s / 10},
                *({"layer": i, "score": "cos_V", "value": 0.1 * i} for i in (0, 1)),
            ],
        }
        for s in (0, 1, 2)
    ]
    for record in records:
        for row in record["rows"]:
            row.update(analysis="decompose", head=None)
    table = SweepTable.from_records(records, metadata={})
    lists = associations(trained["stats"], {"bigram": ["red"], "context": ["fish"]})
    page = report(tmp_path / "r.html", d, table, lists, stats=trained["stats"],
                  progress=False).read_text()  # fmt: skip
    labels = re.findall(r'class="decompose-row"[^>]*data-label="([^"]+)"', page)
    assert labels == ["W_O", "L0", "L1", "L0", "L1", "L0", "L1"]  # per layer, heads combined
    assert page.count("data:image/png;base64,") == 2  # one heatmap per score
    assert "SweepTable: 3 checkpoints" in page
    kinds = re.findall(r'data-word="([^"]+)" data-kind="([^"]+)"', page)
    assert kinds == [("red", "bigram")]  # "fish" is not in these 96 windows: a note, no list
    assert "never occurred in the corpus" in page


def test_bad_arguments(trained, tmp_path):
    from tl_leadterms.explorer import associations

    stats = trained["stats"]
    lists = associations(stats, ["red"])
    with pytest.raises(LeadTermsError, match="is a folder"):
        report(tmp_path, lists, progress=False)
    with pytest.raises(LeadTermsError, match="stats must be a CorpusStats"):
        unchecked(report)(tmp_path / "r.html", lists, stats={}, progress=False)
    with pytest.raises(LeadTermsError, match="words must"):
        associations(stats, 3)
    with pytest.raises(LeadTermsError, match="words must map kinds"):
        associations(stats, {"nonsense": ["red"]})
    with pytest.raises(LeadTermsError, match="title must be a string"):
        unchecked(report)(tmp_path / "r.html", lists, title=3, progress=False)
    with pytest.raises(LeadTermsError, match="report takes results that render a section"):
        report(tmp_path / "r.html", lists, {"rows": []}, progress=False)
    with pytest.raises(LeadTermsError, match="path must be a file path"):
        unchecked(report)(None, lists, progress=False)
    assert not (tmp_path / "r.html").exists()


def test_docstring_example():
    import importlib

    module = importlib.import_module("tl_leadterms.reports.compose")
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.hooked
def test_report_of_a_deep_model_stays_small(tmp_path):
    """12 layers × 4 heads: heatmaps, the per-head rows inside a collapsed <details>, and a
    handful of attention views (the best and worst agreeing heads)."""
    from tests.factories import random_attn_only
    from tl_leadterms import corpus_stats, decompose
    from tl_leadterms.analyses.attention import ATTENTION_VIEWS, plot_attention
    from tl_leadterms.analyses.decompose.report import COSINE_FLOOR, EXPLAINED_FLOOR
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.stats import make_windows

    stories = generate_stories(60, seed=2)
    tokenizer = train_word_tokenizer(stories, 60)
    windows = make_windows(stories, n_ctx=12, tokenizer=tokenizer)[:64]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = random_attn_only(len(tokenizer), 12, seed=1, n_layers=12, n_heads=4)
    d = decompose(model, stats, per_head=True)
    path = report(tmp_path / "deep.html", d, stats=stats, model=model, progress=False)
    page = path.read_text(encoding="utf-8")
    size = path.stat().st_size
    print(f"12x4 report without attention views: {size / 1e3:.0f} kB")
    details = re.search(r'<details class="decompose-details">(.*?)<details', page, re.S)
    assert details is not None  # collapsed (no "open") for 12 layers
    rows = re.findall(r'<tr class="decompose-row"', page)
    assert len(rows) == 1 + 3 * 12 * 4  # W_O; V, W, P per layer and head
    assert len(re.findall(r'<tr class="decompose-row"', details.group(1))) == len(rows)
    for metric in ("cosine", "explained", "character"):
        grids = re.findall(rf'<table class="heatmap" data-weight="[^"]+" data-metric="{metric}"',
                           page)  # fmt: skip
        assert len(grids) == 3  # V, W, P
    # a random model explains little: no character where R² is below the floor, and no
    # implied s·η where the cosine is below its floor
    for key, more in zip(_by_heading(page, "decompose"), _by_heading(page, "decompose-more"),
                         strict=True):  # fmt: skip
        if float(more["explained"]) < EXPLAINED_FLOOR:
            assert key["character"] == "–"
        if float(key["cosine"]) < COSINE_FLOOR:
            assert more["implied s·η"] == "–"
    # with a text: ATTENTION_VIEWS heads, one view each, and the agreement beside each
    views = plot_attention(model, stats, "the little girl saw a red ball", heads=ATTENTION_VIEWS)
    path = report(tmp_path / "deep_text.html", d, views, stats=stats, progress=False)
    page = path.read_text(encoding="utf-8")
    print(f"12x4 report with attention views: {path.stat().st_size / 1e3:.0f} kB")
    heads = re.findall(r'<p class="agreement" data-head="(L\d+H\d+)">', page)
    assert len(heads) == ATTENTION_VIEWS and len(set(heads)) == ATTENTION_VIEWS
    assert page.count("CircuitsVis.render(") == ATTENTION_VIEWS
    assert page.count("CircuitsVis=") == 1
    assert path.stat().st_size < 1.3e6 + 300e3  # the circuitsvis bundle (~1.3 MB) and the rest


def test_findings_null_ci_and_atlas(trained, tmp_path):
    from tl_leadterms import decompose, head_atlas
    from tl_leadterms.results.null import NullSpec, add_verdicts

    d = decompose(trained["model"], trained["stats"], schedule=(1.0, 3), per_head=True)
    # the columns of the null and CI helpers, written here by hand
    for i, row in enumerate(d.rows):
        row.update(score=row["cosine"], lo=row["cosine"] - 0.01, hi=row["cosine"] + 0.03,
                   null_mean=0.1, null_sd=0.05, z=9.0, p=0.5 if i == 2 else 0.001,
                   excess=row["cosine"] - 0.1)  # fmt: skip
    add_verdicts(d.rows, NullSpec(999))  # the floor 1/(999 + 1) = 0.001: the others stand out
    label = f"{d.rows[2]['weight']} {d.rows[2]['label']}"

    atlas = head_atlas(trained["model"], trained["stats"], null=5)
    page = report(tmp_path / "r.html", d, atlas, stats=trained["stats"],
                  progress=False).read_text()  # fmt: skip
    findings = re.search(r'<ul class="findings">(.*?)</ul>', page, re.S).group(1)
    n = len(d.rows)
    assert f"Of the {n} scores with a null, {n - 1} stand out (" in findings
    assert f"1 not distinguished ({label})" in findings
    assert f"over {len(d.rows)} scores: median width 0.04" in findings
    assert '<div class="view atlas"><div class="head-atlas">' in page
    for column in ("null_mean", "null_sd", "z", "p", "lo", "hi"):
        assert f"<th>{column}</th>" in page
    assert page.count("data:image/png;base64,") == 1  # the scores with their bands
    # the row its verdict dims gets no implied s·η even where its cosine is high
    assert _by_heading(page, "decompose-more")[2]["implied s·η"] == "–"
    assert (
        _by_heading(page, "decompose")[2]["interval"]
        == f"{d.rows[2]['lo']:.3g} – {d.rows[2]['hi']:.3g}"
    )
    plain = decompose(trained["model"], trained["stats"], per_head=True)
    page = report(tmp_path / "p.html", plain, progress=False).read_text()
    assert "No null baseline in these rows" in page and "No confidence intervals" in page


def _first_neighbours(page: str) -> list[str]:
    """The three labels of the first row of the (only) association table: bigram,
    interchangeability, context."""
    row = re.search(r'<tr class="association-row"><td>1</td>(.*?)</tr>', page)
    return [
        re.sub(r"<small>.*?</small>", "", c).strip()
        for c in re.findall(r"<td>(.*?)</td>", row.group(1))
    ]


def test_association_lists_name_their_scoring(trained, tmp_path):
    import torch

    stats, tokenizer = trained["stats"], trained["tokenizer"]
    from tl_leadterms.explorer import associations

    words = {"interchangeability": ["he"]}
    cosine = report(tmp_path / "c.html", associations(stats, words), progress=False).read_text()
    raw = report(tmp_path / "r.html", associations(stats, words, scoring="raw"),
                 progress=False).read_text()  # fmt: skip
    assert 'class="association-scoring" data-scoring="cosine"' in cosine
    assert "<strong>cosine</strong> scoring: each entry divided by the norms" in cosine
    assert "Special tokens ([EOS], [UNK]) are left out" in cosine
    assert 'data-scoring="raw"' in raw and "as the paper prints them" in raw
    # the top interchangeable token of "he" by a plain reference: Σ = B̄ᵀB̄ from the bigram
    # counts, cosine Σ_ij / √(Σ_ii Σ_jj) and raw Σ_ij, the word itself and specials left out
    (he,) = tokenizer.encode("he", add_special_tokens=False)
    B = stats.B_bar.double()
    sigma = B.T @ B
    skip = {he, *tokenizer.all_special_ids}
    diag = sigma.diagonal()

    def best(scores):
        order = [int(i) for i in torch.argsort(scores, descending=True)]
        return tokenizer.decode([next(i for i in order if i not in skip)])

    cos_ref = best(sigma[he] / (diag[he] * diag).sqrt().clamp_min(1e-300))
    assert _first_neighbours(cosine)[1] == cos_ref
    raw_ref = best(sigma[he])
    assert _first_neighbours(raw)[1] == raw_ref
    with pytest.raises(LeadTermsError, match="associations must be one of"):
        associations(stats, words, scoring="tfidf")


def _tv_reference(pattern) -> float:
    """max over query rows q of ½ Σ_k |p_qk − 1/(q+1)| on k ≤ q, written plainly."""
    worst = 0.0
    for q in range(pattern.shape[0]):
        total = sum(abs(float(pattern[q, k]) - 1.0 / (q + 1)) for k in range(q + 1))
        worst = max(worst, 0.5 * total)
    return worst


def test_attention_of_a_later_checkpoint(trained, tmp_path):
    import copy

    import torch

    from tl_leadterms import train
    from tl_leadterms.data import generate_stories
    from tl_leadterms.stats import make_windows

    stats, tokenizer = trained["stats"], trained["tokenizer"]
    later = copy.deepcopy(trained["model"])
    windows = make_windows(generate_stories(200, seed=3), n_ctx=16, tokenizer=tokenizer)[:96]
    train(later, windows, lr=1.0, steps=40, progress=False)  # steps 4..43 of the same run
    from tl_leadterms import decompose
    from tl_leadterms.analyses.attention import plot_attention

    text = "the little girl saw a red ball"
    d = decompose(trained["model"], stats, schedule=(1.0, 3), per_head=True)
    views = plot_attention(later, stats, text, step=43)  # past the regime: the scale fitted
    page = report(tmp_path / "r.html", d, views, progress=False).read_text()
    assert "The weights at step 3 (s·η = 3)" in page
    assert 'data-step="43"' in page and "<strong>step 43</strong>" in page
    assert "scale c fitted to this checkpoint" in page
    rows = re.findall(r'class="attention-row" data-head="(L\dH0)" data-tv-actual="([^"]+)"', page)
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    _, cache = later.run_with_cache(ids)
    for label, tv in rows:
        layer = int(label[1])
        assert float(tv) == pytest.approx(_tv_reference(cache["pattern", layer][0, 0]), abs=1e-5)
    assert [label for label, _ in rows] == ["L0H0", "L1H0"]
    assert "Attention on the sample text at step 43" in page
    with pytest.raises(LeadTermsError, match="step must be an integer"):
        plot_attention(later, stats, text, step=-1)
