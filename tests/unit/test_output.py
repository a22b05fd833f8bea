"""The leading-term model and output_agreement against plain references written from the maths.

The references below use tests/reference.py (the dense oracle: statistics by one-hot einsums,
the paper model's forward, full-batch GD by autograd) and the coefficients written out here:
c_O = sη, c_V = C(s,2)η², c_W = c_P = (3C(s,4) + 2C(s,3))η⁴.
"""

import math

import pytest
import torch

from tests.conftest import unchecked
from tests.reference import dense_corpus_stats, gd_train, paper_forward
from tl_leadterms import (
    LeadTermsError,
    block_stats,
    corpus_stats,
    output_agreement,
    paper_model,
    to_paper,
    train,
)
from tl_leadterms.analyses.output.predictors import LeadingPredictor
from tl_leadterms.models import leading_model
from tl_leadterms.results import BootstrapSpec

D, T = 10, 6


def _coefficients(lr: float, s: int) -> tuple[float, float, float]:
    comb = math.comb
    return s * lr, comb(s, 2) * lr**2, (3 * comb(s, 4) + 2 * comb(s, 3)) * lr**4


def _tokens(n: int = 24, d: int = D, seed: int = 0) -> torch.Tensor:
    # a noisy cycle: the next token is mostly the current one plus one (strong bigrams)
    g = torch.Generator().manual_seed(seed)
    start = torch.randint(0, d, (n, 1), generator=g)
    steps = torch.where(
        torch.rand(n, T, generator=g) < 0.8, 1, torch.randint(0, d, (n, T), generator=g)
    )
    return torch.cat([start, start + steps.cumsum(1)], 1) % d


def _eq12_params(ref: dict, lr: float, s: int, n_layers: int) -> dict:
    """Eq. 12's weights, written from the statistics: the same V, W, P in every layer."""
    c_O, c_V, c_W = _coefficients(lr, s)
    V = c_V * (ref["B_bar"] @ ref["Phi_bar"]).T  # Φ̄ᵀB̄ᵀ
    return {"W_O": c_O * ref["B_bar"], "W": [c_W * ref["Q_bar"]] * n_layers,
            "V": [V] * n_layers, "P": [c_W * ref["Delta"]] * n_layers}  # fmt: skip


def _kl(p_log: torch.Tensor, q_log: torch.Tensor) -> torch.Tensor:
    return (p_log.exp() * (p_log - q_log)).sum(-1)


@pytest.mark.parametrize("n_layers", [1, 2])
def test_leading_model_is_eq12(n_layers):
    tokens = _tokens()
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    ref = dense_corpus_stats(tokens, D)
    lr, s = 0.7, 5
    model = leading_model(stats, schedule=(lr, s), n_layers=n_layers, dtype=torch.float64)
    x = tokens[:4, :-1]
    expected = paper_forward(x, _eq12_params(ref, lr, s, n_layers), D)
    torch.testing.assert_close(model(x), expected, rtol=1e-9, atol=1e-10)
    # the fast predictor (shared maps, gathered first layer) computes the same logits
    pred = LeadingPredictor(stats, dtype=torch.float64)
    c_O, c_V, c_W = _coefficients(lr, s)
    got = pred.logits(x, c_O, c_V, c_W, n_layers=n_layers)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)


def test_leading_model_matches_gradient_descent_at_small_s_lr():
    tokens = _tokens(32)
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    lr, s, n_layers = 0.05, 4, 2  # s·η = 0.2
    params = gd_train(tokens, D, n_layers, lr, s)
    x = tokens[:, :-1]
    trained = paper_forward(x, params, D)
    lead = leading_model(stats, schedule=(lr, s), n_layers=n_layers, dtype=torch.float64)(x)
    x_ = s * lr
    # the theorem bounds ‖W_O − sηB̄‖ by 3s²η² and ‖V − c_V Φ̄ᵀB̄ᵀ‖ by 12s³η³: a one-hot row's
    # logits move by at most the first plus the value path's share of the second
    bound = 3 * x_**2 + 12 * x_**3 * float(params["W_O"].norm())
    error = (trained - lead).norm(dim=-1).max()
    assert error <= bound
    assert error < 0.05 * trained.norm(dim=-1).max()  # and it is small next to the logits


