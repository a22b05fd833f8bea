"""predict_attention and attention_agreement against plain computations from
docs/math.md#leading-terms."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import unchecked
from tests.factories import markov_tokens
from tests.reference import dense_corpus_stats
from tl_leadterms import LeadTermsError, corpus_stats, paper_model, train
from tl_leadterms.analyses.attention.compute import attention_agreement, predict_attention
from tl_leadterms.analyses.attention.fit import LayerScores, average_ranks

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
    got = predict_attention(stats, tokens[:5, :T], schedule=(2.0, 6))
    assert torch.allclose(got, _plain_prediction(ref, tokens[:5, :T], c, kept), atol=1e-12)
    same = predict_attention(stats, tokens[:5, :T], scale=c)
    assert torch.equal(got, same)


def test_trained_paper_model_agrees_and_random_does_not(corpus):
    tokens, stats = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=8, progress=False)  # early: W = c·Q̄ to ~1e-4
    inputs = tokens[:60, :T]
    agreement = attention_agreement(model, stats, inputs, schedule=(0.5, 8), progress=False)
    for layer in range(2):
        row = agreement.row(layer, 0)
        assert row["rank_correlation"] > 0.95
        assert row["js_divergence"] < 1e-6
    # the layer-0 pattern is exactly the prediction up to the leading-term error
    _, cache = model.run_with_cache(inputs)
    predicted = predict_attention(stats, inputs, schedule=(0.5, 8))
    # early on both are close to uniform; compare the departures from uniform attention
    uniform = torch.tril(torch.ones(T, T, dtype=torch.float64)) / torch.arange(1, T + 1)[:, None]
    departure = cache["pattern", 0][:, 0] - uniform
    assert (departure - (predicted - uniform)).norm() < 0.05 * departure.norm()
    fitted = attention_agreement(model, stats, inputs, progress=False)
    assert fitted.row(0)["js_divergence"] <= agreement.row(0)["js_divergence"] * (1 + 1e-9)
    random = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    with torch.no_grad():
        for p in random.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    chance = attention_agreement(random, stats, inputs, progress=False)
    best_chance = max(r["rank_correlation"] for r in chance.rows)
    assert best_chance < min(r["rank_correlation"] for r in agreement.rows) - 0.3
    assert len(chance.to_pandas()) == 2 and "L1H0" in repr(chance)


def _layer(actual_rows, score_rows) -> LayerScores:
    """One head, one sequence: the given rows become query rows 2.. (row 1 is a dummy)."""
    a = torch.tensor(actual_rows, dtype=torch.float64)
    s = torch.tensor(score_rows, dtype=torch.float64)
    a = torch.cat([torch.zeros(1, a.shape[-1], dtype=a.dtype), a])[None, None]
    s = torch.cat([torch.zeros(1, s.shape[-1], dtype=s.dtype), s])[None]
    return LayerScores(a, s)


def test_js_and_rank_correlation_by_hand():
    kl = lambda a, b: sum(x * math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0)  # noqa: E731
    p, q = [0.5, 0.5, 0.0], [0.0, 0.5, 0.5]
    m = [(x + y) / 2 for x, y in zip(p, q, strict=True)]
    logits = [math.log(x) if x > 0 else -math.inf for x in q]  # softmax(1·logits) = q
    layer = _layer([p], [logits])
    assert float(layer.js(1.0)[0]) == pytest.approx(0.5 * kl(p, m) + 0.5 * kl(q, m))
    assert float(_layer([q], [logits]).js(1.0)[0]) == pytest.approx(0.0, abs=1e-15)
    a, s = [0.1, 0.7, 0.2, 0.0], [1.0, 5.0, 2.0, -math.inf]
    assert float(_layer([a], [s]).rank_correlation()[0]) == pytest.approx(1.0)
    flipped = [-1.0, -5.0, -2.0, -math.inf]
    assert float(_layer([a], [flipped]).rank_correlation()[0]) == pytest.approx(-1.0)
    # uniform attention has no preference: undefined, not a perfect (index-order) correlation
    assert math.isnan(float(_layer([[1 / 3, 1 / 3, 1 / 3, 0.0]], [s]).rank_correlation()[0]))
    # ties share their average rank (Spearman with ties = Pearson on average ranks)
    tied = _layer([[0.1, 0.7, 0.2, 0.2]], [[1.0, 5.0, 2.0, 2.0]])
    assert float(tied.rank_correlation()[0]) == pytest.approx(1.0)


def test_layer_scores_equal_plain_per_head_loops():
    """All heads at once == scipy's Spearman (average ties) and JS, one row at a time."""
    from scipy.spatial.distance import jensenshannon
    from scipy.stats import spearmanr

    g = torch.Generator().manual_seed(4)
    H, B, n = 3, 2, 7
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    scores = torch.randn(B, n, n, generator=g, dtype=torch.float64).round(decimals=1)
    scores = scores.masked_fill(~causal, -math.inf)
    planted = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)[:, None, None, None]
    noise = 0.3 * torch.randn(H, B, n, n, generator=g, dtype=torch.float64)
    actual = torch.softmax(
        (planted * scores.clamp(min=-1e9) + noise).masked_fill(~causal, -math.inf), -1
    )
    layer = LayerScores(actual, scores)
    c = torch.tensor([0.5, 2.0, 7.0], dtype=torch.float64)
    js, rho = layer.js(c), layer.rank_correlation()
    for h in range(H):
        js_rows, rho_rows = [], []
        for b in range(B):
            for t in range(1, n):
                keys = slice(0, t + 1)
                q = torch.softmax(c[h] * scores[b, t, keys], -1).numpy()
                p = actual[h, b, t, keys].numpy()
                js_rows.append(jensenshannon(p, q) ** 2)
                if t + 1 >= 3:
                    rho_rows.append(spearmanr(p, scores[b, t, keys].numpy()).statistic)
        assert float(js[h]) == pytest.approx(sum(js_rows) / len(js_rows), rel=1e-9)
        assert float(rho[h]) == pytest.approx(sum(rho_rows) / len(rho_rows), rel=1e-9)
    fitted, at_bound = layer.fit_scale()
    brute = torch.logspace(-3, 3, 1201, dtype=torch.float64)  # every head at once per point
    best = torch.stack([layer.js(x) for x in brute]).min(0).values
    assert (layer.js(fitted) <= best + 1e-9).all() and not at_bound.any()


