"""Statistics per block of windows and bootstrap intervals, against plain recomputations."""

import math

import numpy as np
import pytest
import torch

from tests.factories import markov_tokens, random_attn_only
from tests.reference import dense_corpus_stats, expansion_factor, resample_quantile
from tl_leadterms import (
    LeadTermsError,
    corpus_stats,
    covariance_similarity,
    decompose,
    head_atlas,
)
from tl_leadterms.results.bootstrap import BootstrapSpec
from tl_leadterms.stats.blocks import BlockStats, block_stats

V, T = 10, 8
MATRICES = ("B_bar", "Phi_bar", "G_bar", "Q_bar", "Delta")


@pytest.fixture(scope="module")
def tokens():
    return markov_tokens(120, T + 1, V, seed=1)


def _windows(tokens, blocks, weights):
    return torch.cat([tokens[a:z] for (a, z), m in zip(blocks.bounds, weights, strict=True)
                      for _ in range(int(m))])  # fmt: skip


@pytest.mark.parametrize("vocab", [None, 7])
def test_full_equals_corpus_stats(tokens, vocab):
    blocks = block_stats(tokens, d_vocab=V, blocks=6, vocab=vocab, progress=False)
    kept = None if vocab is None else blocks.vocab.kept.tolist()
    want = corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)
    got = blocks.full()
    assert got.n_sequences == want.n_sequences == 120
    for name in MATRICES:
        assert torch.allclose(getattr(got, name), getattr(want, name), atol=1e-12, rtol=0), name
    assert torch.equal(got.pair_codes, want.pair_codes)
    assert torch.equal(got.pair_counts, want.pair_counts)


@pytest.mark.parametrize("vocab", [None, [0, 2, 3, 5, 6, 8, 9]])
def test_resample_equals_dense_reference_of_its_windows(tokens, vocab):
    """A resample is the statistics of the drawn windows, pass two (Q̄, Δ) with its own Ḡ."""
    blocks = block_stats(tokens, d_vocab=V, blocks=6, vocab=vocab, progress=False)
    for seed in range(2):
        weights = blocks.draw(torch.Generator().manual_seed(seed))
        got = blocks.weighted(weights)
        want = dense_corpus_stats(_windows(tokens, blocks, weights), V, kept=vocab)
        for name in MATRICES:
            assert torch.allclose(getattr(got, name), want[name], atol=1e-12, rtol=0), name
        assert got.metadata["bootstrap"] == "resample (exact pass two)"


@pytest.mark.parametrize(("d_vocab", "sparse"), [(V, False), (60, True)])
def test_resample_phi_from_sparse_parts_equals_the_dense_reference(d_vocab, sparse):
    """A resample's Φ̄ formed from each block's column term and sparse rest (and, for a small
    vocabulary whose rests are not sparse, densely) is the Φ̄ of its windows."""
    tokens = markov_tokens(120, T + 1, d_vocab, seed=3)
    blocks = block_stats(tokens, d_vocab=d_vocab, blocks=6, progress=False)
    for seed in range(3):
        weights = blocks.draw(torch.Generator().manual_seed(seed))
        want = dense_corpus_stats(_windows(tokens, blocks, weights), d_vocab)
        got = blocks.weighted(weights)
        for name in MATRICES:
            assert torch.allclose(getattr(got, name), want[name], atol=1e-12, rtol=0), name
    assert all(isinstance(part, tuple) == sparse for part in blocks._phis.parts)


def test_first_order_shortcut_is_measured_against_the_exact_resample(tokens):
    blocks = block_stats(tokens, d_vocab=V, blocks=6, progress=False)
    full = blocks.full()
    errors, spreads = [], []
    for seed in range(4):
        weights = blocks.draw(torch.Generator().manual_seed(seed))
        approx = blocks.weighted(weights, exact=False)
        exact = blocks.weighted(weights)
        for name in ("B_bar", "Phi_bar", "G_bar"):  # pass one: exact either way
            assert torch.equal(getattr(approx, name), getattr(exact, name))
        errors.append(float((approx.Q_bar - exact.Q_bar).norm() / exact.Q_bar.norm()))
        spreads.append(float((exact.Q_bar - full.Q_bar).norm() / exact.Q_bar.norm()))
    # measured (20 draws): relative error 0.16 mean (0.43 max) of ‖Q̄‖, while a resample
    # moves the exact Q̄ by 0.21 mean: the shortcut is coarse at this tiny size
    assert 0 < max(errors) < 0.5, errors
    assert np.mean(errors) < np.mean(spreads), (errors, spreads)


