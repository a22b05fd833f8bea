"""Resamples are computed once per ``BlockStats`` (``Bootstrap.resamples``): a second analysis
asking for the same draws reads the kept tables, and those are the statistics of the drawn
windows, recomputed here plainly with ``corpus_stats`` over the blocks' windows repeated as
drawn."""

import pytest
import torch

from tl_leadterms import corpus_stats
from tl_leadterms.results import bootstrap as bs
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec
from tl_leadterms.stats.blocks import block_stats

TABLES = ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar_Phi_bar")


@pytest.fixture
def blocks():
    gen = torch.Generator().manual_seed(4)
    windows = torch.randint(0, 15, (30, 9), generator=gen)
    return block_stats(windows, d_vocab=15, blocks=5, progress=False)


def plain_resample(blocks, seed, r):
    """Resample ``r`` of seed ``seed``: ``B − 1`` blocks drawn with replacement (torch.randint on a
    generator seeded once), their windows repeated as often as drawn, counted afresh."""
    gen = torch.Generator().manual_seed(seed)
    B = blocks.n_blocks
    for _ in range(r + 1):
        picks = torch.randint(B, (B - 1,), generator=gen)
    times = torch.bincount(picks, minlength=B).tolist()
    windows = torch.cat([blocks.windows[b] for b in range(B) for _ in range(times[b])])
    return corpus_stats(windows, d_vocab=15, progress=False)


def test_second_reading_is_the_kept_resamples_and_they_are_the_drawn_windows(blocks):
    boot = Bootstrap(blocks, 0.9, BootstrapSpec(resamples=4, seed=3))
    first = list(boot.resamples())
    other_method = Bootstrap(blocks, 0.8, BootstrapSpec(resamples=4, seed=3, method="percentile"))
    again = list(other_method.resamples())  # the same draws: read, not recomputed
    assert len(first) == len(again) == 4
    for r, (a, b) in enumerate(zip(first, again, strict=True)):
        assert a is not b  # fresh statistics ...
        for name in TABLES:  # ... over the very tables
            assert getattr(a, name) is getattr(b, name), (r, name)
        plain = plain_resample(blocks, 3, r)
        assert torch.equal(b.pair_codes, plain.pair_codes)
        assert torch.equal(b.pair_counts, plain.pair_counts)
        assert torch.equal(b.unigram_counts, plain.unigram_counts)
        for name in TABLES:
            assert torch.allclose(getattr(b, name), getattr(plain, name), rtol=1e-10,
                                  atol=1e-13), (r, name)  # fmt: skip
    different = list(Bootstrap(blocks, 0.9, BootstrapSpec(resamples=4, seed=5)).resamples())
    assert not torch.equal(different[0].Q_bar, first[0].Q_bar) or not torch.equal(
        different[1].Q_bar, first[1].Q_bar
    )


def test_nothing_is_kept_when_cut_short_or_too_big(blocks, monkeypatch):
    boot = Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3, seed=1))
    for _ in boot.resamples():
        break  # cut short: not kept
    assert not bs._RESAMPLES.get(blocks)
    monkeypatch.setattr(bs, "RESAMPLE_CACHE_BYTES", 0)
    first = list(boot.resamples())
    assert not bs._RESAMPLES.get(blocks)  # too big for the budget: recomputed each time
    again = list(boot.resamples())
    for r, (a, b) in enumerate(zip(first, again, strict=True)):
        assert a.Q_bar is not b.Q_bar and torch.equal(a.Q_bar, b.Q_bar), r
        plain = plain_resample(blocks, 1, r)
        assert torch.allclose(a.Q_bar, plain.Q_bar, rtol=1e-10, atol=1e-13), r


def test_leave_one_out_draws_are_kept_apart(blocks):
    shifted = list(Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3)).resamples())
    bca = list(Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3, method="bca")).resamples())
    assert len(shifted) == 3 and len(bca) == 3 + blocks.n_blocks
    assert all(torch.equal(a.Q_bar, b.Q_bar) for a, b in zip(shifted, bca[:3], strict=True))
    windows = torch.cat([blocks.windows[b] for b in range(1, blocks.n_blocks)])  # block 0 out
    plain = corpus_stats(windows, d_vocab=15, progress=False)
    assert torch.allclose(bca[3].Q_bar, plain.Q_bar, rtol=1e-10, atol=1e-13)
