"""Q̄ and Δ under a vocabulary restriction: both definitions and the paper-code last target.

The oracle is ``tests.reference.paper_code_stats``: restricted one-hot ``X``, ``Y`` and
``R = Y − u`` as dense einsums with an explicit ``T × T × T`` Jacobian (no code shared with
the library or with ``dense_corpus_stats``' per-sample loops).
"""

import pytest
import torch

from tests.conftest import unchecked
from tests.reference import dense_corpus_stats, paper_code_stats
from tests.unit.test_stats import STATS, assert_matches, markov_windows
from tl_leadterms import LeadTermsError, corpus_stats
from tl_leadterms.stats import AttentionAccumulator, ContextAccumulator, CorpusStats
from tl_leadterms.stats import resolve_vocab as resolve

V = 30
KEPT = list(range(V))[::3][::-1]  # a third of the tokens, in a permuted matrix order


@pytest.fixture(scope="module")
def windows():
    return markov_windows(20, 10, V, seed=1)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("last_target", ["data", "paper-code"])
@pytest.mark.parametrize("centre_vocab", [None, len(KEPT), 45])
def test_restricted_default_equals_dense_one_hot_einsums(
    windows, backend, last_target, centre_vocab
):
    stats = corpus_stats(
        windows, d_vocab=V, vocab=KEPT, centre_vocab=centre_vocab, last_target=last_target,
        backend=backend, progress=False,
    )  # fmt: skip
    ref = paper_code_stats(
        windows, V, kept=KEPT, centre_vocab=centre_vocab, last_target=last_target
    )
    assert_matches(stats, ref, tol=1e-10)
    assert stats.metadata["q_targets"] == "centred"
    assert stats.metadata["last_target"] == last_target


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_one_hot_option_keeps_the_previous_definition(windows, backend):
    stats = corpus_stats(
        windows, d_vocab=V, vocab=KEPT, q_targets="one-hot", backend=backend, progress=False
    )
    assert_matches(stats, dense_corpus_stats(windows, V, kept=KEPT, q_targets="one-hot"))
    centred = corpus_stats(windows, d_vocab=V, vocab=KEPT, backend=backend, progress=False)
    for name in ("B_bar", "Phi_bar", "G_bar"):  # only Q̄ and Δ depend on the choice
        assert torch.equal(getattr(stats, name), getattr(centred, name))
    # the two definitions differ by several percent here (the −u·1ᵀḠ term is not small)
    rel = (stats.Q_bar - centred.Q_bar).norm() / centred.Q_bar.norm()
    assert rel > 0.02


def test_the_two_references_agree(windows):
    """The per-sample loops and the corpus einsums give the same centred statistics."""
    for last_target in ("data", "paper-code"):
        loops = dense_corpus_stats(windows, V, kept=KEPT, last_target=last_target)
        einsums = paper_code_stats(windows, V, kept=KEPT, last_target=last_target)
        for name in STATS:
            err = (loops[name] - einsums[name]).abs().max()
            assert err <= 1e-12 * einsums[name].abs().max(), name


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_full_vocabulary_is_unchanged(windows, backend):
    centred = corpus_stats(windows, d_vocab=V, backend=backend, progress=False)
    one_hot = corpus_stats(windows, d_vocab=V, q_targets="one-hot", backend=backend, progress=False)
    for name in STATS:  # the term vanishes exactly there and is not added: same bits
        assert torch.equal(getattr(centred, name), getattr(one_hot, name)), name
    assert_matches(centred, paper_code_stats(windows, V))
    assert_matches(one_hot, dense_corpus_stats(windows, V, q_targets="one-hot"))


