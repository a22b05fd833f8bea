"""decompose / leading_cosines / ablate against plain computations from
docs/math.md#leading-terms."""

import itertools
import math

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import HookedTransformer, markov_tokens, random_attn_only
from tests.reference import dense_corpus_stats
from tl_leadterms import LeadTermsError, corpus_stats, leading_terms, paper_model, train
from tl_leadterms.adapters import factored, to_paper
from tl_leadterms.analyses import ablate, decompose, leading_cosines
from tl_leadterms.analyses.decompose.fit import BasisCache
from tl_leadterms.theory import TERMS, term

V, T, L = 24, 10, 2


@pytest.fixture(scope="module")
def corpus():
    tokens = markov_tokens(120, T + 1, V, seed=21)
    return tokens, corpus_stats(tokens, d_vocab=V, progress=False), dense_corpus_stats(tokens, V)


@pytest.fixture(scope="module")
def trained(corpus):
    tokens, stats, _ = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L, dtype=torch.float64)
    history = train(model, tokens, lr=0.5, steps=8, track=stats, every=1, progress=False)
    return model, history


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().flatten(), b.double().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def _basis(ref: dict, kind: str) -> list[torch.Tensor]:
    """The basis of each kind, written out from the table in tl_leadterms/theory/table.py."""
    B, S, Phi, Q = ref["B_bar"], ref["Sigma_B"], ref["Phi_bar"], ref["Q_bar"]
    return {
        "output": [B, S, Phi.T, Phi.T @ S],
        "value_output": [Phi.T @ S, B, S, Phi.T],  # the output basis, leading term first
        "value": [Phi.T @ B.T, B, S, Phi.T],
        "attention": [Q, B @ Phi, B.T, S, Phi],
    }[kind]


def _r2(X: torch.Tensor, y: torch.Tensor, cols: tuple[int, ...]) -> float:
    if not cols:
        return 0.0
    Xs = X[:, list(cols)]
    beta = torch.linalg.lstsq(Xs, y[:, None], driver="gelsd").solution[:, 0]
    return 1.0 - float(((y - Xs @ beta) ** 2).sum() / (y @ y))


def _least_squares(M: torch.Tensor, maps: list[torch.Tensor]) -> tuple[list[float], float]:
    """Shapley values of R² (averaged over every order of adding the components) and the
    least-squares remainder, written plainly from materialised maps."""
    X = torch.stack([m.flatten() for m in maps], dim=1)
    y = M.detach().double().flatten()
    n = len(maps)
    orders = list(itertools.permutations(range(n)))
    shares = [0.0] * n
    for order in orders:
        for position, i in enumerate(order):
            before = tuple(sorted(order[:position]))
            gain = _r2(X, y, tuple(sorted((*before, i)))) - _r2(X, y, before)
            shares[i] += gain / len(orders)
    return shares, 1.0 - _r2(X, y, tuple(range(n)))


def test_tracked_cosines_at_small_s_lr(trained):
    _, history = trained
    for weight in ("W_O", "V", "W", "P"):
        assert history.min_cosine(weight) >= 0.999, weight
    assert set(history.cosines) == {"W_O"} | {f"{w}.{i}" for w in "VWP" for i in range(L)}
    # W and P are exactly zero until step 3: no direction, recorded as NaN
    assert math.isnan(history.cosines["W.0"][1]) and not math.isnan(history.cosines["W.0"][2])


