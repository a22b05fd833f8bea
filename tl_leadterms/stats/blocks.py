"""Statistics kept per block of windows, for bootstrap confidence intervals over the corpus.

:func:`block_stats` reads a corpus like :func:`~tl_leadterms.corpus_stats` but keeps the
accumulators of ``B`` contiguous blocks of windows apart. :meth:`BlockStats.full` gives the
statistics of the whole corpus and :meth:`BlockStats.resample` those of a bootstrap resample of
blocks (``B`` blocks drawn with replacement), without reading the corpus again:

* **pass one is exact**: the resample's bigram counts, unigram counts and Φ̄ are sums over the
  drawn blocks with multiplicity (Φ̄ is the window-weighted mean of the blocks' Φ̄), and Ḡ is
  recomputed from them;
* **pass two is approximate**: Q̄ and Δ are linear in Ḡ for fixed windows; the resample's Q̄
  and Δ are the window-weighted means of the blocks' Q̄ and Δ computed with the FULL-corpus Ḡ.
  This keeps the sampling variability of the windows (first order, the delta-method term
  in the windows) but drops the propagation of the resample's own Ḡ into Q̄ (the term
  ``L̄(Ḡ* − Ḡ)``, also first order, which would need one more pass over the resampled windows).
  Measured against the exact recomputation (pass two rerun on the resampled windows with the
  resampled Ḡ; ``tests/unit/test_blocks.py``) on 120 windows of a 10-token chain in 6 blocks,
  20 resamples: Q̄ is off by 16% of ‖Q̄‖ on average (43% at most) while a resample moves the
  exact Q̄ by 21%; the cosine of a trained ``W`` with Q̄ is off by 0.043 on average, as much
  as the resampling spread itself (0.036). At such sizes the interval of a ``W``/``Q̄``
  score is therefore rough (its coverage was 80% for a nominal 90%); pass-one scores
  (``W_O``, ``V``) are exact.

Memory: every block keeps a ``[k, k]`` Φ̄ and Q̄, so ``2·B·k²`` numbers; use a restricted
vocabulary (``vocab=``) for large tokenizers.

>>> import torch
>>> windows = torch.randint(0, 6, (40, 5), generator=torch.Generator().manual_seed(0))
>>> blocks = block_stats(windows, d_vocab=6, blocks=4, progress=False)
>>> blocks.n_blocks, blocks.bounds[:2], blocks.full().n_sequences
(4, [(0, 10), (10, 20)], 40)
>>> blocks.resample(torch.Generator().manual_seed(1)).Q_bar.shape
torch.Size([6, 6])
"""

import itertools
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator, ContextCounts
from tl_leadterms.stats.compute import composed_from_counts
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.definitions import LastTarget, QTargets
from tl_leadterms.stats.tokens import TokenSource
from tl_leadterms.stats.vocab import VocabSpec, resolve_vocab
from tl_leadterms.version import __version__

__all__ = ["BlockStats", "block_stats"]


class BlockStats:
    """Per-block pass-one counts and pass-two sums (with the full-corpus Ḡ) of one corpus.

    Attributes:
        counts: one :class:`~tl_leadterms.stats.accumulate.ContextCounts` per block.
        Q_bars, Deltas: each block's Q̄ ``[k, k]`` and Δ ``[T]`` computed with the full Ḡ.
        sizes: windows per block; ``bounds``: each block's ``[start, stop)`` window range.
    """

    def __init__(self, counts, Q_bars, Deltas, bounds, vocab, G_bar, metadata, tokenizer=None):
        self.counts: list[ContextCounts] = counts
        self.Q_bars: list[Tensor] = Q_bars
        self.Deltas: list[Tensor] = Deltas
        self.bounds: list[tuple[int, int]] = bounds
        self.sizes = torch.tensor([b - a for a, b in bounds], dtype=torch.long)
        self.vocab = vocab
        self.metadata = metadata
        self.tokenizer = tokenizer
        self._full = self._stats(torch.ones(len(bounds), dtype=torch.long), G_bar, "full")

    @property
    def n_blocks(self) -> int:
        return len(self.bounds)

    def full(self) -> CorpusStats:
        """The statistics of the whole corpus (equal to ``corpus_stats`` up to rounding)."""
        return self._full

    def draw(self, generator: torch.Generator | None = None) -> Tensor:
        """Multiplicities ``[B]`` of a bootstrap resample: ``B`` blocks drawn with replacement."""
        picks = torch.randint(self.n_blocks, (self.n_blocks,), generator=generator)
        return torch.bincount(picks, minlength=self.n_blocks)

    def resample(self, generator: torch.Generator | None = None) -> CorpusStats:
        """The statistics of one bootstrap resample of blocks (see the module docstring)."""
        return self.weighted(self.draw(generator))

    def weighted(self, weights: Any) -> CorpusStats:
        """The statistics of the blocks taken ``weights[b]`` times each (non-negative ints)."""
        w = torch.as_tensor(weights)
        if w.shape != (self.n_blocks,) or w.dtype.is_floating_point or bool((w < 0).any()):
            raise LeadTermsError(
                f"weights must be {self.n_blocks} non-negative integers (one per block), got "
                f"{weights!r}"
            )
        if int(w.sum()) == 0:
            raise LeadTermsError("weights select no block; give at least one block weight > 0")
        return self._stats(w.long(), None, "resample")

    def _stats(self, w: Tensor, G_bar: Tensor | None, kind: str) -> CorpusStats:
        chosen = [int(b) for b in torch.nonzero(w).flatten()]
        n = int((w * self.sizes).sum())
        share = [float(w[b] * self.sizes[b]) / n for b in chosen]  # window weight of each block
        counts = _combine_counts([self.counts[b] for b in chosen], [int(w[b]) for b in chosen],
                                 share, n)  # fmt: skip
        if G_bar is None:
            G_bar = composed_from_counts(counts, self.vocab)
        Q_bar = sum(s * self.Q_bars[b] for s, b in zip(share, chosen, strict=True))
        Delta = sum(s * self.Deltas[b] for s, b in zip(share, chosen, strict=True))
        metadata = {**self.metadata, "n_sequences": n, "bootstrap": kind}
        return CorpusStats(
            vocab=self.vocab, n_sequences=n, n_ctx=counts.n_ctx, pair_codes=counts.pair_codes,
            pair_counts=counts.pair_counts, unigram_counts=counts.unigram_counts,
            Phi_bar=counts.Phi_bar, G_bar=G_bar, Q_bar=Q_bar, Delta=Delta, metadata=metadata,
            tokenizer=self.tokenizer,
        )  # fmt: skip

    def __repr__(self) -> str:
        return (f"BlockStats({self.n_blocks} blocks of {self.sizes.min()}-{self.sizes.max()} "
                f"windows, k={self.vocab.k}, T={self.counts[0].n_ctx})")  # fmt: skip


