"""predict_attention and attention_agreement against plain computations from MATH.md §3."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import unchecked
from tests.reference import dense_corpus_stats
from tests.unit.test_reference import markov_tokens
from tl_leadterms import LeadTermsError, corpus_stats, paper_model, train
from tl_leadterms.analyzers.attention import attention_agreement, predict_attention

V, T = 20, 10


@pytest.fixture(scope="module")
def corpus():
    tokens = markov_tokens(150, T + 1, V, seed=31)
    return tokens, corpus_stats(tokens, d_vocab=V, progress=False)


def _plain_prediction(ref: dict, tokens: torch.Tensor, c: float, kept=None) -> torch.Tensor:
    """S(Mask(c·X Q̄ Xᵀ + c·DM(Δ))) with explicit one-hot rows (zero rows for dropped ids)."""
    columns = list(range(V)) if kept is None else kept
    out = []
    for seq in tokens:
        X = torch.zeros(len(seq), len(columns), dtype=torch.float64)
        for t, token in enumerate(seq.tolist()):
            if token in columns:
                X[t, columns.index(token)] = 1.0
        n = len(seq)
        DM = torch.zeros(n, n, dtype=torch.float64)
        for t in range(n):
            for j in range(t + 1):
                DM[t, j] = ref["Delta"][t - j]
        scores = c * (X @ ref["Q_bar"] @ X.T + DM)
        mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        out.append(torch.softmax(scores.masked_fill(mask, -math.inf), dim=-1))
    return torch.stack(out)


@pytest.mark.parametrize("kept", [None, [4, 0, 17, 9, 12, 3, 8]])
def test_prediction_equals_plain_formula(corpus, kept):
    tokens, _ = corpus
    stats = corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)
    ref = dense_corpus_stats(tokens, V, kept=kept)
    c = (3 * math.comb(6, 4) + 2 * math.comb(6, 3)) * 2.0**4
    got = predict_attention(stats, tokens[:5, :T], lr=2.0, steps=6)
    assert torch.allclose(got, _plain_prediction(ref, tokens[:5, :T], c, kept), atol=1e-12)
    same = predict_attention(stats, tokens[:5, :T], scale=c)
    assert torch.equal(got, same)


def test_trained_paper_model_agrees_and_random_does_not(corpus):
    tokens, stats = corpus
    model = paper_model(V, T, 2, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=8, progress=False)  # early: W = c·Q̄ to ~1e-4
    inputs = tokens[:60, :T]
    agreement = attention_agreement(model, stats, inputs, lr=0.5, steps=8, progress=False)
    for layer in range(2):
        row = agreement.row(layer, 0)
        assert row["rank_correlation"] > 0.95
        assert row["js_divergence"] < 1e-6
    # the layer-0 pattern is exactly the prediction up to the leading-term error
    _, cache = model.run_with_cache(inputs)
    predicted = predict_attention(stats, inputs, lr=0.5, steps=8)
    # early on both are close to uniform; compare the departures from uniform attention
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64)) / torch.arange(1, T + 1)[:, None]
    departure = cache["pattern", 0][:, 0] - uniform
    assert (departure - (predicted - uniform)).norm() < 0.05 * departure.norm()
    fitted = attention_agreement(model, stats, inputs, progress=False)
    assert fitted.row(0)["js_divergence"] <= agreement.row(0)["js_divergence"] * (1 + 1e-9)
    random = paper_model(V, T, 2, dtype=torch.float64)
    with torch.no_grad():
        for p in random.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    chance = attention_agreement(random, stats, inputs, progress=False)
    best_chance = max(r["rank_correlation"] for r in chance.rows)
    assert best_chance < min(r["rank_correlation"] for r in agreement.rows) - 0.3
    assert len(chance.to_pandas()) == 2 and "L1H0" in repr(chance)


def test_js_and_rank_correlation_by_hand():
    from tl_leadterms.analyzers.attention import _js_divergence, _rank_correlation

    p = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    q = torch.tensor([[0.0, 0.5, 0.5]], dtype=torch.float64)
    m = (p + q) / 2
    kl = lambda a, b: sum(x * math.log(x / y) for x, y in zip(a[0], b[0], strict=True) if x > 0)  # noqa: E731
    assert float(_js_divergence(p, q)) == pytest.approx(0.5 * kl(p, m) + 0.5 * kl(q, m))
    assert float(_js_divergence(p, p)) == 0.0
    a = torch.tensor([[0.1, 0.7, 0.2, 0.0]], dtype=torch.float64)
    s = torch.tensor([[1.0, 5.0, 2.0, -math.inf]], dtype=torch.float64)
    valid = torch.isfinite(s)
    assert float(_rank_correlation(a, s, valid)) == pytest.approx(1.0)
    assert float(_rank_correlation(a, -s.clamp(min=-10), valid)) == pytest.approx(-1.0)
    # uniform attention has no preference: undefined, not a perfect (index-order) correlation
    uniform = torch.tensor([[1 / 3, 1 / 3, 1 / 3, 0.0]], dtype=torch.float64)
    assert math.isnan(float(_rank_correlation(uniform, s, valid)))
    # ties share their average rank (Spearman with ties = Pearson on average ranks)
    b = torch.tensor([[0.1, 0.7, 0.2, 0.2]], dtype=torch.float64)
    t = torch.tensor([[1.0, 5.0, 2.0, 2.0]], dtype=torch.float64)
    assert float(_rank_correlation(b, t, torch.ones(1, 4, dtype=torch.bool))) == pytest.approx(1.0)


def test_bad_input(corpus):
    tokens, stats = corpus
    with pytest.raises(LeadTermsError, match="lr and steps"):
        predict_attention(stats, tokens[:2, :T])
    with pytest.raises(LeadTermsError, match=r"\[0, 20\)"):
        predict_attention(stats, torch.full((1, 4), 25), scale=1.0)
    with pytest.raises(LeadTermsError, match="positions"):
        predict_attention(stats, tokens[:1], scale=1.0)  # T + 1 > n_ctx
    with pytest.raises(LeadTermsError, match="not both"):
        predict_attention(stats, tokens[:1, :T], lr=1.0, steps=2, scale=1.0)
    with pytest.raises(LeadTermsError, match="CorpusStats"):
        unchecked(predict_attention)("stats", tokens[:1, :T], scale=1.0)
    with pytest.raises(LeadTermsError, match="d_vocab=25"):
        attention_agreement(paper_model(25, T, 1), stats, tokens[:2, :T], progress=False)
    logits = F.one_hot(tokens[:1, :3], V)  # integers are fine, floats are not
    with pytest.raises(LeadTermsError, match="integer"):
        unchecked(predict_attention)(stats, logits.float()[0], scale=1.0)