def test_block_file_keeps_the_windows_and_version_1_still_loads(tokens, tmp_path):
    blocks = block_stats(tokens, d_vocab=V, blocks=4, progress=False)
    blocks.save(tmp_path / "b.safetensors")
    loaded = BlockStats.load(tmp_path / "b.safetensors")
    pairs = zip(loaded.windows, blocks.windows, strict=True)
    assert loaded.exact and all(torch.equal(a.long(), b.long()) for a, b in pairs)
    g = torch.Generator
    assert torch.equal(loaded.resample(g().manual_seed(1)).Q_bar,
                       blocks.resample(g().manual_seed(1)).Q_bar)  # fmt: skip
    blocks.windows = None  # as a file written before the windows were kept
    blocks.save(tmp_path / "v1.safetensors")
    old = BlockStats.load(tmp_path / "v1.safetensors")
    assert not old.exact
    assert old.resample(g().manual_seed(1)).metadata["bootstrap"].endswith("(first-order pass two)")
    with pytest.raises(LeadTermsError, match="exact=True needs the blocks' windows"):
        old.resample(g().manual_seed(1), exact=True)


@pytest.mark.hooked
def test_weights_are_checked(tokens):
    blocks = block_stats(tokens, d_vocab=V, blocks=4, progress=False)
    for bad in ([1, 1, 1], [0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0], [-1, 2, 1, 1]):
        with pytest.raises(LeadTermsError):
            blocks.weighted(bad)
    with pytest.raises(LeadTermsError, match="blocks"):
        block_stats(tokens, d_vocab=V, blocks=1, progress=False)
    with pytest.raises(LeadTermsError, match="block_stats"):
        decompose(random_attn_only(V, T, seed=0), blocks.full(), ci=0.9, per_head=True)


def _reference_interval(values, estimate, level, blocks):
    """The default: the raw basic interval, each side widened about its centre by
    ``t_ν/z`` for ``blocks`` blocks and ``len(values)`` resamples, translated into [-1, 1]
    with its width kept."""
    q_lo, q_mid, q_hi = resample_quantile(values, [(1 - level) / 2, 0.5, (1 + level) / 2])
    lo, mid, hi = 2 * estimate - q_hi, 2 * estimate - q_mid, 2 * estimate - q_lo
    f = expansion_factor(level, blocks, len(values))
    lo, hi = mid - (mid - lo) * f, mid + (hi - mid) * f
    shift = max(hi - 1, 0) - max(-1 - lo, 0)
    return lo - shift, hi - shift, min(max(mid, lo - shift), hi - shift)


@pytest.mark.hooked
def test_decompose_interval_is_the_default_bootstrap_of_plain_decompositions(tokens):
    blocks = block_stats(tokens, d_vocab=V, blocks=6, vocab=8, progress=False)
    model = random_attn_only(V, T, seed=2)
    spec = BootstrapSpec(resamples=6, seed=3, method="shifted")  # "inverted": test_draws
    d = decompose(model, blocks, ci=0.8, bootstrap=spec, per_head=True)
    generator = torch.Generator().manual_seed(3)
    plain = [decompose(model, blocks.resample(generator), per_head=True).rows for _ in range(6)]
    for i, row in enumerate(d.rows):
        values = [rows[i]["cosine"] for rows in plain]
        want = _reference_interval(values, row["cosine"], 0.8, blocks=6)
        got = (row["lo"], row["hi"], row["corrected"])
        assert got == pytest.approx(want, abs=1e-9)
        assert row["ci_level"] == 0.8
    assert d.metadata["ci"]["resamples"] == 6 and d.metadata["ci"]["method"] == "shifted"


@pytest.mark.hooked
def test_covariance_interval_matches_plain_scores(tokens):
    blocks = block_stats(tokens, d_vocab=V, blocks=6, vocab=8, progress=False)
    model = random_attn_only(V, T, seed=2)
    spec = BootstrapSpec(resamples=5, seed=1, method="percentile")
    sim = covariance_similarity(model, blocks, ci=0.9, bootstrap=spec, per_head=True,
                                progress=False)  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    plain = [covariance_similarity(model, blocks.resample(generator), per_head=True,
                                   progress=False).rows for _ in range(5)]  # fmt: skip
    for i, row in enumerate(sim.rows):
        values = [rows[i]["value"] for rows in plain]
        lo, hi, mid = resample_quantile(values, [0.05, 0.95, 0.5])  # percentile: median inside
        f = expansion_factor(0.9, 6, 5)  # expanded for 6 blocks and 5 resamples, about mid
        want = (max(mid - (mid - lo) * f, -1.0), min(mid + (hi - mid) * f, 1.0), mid)
        assert (row["lo"], row["hi"], row["corrected"]) == pytest.approx(want, abs=1e-9)


