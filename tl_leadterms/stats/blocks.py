"""Statistics kept per block of windows, for bootstrap confidence intervals over the corpus.

:func:`block_stats` reads a corpus like :func:`~tl_leadterms.corpus_stats` but keeps the
accumulators of ``B`` contiguous blocks of windows apart. :meth:`BlockStats.full` gives the
statistics of the whole corpus and :meth:`BlockStats.resample` those of a bootstrap resample of
blocks (``B − 1`` blocks drawn with replacement, :meth:`BlockStats.draw` says why), without
reading the corpus again:

* **pass one is exact**: the resample's bigram counts, unigram counts and Φ̄ are sums over the
  drawn blocks with multiplicity (Φ̄ is the window-weighted mean of the blocks' Φ̄), and Ḡ is
  recomputed from them;
* **pass two is exact** too: the blocks keep their windows, and a resample's Q̄ and Δ come from
  pass two rerun over the drawn blocks with the resample's OWN Ḡ (one pass, each distinct
  block once, its windows weighted by the block's multiplicity ``m``), so a resample costs
  about 0.63 of a pass two over the corpus (the expected share of distinct blocks in a draw).
  ``resample(..., exact=False)`` (and block files written before the windows were kept) use
  the first-order shortcut: the window-weighted mean of the blocks' Q̄ and Δ computed with
  the FULL-corpus Ḡ, which keeps the windows' variability but drops the propagation of the
  resample's own Ḡ into Q̄. On 120 windows of a 10-token chain in 6 blocks the shortcut is off
  by 16% of ‖Q̄‖ on average (43% at most) while a resample moves the exact Q̄ by 21%
  (``tests/unit/test_blocks.py``); the cost and the effect on intervals are measured in
  ``benchmarks/bench_coverage.py``.

Saved with :meth:`BlockStats.save` as one ``.safetensors`` file: each block's tables under
``block{b}/`` (``pair_codes``, ``pair_counts``, ``unigram_counts``, ``Phi_bar``, ``Q_bar``,
``Delta`` and, from format version 2, its ``windows``), the full-corpus ``G_bar``, the kept
ids, and a header with the block bounds, the metadata, the vocabulary hash and the SHA-256
of every tensor and of the header, verified by :meth:`BlockStats.load` as
:func:`~tl_leadterms.stats.io.read_stats` verifies plain files (format
``tl_leadterms.stats.blocks.BlockStats``; each loader names the other for a file of the other kind).

Memory: every block keeps a ``[k, k]`` Φ̄ and Q̄, so ``2·B·k²`` numbers, and its windows (one
integer per token); use a restricted vocabulary (``vocab=``) for large tokenizers.

>>> import torch
>>> windows = torch.randint(0, 6, (40, 5), generator=torch.Generator().manual_seed(0))
>>> blocks = block_stats(windows, d_vocab=6, blocks=4, progress=False)
>>> blocks.n_blocks, blocks.bounds[:2], blocks.full().n_sequences
(4, [(0, 10), (10, 20)], 40)
>>> blocks.resample(torch.Generator().manual_seed(1)).Q_bar.shape
torch.Size([6, 6])
>>> blocks.resample(torch.Generator().manual_seed(1)).metadata["bootstrap"]
'resample (exact pass two)'
>>> import tempfile
>>> path = tempfile.mkdtemp() + "/blocks.safetensors"; blocks.save(path)
>>> torch.equal(BlockStats.load(path).full().Q_bar, blocks.full().Q_bar)
True
"""

import itertools
import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import TokenWindows
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator, ContextCounts
from tl_leadterms.stats.algebra import CentredBigram
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.definitions import LastTarget, QTargets, key_shift
from tl_leadterms.stats.driver import composed_from_counts, tokenizer_provenance
from tl_leadterms.stats.io import (
    BLOCK_FORMAT,
    check_header,
    check_tables,
    check_tokenizer,
    corrupt_file,
    read_file,
    verify_checksums,
    write_file,
)
from tl_leadterms.stats.provenance import WindowsDigest, ids_vocab_hash
from tl_leadterms.stats.tables import padded_square
from tl_leadterms.stats.tokens import TokenSource, default_batch_size, token_counts
from tl_leadterms.stats.vocab import KeptVocab, VocabSpec, resolve_vocab
from tl_leadterms.version import __version__

__all__ = ["BlockStats", "block_stats"]