def test_decompose_matches_hand_computation(corpus, trained):
    _tokens, stats, _ref = corpus
    model, _ = trained
    d = decompose(model, stats, schedule=(0.5, 8), per_head=True)
    lt = leading_terms(stats, lr=0.5, steps=8, n_layers=L)
    assert d.row("W_O")["cosine"] == pytest.approx(_cos(model.unembed.W_U, lt.W_O), abs=1e-10)
    for layer in range(L):
        attn = model.blocks[layer].attn
        for weight, param, target in [
            ("V", attn.W_V[0], lt.V[layer]),
            ("W", attn.W_Q[0], lt.W[layer]),
            ("P", attn.P, lt.P[layer]),
        ]:
            row = d.row(weight, layer, 0)
            assert row["cosine"] == pytest.approx(_cos(param, target), abs=1e-10)
            assert row["cosine"] > 0.999
    # what train(track=) records is the same cosine, heads combined per layer
    tracked = leading_cosines(model, stats)
    assert tracked["W_O"] == pytest.approx(d.row("W_O")["cosine"], abs=1e-10)
    for layer in range(L):
        for weight in ("V", "W", "P"):
            want = d.row(weight, layer, 0)["cosine"]
            assert tracked[f"{weight}.{layer}"] == pytest.approx(want, abs=1e-10)
    # implied s·η from W_O's projection onto B̄ matches lr·steps within 1%
    assert d.row("W_O")["implied_s_lr"] == pytest.approx(4.0, rel=0.01)
    assert d.row("W_O")["expected_s_lr"] == 4.0


def test_least_squares_against_dense_reference(corpus, trained):
    _, stats, ref = corpus
    model, _ = trained
    d = decompose(model, stats, per_head=True)
    cases = [("W_O", None, model.unembed.W_U, "output")]
    for layer in range(L):
        cases.append(("V", layer, model.blocks[layer].attn.W_V[0], "value"))
        cases.append(("W", layer, model.blocks[layer].attn.W_Q[0], "attention"))
    for weight, layer, M, kind in cases:
        row = d.row(weight, layer)
        shares, remainder = _least_squares(M, _basis(ref, kind))
        assert list(row["shares"].values()) == pytest.approx(shares, abs=1e-6)
        assert row["remainder"] == pytest.approx(remainder, abs=1e-6)
        assert row["explained"] == pytest.approx(sum(shares), abs=1e-6)
    assert d.row("W_O")["character"] == "bigram-like"
    assert d.row("V", 0)["character"] == "context∘bigram-like"


def _random_attn_only(seed: int) -> HookedTransformer:
    return random_attn_only(V, T, seed=seed)


@pytest.mark.hooked
def test_factored_equals_materialised(corpus):
    _tokens, stats, ref = corpus
    model = _random_attn_only(3)
    d = decompose(model, stats, per_head=True)
    pw = to_paper(model)
    W_E, W_U = model.W_E.detach().double(), model.W_U.detach().double()
    M = W_E @ W_U
    row = d.row("W_O")
    assert row["cosine"] == pytest.approx(_cos(M, ref["B_bar"]), rel=1e-5)
    shares, remainder = _least_squares(M, _basis(ref, "output"))
    assert list(row["shares"].values()) == pytest.approx(shares, rel=1e-5, abs=1e-9)
    for layer in range(2):
        for head in range(3):
            OV = W_E @ model.W_V[layer, head].double() @ model.W_O[layer, head].double() @ W_U
            QK = W_E @ model.W_Q[layer, head].double() @ model.W_K[layer, head].double().T
            QK = QK @ W_E.T / model.blocks[layer].attn.attn_scale
            for weight, dense, kind in (("V", OV, "value_output"), ("W", QK, "attention")):
                r = d.row(weight, layer, head)
                target = _basis(ref, kind)[0]
                assert r["cosine"] == pytest.approx(_cos(dense, target), rel=1e-5)
                shares, remainder = _least_squares(dense, _basis(ref, kind))
                assert list(r["shares"].values()) == pytest.approx(shares, rel=1e-4, abs=1e-8)
                assert r["remainder"] == pytest.approx(remainder, rel=1e-4, abs=1e-8)
        assert torch.allclose(factored.materialise(pw.W[layer]).double()[1], QK.new_tensor(0) + (
            W_E @ model.W_Q[layer, 1].double() @ model.W_K[layer, 1].double().T @ W_E.T
            / model.blocks[layer].attn.attn_scale), atol=1e-5)  # fmt: skip
    combined = decompose(model, stats, per_head=False)
    OV_sum = sum(W_E @ model.W_V[0, h].double() @ model.W_O[0, h].double() @ W_U for h in range(3))
    assert combined.row("V", 0)["cosine"] == pytest.approx(_cos(OV_sum, ref["G_bar"].T), rel=1e-5)