@pytest.mark.hooked
def test_atlas_fills_interval_from_blocks(tokens):
    blocks = block_stats(tokens, d_vocab=V, blocks=5, progress=False)
    atlas = head_atlas(random_attn_only(V, T, seed=1), blocks, null=None, bootstrap=4)
    assert all(r["lo"] <= r["corrected"] <= r["hi"] for r in atlas.rows)
    assert atlas.metadata["ci"]["level"] == 0.95
    plain = head_atlas(random_attn_only(V, T, seed=1), blocks.full(), null=None)
    assert all(math.isnan(r["lo"]) and math.isnan(r["corrected"]) for r in plain.rows)


def _plain_document_cuts(windows, blocks, eos):
    """The cuts written out: for each equal cut, the windows within half a block either way;
    keep those that contain ``eos``; pick the one leaving the fewest tokens after its last
    ``eos``, the nearest to the equal cut on a tie, and cut just after it."""
    n, width = windows.shape
    half = n // (2 * blocks)
    edges = [0]
    for i in range(1, blocks):
        equal = round(i * n / blocks)
        best = None
        for cut in range(max(edges[-1] + 1, equal - half), min(n - (blocks - i), equal + half) + 1):
            row = windows[cut - 1].tolist()
            if eos in row:
                last = width - 1 - row[::-1].index(eos)
                key = (width - 1 - last, abs(cut - equal))
                best = min(best, (key, cut)) if best else (key, cut)
        edges.append(best[1] if best else equal)
    edges.append(n)
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def test_blocks_are_cut_where_documents_end():
    g = torch.Generator().manual_seed(4)
    windows = torch.randint(2, 12, (90, 7), generator=g)
    ends = torch.randint(0, 90 * 7, (14,), generator=g)
    windows.view(-1)[ends] = 1  # ends of documents at random places
    blocks = block_stats(windows, d_vocab=12, blocks=6, eos_id=1, progress=False)
    assert blocks.bounds == _plain_document_cuts(windows, 6, 1)
    assert blocks.bounds != block_stats(windows, d_vocab=12, blocks=6, progress=False).bounds
    assert blocks.metadata["block_cuts"] == "documents (eos_id 1)"
    want = corpus_stats(windows, d_vocab=12, progress=False)  # any cut: the same whole
    for name in MATRICES:
        assert torch.allclose(getattr(blocks.full(), name), getattr(want, name), atol=1e-12), name


def test_document_cuts_of_a_tokenizers_eos_and_equal_cuts_without_one():
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    tokenizer = train_word_tokenizer(generate_stories(20, seed=0), 40)
    eos, d_vocab = tokenizer.eos_token_id, len(tokenizer)
    g = torch.Generator().manual_seed(5)
    windows = torch.randint(eos + 1, d_vocab, (60, 7), generator=g)
    windows[[13, 31, 47], 6] = eos  # documents end at the ends of three windows
    cut = block_stats(windows, d_vocab=d_vocab, blocks=4, tokenizer=tokenizer, eos_id=eos,
                      progress=False)  # fmt: skip
    assert cut.bounds == [(0, 14), (14, 32), (32, 48), (48, 60)]
    assert cut.metadata["block_cuts"] == f"documents (eos_id {eos})"
    equal = block_stats(windows, d_vocab=d_vocab, blocks=4, tokenizer=tokenizer, progress=False)
    assert equal.bounds == [(0, 15), (15, 30), (30, 45), (45, 60)]
    assert equal.metadata["block_cuts"] == "windows"
    no_end = block_stats(windows.clamp(min=eos + 1), d_vocab=d_vocab, blocks=4, eos_id=eos,
                         progress=False)  # fmt: skip
    assert no_end.bounds == equal.bounds  # no end of document within reach: equal cuts


@pytest.mark.parametrize("bad", [12, -1, True])
def test_an_eos_id_outside_the_vocabulary_is_refused(bad):
    windows = torch.randint(0, 12, (30, 5), generator=torch.Generator().manual_seed(0))
    with pytest.raises(LeadTermsError, match=rf"eos_id={bad!r} is not a token id"):
        block_stats(windows, d_vocab=12, blocks=3, eos_id=bad, progress=False)
