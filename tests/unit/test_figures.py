"""Every figure shows where it is made: an inline PNG (once), never pyplot, readable heatmaps.

The contrast of each heatmap annotation on its cell is computed here from the WCAG 2 formula
(relative luminance of the sRGB colours, (L1 + 0.05) / (L2 + 0.05)), not with the package's own.
"""

import io
import subprocess
import sys
from pathlib import Path

import matplotlib.colors
import matplotlib.figure
import matplotlib.image
import numpy as np
import pytest
import torch

from tl_leadterms.analyses.ablation import AblationTable, plot_ablation
from tl_leadterms.analyses.attention import AttentionAgreement, plot_agreement
from tl_leadterms.analyses.covariance import (
    CovarianceSimilarity,
    TokenMaps,
    plot_covariance,
    plot_token_maps,
)
from tl_leadterms.analyses.decompose import plot_scores
from tl_leadterms.sweeps import SweepTable, plot_sweep, plot_sweep_null
from tl_leadterms.training import TrainHistory, plot_history

ROOT = Path(__file__).resolve().parents[2]


def wcag_contrast(a, b) -> float:
    def luminance(rgb):
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb[:3]]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


class Rows:
    """Anything with ``.rows`` draws with plot_scores: a decomposition's columns."""

    def __init__(self, rows):
        self.rows = rows


def _sweep(with_null: bool) -> SweepTable:
    rows = []
    for i, (c, step) in enumerate((("step4", 4), ("step8", 8), ("step16", 16))):
        for layer in (None, 0, 1):
            row = {"checkpoint": c, "step": step, "layer": layer, "head": None,
                   "analysis": "decompose", "score": "cos_W_O" if layer is None else "cos_W",
                   "value": 0.99 + 1e-4 * (3 * i + (layer or 0))}  # fmt: skip
            if with_null:
                row.update(null_mean=0.98, null_sd=0.002, specific=0.3 + 0.01 * step)
            rows.append(row)
    return SweepTable(rows, ["step4", "step8", "step16"], {})


def _figures() -> dict:
    gen = torch.Generator().manual_seed(0)
    history = TrainHistory()
    for step in range(1, 6):
        history.record(step, 3.0 / step, {"W_O": 1 - 0.1 / step, "V.0": 1 - 0.2 / step})
    heads = [{"layer": layer, "head": h, "label": f"L{layer}H{h}",
              "rank_correlation": 0.9 - 0.35 * h - 0.3 * layer, "js_divergence": 0.05 * (h + 1),
              "scale": 1.0, "scale_at_bound": h == 2}
             for layer in range(2) for h in range(3)]  # fmt: skip
    covariance = [{"layer": layer, "head": None, "score": s, "value": v, "null_mean": 0.1,
                   "null_sd": 0.05, "lo": v - 0.05, "hi": v + 0.05}
                  for layer in range(2) for s, v in (("attention", 0.8), ("value_post", 0.4),
                                                     ("value_attn", -0.2))]  # fmt: skip
    covariance += [{"layer": layer, "head": h, "score": "attention", "value": 0.5 - 0.4 * h}
                   for layer in range(2) for h in range(3)]  # fmt: skip
    scores = [{"weight": w, "layer": layer, "head": h, "label": f"L{layer}H{h}",
               "cosine": 0.9931 + 0.0001 * h, "lo": 0.992, "hi": 0.995, "corrected": 0.993,
               "null_mean": 0.99, "null_sd": 0.001} for w in ("V", "W")
              for layer in range(2) for h in range(3)]  # fmt: skip
    maps = TokenMaps(torch.arange(6), [0, 1], torch.randn(2, 6, 4, generator=gen),
                     torch.randn(2, 6, 4, generator=gen), torch.randn(2, 6, 4, generator=gen),
                     {"model_name": "tiny"})  # fmt: skip
    ablation = AblationTable(2.0, [{"weight": "W_O", "layer": None, "removed_fraction": 0.6,
                                    "loss": 2.4}, {"weight": "V", "layer": 0,
                                    "removed_fraction": 0.2, "loss": 1.9}])  # fmt: skip
    return {
        "history": plot_history(history),
        "agreement": plot_agreement(AttentionAgreement(heads, {"fitted": True})),
        "covariance": plot_covariance(CovarianceSimilarity(covariance, {"model_name": "m"})),
        "token_maps": plot_token_maps(maps),
        "scores": plot_scores(Rows(scores)),
        "ablation": plot_ablation(ablation),
        "sweep": plot_sweep(_sweep(False), "cos_W", analysis="decompose"),
        "sweep_null": plot_sweep_null(_sweep(True), "cos_W"),
    }