def test_output_agreement_against_a_plain_computation():
    tokens = _tokens(40)
    train_tokens, held = tokens[:32], tokens[32:, :-1]
    stats = corpus_stats(train_tokens, d_vocab=D, progress=False)
    ref = dense_corpus_stats(train_tokens, D)
    lr, s, n_layers = 0.5, 12, 2
    params = gd_train(train_tokens, D, n_layers, lr, s)
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=n_layers, dtype=torch.float64)
    with torch.no_grad():
        for name, p in model.paper_parameters().items():
            w, _, layer = name.partition(".")
            p.copy_((params[w] if not layer else params[w][int(layer)]).reshape(p.shape))
    out = output_agreement(model, stats, held, schedule=(lr, s), dtype=torch.float64)
    model_lp = torch.log_softmax(paper_forward(held, params, D), -1)
    lead_lp = torch.log_softmax(paper_forward(held, _eq12_params(ref, lr, s, n_layers), D), -1)
    bigram_lp = torch.log_softmax(lr * s * ref["B_bar"][held], -1)
    counts = torch.bincount(train_tokens[:, :-1].flatten(), minlength=D).double()
    unigram_lp = ((counts + 1) / (counts.sum() + D)).log().expand_as(model_lp)
    kl = {name: float(_kl(model_lp, q).mean()) for name, q in
          (("leading", lead_lp), ("bigram", bigram_lp), ("unigram", unigram_lp))}  # fmt: skip
    for name, value in kl.items():
        assert out.row(name)["kl"] == pytest.approx(value, rel=1e-5, abs=1e-9)
        assert out.row(name)["explained"] == pytest.approx(1 - value / kl["unigram"], abs=1e-6)
    top = model_lp.argmax(-1)
    assert out.row("leading")["top1"] == pytest.approx(
        float((lead_lp.argmax(-1) == top).double().mean())
    )
    per_position = _kl(model_lp, lead_lp).mean(0)
    torch.testing.assert_close(torch.tensor(out.row()["kl_per_position"], dtype=torch.float64),
                               per_position, rtol=1e-5, atol=1e-9)  # fmt: skip
    assert kl["leading"] < kl["bigram"] < kl["unigram"]  # the leading terms explain more


def test_the_leading_model_explains_itself_and_fit_recovers_its_scalars():
    tokens = _tokens(20)
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    model = leading_model(stats, s_lr=3.0, n_layers=1, dtype=torch.float64)
    out = output_agreement(model, stats, tokens[:8, :-1], s_lr=3.0, dtype=torch.float64)
    assert out.kl < 1e-10 and out.explained == pytest.approx(1.0) and out.row()["top1"] == 1.0
    fitted = output_agreement(model, stats, tokens[:, :-1], fit=True, dtype=torch.float64)
    assert fitted.metadata["fitted"]["c_O"] == pytest.approx(3.0, rel=1e-2)
    assert fitted.explained > 0.999
    assert fitted.metadata["n_calibration"] == 10 and fitted.metadata["n_windows"] == 10


def test_restricted_vocabulary_uses_one_bucket():
    d = 16
    tokens = _tokens(40, d=d)
    stats = corpus_stats(tokens, d_vocab=d, vocab=10, progress=False, dtype=torch.float64)
    model = paper_model(d_vocab=d, n_ctx=T, n_layers=1, dtype=torch.float64)
    with torch.no_grad():  # any model with mass on the dropped tokens
        model.unembed.W_U.copy_(torch.randn(d, d, generator=torch.Generator().manual_seed(1)))
    held = tokens[:8, :-1]
    out = output_agreement(model, stats, held, s_lr=2.0, dtype=torch.float64)
    kept = stats.kept
    with torch.no_grad():
        lp = torch.log_softmax(model(held), -1)
    dropped = [i for i in range(d) if i not in set(kept.tolist())]
    model_lp = torch.cat([lp[..., kept], lp[..., dropped].logsumexp(-1, keepdim=True)], -1)
    index = torch.full((d,), -1, dtype=torch.long)
    index[kept] = torch.arange(10)
    B_bar = stats.B_bar  # [10, 10]; a dropped input is a zero row
    rows = torch.where((index[held] >= 0)[..., None], B_bar[index[held].clamp(min=0)], 0.0)
    logits = 2.0 * rows
    bucket = math.log(len(dropped)) - logits.sum(-1, keepdim=True) / len(dropped)
    bigram_lp = torch.log_softmax(torch.cat([logits, bucket], -1), -1)
    assert out.row("bigram")["kl"] == pytest.approx(
        float(_kl(model_lp, bigram_lp).mean()), rel=1e-6
    )
    assert out.metadata["bucket"] is True


