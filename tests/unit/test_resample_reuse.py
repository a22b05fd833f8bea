"""Resamples' pass two is computed at most twice per ``BlockStats`` (``Bootstrap.resamples``):
the second analysis asking for the same draws keeps Q̄ and Δ, later ones read them and rebuild
pass one's sums to the same numbers, and those are the statistics of the drawn windows,
recomputed here plainly with ``corpus_stats`` over the blocks' windows repeated as drawn."""

import pytest
import torch

from tl_leadterms import corpus_stats
from tl_leadterms.results import bootstrap as bs
from tl_leadterms.results.bootstrap import Bootstrap, BootstrapSpec
from tl_leadterms.stats.blocks import block_stats

TABLES = ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar_Phi_bar")
KEPT = ("Q_bar", "Delta")  # pass two: kept; the others are rebuilt


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


def test_later_readings_are_the_kept_pass_two_and_they_are_the_drawn_windows(blocks):
    boot = Bootstrap(blocks, 0.9, BootstrapSpec(resamples=4, seed=3))
    once = list(boot.resamples())
    assert bs._RESAMPLES[blocks] == {(3, 4, (), True): None}  # asked once: nothing kept
    first = list(boot.resamples())  # asked again: kept this time
    assert [q is f.Q_bar for (q, _), f in zip(bs._RESAMPLES[blocks][(3, 4, (), True)],
                                               first, strict=True)] == [True] * 4  # fmt: skip
    other_method = Bootstrap(blocks, 0.8, BootstrapSpec(resamples=4, seed=3, method="percentile"))
    again = list(other_method.resamples())  # the same draws: read, not recomputed
    assert len(first) == len(again) == 4
    for r, (a, b) in enumerate(zip(first, again, strict=True)):
        assert a is not b  # fresh statistics ...
        for name in KEPT:  # ... over the very pass-two tables
            assert getattr(a, name) is getattr(b, name), (r, name)
        for name in TABLES:  # pass one rebuilt, and the first reading: the same numbers
            assert torch.equal(getattr(a, name), getattr(b, name)), (r, name)
            assert torch.equal(getattr(once[r], name), getattr(b, name)), (r, name)
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
    for _ in range(3):
        for _ in boot.resamples():
            break  # cut short: not even remembered as asked
    assert not bs._RESAMPLES.get(blocks)
    monkeypatch.setattr(bs, "RESAMPLE_CACHE_BYTES", 0)
    first = list(boot.resamples())
    again = list(boot.resamples())
    third = list(boot.resamples())
    assert bs._RESAMPLES[blocks] == {(1, 3, (), True): None}  # too big: recomputed each time
    for r, (a, b, c) in enumerate(zip(first, again, third, strict=True)):
        assert a.Q_bar is not b.Q_bar and b.Q_bar is not c.Q_bar and torch.equal(a.Q_bar, c.Q_bar)
        plain = plain_resample(blocks, 1, r)
        assert torch.allclose(a.Q_bar, plain.Q_bar, rtol=1e-10, atol=1e-13), r


def test_resamples_run_on_one_thread_and_restore_the_thread_count(blocks):
    before = torch.get_num_threads()
    seen = []
    for _stats in Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3, seed=2)).resamples():
        seen.append(torch.get_num_threads())
    assert seen == [1, 1, 1] and torch.get_num_threads() == before
    stream = Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3, seed=2)).resamples()
    next(stream)
    stream.close()  # stopped early: restored too
    assert torch.get_num_threads() == before


def test_kept_pass_two_of_the_wrong_shape_is_refused(blocks):
    w = torch.ones(blocks.n_blocks, dtype=torch.long)
    with pytest.raises(Exception, match="pass_two must be"):
        blocks.weighted(w, pass_two=(torch.zeros(3, 3), torch.zeros(8)))


def test_leave_one_out_draws_are_kept_apart(blocks):
    shifted = list(Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3)).resamples())
    bca = list(Bootstrap(blocks, 0.9, BootstrapSpec(resamples=3, method="bca")).resamples())
    assert len(shifted) == 3 and len(bca) == 3 + blocks.n_blocks
    assert all(torch.equal(a.Q_bar, b.Q_bar) for a, b in zip(shifted, bca[:3], strict=True))
    windows = torch.cat([blocks.windows[b] for b in range(1, blocks.n_blocks)])  # block 0 out
    plain = corpus_stats(windows, d_vocab=15, progress=False)
    assert torch.allclose(bca[3].Q_bar, plain.Q_bar, rtol=1e-10, atol=1e-13)