def test_full_vocabulary_with_another_centring_adds_the_term(windows):
    # B̄1 = α(1 − |V|·u) ≠ 0 when centre_vocab ≠ d_vocab, so 1ᵀḠ ≠ 0 even without a restriction
    stats = corpus_stats(windows, d_vocab=V, centre_vocab=2 * V, progress=False)
    assert_matches(stats, paper_code_stats(windows, V, centre_vocab=2 * V))
    old = corpus_stats(windows, d_vocab=V, centre_vocab=2 * V, q_targets="one-hot", progress=False)
    assert not torch.allclose(old.Q_bar, stats.Q_bar, rtol=0, atol=1e-6 * stats.Q_bar.abs().max())


def test_paper_code_last_target_is_token_zero(windows):
    zeroed = windows.clone()
    zeroed[:, -1] = 0
    paper = corpus_stats(windows, d_vocab=V, vocab=KEPT, last_target="paper-code", progress=False)
    plain = corpus_stats(zeroed, d_vocab=V, vocab=KEPT, progress=False)
    for name in STATS:
        assert torch.equal(getattr(paper, name), getattr(plain, name)), name
    assert not torch.equal(
        paper.Phi_bar, corpus_stats(windows, d_vocab=V, vocab=KEPT, progress=False).Phi_bar
    )


def test_float32_restricted_close_to_float64(windows):
    s64 = corpus_stats(windows, d_vocab=V, vocab=KEPT, progress=False)
    s32 = corpus_stats(
        windows, d_vocab=V, vocab=KEPT, dtype=torch.float32, progress=False
    )  # row groups
    for name in STATS:
        a, b = getattr(s64, name), getattr(s32, name)
        assert (a - b.double()).abs().max() <= 1e-5 * a.abs().max(), name


def test_definitions_survive_save_and_load(windows, tmp_path):
    stats = corpus_stats(
        windows,
        d_vocab=V,
        vocab=KEPT,
        q_targets="one-hot",
        last_target="paper-code",
        progress=False,
    )
    stats.save(tmp_path / "s.safetensors")
    loaded = CorpusStats.load(tmp_path / "s.safetensors")
    assert loaded.metadata["q_targets"] == "one-hot"
    assert loaded.metadata["last_target"] == "paper-code"
    assert torch.equal(loaded.Q_bar, stats.Q_bar)


def test_accumulators_merge_only_like_definitions(windows):
    kept = resolve(KEPT, V)
    a, b = windows[:10], windows[10:]
    with pytest.raises(LeadTermsError, match="last_target"):
        ContextAccumulator(kept).update(a).merge(
            ContextAccumulator(kept, last_target="paper-code").update(b)
        )
    g = corpus_stats(windows, d_vocab=V, vocab=KEPT, progress=False).G_bar
    with pytest.raises(LeadTermsError, match="q_targets"):
        AttentionAccumulator(g, kept).update(a).merge(
            AttentionAccumulator(g, kept, q_targets="one-hot").update(b)
        )
    # shards with the default definition add up to the whole corpus
    whole = corpus_stats(windows, d_vocab=V, vocab=KEPT, progress=False)
    merged = AttentionAccumulator(g, kept).update(a).merge(AttentionAccumulator(g, kept).update(b))
    q_bar, delta = merged.result()
    assert torch.allclose(q_bar, whole.Q_bar, rtol=0, atol=1e-15)
    assert torch.allclose(delta, whole.Delta, rtol=0, atol=1e-15)


def test_bad_choices_are_named(windows):
    call = unchecked(corpus_stats)
    with pytest.raises(LeadTermsError, match="q_targets must be one of"):
        call(windows, d_vocab=V, vocab=KEPT, q_targets="centered", progress=False)
    with pytest.raises(LeadTermsError, match="last_target must be one of"):
        call(windows, d_vocab=V, last_target="zero", progress=False)
    with pytest.raises(LeadTermsError, match="q_targets must be one of"):
        acc = AttentionAccumulator.__new__(AttentionAccumulator)
        unchecked(AttentionAccumulator.__init__)(
            acc, torch.zeros(V, V), resolve(None, V), q_targets=None
        )