def _combine_counts(parts: list[ContextCounts], mult: list[int], share, n: int) -> ContextCounts:
    """Pass-one counts of blocks taken ``mult`` times (exact: Φ̄ is linear in the sums)."""
    codes = torch.cat([c.pair_codes for c in parts])
    counts = torch.cat([c.pair_counts * m for c, m in zip(parts, mult, strict=True)])
    unique, inverse = torch.unique(codes, return_inverse=True)
    summed = torch.zeros(unique.numel(), dtype=torch.long).index_add_(0, inverse, counts)
    unigram = sum(c.unigram_counts * m for c, m in zip(parts, mult, strict=True))
    phi = sum(s * c.Phi_bar for s, c in zip(share, parts, strict=True))
    return ContextCounts(unique, summed, unigram, phi, n, parts[0].n_ctx)


def _block_bounds(n: int, blocks: int) -> list[tuple[int, int]]:
    edges = [round(i * n / blocks) for i in range(blocks + 1)]
    return list(itertools.pairwise(edges))


def _split(batch: Tensor, start: int, bounds: list[tuple[int, int]]):
    """``(block, rows)`` pieces of a batch whose first window is window ``start``."""
    stop = start + batch.shape[0]
    for b, (lo, hi) in enumerate(bounds):
        a, z = max(lo, start), min(hi, stop)
        if a < z:
            yield b, batch[a - start : z - start]


def _read(source, bounds, make, desc: str, progress: bool) -> list:
    accs = [make() for _ in bounds]
    start = 0
    for batch in tqdm(source, total=len(source) or None, desc=desc, disable=not progress):
        for b, rows in _split(batch, start, bounds):
            accs[b].update(rows)
        start += batch.shape[0]
    return accs


def block_stats(
    tokens: Any,
    d_vocab: int,
    *,
    blocks: int = 20,
    vocab: VocabSpec = None,
    centre_vocab: int | None = None,
    dtype: torch.dtype = torch.float64,
    batch_size: int | None = None,
    backend: str = "auto",
    q_targets: QTargets = "centred",
    last_target: LastTarget = "data",
    tokenizer: Any = None,
    progress: bool = True,
) -> BlockStats:
    """Corpus statistics kept per contiguous block of windows (see the module docstring).

    Arguments as :func:`~tl_leadterms.corpus_stats` (CPU, float64 accumulation), plus
    ``blocks``: the number ``B`` of contiguous blocks of windows (about equal sizes, at least
    2 and at most the number of windows). Blocks should be long enough that windows in
    different blocks are roughly independent (e.g. whole documents per block).
    """
    if positive_int("blocks", blocks) < 2:
        raise LeadTermsError(f"blocks must be at least 2 for a bootstrap, got {blocks}")
    if dtype not in (torch.float64, torch.float32):
        raise LeadTermsError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    source = TokenSource(tokens, d_vocab, batch_size=batch_size)
    kept = resolve_vocab(vocab, source.d_vocab, centre_vocab=centre_vocab, count_batches=source)
    n = sum(batch.shape[0] for batch in source)
    if n < blocks:
        raise LeadTermsError(
            f"blocks={blocks} is more than the corpus' {n} windows; use at most {n} blocks."
        )
    bounds = _block_bounds(n, blocks)

    def context() -> ContextAccumulator:
        return ContextAccumulator(kept, backend=backend, last_target=last_target)

    firsts = _read(source, bounds, context, "pass 1/2 (blocks)", progress)
    counts = [acc.result(release=True, dtype=dtype) for acc in firsts]
    whole = _combine_counts(counts, [1] * blocks, [(b - a) / n for a, b in bounds], n)
    G_bar = composed_from_counts(whole, kept)

    def attention() -> AttentionAccumulator:
        return AttentionAccumulator(G_bar, kept, backend=backend, dtype=torch.float64,
                                    q_targets=q_targets, last_target=last_target)  # fmt: skip

    seconds = _read(source, bounds, attention, "pass 2/2 (blocks)", progress)
    results = [acc.result(release=True, dtype=dtype) for acc in seconds]
    metadata = {
        "library_version": __version__, "d_vocab": kept.d_vocab, "n_ctx": counts[0].n_ctx,
        "n_sequences": n, "n_kept": kept.k, "centre_vocab": kept.centre_vocab,
        "dtype": str(dtype).removeprefix("torch."), "backend": firsts[0].backend,
        "q_targets": q_targets, "last_target": last_target, "blocks": blocks,
    }  # fmt: skip
    return BlockStats(counts, [q for q, _ in results], [d for _, d in results], bounds, kept,
                      G_bar, metadata, tokenizer)  # fmt: skip