def test_fit_scale_widens_past_the_first_grid():
    """An optimum far above the first grid (c = 3e8 on scores of size 1e-7): the scan widens
    until it is bracketed and the search finds it."""
    s = torch.tensor([0.0, 1e-7, 0.5e-7, -math.inf], dtype=torch.float64)
    planted = torch.softmax(3e8 * s, -1).tolist()
    fitted, at_bound = _layer([planted], [s.tolist()]).fit_scale()
    assert float(fitted[0]) == pytest.approx(3e8, rel=1e-3) and not bool(at_bound[0])
    # a one-hot head: c → ∞ is the optimum; reported as at a limit, not as a grid point
    fitted, at_bound = _layer([[0.0, 1.0, 0.0, 0.0]], [s.tolist()]).fit_scale()
    assert bool(at_bound[0]) and float(fitted[0]) > 1e8
    beyond = _layer([[0.0, 1.0, 0.0, 0.0]], [[0.0, 1e-19, 0.0, -math.inf]])
    fitted, at_bound = beyond.fit_scale()  # would need c ~ 1e20: past the search's limit
    assert bool(at_bound[0])  # the data cannot tell the scale: reported as at a limit


def test_bad_input(corpus):
    tokens, stats = corpus
    with pytest.raises(LeadTermsError, match=r"schedule=Schedule\(lr=\.\.\., steps=\.\.\.\)"):
        predict_attention(stats, tokens[:2, :T])
    with pytest.raises(LeadTermsError, match=r"\[0, 20\)"):
        predict_attention(stats, torch.full((1, 4), 25), scale=1.0)
    with pytest.raises(LeadTermsError, match="positions"):
        predict_attention(stats, tokens[:1], scale=1.0)  # T + 1 > n_ctx
    with pytest.raises(LeadTermsError, match="not both"):
        predict_attention(stats, tokens[:1, :T], schedule=(1.0, 2), scale=1.0)
    with pytest.raises(LeadTermsError, match="not both"):  # the plain keywords of old calls too
        predict_attention(stats, tokens[:1, :T], schedule=(1.0, 2), scale=1.0)
    with pytest.raises(LeadTermsError, match="CorpusStats"):
        unchecked(predict_attention)("stats", tokens[:1, :T], scale=1.0)
    with pytest.raises(LeadTermsError, match="d_vocab=25"):
        attention_agreement(
            paper_model(d_vocab=25, n_ctx=T, n_layers=1), stats, tokens[:2, :T], progress=False
        )
    logits = F.one_hot(tokens[:1, :3], V)  # integers are fine, floats are not
    with pytest.raises(LeadTermsError, match="integer"):
        unchecked(predict_attention)(stats, logits.float()[0], scale=1.0)