@pytest.mark.hooked
def test_restricted_stats_compare_kept_tokens(corpus, trained):
    tokens, _, _ = corpus
    kept = [3, 7, 1, 20, 11, 5, 9, 14]
    stats = corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)
    ref = dense_corpus_stats(tokens, V, kept=kept)
    model = _random_attn_only(4)
    W_E, W_U = model.W_E.detach().double(), model.W_U.detach().double()
    d = decompose(model, stats, per_head=True)
    assert d.row("W_O")["cosine"] == pytest.approx(
        _cos((W_E @ W_U)[kept][:, kept], ref["B_bar"]), rel=1e-5
    )
    QK = W_E @ model.W_Q[1, 2].double() @ model.W_K[1, 2].double().T @ W_E.T
    QK = QK.detach()[kept][:, kept]
    assert d.row("W", 1, 2)["cosine"] == pytest.approx(_cos(QK, ref["Q_bar"]), rel=1e-5)
    # the paper model: V and W restricted to kept x kept; ablation edits only that block
    paper, _ = trained
    d = decompose(paper, stats, per_head=True)
    for layer in range(L):
        V_kept = paper.V[layer].detach()[kept][:, kept]
        target = ref["Phi_bar"].T @ ref["B_bar"].T
        assert d.row("V", layer)["cosine"] == pytest.approx(_cos(V_kept, target), abs=1e-10)
    pair = d.top_pairs("W", 0, n=1, model=paper, stats=stats)[0]
    assert pair.row_id in kept and pair.col_id in kept
    before = paper.unembed.W_U.detach().clone()
    table = ablate(paper, stats, tokens[:20], weights="W_O", progress=False)
    assert torch.equal(paper.unembed.W_U, before)
    M = before[kept][:, kept].double()
    a = float((M * ref["B_bar"]).sum() / (ref["B_bar"] ** 2).sum())
    assert table.rows[0]["coefficient"] == pytest.approx(a, rel=1e-9)
    assert table.rows[0]["removed_fraction"] == pytest.approx(_cos(M, ref["B_bar"]) ** 2, rel=1e-9)


def test_top_pairs_finds_the_planted_difference(corpus):
    tokens, stats, _ = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=2, progress=False)
    with torch.no_grad():
        model.unembed.W_U[4, 9] += 1.0
    pairs = decompose(model, stats, per_head=True).top_pairs("W_O", n=3, model=model, stats=stats)
    assert (pairs[0].row_id, pairs[0].col_id) == (4, 9)
    assert pairs[0].difference == pytest.approx(pairs[0].model - pairs[0].theory)
    assert abs(pairs[0].difference) > abs(pairs[1].difference)


