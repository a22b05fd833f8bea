"""The permutation null of attention_agreement's rank correlation."""

import pytest
import torch

from tests.factories import markov_tokens
from tl_leadterms import attention_agreement, corpus_stats, paper_model, train
from tl_leadterms.results.null import permutations, random_reference
from tl_leadterms.stats.corpus import CorpusStats

V, T = 16, 8


@pytest.fixture(scope="module")
def setting():
    tokens = markov_tokens(100, T + 1, V, seed=3)
    stats = corpus_stats(tokens, d_vocab=V, vocab=12, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2, dtype=torch.float64)
    train(model, tokens, lr=0.5, steps=6, progress=False)
    return tokens[:24, :T], stats, model


def _relabelled(stats: CorpusStats, perm: torch.Tensor) -> CorpusStats:
    """The statistics with kept token i given row and column perm[i] of Q̄ (materialised)."""
    return CorpusStats(vocab=stats.vocab, n_sequences=stats.n_sequences, n_ctx=stats.n_ctx,
                       pair_codes=stats.pair_codes, pair_counts=stats.pair_counts,
                       unigram_counts=stats.unigram_counts, Phi_bar=stats.Phi_bar,
                       G_bar=stats.G_bar, Q_bar=stats.Q_bar[perm][:, perm],
                       Delta=stats.Delta)  # fmt: skip


def test_null_mean_is_the_mean_over_relabelled_statistics(setting):
    probe, stats, model = setting
    a = attention_agreement(model, stats, probe, s_lr=3.0, null=4, progress=False)
    plain = [attention_agreement(model, _relabelled(stats, p), probe, s_lr=3.0, progress=False)
             for p in permutations(stats.k, 4, 0)]  # fmt: skip
    for i, row in enumerate(a.rows):
        values = torch.tensor([p.rows[i]["rank_correlation"] for p in plain], dtype=torch.float64)
        assert row["null_mean"] == pytest.approx(float(values.mean()), abs=1e-12)
        assert row["null_sd"] == pytest.approx(float(values.std()), abs=1e-12)
        assert row["score"] == row["rank_correlation"]


def test_trained_beats_the_null_random_init_does_not(setting):
    probe, stats, model = setting
    trained = attention_agreement(model, stats, probe, null=99, progress=False)
    assert all(r["p"] < 0.05 for r in trained.rows), [(r["label"], r["p"]) for r in trained.rows]
    reference = random_reference(model, seed=5, init_range=1.0)
    rand = attention_agreement(reference, stats, probe, null=99, progress=False)
    assert sum(r["p"] > 0.05 for r in rand.rows) >= 0.5 * len(rand.rows), [
        (r["label"], r["p"]) for r in rand.rows
    ]
