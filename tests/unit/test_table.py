"""The result-table base: one look-up, plain data, and HTML checked by parsing it."""

import re
from html.parser import HTMLParser

import pytest

from tl_leadterms import LeadTermsError
from tl_leadterms.analyses.ablation import AblationTable
from tl_leadterms.analyses.atlas import HeadAtlas
from tl_leadterms.analyses.attention import AttentionAgreement
from tl_leadterms.analyses.covariance import CovarianceSimilarity, TokenMaps
from tl_leadterms.analyses.decompose import Decomposition
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.table_html import cell_colours
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


VERDICTS = ("stands out", "negligible", "not distinguished")


def _rows():
    rows = []
    for layer in range(2):
        for head in range(3):
            rows.append({"layer": layer, "head": head, "label": f"L{layer}H{head}",
                         "excess": 0.5 - 0.25 * head, "lo": 0.4 - 0.25 * head,
                         "hi": 0.6 - 0.25 * head, "null_mean": 0.0, "null_sd": 0.1,
                         "q": 0.01 if head == 0 else 0.2, "token": "<b>&",
                         "verdict": VERDICTS[head]})  # fmt: skip
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
    main = html[html.index('class="tl-main"') : html.index("<details")]
    rows = re.findall(r'<tr class="(tl-row[^"]*)"', main)
    assert rows == ["tl-row", "tl-row tl-dim", "tl-row tl-dim"] * 2  # dimmed by the verdict
    assert "<b>&" not in html and "&lt;b&gt;&amp;" in html
    heat = tags.find("table", **{"class": "tl-heat"})
    faint = [a for t_, a in tags.tags if t_ == "td" and "tl-dim" in a.get("class", "").split()
             and "title" in a]  # fmt: skip
    assert len(heat) == 1 and len(faint) == 4  # 2 × 3 grid, 4 dimmed (each with its hover tip)
    sortable = len(tags.find("th", onclick="tlltSort(this)"))
    assert sortable == len(Scores.key_columns(t)) + 1 + 3 + 4  # main: keys, token; the rest
    assert "src=" not in html and "import " not in html  # nothing loaded from anywhere


def test_key_columns_lead_and_the_rest_fold_under_the_table():
    t = Scores([{**r, "z": 3.0, "p": 0.01, "character": "x"} for r in _rows()])
    assert t.key_columns() == ["label", "excess", "interval", "q", "verdict"]
    html = t._repr_html_()
    main, more = html[html.index('class="tl-main"') :].split("<details", 1)
    heads = re.findall(r'class="col_heading level0 col\d+"[^>]*>([^<]*)</th>', main)
    assert heads == ["label", "excess", "interval", "q", "verdict", "token", "character"]
    folded = re.findall(r'class="col_heading level0 col\d+"[^>]*>([^<]*)</th>', more)
    assert folded[0] == "label" and {"z", "p", "lo", "hi", "null_mean"} <= set(folded)
    assert "0.4 – 0.6" in main and "not distinguished" in main
    text = repr(t).splitlines()[1].split()
    assert text[:5] == ["label", "excess", "interval", "q", "verdict"]


def test_no_verdict_no_dimming_and_an_unreachable_null_is_one_line_above():
    plain = Scores([{k: v for k, v in r.items() if k != "verdict"} for r in _rows()])
    html = plain._repr_html_()
    dim = re.compile(r'class="[^"]*tl-dim')
    assert not dim.search(html) and "permutations" not in html  # q = 0.2 alone dims nothing
    rows = [{**r, "p": 0.1, "verdict": "unreachable"} for r in _rows()]
    html = Scores(rows)._repr_html_()
    assert not dim.search(html)
    line = re.search(r'<p class="tl-note">(null of [^<]*)</p>', html).group(1)
    assert "no row can reach q ≤ 0.05" in line and line.endswith("pass null=99")
    assert html.index(line) < html.index('class="tl-heat"')


def wcag_contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours, from the standard's formula."""

    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def heat_cells(html: str) -> list[tuple[str, str, str]]:
    """(text, background, colour) of every heatmap cell, read from the emitted CSS and cells."""
    rules = {}
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", html):
        found = dict(re.findall(r"(background-color|color):\s*(#[0-9a-f]{6})", body))
        for cell_id in re.findall(r"#(T_\w+)", selectors):
            rules[cell_id] = found
    out = []
    for table in re.findall(r'<table id="[^"]+" class="tl-heat".*?</table>', html, re.S):
        for cell_id, text in re.findall(r'<td id="([^"]+)"[^>]*>([^<]*)</td>', table):
            style = rules.get(cell_id, {})
            out.append((text, style.get("background-color"), style.get("color")))
    return out


class Cosines(ResultTable):
    SCORE = "cosine"
    SCORE_RANGE = (-1.0, 1.0)


