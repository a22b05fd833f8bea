"""Statistics kept per block of windows, for bootstrap confidence intervals over the corpus.

:func:`block_stats` reads a corpus like :func:`~tl_leadterms.corpus_stats` but keeps the
accumulators of ``B`` contiguous blocks of windows apart. :meth:`BlockStats.full` gives the
statistics of the whole corpus and :meth:`BlockStats.resample` those of a bootstrap resample of
blocks (``B − 1`` blocks drawn with replacement, :meth:`BlockStats.draw`), without
reading the corpus again:

* **pass one is exact**: the resample's bigram counts, unigram counts and Φ̄ are sums over the
  drawn blocks with multiplicity (Φ̄ is the window-weighted mean of the blocks' Φ̄), and Ḡ is
  recomputed from them;
* **pass two is exact** too: pass two rerun over the drawn blocks' windows with the resample's OWN
  Ḡ; ``resample(..., exact=False)`` (and block files of format 1) use the first-order shortcut, the
  blocks' Q̄ and Δ computed with the FULL-corpus Ḡ. Its error and the exact pass's cost:
  docs/guides/intervals.md#exact-resamples-and-what-they-cost.

Saved with :meth:`BlockStats.save` as one ``.safetensors`` file, every tensor checksummed and
verified by :meth:`BlockStats.load` (the layout: :mod:`tl_leadterms.stats.block_files`). Where
the blocks are cut, equal or at the ends of documents: :mod:`tl_leadterms.stats.cuts`. Every block
keeps a ``[k, k]`` Φ̄ and Q̄ and its windows; the memory plan, checked before any table exists:
docs/guides/performance.md#the-memory-plan-stage-by-stage.

>>> import torch
>>> windows = torch.randint(0, 6, (40, 5), generator=torch.Generator().manual_seed(0))
>>> blocks = block_stats(windows, d_vocab=6, blocks=4, progress=False)
>>> blocks.n_blocks, blocks.bounds[:2], blocks.full().n_sequences
(4, [(0, 10), (10, 20)], 40)
>>> blocks.resample(torch.Generator().manual_seed(1)).metadata["bootstrap"]
'resample (exact pass two)'
>>> import tempfile
>>> path = tempfile.mkdtemp() + "/blocks.safetensors"; blocks.save(path)
>>> torch.equal(BlockStats.load(path).full().Q_bar, blocks.full().Q_bar)
True
"""

import os
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import TokenWindows
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator, ContextCounts
from tl_leadterms.stats.algebra import CentredBigram
from tl_leadterms.stats.block_files import read_block_stats, write_block_stats
from tl_leadterms.stats.corpus import CorpusStats, check_stats_dtype
from tl_leadterms.stats.cuts import check_eos, document_bounds, equal_bounds, window_tails
from tl_leadterms.stats.definitions import LastTarget, QTargets, key_shift
from tl_leadterms.stats.driver import composed_from_counts, tokenizer_provenance
from tl_leadterms.stats.memory import check_memory, plan_block_memory
from tl_leadterms.stats.provenance import WindowsDigest
from tl_leadterms.stats.tables import padded_square
from tl_leadterms.stats.tokens import TokenSource, default_batch_size, token_counts
from tl_leadterms.stats.vocab import VocabSpec, resolve_vocab
from tl_leadterms.version import __version__

__all__ = ["BlockStats", "block_stats"]


