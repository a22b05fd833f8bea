"""The null and bootstrap columns of decompose, against cosines written from their definitions.

The null: the cosine of each map relabelled by each permutation, ``cos(M[π][:, π], T)``, with
dense tensors. The bootstrap: each resample's statistics recounted from scratch by the dense
oracle of ``tests/reference.py`` over the drawn blocks' windows (a block drawn ``m`` times
repeated ``m`` times), and the cosine of each map with its target. The reuse of resamples across
analyses is checked by counting the resamples built.
"""

import math

import pytest
import torch

from tests.factories import markov_tokens
from tests.reference import dense_corpus_stats
from tl_leadterms import decompose, head_atlas, paper_model, train
from tl_leadterms.results.intervals import interval
from tl_leadterms.results.null import permutations
from tl_leadterms.stats.blocks import BlockStats, block_stats

V, T, R, B = 14, 10, 12, 5


@pytest.fixture(scope="module")
def setup():
    tokens = markov_tokens(100, T + 1, V, seed=4)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2)
    train(model, tokens, lr=1.0, steps=5, progress=False)
    return tokens, model


def _maps(model, layer, weight):
    """The paper model's dense maps, read from its parameters (docs/math.md#model)."""
    block = None if weight == "W_O" else model.blocks[layer].attn
    return {"W_O": lambda: model.unembed.W_U, "V": lambda: block.W_V[0],
            "W": lambda: block.W_Q[0]}[weight]().detach().double()  # fmt: skip


def _target(stats, weight):
    """The leading term of each weight (docs/math.md#leading-terms) from a dict of dense
    statistics."""
    if weight == "W_O":
        return stats["B_bar"]
    if weight == "V":
        return (stats["B_bar"] @ stats["Phi_bar"]).T
    return stats["Q_bar"]


def _cos(a, b):
    return float((a * b).sum() / (a.norm() * b.norm()))


def _rows(d):
    return [r for r in d.rows if r["weight"] != "P"]


@pytest.mark.parametrize("vocab", [None, 9])
def test_null_columns_are_the_relabelled_cosines(setup, vocab):
    tokens, model = setup
    blocks = block_stats(tokens, d_vocab=V, blocks=B, vocab=vocab, progress=False)
    kept = None if vocab is None else blocks.vocab.kept.tolist()
    stats = dense_corpus_stats(tokens, V, kept=kept)
    d = decompose(model, blocks, per_head=True, null=R, progress=False)
    perms = permutations(blocks.full().k, R, 0)  # NullSpec's default seed
    for row in _rows(d):
        M = _maps(model, row["layer"], row["weight"])
        if kept is not None:
            M = M[kept][:, kept]
        target = _target(stats, row["weight"])
        draws = torch.tensor([_cos(M[p][:, p], target) for p in perms], dtype=torch.float64)
        assert row["null_mean"] == pytest.approx(float(draws.mean()), abs=1e-12)
        assert row["null_sd"] == pytest.approx(float(draws.std()), abs=1e-12)
        assert row["p"] == (1 + int((draws >= row["score"]).sum())) / (R + 1)


def _held_out(model, vocab):
    """``(tokens, blocks, kept ids, decompose with ci=0.9)`` of held-out windows (intervals are
    for statistics other than the model's training data)."""
    tokens = markov_tokens(100, T + 1, V, seed=5)
    blocks = block_stats(tokens, d_vocab=V, blocks=B, vocab=vocab, progress=False)
    kept = None if vocab is None else blocks.vocab.kept.tolist()
    return tokens, blocks, kept, decompose(model, blocks, per_head=True, ci=0.9, bootstrap=R,
                                           progress=False)  # fmt: skip


def _resampled(tokens, blocks, kept=None):
    """The dense statistics of each of the ``R`` resamples ``BootstrapSpec``'s default seed
    (0) draws: ``B − 1`` blocks drawn with replacement (the n − 1 bootstrap), each window of
    block b taken w[b] times, recounted from scratch."""
    generator = torch.Generator().manual_seed(0)
    for _ in range(R):
        weights = torch.bincount(torch.randint(B, (B - 1,), generator=generator), minlength=B)
        taken = zip(blocks.bounds, weights.tolist(), strict=True)
        yield dense_corpus_stats(torch.cat([tokens[a:z] for (a, z), m in taken for _ in range(m)]),
                                 V, kept=kept)  # fmt: skip


