"""`corpus_stats`: the two passes over a corpus in this process (:class:`LocalExecutor`), run by
the driver of :mod:`tl_leadterms.stats.driver`."""

import os
from collections.abc import Iterable
from typing import Any

import torch

from tl_leadterms.progress import in_notebook, progress_bar, write_line
from tl_leadterms.protocols import TokenWindows
from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.definitions import LastTarget, QTargets, key_shift
from tl_leadterms.stats.driver import PassPlan, pass_plan, run_passes
from tl_leadterms.stats.memory import check_memory as check_memory_fits
from tl_leadterms.stats.memory import plan_memory
from tl_leadterms.stats.provenance import WindowsDigest
from tl_leadterms.stats.tokens import TokenSource, token_counts
from tl_leadterms.stats.vocab import KeptVocab, VocabSpec

__all__ = ["LocalExecutor", "corpus_stats"]


class LocalExecutor:
    """The passes in this process, over a :class:`TokenSource` (tables on ``source.device``)."""

    split_rows = True

    def __init__(self, source: TokenSource, known_positions: int | None = None) -> None:
        self.source = source
        self.known_positions = known_positions
        self.timings: dict[str, Any] = {}
        self._shift: tuple[torch.Tensor, torch.Tensor | None] | None = None  # (Ḡ, its shift)
        self._spare: torch.Tensor | None = None  # the last row group's table, to reuse
        self._windows = WindowsDigest()  # which windows pass one read (the provenance)

    def token_counts(self, d_vocab: int) -> torch.Tensor:
        return token_counts(self.source, d_vocab)

    def check_memory(
        self, d_vocab: int, kept: KeptVocab, plan: PassPlan, *, offload: bool, refuse: bool
    ) -> None:
        memory = plan_memory(
            d_vocab,
            k=kept.k,
            dtype=plan.dtype,
            accumulate_dtype=plan.accumulate_dtype,
            want=plan.statistics,
            n_positions=self.known_positions,
            offload=offload,
        )
        if refuse and self.source.device.type == "cpu":
            check_memory_fits(memory)
        if plan.progress and (memory.peak >= 2**30 or not in_notebook()):
            write_line(str(memory))  # in a notebook only when it is worth a line in the cell

    def _batches(self, desc: str, plan: PassPlan):
        total = len(self.source) or None
        return progress_bar(self.source, total=total, desc=desc, disable=not plan.progress)

    def context_pass(self, kept: KeptVocab, plan: PassPlan) -> ContextAccumulator:
        acc = ContextAccumulator(
            kept,
            dtype=plan.accumulate_dtype,
            device=self.source.device,
            backend=plan.backend,
            last_target=plan.last_target,
        )
        self._windows = WindowsDigest()
        for batch in self._batches("pass 1/2: B̄, Φ̄", plan):
            acc.update(batch)
            self._windows.update(batch)
        return acc

    def attention_pass(self, kept, g_bar, plan: PassPlan, rows) -> AttentionAccumulator:
        """Pass two for the query rows ``rows``. The row groups of one run share Ḡ, so its
        per-key term (a ``[k, k]`` reduction) is computed once, and each group but the last
        hands its table to the next: the driver has copied the group's rows out by then."""
        if self._shift is None or self._shift[0] is not g_bar:
            self._shift = (g_bar, key_shift(g_bar, kept, plan.q_targets))
        acc = AttentionAccumulator(
            g_bar,
            kept,
            device=g_bar.device,
            backend=plan.backend,
            dtype=plan.accumulate_dtype,
            rows=rows,
            q_targets=plan.q_targets,
            last_target=plan.last_target,
            shift=self._shift[1],
            table=self._spare,
        )
        self._spare = None
        groups = "" if rows is None else f" (rows {rows[0]}–{rows[1]})"
        for batch in self._batches("pass 2/2: Q̄, Δ" + groups, plan):
            acc.update(batch)
        if rows is not None and rows[1] <= kept.k:  # another group follows
            self._spare = acc.table
        return acc

    def provenance(self) -> dict[str, Any]:
        return {"windows_fingerprint": self._windows.hexdigest()}


