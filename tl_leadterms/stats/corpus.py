"""`CorpusStats`: the corpus statistics of docs/math.md#statistics in the paper's orientation."""

from collections.abc import Iterable
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.jsontext import terminal_text
from tl_leadterms.protocols import PathLike
from tl_leadterms.stats import algebra, neighbours
from tl_leadterms.stats.scoring import single_token_id
from tl_leadterms.stats.vocab import KeptVocab

__all__ = ["STATS_DTYPES", "CorpusStats", "Neighbour", "check_stats_dtype"]

# attribute name -> what its rows and columns index; aliases accepted by `matrix` and `top`
MATRICES = {
    "B_bar": "current token -> next token",
    "Sigma_B": "next-token identity <-> next-token identity",
    "Phi_bar": "target token -> context token",
    "G_bar": "output token -> context token",
    "Q_bar": "query token -> key token",
}
ALIASES = {
    "bigram": "B_bar",
    "interchangeability": "Sigma_B",
    "context": "Phi_bar",
    "composed": "G_bar",
    "attention": "Q_bar",
}


_MISSING_HINT = (
    "compute them with corpus_stats(..., want=None) (every statistic) or tl-leadterms stats "
    "without --only, and load the file without want="
)


class Neighbour(NamedTuple):
    """One entry of :meth:`CorpusStats.top`."""

    token: str | int
    token_id: int
    score: float

    def __repr__(self) -> str:  # the token as a terminal may show it (escaped, cut)
        token = (
            terminal_text(self.token, quoted=True) if isinstance(self.token, str) else self.token
        )
        return f"Neighbour(token={token}, token_id={self.token_id}, score={self.score!r})"


STATS_DTYPES = (torch.float64, torch.float32)
"""The float dtypes statistics are computed, stored and analysed in (half precision is refused:
its 3-4 significant digits cannot hold the small centred entries)."""


def check_stats_dtype(dtype: object, what: str) -> torch.dtype:
    """``dtype`` if it is in :data:`STATS_DTYPES`, else the one error that names the fix."""
    if dtype not in STATS_DTYPES:
        raise LeadTermsError(
            f"{what} must be torch.float64 or torch.float32, got {dtype}; use float64 for "
            "exactness, float32 at scale (half precision is not supported for statistics)"
        )
    return dtype


