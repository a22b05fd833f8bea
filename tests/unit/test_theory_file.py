"""Theory terms in a file (analyses/covariance/theory_file.py) and float32 products
(``gemm_dtype``): round trip, refusals, bitwise-equal scores, and the products' error against
plain materialised covariances written from docs/math.md#pythia-protocol."""

import math

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import markov_tokens
from tl_leadterms import LeadTermsError, corpus_stats, paper_model
from tl_leadterms.analyses.covariance import algebra
from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.analyses.covariance.theory_file import (
    load_theory,
    save_theory,
    stats_checksum,
    theory_for,
    theory_path,
)
from tl_leadterms.sweeps.run import sweep

V, T = 30, 8


@pytest.fixture(scope="module")
def tokens():
    return markov_tokens(200, T + 1, V, seed=5)


@pytest.fixture(scope="module")
def stats(tokens):
    return corpus_stats(tokens, d_vocab=V, progress=False)


@pytest.fixture(scope="module")
def model():
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for layer in range(2):
            attn = model.blocks[layer].attn
            attn.W_Q.copy_(torch.randn(attn.W_Q.shape, generator=gen, dtype=torch.float64))
            attn.W_V.copy_(torch.randn(attn.W_V.shape, generator=gen, dtype=torch.float64))
    return model


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    """Every test starts with no theory terms in memory (as a fresh process does)."""
    monkeypatch.setattr(algebra, "_THEORY_CACHE", algebra.weakref.WeakKeyDictionary())