def corpus_stats(
    tokens: TokenWindows,
    *,
    d_vocab: int,
    vocab: VocabSpec = None,
    centre_vocab: int | None = None,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    batch_size: int | None = None,
    progress: bool = True,
    tokenizer: Any = None,
    backend: str = "auto",
    accumulate_dtype: torch.dtype | None = None,
    q_targets: QTargets = "centred",
    last_target: LastTarget = "data",
    want: Iterable[str] | None = None,
    check_memory: bool = True,
    offload: str | os.PathLike | None = None,
) -> CorpusStats:
    """Compute B̄, Σ_B̄, Φ̄, Ḡ, Q̄ and Δ (docs/math.md#statistics) of a tokenized corpus.

    Two streaming passes (B̄ counts and Φ̄; then Q̄ and Δ), Ḡ = Σ_B̄ Φ̄ formed exactly between them
    from the sparse counts; nothing one-hot is built (docs/guides/performance.md).

    Args:
        tokens: windows of ``T + 1`` token ids: a 2-D integer tensor/array
            ``[n_sequences, T + 1]``, an iterable of such batches (a one-shot iterator is read
            into memory for the second pass), or a ``datasets.Dataset`` with an ``input_ids``
            column. :func:`tl_leadterms.make_windows` builds them from documents.
        d_vocab: the tokenizer's vocabulary size; every id must be in ``[0, d_vocab)``.
        vocab: restrict to these token ids (a list, in matrix order) or to the ``k`` most frequent
            input tokens (an int; ``k >= d_vocab`` keeps every token, most frequent first); other
            tokens add nothing to any matrix but still count as positions
            (docs/guides/corpus-statistics.md#restricting-the-vocabulary).
        centre_vocab: ``|V|`` of the centring ``u = 1/|V|``; defaults to ``d_vocab`` even with
            a restriction (the paper's choice).
        dtype: ``torch.float64`` (exact) or ``torch.float32`` (half the memory, for large
            vocabularies).
        device: where the tables live and the work runs (default: the CPU); elsewhere the vectorised
            torch backend runs.
        batch_size: sequences per batch (default: about two million pairs per batch).
        progress: show tqdm progress bars.
        tokenizer: recorded in the provenance (name and vocabulary hash) and used by
            :meth:`CorpusStats.top` to print strings.
        backend: ``"numba"`` (fused CPU kernels, the default on CPU), ``"torch"``
            (vectorised torch ops, any device, the default elsewhere) or ``"auto"``.
        accumulate_dtype: dtype of the accumulation tables; default ``torch.float64`` for either
            ``dtype``, rounded once (docs/guides/performance.md#float32); float32 statistics then
            run pass two in two halves of the query rows, which ``torch.float32`` saves.
        q_targets: the score rows of Q̄ and Δ under a restriction: ``"centred"`` (default, the
            paper's code) or ``"one-hot"``.
        last_target: ``"data"`` (default) or ``"paper-code"``: every window's last target
            replaced by token 0 before counting, as the paper's ``pythia.py`` does (both:
            docs/guides/corpus-statistics.md#q_targets-and-the-last-target).
        want: the statistics needed (None: all). ``("B_bar", "Phi_bar")`` stops after pass one (no
            Ḡ, no second pass: ``top bigram``/``top context`` need nothing else); ``"G_bar"`` adds
            Ḡ; ``"Q_bar"`` or ``"Delta"`` run pass two (:func:`resolve_want`). Accessing a table not
            computed raises a :class:`LeadTermsError` saying how to get it.
        check_memory: refuse, in one line, a run whose memory plan does not fit before any
            table exists (docs/guides/performance.md#memory); ``False`` skips the check.
        offload: a folder where Φ̄ waits in a temporary file while pass two runs (which does not
            read it): one ``[k, k]`` table less at the peak; read back at the end and removed (also
            on errors; one left by a killed run is removed by the next).

    Returns:
        A :class:`CorpusStats`; ``metadata`` records ``q_targets``, ``last_target``, ``statistics``
        (those computed), ``degenerate`` (per dense statistic: zero up to rounding,
        :mod:`tl_leadterms.stats.degenerate`), ``vocab_hash`` and ``windows_fingerprint`` (which
        windows were read, order-free: :func:`~tl_leadterms.stats.provenance.windows_fingerprint`);
        ``timings`` holds the wall-clock seconds of ``"vocab"``, ``"pass1"`` (B̄ counts and Φ̄),
        ``"G_bar"``, ``"pass2"`` (Q̄, Δ) and ``"degenerate"``.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats
        >>> windows = torch.randint(0, 50, (64, 17))
        >>> stats = corpus_stats(windows, d_vocab=50, progress=False)
        >>> stats.B_bar.shape, stats.Delta.shape, stats.metadata["q_targets"]
        (torch.Size([50, 50]), torch.Size([16]), 'centred')
    """
    plan = pass_plan(
        dtype=dtype,
        accumulate_dtype=accumulate_dtype,
        backend=backend,
        q_targets=q_targets,
        last_target=last_target,
        want=want,
        progress=progress,
    )
    device = "cpu" if device is None else device
    source = TokenSource(tokens, d_vocab, batch_size=batch_size, device=device)
    shape = getattr(tokens, "shape", None)  # N·T when it is known without reading the corpus
    known = (
        int(shape[0]) * max(int(shape[1]) - 1, 1) if shape is not None and len(shape) == 2 else None
    )
    executor = LocalExecutor(source, known_positions=known)
    return run_passes(
        executor,
        source.d_vocab,
        plan,
        vocab=vocab,
        centre_vocab=centre_vocab,
        check_memory=check_memory,
        offload=offload,
        tokenizer=tokenizer,
    )
