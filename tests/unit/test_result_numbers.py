"""Every result holds plain numbers (no model, weights, statistics or live tensors), and every
result's ``.plot()`` draws a figure whose content is checked against its rows."""

import math
import pickle

import matplotlib.figure
import numpy as np
import pytest
import torch
from transformer_lens import FactoredMatrix

from tests.factories import markov_tokens
from tl_leadterms import (
    CorpusStats,
    LeadTermsError,
    ablate,
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    head_atlas,
    output_agreement,
    paper_model,
    sweep,
    train,
)
from tl_leadterms.adapters import PaperWeights
from tl_leadterms.analyses.ablation import AblationTable, plot_ablation
from tl_leadterms.analyses.attention import AttentionAgreement, plot_agreement
from tl_leadterms.analyses.covariance import (
    CovarianceSimilarity,
    TokenMaps,
    plot_covariance,
    plot_token_maps,
    token_maps,
)
from tl_leadterms.results.table import ResultTable
from tl_leadterms.stats.blocks import BlockStats

V, T, L = 20, 8, 2


@pytest.fixture(scope="module")
def run():
    tokens = markov_tokens(96, T + 1, V, seed=3)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L, dtype=torch.float64)
    history = train(model, tokens, lr=1.0, steps=4, track=stats, progress=False)
    return tokens, stats, model, history


@pytest.fixture(scope="module")
def results(run):
    tokens, stats, model, history = run
    held = tokens[:8, :T]
    return {
        "Decomposition": decompose(model, stats, null=9, per_head=True),
        "AttentionAgreement": attention_agreement(model, stats, held, progress=False),
        "CovarianceSimilarity": covariance_similarity(
            model, stats, per_head=True, null=9, progress=False
        ),
        "HeadAtlas": head_atlas(model, stats, held, null=9),
        "AblationTable": ablate(model, stats, held, progress=False),
        "SweepTable": sweep([("a", model)], stats, analyses=["decompose"], progress=False),
        "TrainHistory": history,
        "TokenMaps": token_maps(model, progress=False),
        "OutputAgreement": output_agreement(model, stats, held, s_lr=4.0, dtype=torch.float64),
    }


def _reachable(obj):
    """Every object reachable from ``obj`` through attributes, dict items and sequences."""
    seen, stack, out = set(), [obj], []
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(o))
        out.append(o)
        if isinstance(o, dict):
            stack += [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack += list(o)
        elif hasattr(o, "__dict__") and not isinstance(o, (type, torch.Tensor)):
            stack += list(vars(o).values())
    return out


_LIVE = (torch.nn.Module, CorpusStats, BlockStats, PaperWeights, FactoredMatrix)


def test_every_result_holds_numbers_only(run, results):
    _, _, model, _ = run
    params = {p.data_ptr() for p in model.parameters()}
    model_bytes = len(pickle.dumps(model.state_dict()))
    for name, result in results.items():
        assert type(result).__name__ == name
        found = _reachable(result)
        live = [type(o).__name__ for o in found if isinstance(o, _LIVE)]
        assert not live, (name, live)
        tensors = [o for o in found if isinstance(o, torch.Tensor)]
        if name == "TokenMaps":  # the activations are its data: detached copies, nothing else
            assert tensors and all(not t.requires_grad for t in tensors)
            assert not {t.untyped_storage().data_ptr() for t in tensors} & params
            continue
        assert not tensors, (name, [tuple(t.shape) for t in tensors])
        blob = pickle.dumps(result)
        assert len(blob) < model_bytes, (name, len(blob), model_bytes)
        back = pickle.loads(blob)
        assert back.rows == result.rows or _same_rows(back.rows, result.rows), name


def _same_rows(a, b):
    """Rows equal with NaN equal to NaN."""

    def same(x, y):
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            return True
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        return x == y

    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))


def test_walk_finds_a_live_reference():
    """The check above can fail: a table that keeps its statistics is caught."""
    stats = corpus_stats(markov_tokens(20, T + 1, V, seed=1), d_vocab=V, progress=False)
    table = ResultTable([{"layer": 0, "head": 0, "score": 1.0}])
    table.kept = {"stats": [stats]}
    assert any(isinstance(o, CorpusStats) for o in _reachable(table))