@pytest.mark.parametrize("vocab", [None, 9])
def test_interval_is_built_from_recounted_resamples(setup, vocab):
    _, model = setup
    tokens, blocks, kept, d = _held_out(model, vocab)
    rows = _rows(d)
    full = dense_corpus_stats(tokens, V, kept=kept)
    t_hat = [_target(full, row["weight"]) for row in rows]
    draws, star_sq, cross = [], [], []  # per resample: s*, ‖T*‖² and ⟨T̂, T*⟩ of every row
    for stats in _resampled(tokens, blocks, kept):
        draws.append([])
        star_sq.append([])
        cross.append([])
        for row, target in zip(rows, t_hat, strict=True):
            M = _maps(model, row["layer"], row["weight"])
            M = M if kept is None else M[kept][:, kept]
            t_star = _target(stats, row["weight"])
            draws[-1].append(_cos(M, t_star))
            star_sq[-1].append(float((t_star**2).sum()))
            cross[-1].append(float((target * t_star).sum()))
    draws, star_sq, cross = (torch.tensor(x, dtype=torch.float64) for x in (draws, star_sq, cross))
    target_sq = torch.tensor([float((t**2).sum()) for t in t_hat], dtype=torch.float64)
    estimate = torch.tensor([r["cosine"] for r in rows], dtype=torch.float64)
    assert d.metadata["ci"]["method"] == "inverted"  # the default, given each row's geometry
    lo, hi, mid = interval(draws, 0.9, "inverted", estimate, blocks=B,  # expanded for B blocks
                           geometry=(star_sq, cross, target_sq))  # fmt: skip
    for i, row in enumerate(rows):
        assert row["lo"] == pytest.approx(float(lo[i]), abs=1e-10)
        assert row["hi"] == pytest.approx(float(hi[i]), abs=1e-10)
        assert row["corrected"] == pytest.approx(float(mid[i]), abs=1e-10)


def _off_plane(d, t_hat, m):
    """``‖d_⊥‖²``: the part of ``d`` off the plane of ``t_hat`` and ``m`` (Gram–Schmidt)."""
    d, t_hat, m = d.flatten(), t_hat.flatten(), m.flatten()
    e1 = t_hat / t_hat.norm()
    e2 = m - (m @ e1) * e1
    e2 = e2 / e2.norm()
    return float(((d - (d @ e1) * e1 - (d @ e2) * e2) ** 2).sum())


def _check_shares(d, maps, target, tokens, blocks, kept=None):
    """Every row's ``noise_share`` = mean over the resamples of ‖(T* − T̂)_⊥‖² over
    ‖T̂‖²(1 − ŝ²), the targets recounted densely."""
    full = dense_corpus_stats(tokens, V, kept=kept)
    moved = torch.zeros(len(d.rows), dtype=torch.float64)
    for stats in _resampled(tokens, blocks, kept):
        for i, row in enumerate(d.rows):
            t_hat = target(full, row)
            moved[i] += _off_plane(target(stats, row) - t_hat, t_hat, maps(row)) / R
    for i, row in enumerate(d.rows):
        off = float((target(full, row) ** 2).sum()) * (1 - row["cosine"] ** 2)
        assert row["noise_share"] == pytest.approx(float(moved[i]) / off, rel=1e-7)


@pytest.mark.parametrize("vocab", [None, 9])
def test_noise_share_is_the_noise_off_the_plane_of_map_and_target(setup, vocab):
    """Every weight of the paper model (``P``: Δ on the model's offsets)."""
    _, model = setup
    tokens, blocks, kept, d = _held_out(model, vocab)

    def maps(row):
        if row["weight"] == "P":
            return model.blocks[row["layer"]].attn.P.detach().double()
        M = _maps(model, row["layer"], row["weight"])
        return M if kept is None else M[kept][:, kept]

    def target(stats, row):
        return stats["Delta"][:T] if row["weight"] == "P" else _target(stats, row["weight"])

    _check_shares(d, maps, target, tokens, blocks, kept)
    assert {r["weight"] for r in d.rows} == {"W_O", "V", "W", "P"}
    assert all(0 < r["noise_share"] < math.inf for r in d.rows)