def test_top_pairs_takes_the_model_and_refuses_a_changed_one(corpus):
    tokens, stats, _ = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=2, progress=False)
    d = decompose(model, stats, per_head=True)
    with pytest.raises(LeadTermsError, match="model=model, stats=stats"):
        d.top_pairs("W_O", n=3)
    other = corpus_stats(tokens[: len(tokens) // 2], d_vocab=V, progress=False)
    with pytest.raises(LeadTermsError, match="not the ones this table was decomposed against"):
        d.top_pairs("W_O", n=3, model=model, stats=other)
    # the map by hand: W_O = W_U of the paper model, theory = projection · B̄
    row = d.row("W_O")
    M = model.unembed.W_U.detach().double()
    diff = M - row["projection"] * BasisCache.of(stats).map(term("W_O").target).double()
    flat = diff.abs().flatten().topk(3).indices.tolist()
    pairs = d.top_pairs("W_O", n=3, model=model, stats=stats)
    assert [(p.row_id, p.col_id) for p in pairs] == [divmod(f, V) for f in flat]
    train(model, tokens, lr=0.5, steps=1, progress=False)  # the weights move on
    with pytest.raises(LeadTermsError, match="the model changed since"):
        d.top_pairs("W_O", n=3, model=model, stats=stats)


def test_ablation_ordering(corpus):
    tokens, stats, _ = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L, dtype=torch.float64)
    train(model, tokens, lr=2.0, steps=30, progress=False)
    table = ablate(model, stats, tokens, progress=False)
    base = table.original_loss
    out = table.loss("W_O") - base
    value = min(table.loss("V", layer) for layer in range(L)) - base
    attention = max(table.loss("W", layer) for layer in range(L)) - base
    # the paper's Table 3: output (+2.9) >> value (+0.8..1.2) >> attention (+0.001..0.012)
    assert out > 2 * max(table.loss("V", layer) - base for layer in range(L))
    assert value > 10 * attention
    # the model is restored after each ablation
    assert table.original_loss == pytest.approx(ablate(model, stats, tokens,
                                                       progress=False).original_loss)  # fmt: skip


@pytest.mark.hooked
def test_bad_input(corpus):
    tokens, stats, _ = corpus
    other = corpus_stats(torch.randint(0, V + 5, (8, T + 1)), d_vocab=V + 5, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=L)
    with pytest.raises(LeadTermsError, match="d_vocab=29"):
        decompose(model, other, per_head=True)
    with pytest.raises(LeadTermsError, match="out of range"):
        decompose(model, stats, layers=[0, 5], per_head=True)
    with pytest.raises(LeadTermsError, match="CorpusStats"):
        unchecked(decompose)(model, "stats", per_head=True)
    with pytest.raises(LeadTermsError, match="weights"):
        unchecked(decompose)(model, stats, weights=("W_O", "MLP"), per_head=True)
    with torch.no_grad():
        model.blocks[1].attn.W_V[0, 2, 3] = float("nan")
    with pytest.raises(LeadTermsError, match=r"(?i)nan|finite"):
        decompose(model, stats, per_head=True)
    with pytest.raises(LeadTermsError, match="paper model"):
        unchecked(ablate)(_random_attn_only(0), stats, tokens)
    with pytest.raises(LeadTermsError, match=r"HookedTransformer|missing"):
        unchecked(decompose)(torch.nn.Linear(3, 3), stats, per_head=True)
    with pytest.raises(LeadTermsError, match="d_vocab=29"):
        leading_cosines(paper_model(d_vocab=V, n_ctx=T, n_layers=1), other)


@pytest.mark.hooked
def test_train_tracks_an_attention_only_model_with_embeddings(corpus):
    tokens, stats, _ = corpus
    model = _random_attn_only(5)
    before = model.W_Q.detach().clone()
    history = train(model, tokens, lr=0.05, steps=3, batch_size=32, track=stats, progress=False)
    # the value path is named V on every model (leading_cosines keeps the weight's own name)
    expected = {"W_O"} | {f"{w}.{i}" for w in ("V", "W", "P") for i in range(2)}
    assert set(history.cosines) == expected and history.steps == [1, 2, 3]
    assert not torch.equal(before, model.W_Q)  # the model trained
    now = leading_cosines(model, stats)["V·W_O.1"]
    assert history.cosines["V.1"][-1] == pytest.approx(now)
    assert history.cosines["V·W_O.1"] is history.cosines["V.1"]  # the earlier spelling reads it
    assert history.min_cosine("V") == history.min_cosine("V·W_O")
    frame = history.to_pandas()
    assert list(frame.columns) == ["step", "loss", *(f"cos_{n}" for n in history.cosines)]
    assert "cos_V.1" in frame.columns and len(frame) == 3


@pytest.mark.parametrize("weight", ["W_O", "V", "V·W_O", "W", "P"])
@pytest.mark.parametrize(("lr", "steps"), [(0.01, 40), (0.5, 3), (2.0, 7)])
def test_implied_s_lr_inverts_the_coefficient(weight, lr, steps):
    from math import comb

    exact = {
        "W_O": steps * lr,
        "V": comb(steps, 2) * lr**2,
        "V·W_O": comb(steps, 2) * lr**2 * steps * lr,
        "W": (3 * comb(steps, 4) + 2 * comb(steps, 3)) * lr**4,
        "P": (3 * comb(steps, 4) + 2 * comb(steps, 3)) * lr**4,
    }[weight]
    t = TERMS[weight]
    assert t.coefficient(lr, steps) == pytest.approx(exact, rel=1e-12)
    assert t.implied_s_lr(exact, lr) == pytest.approx(steps * lr, rel=1e-9)
    # without lr: the gradient-flow limit, c = x^p / q at x = s·lr, exact as lr -> 0
    flow = {"W_O": 1, "V": 2, "V·W_O": 3, "W": 4, "P": 4}[weight]
    divisor = {"W_O": 1, "V": 2, "V·W_O": 2, "W": 8, "P": 8}[weight]
    assert t.implied_s_lr(3.0**flow / divisor) == pytest.approx(3.0, rel=1e-12)
    assert t.flow_coefficient(3.0) == pytest.approx(3.0**flow / divisor, rel=1e-12)
    assert math.isnan(t.implied_s_lr(-1.0, lr))


def test_reprs_and_zero_maps(corpus):
    tokens, stats, _ = corpus
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=2, progress=False)  # W and P are still zero
    with pytest.raises(LeadTermsError, match="needs lr"):
        decompose(model, stats, steps=2, per_head=True)  # steps without lr
    d = decompose(model, stats, per_head=True)
    assert "lr·steps" not in repr(d)
    w = d.row("W", 0)
    assert math.isnan(w["cosine"]) and w["character"] == "zero"
    assert d.row("W_O")["character"] == "bigram-like"
    frame = d.to_pandas()
    assert len(frame) == 4 and "share:bigram" in frame.columns