def test_null_and_interval():
    tokens = _tokens(64)
    # statistics of other windows than the training ones (those of the training windows are
    # exact: no interval, tests/unit/test_population.py)
    blocks = block_stats(_tokens(48, seed=1), d_vocab=D, blocks=6, progress=False)
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    train(model, tokens[:48], lr=0.5, steps=8, progress=False)
    spec = BootstrapSpec(resamples=10, method="percentile")
    out = output_agreement(model, blocks, tokens[48:, :-1], schedule=(0.5, 8), null=20, ci=0.9,
                           bootstrap=spec)  # fmt: skip
    row = out.row()
    assert row["p"] == pytest.approx(1 / 21) and row["null_mean"] < row["explained"]
    assert row["lo"] < row["hi"] and row["ci_level"] == 0.9
    assert "p" not in out.row("bigram")


def test_bad_input():
    tokens = _tokens()
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    with pytest.raises(LeadTermsError, match="fit=True"):
        output_agreement(model, stats, tokens[:, :-1])
    with pytest.raises(LeadTermsError, match="n_ctx"):
        output_agreement(model, stats, tokens, s_lr=1.0)
    with pytest.raises(LeadTermsError, match="at least 2 windows"):
        output_agreement(model, stats, tokens[:1, :-1], fit=True)
    with pytest.raises(LeadTermsError, match="s_lr"):
        leading_model(stats)
    with pytest.raises(LeadTermsError, match="PaperWeights"):
        unchecked(output_agreement)(to_paper(model), stats, tokens[:, :-1], s_lr=1.0)


def _one_hot_reference(stats, x: torch.Tensor, c, n_layers: int) -> torch.Tensor:
    """Log-probabilities (kept tokens + bucket) of the leading-term model, written plainly:
    one-hot rows (a dropped token a zero row), a [k, k] W and V materialised for every layer,
    dense products throughout, float64."""
    c_O, c_V, c_W = c
    k, T = stats.k, x.shape[1]
    h = torch.nn.functional.one_hot(x, k + 1)[..., :k].double()
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    delta = torch.cat([stats.Delta, stats.Delta.new_zeros(max(0, T - stats.Delta.shape[0]))])
    bias = torch.where(offset >= 0, c_W * delta[offset.clamp(min=0)], -math.inf)
    for _ in range(n_layers):
        W = c_W * stats.Q_bar.clone()
        V = c_V * (stats.B_bar @ stats.Phi_bar).T
        h = h + torch.softmax(h @ W @ h.transpose(1, 2) + bias, -1) @ h @ V
    logits = h @ (c_O * stats.B_bar)
    dropped = stats.d_vocab - k
    bucket = math.log(dropped) - logits.sum(-1, keepdim=True) / dropped
    return torch.log_softmax(torch.cat([logits, bucket], -1), -1)


def _restricted(d: int = 40, k: int = 25):
    tokens = torch.randint(0, d, (64, 17), generator=torch.Generator().manual_seed(3))
    stats = corpus_stats(tokens, d_vocab=d, vocab=k, progress=False, dtype=torch.float64)
    x = stats.vocab.index_map()[tokens[:6, :-1]]
    assert (x == k).any()  # dropped input tokens occur
    return stats, x


@pytest.mark.parametrize("n_layers", [1, 3])
@pytest.mark.parametrize("s_lr", [0.3, 3.0, 20.0])
def test_both_routes_match_a_one_hot_reference(n_layers, s_lr):
    from tl_leadterms.analyses.output.predictors import with_bucket

    stats, x = _restricted()
    c = (s_lr, s_lr**2 / 2, s_lr**4 / 8)
    expected = _one_hot_reference(stats, x, c, n_layers)
    for dtype, atol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        pred = LeadingPredictor(stats, dtype=dtype)
        for route in ("expansion", "dense", "auto"):
            got = with_bucket(pred.logits(x, *c, n_layers=n_layers, route=route), stats.d_vocab)
            torch.testing.assert_close(got.double(), expected, rtol=0, atol=atol)
        if s_lr == 0.3 and dtype == torch.float32:
            # the expansion stopped early (its dropped terms are below float32's roundoff)
            pred.logits(x, *c, n_layers=n_layers, route="expansion")
            assert pred.last_route[1] < n_layers