@pytest.mark.hooked
def test_noise_share_of_shared_factor_maps(setup):
    """The general path (maps of a model with embeddings, ``V·W_O`` led by ``Φ̄ᵀΣ_B̄``,
    docs/math.md): the same definition."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    from tl_leadterms import to_paper
    from tl_leadterms.adapters import factored

    cfg = HookedTransformerConfig(d_model=8, d_head=4, n_heads=2, n_layers=1, n_ctx=T, d_vocab=V,
                                  attn_only=True, normalization_type=None, act_fn=None, seed=2,
                                  dtype=torch.float64)  # fmt: skip
    model = HookedTransformer(cfg)
    tokens = markov_tokens(100, T + 1, V, seed=5)
    blocks = block_stats(tokens, d_vocab=V, blocks=B, progress=False)
    d = decompose(model, blocks, weights=("W_O", "V", "W"), per_head=True, ci=0.9, bootstrap=R,
                  population="distribution", progress=False)  # fmt: skip
    pw = to_paper(model)

    def maps(row):
        if row["weight"] == "W_O":
            return factored.materialise(pw.W_O).double()
        heads = pw.V if row["weight"] == "V·W_O" else pw.W
        return factored.materialise(heads[row["layer"]]).double()[row["head"]]

    def target(stats, row):
        if row["weight"] == "V·W_O":
            return stats["Phi_bar"].T @ stats["Sigma_B"]
        return _target(stats, row["weight"])

    _check_shares(d, maps, target, tokens, blocks)
    assert {r["weight"] for r in d.rows} == {"W_O", "V·W_O", "W"}


def test_head_atlas_reuses_the_resamples_decompose_made(setup, monkeypatch):
    _, model = setup
    # held-out windows: intervals are for statistics other than the model's training data
    tokens = markov_tokens(100, T + 1, V, seed=5)
    blocks = block_stats(tokens, d_vocab=V, blocks=B, progress=False)
    built = []
    weighted = BlockStats.weighted

    def counted(self, w, **kw):
        built.append(1)
        return weighted(self, w, **kw)

    monkeypatch.setattr(BlockStats, "weighted", counted)
    d = decompose(model, blocks, per_head=True, ci=0.95, bootstrap=R, progress=False)
    assert len(built) == R
    atlas = head_atlas(model, blocks, null=None, bootstrap=R)
    assert len(built) == R  # the same spec: no resample built again
    want = {(r["layer"], r["head"]): (r["lo"], r["hi"]) for r in d.rows if r["weight"] == "W"}
    assert {(r["layer"], r["head"]): (r["lo"], r["hi"]) for r in atlas.rows} == want
    head_atlas(model, blocks, null=None, bootstrap=R + 1)  # another spec: its own resamples
    assert len(built) == 2 * R + 1


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("transposed", [False, True])
def test_permuted_inner_is_the_relabelled_inner_product(monkeypatch, backend, transposed):
    """Both implementations of the null's gather-dot (the fused numba kernel and the torch
    gathers) against ``⟨M_h[π][:, π], T⟩`` summed from the definition, for several maps at
    once and a target stored contiguous or as a transposed view (``Φ̄ᵀB̄ᵀ``)."""
    from tl_leadterms.analyses.decompose import draws

    monkeypatch.setattr(draws, "resolve_backend", lambda *_: backend)
    g = torch.Generator().manual_seed(3)
    k, n = 23, 4
    maps = torch.randn(n, k, k, dtype=torch.float64, generator=g)
    X = torch.randn(k, k, dtype=torch.float64, generator=g)
    target = X.T if transposed else X
    perms = permutations(k, R, 5)
    got = draws.permuted_inner(maps.reshape(n, -1), target, perms)
    want = torch.tensor(
        [[float((maps[h][p][:, p] * target).sum()) for h in range(n)] for p in perms],
        dtype=torch.float64,
    )
    assert got.shape == (R, n)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
