"""`report`: one self-contained HTML file; every part optional; user strings escaped."""

import doctest
import re

import pytest

from tests.conftest import unchecked
from tl_leadterms.checkpoints.sweep_table import SweepTable
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.report import report

N_LAYERS = 2
EVIL = '<script>alert("x")</script>'


@pytest.fixture(scope="module")
def trained():
    from tl_leadterms import corpus_stats, paper_model, train
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.stats import make_windows

    stories = generate_stories(200, seed=3)
    tokenizer = train_word_tokenizer(stories, 300)
    windows = make_windows(stories, 16, tokenizer=tokenizer)[:96]
    stats = corpus_stats(windows, len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(len(tokenizer), 16, N_LAYERS)
    history = train(model, windows, lr=1.0, steps=3, track=stats, progress=False)
    return {"stats": stats, "model": model, "history": history, "tokenizer": tokenizer}


def _external(page: str) -> list[str]:
    """Anything the page would fetch: src/href to a URL, module imports from a URL."""
    found = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*""", page)
    found += re.findall(r"""import[^;]*?from\s*["']https?://[^"']*""", page)
    found += re.findall(r"<link\b[^>]*>", page)
    return found


def test_full_report_is_self_contained(trained, tmp_path):
    path = report(
        tmp_path / "sub" / "report.html",
        **trained,
        text="the little girl saw a red ball",
        words=["red", "he"],
        lr=1.0,
        steps=3,
        progress=False,
    )
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
    assert page.count("CircuitsVis=") == 1 and page.count("CircuitsVis.render(") >= 3
    assert page.count("data:image/png;base64,") == 1  # the training history
    # provenance
    for key in ("n_sequences", "tokenizer_name", "tl_leadterms-word-level", "ln_handling"):
        assert key in page
    assert len(list(tmp_path.joinpath("sub").iterdir())) == 1  # no temporary file left


def test_user_strings_are_escaped(trained, tmp_path):
    page = report(
        tmp_path / "r.html",
        stats=trained["stats"],
        model=trained["model"],
        title=EVIL,
        text=f"the red ball {EVIL}",
        words=["red", EVIL],
        progress=False,
    ).read_text()
    assert EVIL not in page and 'alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert f"<title>{EVIL}" not in page


def test_missing_parts_become_notes(trained, tmp_path):
    page = report(tmp_path / "r.html", stats=trained["stats"], progress=False).read_text()
    assert "decompose-row" not in page and "CircuitsVis" not in page and "data:image" not in page
    assert "No model or decomposition given" in page and "No words given" in page
    assert "No text given" in page and "No training history" in page
    page = report(
        tmp_path / "r.html", stats=trained["stats"], text="a red ball", progress=False
    ).read_text()
    assert "Attention views need a model" in page


def test_given_decomposition_and_sweep_table(trained, tmp_path):
    from tl_leadterms import decompose

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
    page = report(
        tmp_path / "r.html",
        stats=trained["stats"],
        decomposition=d,
        sweep_table=table,
        words={"bigram": ["red"], "context": ["fish"]},
        progress=False,
    ).read_text()
    labels = re.findall(r'class="decompose-row"[^>]*data-label="([^"]+)"', page)
    assert labels == ["W_O", "L0", "L1", "L0", "L1", "L0", "L1"]  # per layer, heads combined
    assert page.count("data:image/png;base64,") == 2  # one heatmap per score
    assert "SweepTable: 3 checkpoints" in page
    kinds = re.findall(r'data-word="([^"]+)" data-kind="([^"]+)"', page)
    assert kinds == [("red", "bigram")]  # "fish" is not in these 96 windows: a note, no list
    assert "never occurred in the corpus" in page


def test_bad_arguments(trained, tmp_path):
    stats = trained["stats"]
    with pytest.raises(LeadTermsError, match="is a folder"):
        report(tmp_path, stats=stats, progress=False)
    with pytest.raises(LeadTermsError, match="stats must be a CorpusStats"):
        unchecked(report)(tmp_path / "r.html", stats={}, progress=False)
    with pytest.raises(LeadTermsError, match="words must"):
        report(tmp_path / "r.html", stats=stats, words=3, progress=False)
    with pytest.raises(LeadTermsError, match="words must map kinds"):
        report(tmp_path / "r.html", stats=stats, words={"nonsense": ["red"]}, progress=False)
    with pytest.raises(LeadTermsError, match="title must be a string"):
        unchecked(report)(tmp_path / "r.html", stats=stats, title=3, progress=False)
    with pytest.raises(LeadTermsError, match="lr must be a positive"):
        unchecked(report)(tmp_path / "r.html", stats=stats, lr=-1.0, progress=False)
    with pytest.raises(LeadTermsError, match="path must be a file path"):
        unchecked(report)(None, stats=stats, progress=False)
    assert not (tmp_path / "r.html").exists()


def test_docstring_example():
    import importlib

    module = importlib.import_module("tl_leadterms.report")  # the attribute is the function
    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
