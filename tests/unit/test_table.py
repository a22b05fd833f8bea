"""The result-table base: one look-up, plain data, and HTML checked by parsing it."""

from html.parser import HTMLParser

import pytest

from tl_leadterms import LeadTermsError
from tl_leadterms.analyses.ablation import AblationTable
from tl_leadterms.analyses.atlas import HeadAtlas
from tl_leadterms.analyses.attention import AttentionAgreement
from tl_leadterms.analyses.covariance import CovarianceSimilarity, TokenMaps
from tl_leadterms.analyses.decompose import Decomposition
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.table_html import heat_colour
from tl_leadterms.sweeps import SweepTable
from tl_leadterms.training import TrainHistory


class _Tags(HTMLParser):
    """Every start tag as (tag, attributes) and the text, in document order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags, self.text = [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def find(self, tag, **attrs):
        return [
            a for t, a in self.tags if t == tag and all(a.get(k) == v for k, v in attrs.items())
        ]


class Scores(ResultTable):
    """A table as another analysis would declare it: new columns, roles by name."""

    KEYS = ("layer", "head")
    SCORE = "excess"
    SCORE_RANGE = (-1.0, 1.0)


def _rows():
    rows = []
    for layer in range(2):
        for head in range(3):
            rows.append({"layer": layer, "head": head, "label": f"L{layer}H{head}",
                         "excess": 0.5 - 0.25 * head, "lo": 0.4 - 0.25 * head,
                         "hi": 0.6 - 0.25 * head, "null_mean": 0.0, "null_sd": 0.1,
                         "q": 0.01 if head == 0 else 0.2, "token": "<b>&"})  # fmt: skip
    return rows


def test_select_and_row_one_signature():
    t = Scores(_rows(), {"run": 1})
    assert t.row(1, 2)["label"] == "L1H2" == t.row(layer=1, head=2)["label"]
    assert [r["label"] for r in t.select(head=0)] == ["L0H0", "L1H0"]
    assert len(t.select(layer=1, head=[0, 2])) == 2 and len(t) == 6
    with pytest.raises(LeadTermsError, match=r"2 rows match \{'head': 1\}; add one of"):
        t.row(head=1)
    with pytest.raises(LeadTermsError, match=r"no row with \{'layer': 5"):
        t.row(5, 0)
    with pytest.raises(LeadTermsError, match="both positionally and by name"):
        t.row(0, layer=0)
    assert t.to_dict() == {"rows": _rows(), "metadata": {"run": 1}}
    df = t.to_pandas()
    assert list(df.columns)[:3] == ["layer", "head", "label"] and df["excess"].tolist()[1] == 0.25


def test_html_bar_whisker_band_grey_and_escape():
    t = Scores(_rows())
    html = t._repr_html_()
    tags = _Tags(html)
    # domain [-1, 1] over 110 px: x(v) = (v + 1) / 2 * 110
    bars = tags.find("rect", **{"class": "tl-bar"})
    assert len(bars) == 6
    x = lambda v: round((v + 1) / 2 * 110, 1)  # noqa: E731
    assert float(bars[0]["x"]) == x(0.0) and float(bars[0]["width"]) == pytest.approx(x(0.5) - x(0))
    assert float(bars[2]["x"]) == pytest.approx(x(0.0))  # score 0: a 1 px bar at 0
    whisker = tags.find("path", **{"class": "tl-ci"})[0]["d"]
    assert whisker.startswith(f"M{x(0.4)} 7H{x(0.6)}")
    band = tags.find("rect", **{"class": "tl-null"})[0]
    assert float(band["x"]) == x(-0.2) and float(band["width"]) == pytest.approx(x(0.2) - x(-0.2))
    rows = [a["class"] for t_, a in tags.tags if t_ == "tr" and "tl-row" in a.get("class", "")]
    assert rows == ["tl-row", "tl-row tl-ns", "tl-row tl-ns"] * 2  # q = 0.2 > 0.05 greyed
    assert "<b>&" not in html and "&lt;b&gt;&amp;" in html
    heat = tags.find("table", **{"class": "tl-heat"})
    assert len(heat) == 1 and html.count('class="tl-ns" title=') == 4  # 2 × 3 grid, 4 faint
    assert len(tags.find("th", onclick="tlltSort(this)")) == len(t.columns())
    assert "src=" not in html and "import " not in html  # nothing loaded from anywhere


def test_heat_colour_ends():
    assert heat_colour(1.0) == "rgb(0,0,255)" and heat_colour(-1.0) == "rgb(255,0,0)"
    assert heat_colour(5.0) == heat_colour(1.0)


def test_every_result_class_is_a_result_table():
    for cls in (AblationTable, AttentionAgreement, CovarianceSimilarity, Decomposition,
                HeadAtlas, SweepTable, TokenMaps, TrainHistory):  # fmt: skip
        assert issubclass(cls, ResultTable), cls


def test_history_rows_html_and_plot():
    h = TrainHistory()
    for step, loss, cos in [(1, 3.0, 0.5), (2, 2.5, 0.7), (3, 2.0, 0.9)]:
        h.record(step, loss, {"W_O": cos})
    assert h.row(2) == {"step": 2, "loss": 2.5, "cos_W_O": 0.7}
    assert h._repr_html_().count('class="tl-row"') == 3
    fig = h.plot()
    assert fig.axes and len(fig.axes[0].lines) == 1  # one cosine curve


def test_sweep_grid_is_layers_by_checkpoints_and_a_result_without_a_figure_says_so():
    rows = [{"checkpoint": c, "step": s, "layer": layer, "head": None, "analysis": "decompose",
             "score": "cos_W", "value": 0.1 * s + layer} for c, s in (("a", 1), ("b", 2))
            for layer in (0, 1)]  # fmt: skip
    table = SweepTable(rows, ["a", "b"], {})
    tags = _Tags(table._repr_html_())
    heat = tags.find("table", **{"class": "tl-heat"})
    assert [h["data-group"] for h in heat] == ["analysis=decompose, score=cos_W"]
    assert table.row("cos_W", 1, None, "b")["value"] == pytest.approx(1.2)
    with pytest.raises(LeadTermsError, match="Scores has no figure"):
        Scores(_rows()).plot()