# -- TokenMaps as a result table ------------------------------------------------------------


def test_token_maps_rows_by_hand(results):
    maps = results["TokenMaps"]
    assert isinstance(maps, ResultTable) and len(maps) == 3 * L
    assert [(r["map"], r["layer"]) for r in maps.rows] == [
        (m, layer) for m in ("pre", "post", "attn") for layer in range(L)
    ]
    for r in maps.rows:
        E = getattr(maps, f"resid_{r['map']}")[r["layer"]].double()
        norms = E.norm(dim=1)
        unit = E / norms[:, None]
        C = unit @ unit.T
        off = C[~torch.eye(V, dtype=torch.bool)]
        assert r["n_tokens"] == V and r["d_model"] == E.shape[1]
        assert r["mean_norm"] == pytest.approx(float(norms.mean()), rel=1e-12)
        assert r["max_norm"] == pytest.approx(float(norms.max()), rel=1e-12)
        assert r["mean_cosine"] == pytest.approx(float(off.mean()), abs=1e-12)
    # the paper model's E_pre of layer 0 is the one-hot embedding: orthogonal, unit rows
    first = maps.row("pre", 0)
    assert first["mean_cosine"] == pytest.approx(0.0, abs=1e-12) and first["mean_norm"] == 1.0
    assert maps.to_dict()["rows"] == maps.rows and maps.to_dict()["metadata"] == maps.metadata
    df = maps.to_pandas()
    assert list(df.columns)[:3] == ["map", "layer", "n_tokens"] and len(df) == 3 * L
    assert len(maps.select(map="attn")) == L
    assert repr(maps).startswith("TokenMaps(n=20 tokens") and maps.title() == repr(maps)
    html = maps._repr_html_()
    assert html.count('class="tl-row') == 3 * L and "tl-heat" in html


def test_token_maps_keep_their_api(results):
    maps = results["TokenMaps"]
    assert maps.n == V and maps.layers == list(range(L))
    torch.testing.assert_close(maps.get("post", 1), maps.resid_post[1])
    with pytest.raises(LeadTermsError, match="is not in these maps"):
        maps.get("pre", 7)


# -- the figures ----------------------------------------------------------------------------


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def _text_at(ax, x, y):
    (text,) = [t.get_text() for t in ax.texts if t.get_position() == (x, y)]
    return text


def test_agreement_plot_is_two_annotated_layer_head_grids(results):
    agreement: AttentionAgreement = results["AttentionAgreement"]
    fig = agreement.plot()
    assert isinstance(fig, matplotlib.figure.Figure) and type(fig).__name__ == "InlineFigure"
    rank_ax, js_ax = [ax for ax in fig.axes if ax.images]
    rank = np.asarray(rank_ax.images[0].get_array())
    js = np.asarray(js_ax.images[0].get_array())
    assert rank.shape == js.shape == (L, 1)  # layers × heads of the paper model
    for r in agreement.rows:
        assert rank[r["layer"], r["head"]] == pytest.approx(r["rank_correlation"])
        assert js[r["layer"], r["head"]] == pytest.approx(r["js_divergence"])
        mark = "*" if r["scale_at_bound"] else ""
        text = _text_at(rank_ax, r["head"], r["layer"])
        assert text.endswith(mark) and float(text.rstrip("*")) == pytest.approx(
            r["rank_correlation"], abs=0.006)  # fmt: skip
    assert [t.get_text() for t in rank_ax.get_yticklabels()] == ["L0", "L1"]
    assert [t.get_text() for t in rank_ax.get_xticklabels()] == ["H0"]
    assert plot_agreement(agreement).axes[0].get_title() == rank_ax.get_title()


