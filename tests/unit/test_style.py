"""One look: HTML and matplotlib paint a value the same colour (red positive, blue negative), and
numbers read by their magnitude, at a GPT-2's small scale too (±0.0058: never 0.00 or -0)."""

import re

import matplotlib
import matplotlib.colors
import numpy as np
import pytest

from tl_leadterms.results import style
from tl_leadterms.results.figures import heatmap, new_figure
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.tokens import shaded_tokens

#: a GPT-2's cosines: the explorer grid printed 0.00 / -0.00 for all of them
SMALL = [0.0058, -0.0058, 0.0031, -0.0004, 0.00012, 0.0]


class Scores(ResultTable):
    SCORE = "cosine"


def _figure_colours(values: list[float]) -> dict[float, str]:
    """The colour each value gets in the package's matplotlib heatmap (the figure's own
    colormap and norm), and the digits it prints on it."""
    fig, (ax,) = new_figure(4.0, 2.0)
    heatmap(ax, fig, np.array([values]), ["r"], [str(i) for i in range(len(values))], label="x")
    image = ax.images[0]
    return {v: matplotlib.colors.to_hex(image.cmap(image.norm(v))) for v in values}


def _html_colours(values: list[float]) -> dict[float, str]:
    """The background of each value's cell in the HTML table's heatmap."""
    table = Scores([{"layer": 0, "head": h, "cosine": v} for h, v in enumerate(values)])
    html = table._repr_html_()
    rules = dict(re.findall(r"#(T_\w+)[^{]*\{[^}]*background-color:\s*(#[0-9a-f]{6})", html))
    cells = re.findall(r'<td id="(T_[^"]+)"[^>]*>([^<]*)</td>', _heat(html))
    return {values[i]: rules[cell] for i, (cell, _) in enumerate(cells)}


def _heat(html: str) -> str:
    return re.search(r'<table id="[^"]+" class="tl-heat".*?</table>', html, re.S).group(0)


def _is_red(colour: str) -> bool:
    r, _, b = matplotlib.colors.to_rgb(colour)
    return r > b


@pytest.mark.parametrize("x", [0.3, 0.0058])
def test_html_and_matplotlib_agree_on_positive_and_negative(x):
    values = [x, -x, 0.5 * x, -0.25 * x]
    figure, page = _figure_colours(values), _html_colours(values)
    assert page == figure  # the same RGB for +x and -x, and between
    assert _is_red(page[x]) and not _is_red(page[-x])  # red positive, blue negative
    # the shaded tokens and the report's and explorer's colours: the same map at ±x / scale
    tokens = shaded_tokens(["a", "b"], [x, -x], scale=x)
    assert re.findall(r"background:(#\w{6})", tokens) == [figure[x], figure[-x]]
    assert style.ramp()[255] == style.colour(1.0) == figure[x]  # the explorer's table's ends
    assert style.ramp()[0] == style.colour(-1.0) == figure[-x]


def test_a_swapped_map_is_caught(monkeypatch):
    """The check above fails when everything, or the HTML alone, draws red negative (the bug of
    issue 43)."""
    from tl_leadterms.results import figures, table_html

    monkeypatch.setattr(figures, "DIVERGING", "RdBu")  # matplotlib's RdBu: red at the low end
    with pytest.raises(AssertionError):
        test_html_and_matplotlib_agree_on_positive_and_negative(0.3)
    monkeypatch.undo()

    def swapped(value, scale):
        return style.colour(-value if scale[0] == style.DIVERGING else value, scale)

    monkeypatch.setattr(table_html, "colour", swapped)
    with pytest.raises(AssertionError):
        test_html_and_matplotlib_agree_on_positive_and_negative(0.3)


def test_numbers_by_magnitude_never_zero_for_a_value_that_is_not():
    assert [style.number(v) for v in SMALL] == ["0.0058", "-0.0058", "0.0031", "-0.0004",
                                               "0.00012", "0"]  # fmt: skip
    assert style.number(-0.0) == "0" and style.number(-1e-9) == "-1e-09"
    assert style.number(None) == "–" and style.number(float("nan")) == "–"
    assert style.number(3) == "3" and style.number(True) == "True"
    close = style.column_format([0.995767, 0.995765])
    assert close(0.995767) != close(0.995765)


def _non_zero_texts_read_non_zero(texts: list[str], values: list[float]) -> None:
    for text, v in zip(texts, values, strict=True):
        assert not re.fullmatch(r"-?0(\.0+)?", text) or v == 0, (text, v)
        assert text != "-0" and (v == 0 or float(text) != 0), (text, v)


def test_small_scores_in_the_text_and_html_tables_and_the_heatmaps():
    table = Scores([{"layer": 0, "head": h, "cosine": v} for h, v in enumerate(SMALL)])
    lines = repr(table).splitlines()[2:]
    _non_zero_texts_read_non_zero([line.split()[-1] for line in lines], SMALL)
    html = table._repr_html_()
    grid = re.findall(r'<td id="T_[^"]+"[^>]*>([^<]*)</td>', _heat(html))
    _non_zero_texts_read_non_zero(grid, SMALL)
    main = html[html.index('class="tl-main"') :]
    bars = re.findall(r'min-width:\d+ch">([^<]*)</span>', main)
    _non_zero_texts_read_non_zero(bars, SMALL)
    fig, (ax,) = new_figure(4.0, 2.0)
    heatmap(ax, fig, np.array([SMALL]), ["r"], [str(i) for i in range(len(SMALL))], label="x")
    _non_zero_texts_read_non_zero([t.get_text() for t in ax.texts], SMALL)


def test_report_heatmap_cells_use_the_map_and_print_small_values():
    from tl_leadterms.analyses.decompose.report import _cell

    row = {"label": "L0H0", "weight": "W", "cosine": -0.0058, "explained": 0.5,
           "character": "mixed"}  # fmt: skip
    cell = _cell("cosine", row)
    assert f"background:{style.colour(-0.0058)}" in cell and ">-0.0058</td>" in cell
