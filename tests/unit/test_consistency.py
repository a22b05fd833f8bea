"""One rule for every entry point: the inconsistencies of issue 9, each pinned.

Each test here failed before the theorem and the checks had one home: the same argument was
accepted by one entry point and refused by another.
"""

import math

import numpy as np
import pytest
import torch

from tests.conftest import unchecked
from tests.factories import markov_tokens, random_attn_only
from tl_leadterms import (
    LeadTermsError,
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    leading_terms,
    paper_model,
    predict_attention,
    train,
)
from tl_leadterms.analyses import ablate
from tl_leadterms.analyses.attention import plot_attention
from tl_leadterms.analyses.covariance import token_maps
from tl_leadterms.theory import TERMS, WEIGHTS

V, T, L = 16, 8, 2


@pytest.fixture(scope="module")
def setup():
    tokens = markov_tokens(48, T + 1, V, seed=3)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=4, progress=False)
    return tokens, stats, model


def test_steps_zero_is_valid_everywhere(setup):
    tokens, stats, model = setup
    assert not leading_terms(stats, lr=0.1, steps=0).W_O.any()
    d = decompose(model, stats, lr=0.1, steps=0, per_head=True)
    assert d.row("W_O")["expected_s_lr"] == 0.0
    uniform = predict_attention(stats, tokens[:2, :T], lr=0.1, steps=0)
    causal = torch.tril(torch.ones(T, T, dtype=uniform.dtype))
    torch.testing.assert_close(uniform[0], causal / causal.sum(-1, keepdim=True))
    agreement = attention_agreement(model, stats, tokens[:2, :T], lr=0.1, steps=0, progress=False)
    assert agreement.row(0)["scale"] == 0.0


@pytest.mark.parametrize("steps", [2.5, -1, True, float("nan")])
def test_a_real_step_count_is_refused_everywhere(setup, steps):
    tokens, stats, model = setup
    calls = [
        (leading_terms, (stats,), {}),
        (decompose, (model, stats), {}),
        (predict_attention, (stats, tokens[:1, :T]), {}),
        (attention_agreement, (model, stats, tokens[:1, :T]), {}),
        (train, (model, tokens), {"progress": False}),
    ]
    for fn, args, kwargs in calls:
        with pytest.raises(LeadTermsError, match="steps must be an integer"):
            unchecked(fn)(*args, lr=0.1, steps=steps, **kwargs)


@pytest.mark.parametrize("lr", [float("inf"), float("nan"), 0.0, -0.5, True])
def test_a_bad_learning_rate_is_refused_everywhere(setup, lr):
    tokens, stats, model = setup
    calls = [
        (leading_terms, (stats,), {"steps": 2}),
        (decompose, (model, stats), {"steps": 2}),
        (decompose, (model, stats), {}),
        (predict_attention, (stats, tokens[:1, :T]), {"steps": 2}),
        (attention_agreement, (model, stats, tokens[:1, :T]), {"steps": 2}),
        (train, (model, tokens), {"steps": 1, "progress": False}),
    ]
    for fn, args, kwargs in calls:
        with pytest.raises(LeadTermsError, match="lr must be a finite number > 0"):
            unchecked(fn)(*args, lr=lr, **kwargs)


def test_a_real_s_lr_goes_in_s_lr(setup):
    tokens, stats, model = setup
    exact = decompose(model, stats, lr=0.5, steps=4, per_head=True)
    flow = decompose(model, stats, s_lr=2.0, per_head=True)
    assert exact.row("W_O")["expected_s_lr"] == flow.row("W_O")["expected_s_lr"] == 2.0
    A = predict_attention(stats, tokens[:1, :T], s_lr=2.0)
    B = predict_attention(stats, tokens[:1, :T], scale=2.0**4 / 8)
    torch.testing.assert_close(A, B)
    with pytest.raises(LeadTermsError, match=r"s_lr=3\.0 disagrees"):
        decompose(model, stats, lr=0.5, steps=4, s_lr=3.0, per_head=True)
    with pytest.raises(LeadTermsError, match="pass s_lr"):
        unchecked(decompose)(model, stats, lr=0.5, steps=2.5, per_head=True)