def test_covariance_plot_bars_whiskers_and_head_grid(results):
    sim: CovarianceSimilarity = results["CovarianceSimilarity"]
    fig = sim.plot()
    bars_ax = fig.axes[0]
    layer_rows = [r for r in sim.rows if r["head"] is None]
    bars = [p for c in bars_ax.containers for p in c.patches]
    assert len(bars) == len(layer_rows) == 2 * 3 * L  # one bar per (layer, score), raw, specific
    heights = sorted(round(p.get_height(), 12) for p in bars)
    assert heights == sorted(round(r["value"], 12) for r in layer_rows)
    assert bars_ax.get_legend() is None  # one legend, above the panels, off the data
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "attention", "value_post", "value_attn", "attention_specific", "value_post_specific",
        "value_attn_specific"]  # fmt: skip
    assert [t.get_text() for t in bars_ax.get_xticklabels()] == ["L0", "L1"]
    # the null band: one grey span per bar, from null_mean - 2 sd to null_mean + 2 sd
    spans = [
        c
        for c in bars_ax.collections
        if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")
    ]
    assert len(spans) == 2 * 3 * L
    lows = sorted(round(float(s.get_paths()[0].vertices[:, 1].min()), 9) for s in spans)
    assert lows == sorted(round(r["null_mean"] - 2 * r["null_sd"], 9) for r in layer_rows)
    heads_ax = next(ax for ax in fig.axes if ax.images)
    grid = np.asarray(heads_ax.images[0].get_array())
    for r in sim.rows:
        if r["head"] is not None and r["score"] == "attention":
            assert grid[r["layer"], r["head"]] == pytest.approx(r["value"])
    assert plot_covariance(sim).axes[0].get_title() == bars_ax.get_title()


def test_ablation_plot_one_bar_per_row(results):
    table: AblationTable = results["AblationTable"]
    fig = table.plot()
    left, right = fig.axes[:2]
    labels = [t.get_text() for t in left.get_yticklabels()]
    assert labels == ["W_O", "V L0", "V L1", "W L0", "W L1"]
    assert [p.get_width() for p in left.patches] == pytest.approx(
        [r["removed_fraction"] for r in table.rows])  # fmt: skip
    assert [p.get_width() for p in right.patches] == pytest.approx(
        [r["loss"] - table.original_loss for r in table.rows])  # fmt: skip
    assert f"{table.original_loss:.4f}" in fig.get_suptitle()
    assert len(plot_ablation(table).axes[0].patches) == len(table.rows)


def test_token_maps_plot_points(results):
    maps = results["TokenMaps"]
    fig = maps.plot()
    top, bottom = fig.axes
    assert not top.lines and not bottom.lines  # layers are categories: points, no lines
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["E_pre", "E_post", "E_attn"]
    for points, name in zip(bottom.collections, ("pre", "post", "attn"), strict=True):
        xy = np.asarray(points.get_offsets())
        assert np.round(xy[:, 0]).tolist() == list(range(L))  # dodged a little around each layer
        assert xy[:, 1].tolist() == pytest.approx(
            [maps.row(name, layer)["mean_cosine"] for layer in range(L)])  # fmt: skip
    assert len(plot_token_maps(maps).axes[0].collections) == 3


def test_plot_functions_refuse_other_results(results):
    with pytest.raises(LeadTermsError, match=r"AblationTable returned by tl_leadterms\.ablate"):
        plot_ablation(results["AttentionAgreement"])
    with pytest.raises(LeadTermsError, match="no rows"):
        plot_ablation(AblationTable(1.0))


def test_token_maps_is_a_token_maps(results):
    assert isinstance(results["TokenMaps"], TokenMaps)


def test_every_result_renders_its_own_report_section(results):
    """Every result a report takes renders its own section (its package's ``report_section``),
    with escaped findings; the registry's ``report=`` name is the section's id."""
    from tl_leadterms import registry
    from tl_leadterms.results.sections import Section

    ids = {}
    for name, result in results.items():
        if name == "TokenMaps":  # an input of the covariance protocol, not a result to show
            continue
        section = result.report_section()
        assert isinstance(section, Section) and section.body, name
        assert all("<script" not in f for f in section.findings), name
        ids[name] = section.id
    for spec in registry.ANALYSES:
        assert spec.report is not None, f"{spec.name} renders no report section"
        assert ids[spec.result] == spec.report
        assert spec.report_section(results[spec.result]).id == spec.report
    assert ids["TrainHistory"] == "history" and ids["SweepTable"] == "sweep"