@pytest.mark.hooked
def test_shared_factor_path_equals_materialised_maps_under_gqa(corpus):
    """V·W_O and W of a GQA model with LayerNorm, restricted statistics, per head and per layer:
    the projected (shared outer factors) path equals dense maps built from to_paper's factors."""
    from transformer_lens import HookedTransformerConfig

    tokens, _, _ = corpus
    kept = [3, 7, 1, 20, 11, 5, 9, 14, 0, 2]
    stats = corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)
    ref = dense_corpus_stats(tokens, V, kept=kept)
    cfg = HookedTransformerConfig(
        d_model=16, d_head=4, n_heads=4, n_key_value_heads=2, n_layers=2, n_ctx=T, d_vocab=V,
        attn_only=True, normalization_type="LN", act_fn=None, seed=3,
        positional_embedding_type="rotary", rotary_dim=4, dtype=torch.float64,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    pw = to_paper(model)
    index = torch.tensor(kept)
    for per_head in (True, False):
        d = decompose(model, stats, per_head=per_head)
        for layer in range(2):
            for weight, maps, kind in (("V·W_O", pw.V, "value_output"), ("W", pw.W, "attention")):
                dense = factored.materialise(maps[layer]).double()[:, index][:, :, index]
                if not per_head:
                    dense = dense.sum(0, keepdim=True) / (dense.shape[0] if weight == "W" else 1)
                for head in range(dense.shape[0]):
                    r = d.row(weight, layer, head if per_head else None)
                    assert r["cosine"] == pytest.approx(
                        _cos(dense[head], _basis(ref, kind)[0]), rel=1e-6, abs=1e-9
                    )
                    shares, remainder = _least_squares(dense[head], _basis(ref, kind))
                    assert list(r["shares"].values()) == pytest.approx(shares, rel=1e-5, abs=1e-9)
                    assert r["remainder"] == pytest.approx(remainder, rel=1e-5, abs=1e-9)