@pytest.fixture(scope="module")
def figures():
    return _figures()


def test_every_figure_renders_once_inline_as_a_non_blank_png(figures):
    from IPython.core.formatters import DisplayFormatter

    formatter = DisplayFormatter()
    for name, fig in figures.items():
        assert isinstance(fig, matplotlib.figure.Figure), name
        png = fig._repr_png_()
        pixels = np.asarray(matplotlib.image.imread(io.BytesIO(png)))[..., :3]
        assert pixels.shape[0] > 100 and pixels.shape[1] > 300, name
        assert float(pixels.std()) > 0.05, name  # drawn, not one flat colour
        assert pixels.shape[1] <= 1100, name  # fits a notebook column (at most ~11 inches)
        data, _ = formatter.format(fig)
        assert "image/png" in data and "text/html" not in data, name  # one image, no second copy
        saved = io.BytesIO()
        fig.savefig(saved, format="png")
        assert saved.getvalue().startswith(b"\x89PNG"), name


def test_one_image_with_matplotlibs_inline_formatter_active_too(figures):
    """After ``%matplotlib inline`` IPython has a png printer for every Figure: that one draws
    ours instead of ``_repr_png_``, still one image and no HTML copy."""
    from types import SimpleNamespace

    from IPython.core.formatters import DisplayFormatter
    from IPython.core.pylabtools import select_figure_formats

    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    select_figure_formats(shell, {"png"})
    data, _ = shell.display_formatter.format(figures["scores"])
    assert set(data) == {"image/png", "text/plain"}
    assert data["image/png"]  # drawn by the registered printer (base64 text or bytes)


def test_figures_leave_no_pyplot_state():
    code = (
        "import sys; from tests.unit.test_figures import _figures; _figures();"
        "print('matplotlib.pyplot' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_heatmap_numbers_meet_contrast_and_scales_follow_the_data(figures):
    checked = 0
    for name in ("agreement", "covariance", "sweep"):
        for ax in figures[name].axes:
            if not ax.images:
                continue
            image = ax.images[0]
            values = np.ma.getdata(image.get_array())
            finite = values[np.isfinite(values)]
            low, high = image.norm.vmin, image.norm.vmax
            if finite.min() < 0 < finite.max():  # signed: diverging, centred on 0
                assert low == -high and high == pytest.approx(np.abs(finite).max())
            else:  # a score: the colours span the values' own range, at least 2% of their size
                span = max(finite.max() - finite.min(), 0.02 * np.abs(finite).max())
                middle = (finite.max() + finite.min()) / 2
                if finite.max() - finite.min() >= span:
                    assert (low, high) == pytest.approx((finite.min(), finite.max()))
                else:
                    assert (low, high) == pytest.approx((middle - span / 2, middle + span / 2))
            for text in ax.texts:
                x, y = text.get_position()
                v = values[round(y), round(x)]
                if not np.isfinite(v):
                    continue
                cell = image.cmap(image.norm(v))
                ink = matplotlib.colors.to_rgb(text.get_color())
                assert wcag_contrast(cell, ink) >= 4.5, (name, text.get_text())
                checked += 1
    assert checked >= 6 + 6 + 9


def test_a_scale_at_its_search_limit_is_starred(figures):
    rank_ax = figures["agreement"].axes[0]
    starred = sorted(t.get_position() for t in rank_ax.texts if t.get_text().endswith("*"))
    assert starred == [(2, 0), (2, 1)]  # head 2 of both layers has scale_at_bound


def test_close_values_read_apart_in_a_heatmap(figures):
    (ax, *_) = figures["sweep"].axes
    texts = [t.get_text() for t in ax.texts]
    assert len(set(texts)) == len(texts) == 6  # 0.99 … 0.9907: not all "0.99"


def test_legends_sit_off_the_data(figures):
    for name in ("scores", "covariance", "token_maps", "sweep_null"):
        fig = figures[name]
        assert fig.legends, name  # a figure legend, outside the panels
        assert all(ax.get_legend() is None for ax in fig.axes[:1]), name
        fig.canvas.draw()
        box = fig.legends[0].get_window_extent()
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent()), name
    (top, _) = figures["history"].axes
    figures["history"].canvas.draw()
    assert not top.get_legend().get_window_extent().overlaps(top.get_window_extent())


def test_panels_that_compare_one_score_share_their_scale(figures):
    v, w = figures["scores"].axes
    assert v.get_ylim() == w.get_ylim()
    panels = figures["sweep_null"].axes[:-1]  # one per layer; the last is the excess
    assert len({ax.get_ylim() for ax in panels}) == 1