BLOCK_FORMAT_VERSION = 2  # 2: each block's windows (exact resamples); 1 still loads
_TABLES = ("pair_codes", "pair_counts", "unigram_counts", "Phi_bar", "Q_bar", "Delta")


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
        """Multiplicities ``[B]`` of a bootstrap resample: ``B − 1`` blocks drawn with
        replacement (one block when ``B = 1``).

        ``B − 1``, not ``B``: the variance of a mean over ``m`` draws from ``B`` blocks is
        ``(B − 1)/(B·m)`` of the blocks' sample variance, so ``m = B − 1`` makes the resamples'
        spread (and the bias of a score, which grows with it) an unbiased estimate of the
        sample's, where ``m = B`` underestimates it by ``(B − 1)/B`` (the ``n − 1`` bootstrap of
        McCarthy and Snowden, 1985; Rao and Wu, 1988). With 20 blocks or fewer that shortfall
        cost the intervals 2-5 points of coverage (``benchmarks/bench_coverage.py``).
        """
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
        resample's own Ḡ; ``False``: the first-order shortcut (the module docstring).
        ``pass_two``: the ``(Q̄, Δ)`` this call made before for the same ``weights`` and
        ``exact`` (what :meth:`~tl_leadterms.results.bootstrap.Bootstrap.resamples` keeps),
        taken as they are: only pass one's sums are formed again.
        """
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
        _save_block_stats(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, *, tokenizer: Any = None,
             check_vocab: bool = True) -> "BlockStats":  # fmt: skip
        """Load a file written by :meth:`save`, verified (see :func:`_load_block_stats`)."""
        return _load_block_stats(path, tokenizer=tokenizer, check_vocab=check_vocab)

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
                    union: tuple[Tensor, list[Tensor]] | None = None,
                    phi: Tensor | None = None) -> ContextCounts:  # fmt: skip
    """Pass-one counts of blocks taken ``mult`` times (exact: Φ̄ is linear in the sums);
    ``union``: the union of every block's codes and these blocks' places in it (``_PairUnion``);
    ``phi``: their Φ̄ sum when the caller formed it (``_PhiParts``)."""
    if union is None:
        codes = torch.cat([c.pair_codes for c in parts])
        counts = torch.cat([c.pair_counts * m for c, m in zip(parts, mult, strict=True)])
        unique, inverse = torch.unique(codes, return_inverse=True)
        summed = torch.zeros(unique.numel(), dtype=torch.long).index_add_(0, inverse, counts)
    else:  # the same sorted distinct codes and sums, by a scatter into the union
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


def _block_bounds(n: int, blocks: int) -> list[tuple[int, int]]:
    edges = [round(i * n / blocks) for i in range(blocks + 1)]
    return list(itertools.pairwise(edges))


#: a window with no end of document in it: never a clean place to cut after
_NO_END = 1 << 30


def _tails(source, eos_id: int) -> Tensor:
    """``[n]``: per window, how many of its tokens follow its last ``eos_id`` (those tokens
    begin the document that the next window continues); ``_NO_END`` for a window without one."""
    out = []
    for batch in source:
        ends = torch.as_tensor(batch) == eos_id
        width = ends.shape[1]
        last = width - 1 - ends.flip(1).to(torch.int8).argmax(1)  # the last eos (if any)
        out.append(torch.where(ends.any(1), width - 1 - last, _NO_END).cpu())
    return torch.cat(out)


def _document_bounds(tails: Tensor, blocks: int) -> list[tuple[int, int]]:
    """Block bounds cut where documents end: each of the equal cuts is moved, within half a
    block either way, to just after the window whose tail holds the fewest tokens of the next
    document (0: the window ends with the end of a document, a clean cut), the nearest such
    window on a tie; a cut with no end of document within reach stays where it was."""
    n = tails.shape[0]
    half = n // (2 * blocks)
    edges = [0]
    for i in range(1, blocks):
        equal = round(i * n / blocks)
        lo = max(edges[-1] + 1, equal - half)
        hi = min(n - (blocks - i), equal + half)
        cuts = torch.arange(lo, hi + 1)
        tail = tails[cuts - 1]
        if bool((tail < _NO_END).any()):
            distance = (cuts - equal).abs()
            score = tail * (2 * half + 2) + distance  # the tail first, then the distance
            edges.append(int(cuts[int(score.argmin())]))
        else:
            edges.append(min(max(equal, lo), hi))
    edges.append(n)
    return list(itertools.pairwise(edges))


def _eos(eos_id: Any, d_vocab: int) -> int | None:
    """The end-of-document id the blocks are cut at (None: equal blocks), checked."""
    if eos_id is None:
        return None
    if isinstance(eos_id, bool) or not isinstance(eos_id, int) or not 0 <= eos_id < d_vocab:
        raise LeadTermsError(
            f"⟦eos_id=|--eos-id ⟧{eos_id!r} is not a token id of this corpus (0 <= id < "
            f"{d_vocab}); pass the id that ends each document in the windows (e.g. the "
            "tokenizer's eos_token_id), or ⟦None|no --eos-id⟧ for equal blocks."
        )
    return eos_id


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
        eos_id: the token that ends each document, as :func:`~tl_leadterms.make_windows`
            writes it (e.g. ``tokenizer.eos_token_id``; default None: equal blocks). Each cut
            between blocks is then moved, within half a block, to where a document ends (just
            after the window whose last end of document leaves the fewest tokens of the next
            one), so that as little of a document as the windows allow lies in two blocks. A
            document split between neighbours makes them dependent, and the bootstrap then
            underestimates the sampling noise: on the embedded stories (about 11 windows each)
            in blocks of 10 windows, a resample's ‖B̄* − B̄‖² was 0.80 of a sample's ‖B̄ − B̄_true‖²
            with equal blocks and 0.90 with cuts at document ends (``bench_coverage.py --part
            population``). The default interval method is calibrated on equal blocks: with
            document cuts its intervals are wider (``docs/guides/intervals.md``).
            ``metadata["block_cuts"]`` records which cut was made.
    """
    if positive_int("blocks", blocks) < 2:
        raise LeadTermsError(f"blocks must be at least 2 for a bootstrap, got {blocks}")
    if dtype not in (torch.float64, torch.float32):
        raise LeadTermsError(f"dtype must be torch.float64 or torch.float32, got {dtype}")
    source = TokenSource(tokens, d_vocab, batch_size=batch_size)
    kept = resolve_vocab(
        vocab,
        source.d_vocab,
        centre_vocab=centre_vocab,
        token_counts=lambda: token_counts(source, source.d_vocab),
    )
    n = sum(batch.shape[0] for batch in source)
    if n < blocks:
        raise LeadTermsError(
            f"blocks={blocks} is more than the corpus' {n} windows; use at most {n} blocks."
        )
    eos = _eos(eos_id, source.d_vocab)
    bounds = _block_bounds(n, blocks) if eos is None else _document_bounds(_tails(source, eos),
                                                                          blocks)  # fmt: skip

    def context() -> ContextAccumulator:
        return ContextAccumulator(kept, backend=backend, last_target=last_target)

    windows: list[Tensor] = []
    digest = WindowsDigest()
    firsts = _read(source, bounds, context, "pass 1/2 (blocks)", progress, windows, digest)
    counts = [acc.result(release=True, dtype=dtype) for acc in firsts]
    whole = _combine_counts(counts, [1] * blocks, [(b - a) / n for a, b in bounds], n)
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