def test_heatmap_text_contrast_and_scales_follow_the_data():
    # many values across the whole scale, so cells land near the black/white crossover
    signed = Cosines([{"layer": i // 8, "head": i % 8, "cosine": -0.3 + 0.7 * i / 63}
                      for i in range(64)])  # fmt: skip
    scores = Cosines([{"layer": i // 8, "head": i % 8, "cosine": 0.2 + 0.5 * i / 63}
                      for i in range(64)])  # fmt: skip
    for table, ends in ((signed, ("#053061", "#67001f")), (scores, ("#440154", "#fde725"))):
        cells = heat_cells(table._repr_html_())
        assert len(cells) == 64
        for text, background, colour in cells:
            assert background and colour, text
            assert wcag_contrast(background, colour) >= 4.5, (text, background, colour)
        by_value = {float(text): background for text, background, _ in cells}
        if table is signed:  # diverging (red positive), centred on 0, as wide as the max |value|
            assert by_value[0.4] == ends[1] and by_value[-0.3] != ends[0]
        else:  # sequential over the values' own range, not a fixed 0–1
            assert by_value[0.2] == ends[0] and by_value[0.7] == ends[1]


def test_noise_does_not_take_the_ends_of_the_colour_map():
    t = Cosines([{"layer": 0, "head": h, "cosine": 0.995765 + 2e-6 * h} for h in range(2)])
    (a, b) = [background for _, background, _ in heat_cells(t._repr_html_())]
    assert a not in ("#440154", "#fde725") and b not in ("#440154", "#fde725")  # not the ends
    step = max(abs(int(a[i : i + 2], 16) - int(b[i : i + 2], 16)) for i in (1, 3, 5))
    assert step <= 4  # two equal-ish values: next-door shades of one mid colour


def test_close_scores_read_apart_in_the_grid():
    t = Cosines([{"layer": 0, "head": h, "cosine": 0.9931 + 0.0001 * h} for h in range(4)])
    texts = [text for text, _, _ in heat_cells(t._repr_html_())]
    assert texts == ["0.9931", "0.9932", "0.9933", "0.9934"]


def test_style_is_scoped_lets_columns_size_and_scrolls_wide_tables():
    html = Scores(_rows())._repr_html_()
    ours = html[html.index("<style>") + 7 : html.index("</style>")]
    selectors = [sel.strip() for block in re.findall(r"([^{}]+)\{", ours)
                 for sel in block.split(",")]  # fmt: skip
    assert selectors and all("div.tl-table" in sel for sel in selectors if sel[0] != "@")
    assert "table-layout:auto!important" in ours  # JupyterLab's fixed layout overridden
    assert re.search(r"div\.tl-table th,div\.tl-table td\{white-space:nowrap", ours)
    assert re.search(r"div\.tl-table div\.tl-scroll\{overflow-x:auto", ours)
    tags = _Tags(html)
    assert len(tags.find("div", **{"class": "tl-scroll"})) == 2  # the table, the folded columns


def _mix(fg: str, bg: str, share: float) -> str:
    """CSS ``color-mix(in srgb, fg share, bg)`` of two opaque colours."""
    a, b = ([int(c[i : i + 2], 16) for i in (1, 3, 5)] for c in (fg, bg))
    return "#" + "".join(
        f"{round(x * share + y * (1 - share)):02x}" for x, y in zip(a, b, strict=True)
    )


def test_dimmed_text_keeps_its_contrast_in_every_palette():
    from tl_leadterms.results import style

    share = float(re.search(r"--tl-muted:color-mix\(in srgb,var\(--tl-fg\) (\d+)%",
                            style.theme_css("p")).group(1)) / 100  # fmt: skip
    # the fallback palettes, and JupyterLab's (light: 87% black on white, striped rows #f5f5f5;
    # dark: white on #111111, striped rows #212121) and VS Code's dark (#cccccc on #1e1e1e)
    (fg, dark_fg), (bg, dark_bg) = style._VARIABLES["fg"][2:], style._VARIABLES["bg"][2:]
    for ink, page, rows in ((fg, bg, "#f5f5f5"), (dark_fg, dark_bg, "#2a2a2a"),
                            ("#212121", "#ffffff", "#f5f5f5"), ("#ffffff", "#111111", "#212121"),
                            ("#cccccc", "#1e1e1e", "#252526")):  # fmt: skip
        muted = _mix(ink, page, share)
        head = _mix(ink, page, 0.08)
        assert wcag_contrast(muted, page) >= 4.5 and wcag_contrast(muted, rows) >= 4.5, muted
        assert wcag_contrast(ink, head) >= 4.5


def test_cell_colours_of_a_missing_value_a_dimmed_one_and_the_ends():
    css = cell_colours([None, 0.0, 1.0, 1.0], ("viridis", 0.0, 1.0), [False] * 3 + [True])
    assert css == ["", "background-color:#440154;color:#ffffff",
                   "background-color:#fde725;color:#000000",
                   "background-color:#fef5a8;color:#000000"]  # fmt: skip


def test_to_pandas_keeps_layer_and_head_integers():
    t = ResultTable([{"weight": "W_O", "layer": None, "head": None, "score": 0.5},
                     {"weight": "V", "layer": 0, "head": None, "score": 0.4},
                     {"weight": "W", "layer": 1, "head": 2, "score": 0.3}])  # fmt: skip
    df = t.to_pandas()
    assert str(df["layer"].dtype) == "Int64" and str(df["head"].dtype) == "Int64"
    assert df["layer"].tolist()[1:] == [0, 1]
    assert df["layer"].isna().tolist() == [True, False, False]
    assert df["head"].tolist()[2] == 2 and isinstance(df["head"].tolist()[2], int)
    full = ResultTable([{"layer": 0, "head": 1}, {"layer": 1, "head": 0}]).to_pandas()
    assert str(full["layer"].dtype) == "int64" and str(full["head"].dtype) == "int64"
    assert str(df["score"].dtype) == "float64"


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