class CorpusStats:
    """Corpus statistics of a token corpus, in the orientation and normalisation of
    docs/math.md#statistics.

    Build one with :func:`tl_leadterms.corpus_stats`; load one with :meth:`CorpusStats.load`.
    Matrices are ``[k, k]`` with ``k = d_vocab`` or the number of kept tokens; index ``i`` is
    token id ``kept[i]`` (or ``i`` without a restriction). ``B_bar`` and ``Sigma_B`` are
    computed on access from the sparse bigram counts.

    Attributes:
        B_bar: bigram map [current token, next token], ``#(i, j)/NT − α_i/|V|``.
        Sigma_B: interchangeability ``B̄ᵀB̄`` [next-token identity, next-token identity].
        Phi_bar: context map [target token, context token].
        G_bar: composed ``Σ_B̄ Φ̄`` [output token, context token].
        Q_bar: attention statistic [query token, key token].
        Delta: positional statistic ``[T]``, index ``d`` = query − key offset.
        unigram: ``α``, frequency of each kept token among the ``N·T`` input positions.
        timings: wall-clock seconds of each stage of :func:`~tl_leadterms.corpus_stats` that
            made these statistics (empty for loaded ones; not saved).
    """

    def __init__(
        self,
        *,
        vocab: KeptVocab,
        n_sequences: int,
        n_ctx: int,
        pair_codes: Int[Tensor, " n_pairs"],
        pair_counts: Int[Tensor, " n_pairs"],
        unigram_counts: Int[Tensor, " k"],
        Phi_bar: Float[Tensor, "k k"] | None,
        G_bar: Float[Tensor, "k k"] | None,
        Q_bar: Float[Tensor, "k k"] | None,
        Delta: Float[Tensor, " n_ctx"] | None,
        metadata: dict[str, Any] | None = None,
        tokenizer: Any = None,
    ) -> None:
        self.vocab = vocab
        self.n_sequences = int(n_sequences)
        self.n_ctx = int(n_ctx)
        self.pair_codes = pair_codes
        self.pair_counts = pair_counts
        self.unigram_counts = unigram_counts
        self.metadata = dict(metadata or {})
        self._tables = {"Phi_bar": Phi_bar, "G_bar": G_bar, "Q_bar": Q_bar, "Delta": Delta}
        for name, table in self._tables.items():
            if table is not None:
                check_stats_dtype(table.dtype, f"{name}'s dtype")
        self.tokenizer = tokenizer
        self.timings: dict[str, Any] = {}
        self._degenerate_notes: dict[str, str | None] = {}  # the tables do not change

    # -- the dense tables (absent when not computed or not loaded) ----------------------------
    def has(self, name: str) -> bool:
        """Whether the statistic ``name`` (``"Phi_bar"``, ``"G_bar"``, ``"Q_bar"``, ``"Delta"``) is
        here; ``"B_bar"`` and ``"Sigma_B"`` always are (they come from the sparse counts)."""
        return (
            name in ("B_bar", "Sigma_B")
            or self._tables.get(name) is not None
            or self._rebuilds(name)
        )

    def _rebuilds(self, name: str) -> bool:
        """Whether ``name`` is Ḡ, not held but to be rebuilt from Φ̄ (statistics loaded from a
        file, which stores Φ̄ alone: see :mod:`.fileformat`)."""
        return (
            name == "G_bar"
            and self._tables["G_bar"] is None
            and self._tables["Phi_bar"] is not None
            and "G_bar" in self.metadata.get("rebuilt", ())
        )

    def _composed(self) -> Tensor:
        """Ḡ = Σ_B̄Φ̄ from the sparse counts and Φ̄, as :func:`~tl_leadterms.corpus_stats`
        computes it (same operator, dtype and backend: the same table)."""
        phi = self._tables["Phi_bar"]
        bigram = algebra.CentredBigram(self.pair_codes, self.pair_counts, self.unigram_counts,
                                       self.n_positions, self.centre_vocab, phi.dtype,
                                       backend=self.metadata.get("backend", "auto"))  # fmt: skip
        return bigram.composed(phi)

    def _table(self, name: str) -> Tensor:
        table = self._tables[name]
        if table is None and self._rebuilds(name):
            table = self._tables[name] = self._composed()
        if table is None:
            raise LeadTermsError(
                f"these statistics hold no {name} (computed: "
                f"{', '.join(n for n in ('B_bar', *self._tables) if self.has(n))}); {_MISSING_HINT}"
            )
        return table

    Phi_bar = property(lambda self: self._table("Phi_bar"), doc="Context map Φ̄ [k, k].")
    G_bar = property(lambda self: self._table("G_bar"), doc="Composed Ḡ = Σ_B̄Φ̄ [k, k].")
    Q_bar = property(lambda self: self._table("Q_bar"), doc="Attention statistic Q̄ [k, k].")
    Delta = property(lambda self: self._table("Delta"), doc="Positional statistic Δ [T].")

    # -- sizes and provenance -----------------------------------------------------------------
    @property
    def d_vocab(self) -> int:
        """Full vocabulary size of the tokenizer the corpus was counted with."""
        return self.vocab.d_vocab

    @property
    def k(self) -> int:
        """Side of the matrices: ``d_vocab``, or the number of kept tokens."""
        return self.vocab.k

    @property
    def kept(self) -> Tensor | None:
        """Kept token ids in matrix order, or None when every token is kept."""
        return self.vocab.kept

    @property
    def centre_vocab(self) -> int:
        """``|V|`` of the centring ``u = 1/|V|``."""
        return self.vocab.centre_vocab

    @property
    def n_positions(self) -> int:
        """``N·T``, the number of (input, target) positions."""
        return self.n_sequences * self.n_ctx

    @property
    def dtype(self) -> torch.dtype:
        table = next((t for t in self._tables.values() if t is not None), None)
        if table is not None:
            return table.dtype
        return getattr(torch, str(self.metadata.get("dtype", "float64")), torch.float64)

    @property
    def device(self) -> torch.device:
        return self.unigram_counts.device

    # -- derived matrices ---------------------------------------------------------------------
    @property
    def unigram(self) -> Float[Tensor, " k"]:
        """``α``: frequency of each kept token among the ``N·T`` input positions."""
        return self.unigram_counts.to(self.dtype) / self.n_positions

    @cached_property
    def bigram(self) -> algebra.CentredBigram:
        """``B̄`` as a sparse operator: products with it cost ``O(nnz·k)``, not ``O(k³)``."""
        return algebra.CentredBigram(
            self.pair_codes,
            self.pair_counts,
            self.unigram_counts,
            self.n_positions,
            self.centre_vocab,
            self.dtype,
        )

    @property
    def B(self) -> Tensor:
        """Raw pair frequencies ``#(i, j)/NT`` as a sparse CSR ``[k, k]`` tensor."""
        return self.bigram.sparse

    @property
    def B_bar(self) -> Float[Tensor, "k k"]:
        """Centred bigram map ``B̄`` [current token, next token].

        Built from the sparse counts on each access (an ``O(k²)`` fill, not cached, so large
        vocabularies do not hold a second ``[k, k]`` table); keep a reference to reuse it.
        """
        return self.bigram.dense()

    @cached_property
    def Sigma_B(self) -> Float[Tensor, "k k"]:
        """Interchangeability ``Σ_B̄ = B̄ᵀB̄`` (cached; ``O(nnz·k)`` from the sparse counts)."""
        return self.bigram.gram()

    @cached_property
    def B_bar_Phi_bar(self) -> Float[Tensor, "k k"]:
        """``B̄Φ̄`` [current token, context token]; its transpose is the value term (cached)."""
        return self.bigram.times(self.Phi_bar)

    # -- reading ------------------------------------------------------------------------------
    @staticmethod
    def _key(name: str) -> str:
        key = ALIASES.get(name, name)
        if key not in MATRICES:
            names = sorted([*MATRICES, *ALIASES])
            raise LeadTermsError(f"unknown statistic {name!r}; choose one of {names}.")
        return key

    def matrix(self, name: str) -> Tensor:
        """A matrix by name (``"B_bar"``, ...) or alias (``"bigram"``, ``"context"``, ...)."""
        return getattr(self, self._key(name))

    def row(self, name: str, index: int) -> Tensor:
        """Row ``index`` of a matrix (B̄'s straight from the sparse counts, no ``[k, k]`` table)."""
        key = self._key(name)
        return self.bigram.row(index) if key == "B_bar" else getattr(self, key)[index]

    def token_id_of(self, token: object, tokenizer: Any = None) -> int:
        if isinstance(token, str):
            if tokenizer is None:
                raise LeadTermsError(
                    f"token {token!r} is a string; pass ⟦tokenizer= (or attach one as "
                    "stats.tokenizer)|--tokenizer FOLDER⟧ to look it up, or pass its token id."
                )
            return single_token_id(token, tokenizer)
        if isinstance(token, torch.Tensor) and token.numel() == 1 and not token.is_floating_point():
            token = token.item()
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise LeadTermsError(f"token must be a token id or a string, got {token!r}.")
        return int(token)

    def check_occurred(self, index: int, token: object = None) -> None:
        """Refuse a token (matrix index ``index``) that never occurred as an input token.

        Its rows hold only the centring terms (B̄: ``−α_i·u = 0``; Φ̄: ``−μ``), so a top-k list
        of it would rank arbitrary tokens.
        """
        if int(self.unigram_counts[index]) == 0:
            name = token if token is not None else self.vocab.token_id(index)
            raise LeadTermsError(
                f"token {name!r} (id {self.vocab.token_id(index)}) never occurred in the corpus "
                f"({self.n_positions} positions): it has no associations; pick a token that occurs"
            )

    def top(
        self,
        matrix_name: str,
        token: int | str | np.integer | Tensor,
        *,
        n: int = 10,
        tokenizer: Any = None,
        exclude_self: bool | None = None,
        scoring: str = neighbours.DEFAULT_SCORING,
        exclude: Any = neighbours.DEFAULT_EXCLUDE,
    ) -> "neighbours.Neighbours":
        """The ``n`` tokens most associated with ``token`` under a statistic (paper Fig. 5).

        Reads the row of ``token``: for ``"B_bar"`` the likeliest next tokens, for ``"Sigma_B"``
        the most interchangeable tokens, for ``"Phi_bar"`` the context tokens that precede it.

        Args:
            matrix_name: ``"B_bar"``/``"bigram"``, ``"Sigma_B"``/``"interchangeability"``,
                ``"Phi_bar"``/``"context"`` (also ``"G_bar"``, ``"Q_bar"``).
            token: a token id, or a string when a tokenizer is given.
            n: how many neighbours.
            tokenizer: turns strings into ids and ids into readable strings; defaults to the
                tokenizer attached to the statistics, if any.
            exclude_self: drop ``token`` itself (default: only for ``Sigma_B``, whose diagonal
                is trivially large).
            scoring: ``"cosine"`` (the default: row/column normalised, so frequent tokens do
                not top every list), ``"raw"`` (the paper's scores) or ``"ppmi"``
                (frequency-corrected); formulas in :mod:`tl_leadterms.stats.neighbours`.
            exclude: ``"special"`` (the default: the tokenizer's special tokens, none without
                a tokenizer), token ids to leave out, or ``()`` to keep every token.
                ``scoring="raw", exclude=()`` gives the paper's raw lists.

        Returns a :class:`~tl_leadterms.stats.neighbours.Neighbours` list; for a token that never
        occurs (or whose row is zero) it is empty and its ``note`` says so.
        """
        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        key = self._key(matrix_name)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise LeadTermsError(f"n must be a positive int, got {n!r}.")
        check_choice("scoring", scoring, neighbours.SCORINGS)
        token_id = self.token_id_of(token, tokenizer)
        row_index = self.vocab.position(token_id)
        if scoring == "raw":
            row = self.row(key, row_index).double().clone()
        else:
            row = neighbours.scored_row(self.matrix(key), row_index, scoring,
                                        symmetric_gram=key == "Sigma_B")  # fmt: skip
        (note,) = self.listed(key, row_index, row[None], token=token, tokenizer=tokenizer,
                              exclude=exclude, exclude_self=exclude_self)  # fmt: skip
        if note:
            return neighbours.Neighbours(scoring=scoring, note=note)
        return self.ranked(row, n=n, tokenizer=tokenizer, scoring=scoring)

    def listed(
        self,
        key: str,
        start: int,
        rows: Tensor,
        *,
        token: object = None,
        tokenizer: Any = None,
        exclude: Any = neighbours.DEFAULT_EXCLUDE,
        exclude_self: bool | None = None,
    ) -> list[str]:
        """The rule :meth:`top` lists by, for whoever scores many rows at once (the explorer).

        ``rows`` are rows ``start, start + 1, ...`` of the statistic ``key`` under a scoring
        (float64 ``[b, k]``, changed in place): the tokens :meth:`top` leaves out are set to
        ``−inf`` (``exclude``, and each row's own token for ``Sigma_B`` unless
        ``exclude_self`` says otherwise). Returns, per row, why its token has no associations
        (``""`` when it has some; ``token`` names a single row's token there).
        """
        stop = start + rows.shape[0]
        raw = (self.bigram.row_block(start, stop) if key == "B_bar"
               else self.matrix(key)[start:stop]).abs()  # fmt: skip
        zero = (~(raw > 0).any(1) | ~torch.isfinite(raw.amax(1))).tolist()
        names = ([token] if token is not None else range(start, stop) if self.kept is None
                 else self.kept[start:stop].tolist())  # fmt: skip
        counts, degenerate = self.unigram_counts[start:stop].tolist(), self.degenerate_note(key)
        notes = [degenerate or neighbours.no_associations(name, count, empty)
                 for name, count, empty in zip(names, counts, zero, strict=True)]  # fmt: skip
        if exclude_self if exclude_self is not None else key == "Sigma_B":
            rows[torch.arange(stop - start), torch.arange(start, stop)] = -torch.inf
        left = [
            self.vocab.position(t)
            for t in neighbours.exclusion_ids(exclude, tokenizer)
            if 0 <= t < self.d_vocab and (self.kept is None or bool((self.kept == t).any()))
        ]
        rows[:, left] = -torch.inf
        return notes

    def degenerate_note(self, key: str) -> str | None:
        """Why the statistic ``key`` has no associations at all (zero up to rounding, as Q̄ of a
        corpus that repeats one token), or None: a ranking of its rounding noise means nothing."""
        from tl_leadterms.stats.degenerate import degenerate_reason

        if key == "Sigma_B":
            return None
        if key not in self._degenerate_notes:  # a table not recorded in the metadata is read
            self._degenerate_notes[key] = degenerate_reason(self, key)
        return self._degenerate_notes[key]

    def ranked(
        self, row: Tensor, *, n: int, tokenizer: Any = None, scoring: str = "raw"
    ) -> "neighbours.Neighbours":  # the scoring ``row`` was scored with, recorded
        """The ``n`` best finite entries of a scored row (matrix positions) as neighbours."""
        out = neighbours.Neighbours(scoring=scoring)
        for score, i in neighbours.best(row, n):
            tid = self.vocab.token_id(i)
            label = tokenizer.decode([tid]) if tokenizer is not None else tid
            out.append(Neighbour(label, tid, score))
        return out

    # -- housekeeping -------------------------------------------------------------------------
    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        """A copy on another device and/or float dtype (float64 or float32; counts stay
        int64)."""
        if dtype is not None:
            check_stats_dtype(dtype, "dtype")

        def move(t: Tensor | None) -> Tensor | None:
            if t is None:
                return None
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        kept = None if self.kept is None else self.kept.to(device)
        return CorpusStats(
            vocab=KeptVocab(self.d_vocab, kept, self.centre_vocab),
            n_sequences=self.n_sequences,
            n_ctx=self.n_ctx,
            pair_codes=self.pair_codes.to(device),
            pair_counts=self.pair_counts.to(device),
            unigram_counts=self.unigram_counts.to(device),
            Phi_bar=move(self._tables["Phi_bar"]),
            G_bar=move(self._tables["G_bar"]),  # None: rebuilt there, if it was to be here
            Q_bar=move(self._tables["Q_bar"]),
            Delta=move(self._tables["Delta"]),
            metadata={
                **self.metadata,
                **({"dtype": str(dtype).removeprefix("torch.")} if dtype else {}),
            },
            tokenizer=self.tokenizer,
        )

    def save(self, path: PathLike) -> None:
        """Write the statistics to one safetensors file, atomically (see :mod:`.io`)."""
        from tl_leadterms.stats.io import save_stats

        save_stats(self, path)

    @classmethod
    def load(
        cls,
        path: PathLike,
        *,
        tokenizer: Any = None,
        d_vocab: int | None = None,
        device: torch.device | str | None = None,
        want: Iterable[str] | None = None,
        check_vocab: bool = True,
    ) -> "CorpusStats":
        """Load statistics saved by :meth:`save`, validating shapes, metadata and checksums.

        Args:
            path: the file :meth:`save` wrote.
            tokenizer, d_vocab: when given, must match what the file was counted with (the
                tokenizer is also attached for strings).
            device: where the tables go (default: the CPU).
            want: read just these statistics (see :func:`tl_leadterms.stats.io.read_stats`).
            check_vocab: ``False`` skips the comparison of the tokenizer with the file's.
        """
        from tl_leadterms.stats.io import read_stats

        return cls(
            **read_stats(
                path,
                tokenizer=tokenizer,
                d_vocab=d_vocab,
                device=device,
                want=want,
                check_vocab=check_vocab,
            )
        )

    def _summary(self) -> list[tuple[str, str]]:
        """The rows of the summary :func:`repr` and the notebook show: ``(name, value)``."""
        kept = "all kept" if self.kept is None else f"{self.k} kept"
        held = [n for n in ("B_bar", "Sigma_B", *self._tables) if self.has(n)]
        dtype = str(self.dtype).removeprefix("torch.")
        rows = [("d_vocab", f"{self.d_vocab} ({kept})"), ("n_ctx", str(self.n_ctx)),
                ("n_sequences", f"{self.n_sequences} ({self.n_positions} positions)"),
                ("centre_vocab", str(self.centre_vocab)), ("statistics", ", ".join(held)),
                ("dtype", f"{dtype} on {self.device}")]  # fmt: skip
        tok = self.metadata.get("tokenizer_name")
        return rows + ([("tokenizer", str(tok))] if tok else [])

    def _repr_html_(self) -> str:
        import html

        cells = "".join(
            f'<tr><th style="text-align:left">{name}</th><td style="text-align:left">'
            f"{html.escape(value)}</td></tr>"
            for name, value in self._summary()
        )
        return (f'<table style="white-space:nowrap"><caption style="text-align:left">'
                f"<strong>CorpusStats</strong></caption>{cells}</table>")  # fmt: skip

    def __repr__(self) -> str:
        """A small aligned table, one row per property (:meth:`_summary`)."""
        rows = self._summary()
        width = max(len(name) for name, _ in rows)
        return "\n".join(["CorpusStats", *(f"  {name:<{width}}  {value}" for name, value in rows)])