def test_truncated_expansion_stays_within_its_bound():
    from tl_leadterms.analyses.output.predictors import with_bucket

    stats, x = _restricted()
    c, n_layers = (1.0, 0.5, 0.125), 6
    expected = _one_hot_reference(stats, x, c, n_layers)
    pred = LeadingPredictor(stats, dtype=torch.float32)
    J = pred.terms(*c, n_layers)
    assert n_layers > J
    # the same truncation computed in float64 isolates the truncation error from rounding
    pred64 = LeadingPredictor(stats, dtype=torch.float64)
    basis = pred64._basis(*pred64._token_set(x)[:1], J, min(J, n_layers - 1))
    logits = pred64._expand(pred64._token_set(x)[1], basis, *c, n_layers, J)
    error = (with_bucket(logits, stats.d_vocab) - expected).abs().max()
    assert error <= torch.finfo(torch.float32).eps


def test_permuted_predictor_is_the_predictor_of_permuted_maps():
    stats, x = _restricted()
    perm = torch.randperm(stats.k, generator=torch.Generator().manual_seed(5))
    c, n_layers = (2.0, 2.0, 2.0), 2
    k = stats.k
    pad = lambda M: torch.nn.functional.pad(M, (0, 1, 0, 1))  # noqa: E731
    maps = {w: pad(M[perm][:, perm]) for w, M in (("W", stats.Q_bar), ("W_O", stats.B_bar),
            ("V", (stats.B_bar @ stats.Phi_bar).T))}  # fmt: skip
    plain = LeadingPredictor(stats, dtype=torch.float64)
    plain._maps = maps  # the plain forward with explicitly permuted maps
    expected = plain.logits(x, *c, n_layers=n_layers, route="dense")
    relabelled = LeadingPredictor(stats, dtype=torch.float64, permutation=perm)
    for route in ("expansion", "dense"):
        got = relabelled.logits(x, *c, n_layers=n_layers, route=route)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    got = plain.permuted(perm).bigram_logits(x, 2.0)
    torch.testing.assert_close(got, 2.0 * maps["W_O"][x][..., :k], rtol=1e-12, atol=1e-14)


def test_shared_predictor_reuses_its_basis_and_lets_the_statistics_go():
    import gc
    import weakref

    stats, x = _restricted()
    pred = LeadingPredictor.shared(stats, dtype=torch.float32)
    assert LeadingPredictor.shared(stats, dtype=torch.float32) is pred
    pred.logits(x, 1.0, 0.5, 0.125, n_layers=2, route="expansion")
    basis = next(iter(pred._bases.values()))
    pred.logits(x, 1.0, 0.4, 0.1, n_layers=2, route="expansion")
    assert next(iter(pred._bases.values())) is basis  # nothing rebuilt for new coefficients
    ref = weakref.ref(stats)
    del stats, pred, basis
    gc.collect()
    assert ref() is None


def test_output_agreement_is_a_result_table_with_its_own_figure():
    from tl_leadterms.analyses.output import OutputAgreement
    from tl_leadterms.results.table import ResultTable

    rows = [{"predictor": p, "kl": kl, "explained": e, "top1": 0.5, "top5": 0.9, "c_O": 1.0,
             "c_V": float("nan"), "c_W": float("nan"), "kl_per_position": [kl, 2 * kl]}
            for p, kl, e in (("leading", 0.1, 0.9), ("bigram", 0.4, 0.6),
                             ("unigram", 1.0, 0.0))]  # fmt: skip
    rows[0].update(lo=0.85, hi=0.95)
    table = OutputAgreement(rows, {"model_name": "m", "n_windows": 2, "n_ctx": 2, "k": 5,
                                   "n_layers": 1})  # fmt: skip
    assert isinstance(table, ResultTable)
    assert table.row()["predictor"] == "leading" and table.row("bigram")["kl"] == 0.4
    assert [r["predictor"] for r in table.select(predictor=["bigram", "unigram"])] == [
        "bigram", "unigram"]  # fmt: skip
    with pytest.raises(LeadTermsError, match="no predictor 'trigram'"):
        table.row("trigram")
    html = table._repr_html_()
    assert "<table" in html and "kl_per_position" not in html  # a list column stays out
    fig = table.plot()
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert bars == pytest.approx([0.9, 0.6, 0.0])
    assert [len(line.get_ydata()) for line in fig.axes[1].lines] == [2, 2, 2]