@pytest.mark.hooked
def test_layers_rule_is_the_same_everywhere(setup):
    tokens, stats, model = setup
    embedded = random_attn_only(V, T, n_layers=L, n_heads=2, seed=0)
    calls = {
        "decompose": lambda layers: decompose(model, stats, layers=layers, per_head=True),
        "covariance": lambda layers: covariance_similarity(
            embedded, stats, layers=layers, progress=False
        ),
        "token_maps": lambda layers: token_maps(embedded, [0, 1, 2], layers=layers),
        "agreement": lambda layers: attention_agreement(
            model, stats, tokens[:1, :T], layers=layers, progress=False
        ),
        "ablate": lambda layers: ablate(model, stats, tokens, layers=layers, progress=False),
        "plot": lambda layers: plot_attention(model, stats, tokens[0, :T], layers=layers),
    }
    for name, call in calls.items():
        with pytest.raises(LeadTermsError, match="layers is empty"):
            unchecked(call)([])
        with pytest.raises(LeadTermsError, match="out of range"):
            unchecked(call)([L])
        with pytest.raises(LeadTermsError, match="twice"):
            unchecked(call)([0, 0])
        assert unchecked(call)([np.int64(1)]) is not None, name
        assert unchecked(call)(np.int64(0)) is not None, name


@pytest.mark.hooked
def test_one_weight_vocabulary_in_every_result(setup):
    tokens, stats, model = setup
    paper_rows = decompose(model, stats, per_head=True).rows
    assert [r["weight"] for r in paper_rows if r["layer"] in (None, 0)] == ["W_O", "V", "W", "P"]
    assert {r["kind"] for r in paper_rows} == {"output", "value", "attention", "positional"}
    embedded = random_attn_only(V, T, n_layers=L, n_heads=2, seed=1)
    rows = decompose(embedded, stats, per_head=True).rows
    assert {r["weight"] for r in rows} == {"W_O", "V·W_O", "W", "P"}
    assert {r["weight"] for r in rows} <= set(WEIGHTS)
    for r in rows:
        assert r["kind"] == TERMS[r["weight"]].kind
        assert r["target"] == TERMS[r["weight"]].target.formula
    # "V" asks for the value path of whichever model
    assert decompose(embedded, stats, weights="V", per_head=True).rows[0]["weight"] == "V·W_O"
    history = train(
        paper_model(d_vocab=V, n_ctx=T, n_layers=1),
        tokens,
        lr=0.5,
        steps=1,
        track=stats,
        progress=False,
    )
    assert set(history.cosines) == {"W_O", "V.0", "W.0", "P.0"}


@pytest.mark.hooked
def test_asking_for_p_of_a_model_without_it_says_why(setup):
    _, stats, _ = setup
    alibi = random_attn_only(V, T, n_layers=1, n_heads=2, seed=2, positional="alibi")
    assert "P" not in {r["weight"] for r in decompose(alibi, stats, per_head=True).rows}
    with pytest.raises(LeadTermsError, match="P is not defined"):
        decompose(alibi, stats, weights=("W_O", "P"), per_head=True)


def test_plot_attention_runs_the_model_once(setup):
    tokens, stats, model = setup
    calls = []
    handle = model.embed.register_forward_hook(lambda *_: calls.append(1))
    try:
        view = plot_attention(model, stats, tokens[0, :T])  # fits the scale: needs patterns
    finally:
        handle.remove()
    assert len(calls) == 1 and view.data["fitted"]


def test_fitted_scale_is_bracketed(setup):
    """A head sharper than any grid point: the scan widens until the optimum is inside."""
    tokens, stats, model = setup
    agreement = attention_agreement(model, stats, tokens[:4, :T], progress=False)
    for row in agreement.rows:
        assert row["scale"] > 0 and not math.isnan(row["js_divergence"])
        assert row["scale_at_bound"] in (None, "lower", "upper")


def test_a_degenerate_statistic_gets_no_score():
    """One repeated token: Q̄ and Δ are zero up to rounding, so W and P get NaN and a reason
    instead of a cosine of rounding noise (issue 10, case 6)."""
    tokens = torch.full((16, T + 1), 3)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1, dtype=torch.float64)
    with torch.no_grad():  # a weight with a direction, so only the target can void the score
        model.blocks[0].attn.W_Q.normal_()
        model.blocks[0].attn.P.normal_()
    d = decompose(model, stats, per_head=True)
    for weight in ("W", "P"):
        row = d.row(weight, 0)
        assert math.isnan(row["cosine"]) and math.isnan(row["implied_s_lr"])
        assert row["character"] == "degenerate" and "zero up to rounding" in row["reason"]
