"""head_atlas against the analyses it gathers, and its HTML grid."""

import math

import pytest
import torch
from transformer_lens import head_detector

from tests.factories import markov_tokens, random_attn_only
from tl_leadterms import attention_agreement, corpus_stats, decompose, head_atlas
from tl_leadterms.analyses.atlas import HeadAtlas
from tl_leadterms.analyses.atlas.figure import atlas_html

pytestmark = pytest.mark.hooked

V, T = 16, 8


def test_atlas_rows_gather_the_analyses():
    tokens = markov_tokens(60, T + 1, V, seed=9)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = random_attn_only(V, T, seed=4)
    probe = tokens[:3, :6]
    atlas = head_atlas(model, stats, probe, null=9)
    assert isinstance(atlas, HeadAtlas) and len(atlas) == 2 * 3
    d = decompose(model, stats, weights=["W"], null=9, per_head=True)
    agree = attention_agreement(model, stats, probe, progress=False)
    for r in atlas.rows:
        want = d.row("W", r["layer"], r["head"])
        assert r["cosine"] == want["cosine"] and r["p"] == want["p"]
        assert r["js_divergence"] == agree.row(r["layer"], r["head"])["js_divergence"]
    # previous-token score: plain fraction of attention one position back, mean over sequences
    prev = 0.0
    for seq in probe:
        _, cache = model.run_with_cache(seq[None])
        pattern = cache["pattern", 1][0, 2].double()
        prev += float(pattern.diagonal(-1).sum() / pattern.sum()) / probe.shape[0]
    assert atlas.rows[3 + 2]["previous_token"] == pytest.approx(prev, abs=1e-6)
    assert head_detector.HEAD_NAMES  # the detectors come from TransformerLens
    df = atlas.to_pandas()
    assert {"character", "z", "p", "induction", "duplicate_token"} <= set(df.columns)
    assert "L1H2" in repr(atlas)
    html = atlas_html(atlas)
    assert html.count('class="atlas-cell"') == 6 and '<div class="head-atlas">' in html
    assert 'data-label="L0H1"' in html


def test_atlas_without_tokens_has_nan_detectors():
    tokens = markov_tokens(40, T + 1, V, seed=2)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    atlas = head_atlas(random_attn_only(V, T, seed=1), stats, null=None)
    assert all(math.isnan(r["induction"]) and math.isnan(r["p"]) for r in atlas.rows)
    assert torch.isfinite(torch.tensor([r["cosine"] for r in atlas.rows])).all()