def _plain_js(actual: torch.Tensor, scores: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Mean JS divergence of one head's rows 2.. against softmax(c·scores), for each ``c``."""
    p = actual[:, 1:]  # [B, n-1, n]
    q = torch.softmax(c[:, None, None, None] * scores[None, :, 1:], -1)  # −inf stays −inf
    m = 0.5 * (p + q)

    def kl(a, b):
        return torch.where(a > 0, a * (a / b).log(), 0.0).sum(-1)

    return (0.5 * kl(p, m) + 0.5 * kl(q, m)).mean((-2, -1))


@pytest.mark.parametrize("coarse", [False, True])
def test_fit_matches_a_plain_dense_grid(coarse):
    """The Newton fit's c and divergence against a dense log grid of plainly computed JS."""
    g = torch.Generator().manual_seed(11)
    H, B, n = 3, 3, 8
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    scores = (1e-4 * torch.randn(B, n, n, generator=g, dtype=torch.float64)).masked_fill(
        ~causal, -math.inf
    )
    planted = torch.tensor([300.0, 2e4, 1e5], dtype=torch.float64)[:, None, None, None]
    noise = 0.5 * torch.randn(H, B, n, n, generator=g, dtype=torch.float64)
    actual = torch.softmax(
        (planted * scores.clamp(min=-1e9) + noise).masked_fill(~causal, -math.inf), -1
    )
    layer = LayerScores(actual, scores)
    cheap = LayerScores(actual.float(), scores, torch.float32) if coarse else None
    fitted, at_bound, js = layer.fit(cheap)
    grid = torch.logspace(0, 7, 7001, dtype=torch.float64)  # 0.1% apart
    for h in range(H):
        plain = _plain_js(actual[h], scores, grid)
        best = int(plain.argmin())
        assert 0 < best < len(grid) - 1 and not bool(at_bound[h])
        assert abs(math.log10(float(fitted[h])) - math.log10(float(grid[best]))) <= 2e-3
        at_fit = float(_plain_js(actual[h], scores, fitted[h : h + 1])[0])
        assert float(js[h]) == pytest.approx(at_fit, rel=1e-10, abs=1e-15)
        assert at_fit <= float(plain[best]) + 1e-12
    # the two-pair accessor agrees with the full fit
    assert torch.equal(layer.fit_scale(cheap)[0], fitted)


def test_slope_and_curvature_match_finite_differences():
    g = torch.Generator().manual_seed(5)
    H, B, n = 2, 2, 6
    causal = torch.tril(torch.ones(n, n, dtype=torch.bool))
    scores = torch.randn(B, n, n, generator=g, dtype=torch.float64).masked_fill(~causal, -math.inf)
    actual = torch.softmax(
        torch.randn(H, B, n, n, generator=g, dtype=torch.float64).masked_fill(~causal, -math.inf),
        -1,
    )
    layer = LayerScores(actual, scores)
    u, h = torch.tensor([-0.3, 1.2], dtype=torch.float64), 1e-5
    at = layer.evaluate(u)
    plain = [
        _plain_js(actual[i], scores, (u[i] + d).exp().reshape(1))
        for i in range(H)
        for d in (-h, 0, h)
    ]
    plain = torch.cat(plain).reshape(H, 3)
    assert torch.allclose(at.js, plain[:, 1], rtol=1e-10)
    assert torch.allclose(at.slope, (plain[:, 2] - plain[:, 0]) / (2 * h), rtol=1e-5)
    second = (plain[:, 2] - 2 * plain[:, 1] + plain[:, 0]) / h**2
    assert torch.allclose(at.curvature, second, rtol=1e-3)


def test_average_ranks_equal_scipy_with_ties():
    from scipy.stats import rankdata

    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 5, (4, 6, 9), generator=g).to(torch.float32)
    valid = torch.rand(4, 6, 9, generator=g) < 0.8
    got = average_ranks(x, valid)
    for row, keep, ranks in zip(
        x.reshape(-1, 9), valid.reshape(-1, 9), got.reshape(-1, 9), strict=True
    ):
        expected = rankdata(row[keep].numpy()) - 1
        assert torch.equal(ranks[keep], torch.tensor(expected, dtype=torch.float64))