def _no_recompute(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("theory terms were recomputed instead of read")

    monkeypatch.setattr(algebra, "theory_terms", refuse)


def _plain_norm2(M: torch.Tensor) -> float:
    """‖T̃T̃ᵀ‖² with T̃ = rows scaled to unit norm (zero rows stay 0), then centred."""
    M = M.double()
    norms = M.norm(dim=1, keepdim=True)
    M = torch.where(norms > 0, M / norms, 0.0)
    M = M - M.mean(dim=1, keepdim=True)
    return float(((M @ M.T) ** 2).sum())


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def test_saved_terms_round_trip_bit_for_bit(stats, tmp_path):
    path = tmp_path / "stats.theory.safetensors"
    fresh = theory_for(stats, path)  # computed, then written
    assert path.is_file()
    assert fresh.attention_terms.norm2 == pytest.approx(_plain_norm2(stats.Q_bar), rel=1e-10)
    assert fresh.value_terms.norm2 == pytest.approx(_plain_norm2(stats.B_bar_Phi_bar.T), rel=1e-10)
    algebra._THEORY_CACHE.clear()
    loaded = load_theory(path, stats)
    for a, b in ((fresh.attention_terms, loaded.attention_terms),
                 (fresh.value_terms, loaded.value_terms)):  # fmt: skip
        for field in ("scale", "mean", "w"):
            assert torch.equal(getattr(a, field), getattr(b, field)), field
        for field in ("norm2", "centred_norm2", "a"):
            assert getattr(a, field) == getattr(b, field), field
    assert (loaded.protocol, loaded.attention_name) == ("theorem", "Q_bar")
    # save_theory / load_theory are the same file
    again = tmp_path / "again.safetensors"
    save_theory(again, stats, loaded)
    assert load_theory(again, stats).value_terms.norm2 == fresh.value_terms.norm2


def test_scores_with_saved_terms_are_bitwise_the_fresh_ones(model, stats, tmp_path, monkeypatch):
    options = {"per_head": True, "null": 3, "progress": False}
    fresh = covariance_similarity(model, stats, **options)
    algebra._THEORY_CACHE.clear()
    path = tmp_path / "theory.safetensors"
    written = covariance_similarity(model, stats, theory=path, **options)  # computes, writes
    assert path.is_file()
    algebra._THEORY_CACHE.clear()  # as a new process
    _no_recompute(monkeypatch)
    read = covariance_similarity(model, stats, theory=str(path), **options)
    assert len(fresh.rows) == len(read.rows) == len(written.rows) > 0
    for a, b, c in zip(fresh.rows, written.rows, read.rows, strict=True):
        for key in ("value", "common_share", "null_mean", "z", "p"):
            if key in a:  # common_share: on the raw rows
                assert _same(a[key], b[key]) and _same(a[key], c[key]), (key, a, c)


def test_a_file_of_other_statistics_is_refused(model, stats, tokens, tmp_path):
    path = tmp_path / "theory.safetensors"
    theory_for(stats, path)
    other = corpus_stats(tokens[:150], d_vocab=V, progress=False)
    assert stats_checksum(other) != stats_checksum(stats)
    with pytest.raises(LeadTermsError, match=r"other statistics.*n_sequences=200.*n_sequences=150"):
        load_theory(path, other)
    with pytest.raises(LeadTermsError, match=r"delete .* to recompute"):
        covariance_similarity(model, other, theory=path, progress=False)
    # the same counts with one entry of Φ̄ changed: other statistics too
    edited = corpus_stats(tokens, d_vocab=V, progress=False)
    edited.Phi_bar[0, 0] += 1e-9
    with pytest.raises(LeadTermsError, match="other statistics"):
        load_theory(path, edited)


@pytest.mark.parametrize(
    ("asked", "message"),
    [
        ({"protocol": "paper-code"}, "protocol='theorem'.*protocol='paper-code'"),
        ({"dtype": torch.float32}, "dtype='float64'.*dtype='float32'"),
        ({"gemm_dtype": torch.float32}, "gemm_dtype='float64'.*gemm_dtype='float32'"),
        ({"device": "meta"}, "device='cpu'.*device='meta'"),  # computed on another device type
    ],
)
def test_a_file_of_other_settings_is_refused(stats, tmp_path, asked, message):
    path = tmp_path / "theory.safetensors"
    theory_for(stats, path)
    with pytest.raises(LeadTermsError, match=message):
        load_theory(path, stats, **asked)


def test_a_damaged_file_is_refused(stats, tmp_path):
    path = tmp_path / "theory.safetensors"
    theory_for(stats, path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # a bit of the last tensor's bytes
    path.write_bytes(bytes(data))
    with pytest.raises(LeadTermsError, match=r"does not match its checksum.*delete it"):
        load_theory(path, stats)
    with pytest.raises(LeadTermsError, match="no theory file at"):
        load_theory(tmp_path / "absent.safetensors", stats)
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(LeadTermsError, match="not a readable theory file"):
        load_theory(tmp_path / "junk.safetensors", stats)


def test_bad_theory_and_gemm_arguments(model, stats):
    with pytest.raises(LeadTermsError, match="theory must be the path"):
        unchecked(covariance_similarity)(model, stats, theory=3, progress=False)
    with pytest.raises(LeadTermsError, match="gemm_dtype must be None"):
        covariance_similarity(model, stats, dtype=torch.float32, gemm_dtype=torch.float64,
                              progress=False)  # fmt: skip
    with pytest.raises(LeadTermsError, match="gemm_dtype must be None"):
        covariance_similarity(model, stats, gemm_dtype=torch.float16, progress=False)


def test_theory_path_names_one_sidecar_per_setting():
    base = theory_path("/data/stats.safetensors")
    assert base.as_posix() == "/data/stats.theory-theorem-float64.safetensors"
    names = {
        base,
        theory_path("/data/stats.safetensors", protocol="paper-code"),
        theory_path("/data/stats.safetensors", dtype=torch.float32),
        theory_path("/data/stats.safetensors", gemm_dtype=torch.float32),
    }
    assert len(names) == 4


def test_a_sweep_passes_the_theory_file_to_every_checkpoint(model, stats, tmp_path, monkeypatch):
    other = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    checkpoints = [("a", model), ("b", other)]
    plain = sweep(checkpoints, stats, analyses="covariance", progress=False)
    algebra._THEORY_CACHE.clear()
    path = tmp_path / "theory.safetensors"
    theory_for(stats, path)
    algebra._THEORY_CACHE.clear()
    _no_recompute(monkeypatch)
    got = sweep(checkpoints, stats, analyses="covariance", theory=path, progress=False)
    assert len(got.rows) == len(plain.rows) > 0
    for a, b in zip(plain.rows, got.rows, strict=True):
        assert _same(a["value"], b["value"]), (a, b)


# -- float32 products (gemm_dtype) against plain materialised covariances -----------------


def _cov(M: torch.Tensor, scale_rows: bool) -> torch.Tensor:
    """Cov(M) = M̃M̃ᵀ/(m−1), M̃ = rows minus their means, Frobenius-normalised."""
    M = M.double()
    if scale_rows:
        norms = M.norm(dim=1, keepdim=True)
        M = torch.where(norms > 0, M / norms, 0.0)
    Mc = M - M.mean(dim=1, keepdim=True)
    C = Mc @ Mc.T / (M.shape[1] - 1)
    return C / C.norm()


@pytest.mark.parametrize("both", [False, True])
def test_float32_products_stay_within_the_documented_tolerance(monkeypatch, both):
    monkeypatch.setattr(algebra, "_BLOCK_ELEMENTS", 4096)  # several blocks of rows and columns
    gen = torch.Generator().manual_seed(0)
    n, d, H, d_head = 400, 48, 4, 8
    E = torch.randn(n, d, generator=gen, dtype=torch.float64) + 0.5
    W_Q = torch.randn(H, d, d_head, generator=gen, dtype=torch.float64)
    W_K = torch.randn(H, d, d_head, generator=gen, dtype=torch.float64)
    theory = torch.randn(n, n, generator=gen, dtype=torch.float64) + torch.rand(n, 1, generator=gen)
    A = E @ (torch.einsum("hdk,hek->de", W_Q, W_K) / H) @ E.T
    want_att = float((_cov(A, both) * _cov(theory, True)).sum())
    want_val = float((_cov(E, both) * _cov(theory, True)).sum())
    exact = algebra.theory_terms(theory, torch.float64)
    mixed = algebra.theory_terms(theory, torch.float64, torch.float32)
    assert mixed.norm2 != exact.norm2  # the products did run in float32
    assert mixed.norm2 == pytest.approx(exact.norm2, rel=1e-6)
    for terms, gemm in ((exact, None), (mixed, torch.float32)):
        att = algebra.attention_scores(E, W_Q, W_K, theory, terms, both, False, torch.float64,
                                       gemm)[0]  # fmt: skip
        val = algebra.value_scores([E], theory, terms, both, torch.float64, gemm)[0]
        tolerance = 1e-10 if gemm is None else 1e-6
        assert att.raw == pytest.approx(want_att, abs=tolerance)
        assert val.raw == pytest.approx(want_val, abs=tolerance)