def _save_block_stats(blocks: BlockStats, path: str | os.PathLike) -> None:
    """Write ``blocks`` to ``path`` (a ``.safetensors`` file), atomically (see the module)."""
    tensors: dict[str, Tensor] = {}
    for b, (counts, q_bar, delta) in enumerate(
        zip(blocks.counts, blocks.Q_bars, blocks.Deltas, strict=True)
    ):
        tables = [counts.pair_codes, counts.pair_counts, counts.unigram_counts, counts.Phi_bar,
                  q_bar, delta]  # fmt: skip
        tensors.update({f"block{b}/{name}": t for name, t in zip(_TABLES, tables, strict=True)})
        if blocks.windows is not None:
            tensors[f"block{b}/windows"] = blocks.windows[b].to(torch.int32)
    tensors["G_bar"] = blocks.full().G_bar
    vocab = blocks.vocab
    if vocab.kept is not None:
        tensors["kept"] = vocab.kept
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    meta = blocks.metadata
    header = {
        **meta,
        "format": BLOCK_FORMAT,
        "format_version": BLOCK_FORMAT_VERSION if blocks.windows is not None else 1,
        "library_version": meta.get("library_version", __version__),
        "d_vocab": vocab.d_vocab,
        "n_ctx": blocks.counts[0].n_ctx,
        "n_sequences": int(blocks.sizes.sum()),
        "n_kept": vocab.k,
        "centre_vocab": vocab.centre_vocab,
        "dtype": str(tensors["G_bar"].dtype).removeprefix("torch."),
        "vocab_hash": meta.get("tokenizer_vocab_hash") or ids_vocab_hash(vocab.d_vocab, vocab.kept),
        "blocks": blocks.n_blocks,
        "bounds": [[a, z] for a, z in blocks.bounds],
    }
    write_file(Path(path), tensors, header)