class BlockStats:
    """Per-block pass-one counts and pass-two sums (with the full-corpus Ḡ) of one corpus.

    Attributes:
        counts: one :class:`~tl_leadterms.stats.accumulate.ContextCounts` per block.
        Q_bars, Deltas: each block's Q̄ ``[k, k]`` and Δ ``[T]`` computed with the full Ḡ.
        windows: each block's ``[n_b, T + 1]`` windows (for exact resamples), or ``None``
            (a file of format version 1: resamples use the first-order shortcut).
        sizes: windows per block; ``bounds``: each block's ``[start, stop)`` window range.
    """

    def __init__(self, counts, Q_bars, Deltas, bounds, vocab, G_bar, metadata, tokenizer=None,
                 windows=None):  # fmt: skip
        self.counts: list[ContextCounts] = counts
        self.Q_bars: list[Tensor] = Q_bars
        self.Deltas: list[Tensor] = Deltas
        self.windows: list[Tensor] | None = windows
        self.bounds: list[tuple[int, int]] = bounds
        self.sizes = torch.tensor([b - a for a, b in bounds], dtype=torch.long)
        self.vocab = vocab
        self.metadata = metadata
        self.tokenizer = tokenizer
        self._pairs = _PairUnion(counts)
        self._phis: _PhiParts | None = None  # built by the first resample (``_stats``)
        self._full = self._stats(torch.ones(len(bounds), dtype=torch.long), G_bar, "full", False)

    @property
    def n_blocks(self) -> int:
        return len(self.bounds)

    def full(self) -> CorpusStats:
        """The statistics of the whole corpus (equal to ``corpus_stats`` up to rounding)."""
        return self._full

    def draw(self, generator: torch.Generator | None = None) -> Tensor:
        """Multiplicities ``[B]`` of a bootstrap resample: ``B − 1`` blocks drawn with replacement
        (one block when ``B = 1``; why ``B − 1``: docs/guides/intervals.md#the-method-and-why)."""
        picks = torch.randint(self.n_blocks, (max(1, self.n_blocks - 1),), generator=generator)
        return torch.bincount(picks, minlength=self.n_blocks)

    @property
    def exact(self) -> bool:
        """Whether resamples can be exact (the blocks kept their windows)."""
        return self.windows is not None

    def resample(self, generator: torch.Generator | None = None, *,
                 exact: bool | None = None) -> CorpusStats:  # fmt: skip
        """The statistics of one bootstrap resample of blocks (see the module docstring)."""
        return self.weighted(self.draw(generator), exact=exact)

    def weighted(self, weights: Any, *, exact: bool | None = None,
                 pass_two: tuple[Tensor, Tensor] | None = None) -> CorpusStats:  # fmt: skip
        """The statistics of the blocks taken ``weights[b]`` times each (non-negative ints).

        ``exact`` (default: whenever the blocks kept their windows): pass two rerun with the
        resample's own Ḡ; ``False``: the first-order shortcut (the module docstring). ``pass_two``:
        the ``(Q̄, Δ)`` this call made before for the same ``weights`` and ``exact`` (what
        :meth:`~tl_leadterms.results.bootstrap.Bootstrap.resamples` keeps), taken as they are: only
        pass one's sums are formed again."""
        w = torch.as_tensor(weights)
        if w.shape != (self.n_blocks,) or w.dtype.is_floating_point or bool((w < 0).any()):
            raise LeadTermsError(
                f"weights must be {self.n_blocks} non-negative integers (one per block), got "
                f"{weights!r}"
            )
        if int(w.sum()) == 0:
            raise LeadTermsError("weights select no block; give at least one block weight > 0")
        k, t = self.vocab.k, self.counts[0].n_ctx
        if pass_two is not None and (len(pass_two) != 2 or tuple(pass_two[0].shape) != (k, k)
                                     or tuple(pass_two[1].shape) != (t,)):  # fmt: skip
            raise LeadTermsError(
                f"pass_two must be (Q_bar [{k}, {k}], Delta [{t}]) of these blocks, got shapes "
                f"{[tuple(x.shape) for x in pass_two]}; leave it out to compute pass two."
            )
        if exact is None:
            exact = self.exact
        elif exact and not self.exact:
            raise LeadTermsError(
                "exact=True needs the blocks' windows, which this BlockStats does not keep (a "
                "file of format version 1); recompute it with block_stats, or pass exact=False."
            )
        return self._stats(w.long(), None, "resample", bool(exact), pass_two)

    def _stats(self, w: Tensor, G_bar: Tensor | None, kind: str, exact: bool,
               pass_two: tuple[Tensor, Tensor] | None = None) -> CorpusStats:  # fmt: skip
        chosen = [int(b) for b in torch.nonzero(w).flatten()]
        n = int((w * self.sizes).sum())
        share = [float(w[b] * self.sizes[b]) / n for b in chosen]  # window weight of each block
        phi = None
        if kind == "resample":  # the drawn blocks' Φ̄ summed from their sparse parts
            if self._phis is None:
                self._phis = _PhiParts([c.Phi_bar for c in self.counts])
            phi = self._phis.weighted_sum(chosen, share)
        counts = _combine_counts([self.counts[b] for b in chosen], [int(w[b]) for b in chosen],
                                 share, n, self._pairs.at(chosen), phi)  # fmt: skip
        bigram = product = None
        if G_bar is None:  # Ḡ = B̄ᵀ(B̄Φ̄), B̄Φ̄ kept: it is the value term of the resample too
            bigram = CentredBigram(counts.pair_codes, counts.pair_counts, counts.unigram_counts,
                                   n * counts.n_ctx, self.vocab.centre_vocab,
                                   counts.Phi_bar.dtype)  # fmt: skip
            product = bigram.times(counts.Phi_bar)
            G_bar = padded_square(self.vocab.k, product.dtype, product.device, zero=False)
            bigram.t_times(product, out=G_bar)  # every entry written (the pad slot is zero)
        if pass_two is not None:
            Q_bar, Delta = pass_two
        elif exact:
            Q_bar, Delta = self._pass_two(G_bar, w)
        else:
            Q_bar = sum(s * self.Q_bars[b] for s, b in zip(share, chosen, strict=True))
            Delta = sum(s * self.Deltas[b] for s, b in zip(share, chosen, strict=True))
        if kind == "resample":
            kind += " (exact pass two)" if exact else " (first-order pass two)"
        metadata = {**self.metadata, "n_sequences": n, "bootstrap": kind}
        stats = CorpusStats(
            vocab=self.vocab, n_sequences=n, n_ctx=counts.n_ctx, pair_codes=counts.pair_codes,
            pair_counts=counts.pair_counts, unigram_counts=counts.unigram_counts,
            Phi_bar=counts.Phi_bar, G_bar=G_bar, Q_bar=Q_bar, Delta=Delta, metadata=metadata,
            tokenizer=self.tokenizer,
        )  # fmt: skip
        if product is not None:  # the cached operator and product, not computed twice
            stats.bigram, stats.B_bar_Phi_bar = bigram, product
        return stats

    def _pass_two(self, G_bar: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        """Q̄ and Δ of the blocks taken ``w[b]`` times, pass two rerun with ``G_bar`` (a
        resample's own Ḡ): one pass over the drawn blocks' windows, each counted with its
        block's multiplicity (as if repeated)."""
        meta, dtype = self.metadata, self.Q_bars[0].dtype
        step = default_batch_size(self.counts[0].n_ctx)
        q_targets = meta.get("q_targets", "centred")
        chosen = torch.nonzero(w).flatten()
        windows = torch.cat([self.windows[b] for b in chosen.tolist()])
        mult = torch.repeat_interleave(w[chosen], self.sizes[chosen])  # one per window
        acc = AttentionAccumulator(
            G_bar, self.vocab, backend=meta.get("backend", "auto"), dtype=torch.float64,
            q_targets=q_targets, last_target=meta.get("last_target", "data"),
            shift=key_shift(G_bar, self.vocab, q_targets),
        )  # fmt: skip
        for start in range(0, windows.shape[0], step):
            acc.update(windows[start : start + step].long(), weights=mult[start : start + step])
        Q_bar, Delta = acc.result(release=True)
        return Q_bar.to(dtype), Delta.to(dtype)

    def save(self, path: str | os.PathLike) -> None:
        """Write the block statistics to one safetensors file, atomically (see the module)."""
        write_block_stats(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, tokenizer: Any = None,
             check_vocab: bool = True) -> "BlockStats":  # fmt: skip
        """Load a file written by :meth:`save`, verified (see
        :func:`~tl_leadterms.stats.block_files.read_block_stats`)."""
        return cls(**read_block_stats(path, tokenizer=tokenizer, check_vocab=check_vocab))

    def __repr__(self) -> str:
        return (f"BlockStats({self.n_blocks} blocks of {self.sizes.min()}-{self.sizes.max()} "
                f"windows, k={self.vocab.k}, T={self.counts[0].n_ctx})")  # fmt: skip


class _PairUnion:
    """The sorted union of the blocks' pair codes and where each block's codes sit in it: the
    bigram counts of any weighting of the blocks are then one scatter-add per block into the
    union, not a sort of every drawn block's codes."""

    def __init__(self, counts: list[ContextCounts]) -> None:
        self.codes = torch.unique(torch.cat([c.pair_codes for c in counts]))  # sorted
        self.where = [torch.searchsorted(self.codes, c.pair_codes) for c in counts]

    def at(self, blocks: list[int]) -> tuple[Tensor, list[Tensor]]:
        return self.codes, [self.where[b] for b in blocks]


class _PhiParts:
    """Each block's Φ̄ as a column term and a sparse rest: ``Φ̄_b = 1ρ_bᵀ + R_b`` with
    ``ρ_b[j] = min_i Φ̄_b[i, j]`` (``−μ_j`` wherever some target never follows key ``j`` in the
    block, as is the rule), so ``R_b`` is zero outside the block's (target, key) pairs. A
    weighting of the blocks is then one ``[k, k]`` write of ``Σ s_b ρ_b`` and a scatter of each
    drawn block's few pairs, not a dense pass per block. The split is exact for any ``ρ_b``;
    a block whose rest is not sparse (a small vocabulary) is added densely."""

    DENSE_SHARE = 0.25  # a rest with more nonzeros than this share of k² is added as it is

    def __init__(self, phis: list[Tensor]) -> None:
        self.k = phis[0].shape[0]
        self.rho, self.parts = [], []
        for phi in phis:
            rho = phi.amin(dim=0)
            rest = (phi - rho).reshape(-1)
            codes = torch.nonzero(rest).flatten()
            sparse = codes.numel() <= self.DENSE_SHARE * rest.numel()
            self.rho.append(rho)
            self.parts.append((codes, rest[codes]) if sparse else phi)

    def weighted_sum(self, blocks: list[int], share: list[float]) -> Tensor:
        """``Σ_b share[b]·Φ̄_b`` over ``blocks``: a new ``[k, k]`` tensor."""
        rho = self.rho[blocks[0]] * share[0]
        for s, b in zip(share[1:], blocks[1:], strict=True):
            rho.add_(self.rho[b], alpha=s)
        out = rho.expand(self.k, self.k).contiguous()
        flat = out.view(-1)
        for s, b in zip(share, blocks, strict=True):
            part = self.parts[b]
            if isinstance(part, tuple):
                flat.index_add_(0, part[0], part[1], alpha=s)
            else:  # dense: its ρ_b was added above, so only the rest
                out.add_(part - self.rho[b], alpha=s)
        return out


def _combine_counts(parts: list[ContextCounts], mult: list[int], share, n: int,
                    union: tuple[Tensor, list[Tensor]],
                    phi: Tensor | None = None) -> ContextCounts:  # fmt: skip
    """Pass-one counts of blocks taken ``mult`` times (exact: Φ̄ is linear in the sums);
    ``union``: the union of every block's codes and these blocks' places in it (``_PairUnion``),
    so the sorted distinct codes and their sums are one scatter-add per block; ``phi``: their Φ̄
    sum when the caller formed it (``_PhiParts``)."""
    every, places = union
    summed = torch.zeros(every.numel(), dtype=torch.long)
    for c, m, where in zip(parts, mult, places, strict=True):
        summed.index_add_(0, where, c.pair_counts, alpha=m)
    seen = summed > 0  # counts are positive: a code is seen iff a drawn block has it
    unique, summed = every[seen], summed[seen]
    unigram = sum(c.unigram_counts * m for c, m in zip(parts, mult, strict=True))
    if phi is None:
        phi = parts[0].Phi_bar * share[0]  # the first block scaled, the others added in place
        for s, c in zip(share[1:], parts[1:], strict=True):  # one pass per block
            phi.add_(c.Phi_bar, alpha=s)
    return ContextCounts(unique, summed, unigram, phi, n, parts[0].n_ctx)


def _split(batch: Tensor, start: int, bounds: list[tuple[int, int]]):
    """``(block, rows)`` pieces of a batch whose first window is window ``start``."""
    stop = start + batch.shape[0]
    for b, (lo, hi) in enumerate(bounds):
        a, z = max(lo, start), min(hi, stop)
        if a < z:
            yield b, batch[a - start : z - start]


def _read(source, bounds, make, desc: str, progress: bool, keep: list | None = None,
          digest: WindowsDigest | None = None) -> list:  # fmt: skip
    """One pass: an accumulator per block (and, into ``keep``, each block's windows; into
    ``digest``, the fingerprint of every window)."""
    accs = [make() for _ in bounds]
    pieces: list[list[Tensor]] = [[] for _ in bounds]
    start = 0
    for batch in progress_bar(source, total=len(source) or None, desc=desc, disable=not progress):
        for b, rows in _split(batch, start, bounds):
            accs[b].update(rows)
            if keep is not None:
                pieces[b].append(rows.to("cpu", torch.int32))  # ids < d_vocab < 2**31
        if digest is not None:
            digest.update(batch)
        start += batch.shape[0]
    if keep is not None:
        keep.extend(torch.cat(p) for p in pieces)
    return accs


def block_stats(
    tokens: TokenWindows,
    *,
    d_vocab: int,
    blocks: int = 20,
    vocab: VocabSpec = None,
    centre_vocab: int | None = None,
    dtype: torch.dtype = torch.float64,
    batch_size: int | None = None,
    backend: str = "auto",
    q_targets: QTargets = "centred",
    last_target: LastTarget = "data",
    tokenizer: Any = None,
    eos_id: int | None = None,
    progress: bool = True,
) -> BlockStats:
    """Corpus statistics kept per contiguous block of windows (see the module docstring).

    Args:
        tokens, d_vocab, vocab, centre_vocab, dtype, batch_size, backend: as in
            :func:`~tl_leadterms.corpus_stats` (on the CPU, summed in float64).
        q_targets, last_target, tokenizer, progress: as in :func:`~tl_leadterms.corpus_stats`.
        blocks: the number ``B`` of contiguous blocks of windows (about equal sizes, at least
            2 and at most the number of windows). Blocks should be long enough that windows in
            different blocks are roughly independent (e.g. whole documents per block).
        eos_id: the token that ends each document, as :func:`~tl_leadterms.make_windows` writes it
            (e.g. ``tokenizer.eos_token_id``; default None: equal blocks): each cut between blocks
            is then moved to where a document ends (:mod:`~tl_leadterms.stats.cuts`; measured in
            docs/guides/intervals.md#how-often-the-printed-interval-covers-the-distribution-level-score).
            ``metadata["block_cuts"]`` records which cut was made."""
    if positive_int("blocks", blocks) < 2:
        raise LeadTermsError(f"blocks must be at least 2 for a bootstrap, got {blocks}")
    check_stats_dtype(dtype, "dtype")
    source = TokenSource(tokens, d_vocab, batch_size=batch_size)
    count = lambda: token_counts(source, source.d_vocab)  # noqa: E731 (read only for vocab=<int>)
    kept = resolve_vocab(vocab, source.d_vocab, centre_vocab=centre_vocab, token_counts=count)
    eos = check_eos(eos_id, source.d_vocab)
    n, size, tails = 0, 0, []  # the windows and tokens counted, where documents end
    for batch in source:
        n, size = n + batch.shape[0], size + batch.numel()
        if eos is not None:
            tails.append(window_tails(batch, eos))
    if n < blocks:
        raise LeadTermsError(
            f"blocks={blocks} is more than the corpus' {n} windows; use at most {n} blocks."
        )
    check_memory(plan_block_memory(kept.k, blocks, dtype=dtype, n_positions=size))
    bounds = equal_bounds(n, blocks) if eos is None else document_bounds(torch.cat(tails), blocks)

    def context() -> ContextAccumulator:
        return ContextAccumulator(kept, backend=backend, last_target=last_target)

    windows: list[Tensor] = []
    digest = WindowsDigest()
    firsts = _read(source, bounds, context, "pass 1/2 (blocks)", progress, windows, digest)
    counts = [acc.result(release=True, dtype=dtype) for acc in firsts]
    every = _PairUnion(counts).at(list(range(blocks)))
    whole = _combine_counts(counts, [1] * blocks, [(b - a) / n for a, b in bounds], n, every)
    G_bar = composed_from_counts(whole, kept)

    shift = key_shift(G_bar, kept, q_targets)  # one reduction of Ḡ for all the blocks

    def attention() -> AttentionAccumulator:
        return AttentionAccumulator(G_bar, kept, backend=backend, dtype=torch.float64,
                                    q_targets=q_targets, last_target=last_target,
                                    shift=shift)  # fmt: skip

    seconds = _read(source, bounds, attention, "pass 2/2 (blocks)", progress)
    results = [acc.result(release=True, dtype=dtype) for acc in seconds]
    metadata = {
        "library_version": __version__, "d_vocab": kept.d_vocab, "n_ctx": counts[0].n_ctx,
        "n_sequences": n, "n_kept": kept.k, "centre_vocab": kept.centre_vocab,
        "dtype": str(dtype).removeprefix("torch."), "backend": firsts[0].backend,
        "q_targets": q_targets, "last_target": last_target, "blocks": blocks,
        "windows_fingerprint": digest.hexdigest(), **tokenizer_provenance(tokenizer),
        "block_cuts": "windows" if eos is None else f"documents (eos_id {eos})",
    }  # fmt: skip
    return BlockStats(counts, [q for q, _ in results], [d for _, d in results], bounds, kept,
                      G_bar, metadata, tokenizer, windows)  # fmt: skip
