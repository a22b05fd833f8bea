"""output_agreement on a GPT-NeoX checkpoint series: the sweep's output columns, their plot and
the report's finding; fit=True's scalars on a model with embeddings."""

import json
import math

import pytest
import torch

from tl_leadterms import corpus_stats, output_agreement, sweep
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.series import load_series, load_windows, train_neox_series
from tl_leadterms.results.findings import HOLD_EXPLAINED


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    out = tmp_path_factory.mktemp("series")
    train_neox_series(out, n_stories=60, vocab_size=120, n_ctx=16, d_model=16, n_layers=1,
                      n_heads=2, steps=8, checkpoints=[0, 8], batch_size=8, lr=3e-3,
                      progress=False)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def stats_and_held(series):
    windows = load_windows(series)
    d_vocab = json.loads((series / "series.json").read_text())["d_vocab"]
    stats = corpus_stats(windows[:-8], d_vocab=d_vocab, vocab=60, progress=False)
    return stats, windows[-8:, :-1]


def test_sweep_output_columns_plot_and_finding(series, stats_and_held, tmp_path):
    stats, held = stats_and_held
    # s_lr given: no fit per checkpoint (the fit has its own test below)
    table = sweep(series, stats, analyses=["output"], tokens=held, s_lr=1.0, progress=False)
    scores = {s for _, s in table.scores()}
    assert {
        "output_kl",
        "output_explained",
        "output_c_O",
        "bigram_kl",
        "bigram_explained",
    } <= scores
    grid = table.pivot("output_explained")
    assert list(grid.columns) == ["step0", "step8"] and grid.notna().all().all()
    kl = table.pivot("output_kl")
    assert (kl.to_numpy() >= 0).all()
    from tl_leadterms.sweeps.figure import plot_sweep

    figure = plot_sweep(table, "output_explained", path=tmp_path / "explained.png")
    assert (tmp_path / "explained.png").stat().st_size > 0 and figure.axes
    text = " ".join(table.report_section().findings)
    assert "unigram → model KL gap" in text and f"{HOLD_EXPLAINED:.0%}" in text


@pytest.mark.slow  # about 30 s; the fast sibling is test_output.py's fit test on the paper model
def test_fit_reports_its_scalars_on_a_model_with_embeddings(series, stats_and_held):
    stats, held = stats_and_held
    model = load_model(load_series(series)[-1][2])
    out = output_agreement(model, stats, held, fit=True)
    fitted = out.metadata["fitted"]
    assert {"c_O", "c_V", "c_W", "calibration_kl", "bigram_c_O"} <= set(fitted)
    assert all(math.isfinite(fitted[k]) for k in ("c_O", "c_V", "c_W"))
    assert out.metadata["bucket"] and out.metadata["n_calibration"] == 4
    # the fitted leading-term model is at least as close as the fitted bigram on calibration
    # windows; on the held-out ones it is a finite, non-negative divergence
    assert out.kl >= 0 and math.isfinite(out.row("bigram")["kl"])
    assert "fitted scalars" in repr(out)
    lp = out.row("unigram")
    assert lp["explained"] == 0.0 and torch.isfinite(torch.tensor(lp["kl"]))