def _bounds(path: Path, meta: dict[str, Any]) -> list[tuple[int, int]]:
    """The block bounds of the header: contiguous non-empty ranges covering every window."""
    bounds, count = meta.get("bounds"), meta.get("blocks")
    pairs = bounds if isinstance(bounds, list) else []
    ints = all(
        isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p) for p in pairs
    )
    edges = [p[0] for p in pairs] + [pairs[-1][1]] if pairs and ints else []
    if not (
        type(count) is int
        and count >= 2
        and len(pairs) == count
        and ints
        and edges[0] == 0
        and edges[-1] == meta["n_sequences"]
        and all(p[0] < p[1] for p in pairs)
        and all(a[1] == z[0] for a, z in itertools.pairwise(pairs))
    ):
        raise corrupt_file(
            path, f"the metadata's blocks/bounds ({count!r}, {bounds!r}) are not at least 2 "
            f"contiguous window ranges covering the {meta['n_sequences']} windows"
        )  # fmt: skip
    return [(a, z) for a, z in pairs]


def _block_tables(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any], b: int,
                  size: int) -> dict[str, Tensor]:  # fmt: skip
    """Block ``b``'s tables, checked as a plain file's (the full Ḡ with block 0)."""
    tables = {name: tensors.get(f"block{b}/{name}") for name in _TABLES}
    missing = [f"block{b}/{name}" for name, t in tables.items() if t is None]
    if missing:
        raise corrupt_file(path, f"missing tensors {missing}")
    extra = {"kept": tensors["kept"]} if "kept" in tensors else {}
    if b == 0:
        extra["G_bar"] = tensors["G_bar"]
    check_tables(path, {**tables, **extra}, {**meta, "n_sequences": size})
    return tables


def _load_block_stats(
    path: str | os.PathLike, *, tokenizer: Any = None, check_vocab: bool = True
) -> BlockStats:
    """Load block statistics written by :func:`_save_block_stats`: the header, the bounds, every
    block's tables and the SHA-256 of every tensor are checked (a flipped bit is refused,
    naming the tensor); ``tokenizer`` as in :func:`~tl_leadterms.stats.io.read_stats`."""
    path = Path(path)
    tensors, meta = read_file(path, None)
    check_header(path, meta, BLOCK_FORMAT, (1, BLOCK_FORMAT_VERSION))
    verify_checksums(path, tensors, meta)
    bounds = _bounds(path, meta)
    names = _TABLES + (("windows",) if meta["format_version"] >= 2 else ())
    expected = {f"block{b}/{n}" for b in range(len(bounds)) for n in names} | {"G_bar", "kept"}
    unknown = sorted(set(tensors) - expected)
    if unknown or "G_bar" not in tensors:
        raise corrupt_file(path, f"tensors {unknown or ['G_bar']} do not fit {len(bounds)} blocks")
    tables = [_block_tables(path, tensors, meta, b, z - a) for b, (a, z) in enumerate(bounds)]
    windows = None
    if meta["format_version"] >= 2:
        windows = [_block_windows(path, tensors, meta, b, z - a) for b, (a, z) in enumerate(bounds)]
    if tokenizer is not None and check_vocab:
        check_tokenizer(path, meta, tokenizer)
    n_ctx = meta["n_ctx"]
    counts = [
        ContextCounts(t["pair_codes"], t["pair_counts"], t["unigram_counts"], t["Phi_bar"], z - a,
                      n_ctx)
        for t, (a, z) in zip(tables, bounds, strict=True)
    ]  # fmt: skip
    vocab = KeptVocab(meta["d_vocab"], tensors.get("kept"), meta["centre_vocab"])
    dropped = ("format", "format_version", "checksums", "bounds")
    metadata = {key: v for key, v in meta.items() if key not in dropped}
    return BlockStats(counts, [t["Q_bar"] for t in tables], [t["Delta"] for t in tables], bounds,
                      vocab, tensors["G_bar"], metadata, tokenizer, windows)  # fmt: skip


def _block_windows(path: Path, tensors: dict[str, Tensor], meta: dict[str, Any], b: int,
                   size: int) -> Tensor:  # fmt: skip
    """Block ``b``'s windows: ``[size, T + 1]`` integer ids in ``[0, d_vocab)``."""
    w = tensors.get(f"block{b}/windows")
    shape = (size, meta["n_ctx"] + 1)
    if w is None or w.dtype not in (torch.int32, torch.int64) or tuple(w.shape) != shape:
        found = None if w is None else (tuple(w.shape), str(w.dtype))
        raise corrupt_file(path, f"block{b}/windows is {found}, not {shape} integer ids")
    if w.numel() and (int(w.min()) < 0 or int(w.max()) >= meta["d_vocab"]):
        raise corrupt_file(path, f"block{b}/windows has ids outside [0, {meta['d_vocab']})")
    return w
