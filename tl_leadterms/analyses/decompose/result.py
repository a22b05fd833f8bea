"""`Decomposition`: the table that :func:`tl_leadterms.decompose` returns."""

import math
import unicodedata
from typing import Any, ClassVar, NamedTuple

import torch
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import factored
from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.analyses.decompose.fit import BasisCache
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.bootstrap import ci_cell, ci_header, ci_note
from tl_leadterms.results.marks import wide_note
from tl_leadterms.results.style import number
from tl_leadterms.results.table import ResultTable
from tl_leadterms.theory import term

__all__ = ["Decomposition", "PairDifference"]

# rows of a factored map materialised at once by top_pairs
_ROW_BLOCK = 1024


class PairDifference(NamedTuple):
    """One entry of :meth:`Decomposition.top_pairs`: where model and fitted theory differ."""

    row_token: str | int
    col_token: str | int
    row_id: int
    col_id: int
    model: float
    theory: float
    difference: float


def _pad(text: str, width: int) -> str:
    """Left-align ``text`` in ``width`` columns; combining marks (the bar of B̄) take none."""
    shown = sum(not unicodedata.combining(ch) for ch in text)
    return text + " " * max(0, width - shown)


#: the text table's columns after the cosine and its interval: the effect and the evidence
#: (shown when present), then the rest: (column, heading, width)
_LEAD = (("excess", "excess", 8), ("specific", "specific", 8), ("z", "z", 7), ("p", "p", 6),
         ("q", "q", 6))  # fmt: skip
_REST = (("common_share", "common", 6), ("implied_s_lr", "sη impl.", 8),
         ("explained", "explained", 9), ("bigram", "bigram", 7),
         ("interchangeability", "interch.", 8), ("context", "context", 7))  # fmt: skip


class Decomposition(ResultTable):
    """One row per (weight, layer, head); see :func:`tl_leadterms.decompose`.

    Row fields: ``weight``, ``layer``, ``head``, ``label`` (``"L{l}H{h}"``), ``kind``, ``target``
    (the leading term's formula), ``cosine`` (with the leading term, the paper's metric),
    ``projection`` (``⟨M, T⟩/‖T‖²``), ``implied_s_lr`` (the ``s·η`` that projection implies),
    ``expected_s_lr`` (``lr·steps`` when given), ``norm``, ``explained`` (least-squares ``R²``
    on the basis), ``remainder`` (``1 − explained``), ``shares`` (per basis component),
    ``family_shares`` (bigram / interchangeability / context / positional) and ``character``
    (the basis component with the largest share, e.g. ``"bigram-like"``; ``"zero"`` for a map
    that is exactly zero, whose cosine is NaN).

    ``shares`` are exact Shapley values of ``R²`` over the basis components (they add up to
    ``explained``), ``unique``/``shared`` their parts lost without the component / shared with
    others; ``family_shares`` sum the Shapley values of each family's components (a composed
    component split equally among its families). ``character`` is ``"<component>-like"`` only
    when that component's Shapley value leads the runner-up by 20% of ``R²`` and ``R² ≥ 0.1``;
    otherwise ``"mixed"`` or ``"unexplained"`` (:func:`~.fit.shapley`).
    With ``null=`` (``score``, ``null_mean``, ``null_sd``, ``z``, ``p``, ``excess``,
    ``excess_share``, ``q``, ``verdict``, ``reference``), with ``ci=`` (``lo``, ``hi``,
    ``corrected``, ``ci_level``, ``noise_share``; an interval marked ``†`` is wider than its
    level) and on token-token rows (``specific``, ``common_share``) the columns are those
    :func:`~tl_leadterms.decompose` describes.

    The table holds plain numbers only (no model, weights or statistics); :meth:`top_pairs`
    takes the model and statistics it needs explicitly.
    """

    KEYS = ("weight", "layer", "head")
    COLUMNS = ("weight", "layer", "head", "label", "kind", "target", "cosine")
    SCORE = "cosine"
    SCORE_RANGE = (-1.0, 1.0)
    GROUP = ("weight",)
    NESTED: ClassVar[dict[str, str]] = {"shares": "share", "unique": "unique", "shared": "shared",
              "family_shares": "family"}  # fmt: skip
    HIDDEN = ("kind", "score", "projection", "remainder", "expected_s_lr", "reference",
              "ci_level", "shares", "unique", "shared")  # fmt: skip

    def __init__(self, rows: list[dict[str, Any]], *, metadata: dict) -> None:
        super().__init__(rows, metadata)

    def row(self, *key: Any, **where: Any) -> dict:
        """The row of one weight: ``row(weight, layer=None, head=None)`` (``head=None`` picks
        head 0 of a per-head table; any other column may be given by name).

        ``"V"`` and ``"V·W_O"`` both name the value path (see :func:`~tl_leadterms.decompose`).
        """
        where = self._where(key, where)
        if where.get("weight") in ("V", "V·W_O"):
            where["weight"] = ("V", "V·W_O")
        where.setdefault("layer", None)
        if where.get("head") is None:
            rest = {c: v for c, v in where.items() if c != "head"}
            if any(r["head"] is not None for r in self.select(**rest)):
                where["head"] = 0
        return super().row(**where)

    def title(self) -> str:
        meta = self.metadata
        run = meta["lr"] is not None and meta["steps"] is not None
        return (
            f"Decomposition of {meta['model'].get('model_name')!r} against corpus statistics "
            f"(k={meta['k']}, T={meta['n_ctx']}, {meta['n_sequences']} sequences)"
            + (f"; lr·steps = {meta['lr'] * meta['steps']:.4g}" if run else "")
        )

    def __repr__(self) -> str:
        """One line per row, the effect first (the cosine, its interval, ``excess``,
        ``specific``), then the evidence (``z``, ``p``, ``q``, ``verdict``), then the rest."""
        note = ci_note(self.metadata)
        lead = [(c, name, width) for c, name, width in _LEAD if self.has(c)]
        rest = [(c, name, width) for c, name, width in _REST if c != "common_share"
                or self.has(c)]  # fmt: skip
        header = (f"{'weight':<6} {'where':<7} {'target':<8} {'cosine':>9} "
                  + (f"{ci_header(self.rows):<33} " if self.has("lo") else "")
                  + "".join(f"{n:>{w}} " for _, n, w in lead)
                  + (f"{'verdict':<17} " if self.has("verdict") else "")
                  + "".join(f"{n:>{w}} " for _, n, w in rest) + " character (Shapley)")  # fmt: skip
        lines = [self.title(), *([note] if note else []), header]
        for r in self.rows:
            cells = {**r, **r["family_shares"]}
            where = r["label"] if r["layer"] is not None else "-"
            lines.append(
                f"{r['weight']:<6} {where:<7} {_pad(r['target'], 8)} {number(r['cosine'], 6):>9} "
                + (f"{ci_cell(r)} " if self.has("lo") else "")
                + "".join(f"{number(cells.get(c)):>{w}} " for c, _, w in lead)
                + (f"{r.get('verdict') or '-':<17} " if self.has("verdict") else "")
                + "".join(f"{number(cells.get(c)):>{w}} " for c, _, w in rest)
                + f" {r['character']}"
            )
        wide = wide_note(self.rows)
        return "\n".join(lines + ([wide] if wide else []) + self.notes())

    @torch.no_grad()
    def top_pairs(
        self,
        weight: str,
        layer: int | None = None,
        head: int | None = None,
        *,
        n: int = 10,
        model: Any = None,
        stats: Any = None,
    ) -> list[PairDifference]:
        """The ``n`` token pairs where the model's map and its fitted leading term differ most.

        The table holds numbers only, so the weights and statistics are passed here:
        ``model`` (the model decomposed, or its :class:`~tl_leadterms.adapters.PaperWeights`)
        and ``stats`` (the statistics it was decomposed against). Both are checked against the
        table: the statistics' size and provenance, and the map's norm (a model trained further
        since :func:`~tl_leadterms.decompose` is refused rather than compared with a stale
        fit).

        The theory side is the leading term scaled by the row's projection coefficient, so the
        comparison is of shape, not overall scale. Rows and columns are kept token ids, decoded
        with the statistics' tokenizer when one is attached.
        """
        if model is None or stats is None:
            raise LeadTermsError(
                "top_pairs reads the model's weights and the statistics, which the table does "
                "not hold: call d.top_pairs(weight, layer, head, model=model, stats=stats)"
            )
        if weight == "P":
            raise LeadTermsError("top_pairs compares token-token maps; P is indexed by offset")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise LeadTermsError(f"n must be a positive int, got {n!r}")
        r = self.row(weight, layer, head)
        pw, stats = self._sources(model, stats)
        weight = r["weight"]
        if weight == "W_O":
            M = pw.W_O
        elif r["head"] is None:
            M = pw.layer_map(weight, r["layer"])
        else:
            M = (pw.W if weight == "W" else pw.V)[r["layer"]][r["head"]]
        if stats.kept is not None:
            M = factored.restrict(M, stats.kept, stats.kept)
        _check_norm(M, r)
        T = BasisCache.of(stats).map(term(r["weight"]).target)
        scale = r["projection"]
        best_values = torch.empty(0, dtype=torch.float64)
        best_index = torch.empty(0, dtype=torch.long)
        for start in range(0, T.shape[0], _ROW_BLOCK):
            rows = slice(start, start + _ROW_BLOCK)
            block = M.A[rows] @ M.B if isinstance(M, FactoredMatrix) else M[rows]
            diff = (block.double() - scale * T[rows].to(block.device).double()).flatten()
            values, index = diff.abs().topk(min(n, diff.numel()))
            best_values = torch.cat([best_values, values.cpu()])
            best_index = torch.cat([best_index, index.cpu() + start * T.shape[1]])
            keep = best_values.topk(min(n, best_values.numel())).indices
            best_values, best_index = best_values[keep], best_index[keep]
        return _pairs(stats, M, T, scale, best_index)

    def _sources(self, model: Any, stats: Any):
        """``(PaperWeights, CorpusStats)`` from what was passed, checked against the table."""
        from tl_leadterms.stats.blocks import BlockStats

        if isinstance(stats, BlockStats):
            stats = stats.full()
        pw = weights_for_stats(model, stats)
        meta = self.metadata
        have = (stats.k, stats.n_ctx, stats.n_sequences)
        want = (meta.get("k"), meta.get("n_ctx"), meta.get("n_sequences"))
        if have != want or dict(stats.metadata) != meta.get("stats", dict(stats.metadata)):
            raise LeadTermsError(
                f"these statistics (k, n_ctx, n_sequences = {have}) are not the ones this table "
                f"was decomposed against ({want}); pass the same stats as to decompose"
            )
        return pw, stats

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.decompose.figure.plot_scores` of this table (its
        keywords)."""
        from tl_leadterms.analyses.decompose.figure import plot_scores

        return plot_scores(self, **kwargs)


def _check_norm(M: Any, row: dict[str, Any]) -> None:
    """The map's norm must be the one the row was fitted on (the weights are unchanged)."""
    now = float(factored.norm(M))
    then = float(row["norm"])
    if not math.isclose(now, then, rel_tol=1e-4, abs_tol=1e-12):
        raise LeadTermsError(
            f"{row['label']}'s {row['weight']} has norm {now:.6g} now but {then:.6g} when it was "
            "decomposed: the model changed since (trained further?); decompose it again"
        )


@torch.no_grad()
def _pairs(stats: Any, M, T, scale: float, best_index) -> list[PairDifference]:
    out = []
    tokenizer = stats.tokenizer
    for flat in best_index.tolist():
        i, j = divmod(flat, T.shape[1])
        model_value = float(M.A[i] @ M.B[:, j] if isinstance(M, FactoredMatrix) else M[i, j])
        theory = scale * float(T[i, j])
        ri, ci = stats.vocab.token_id(i), stats.vocab.token_id(j)
        decode = (lambda t: tokenizer.decode([t])) if tokenizer is not None else (lambda t: t)
        out.append(PairDifference(decode(ri), decode(ci), ri, ci, model_value, theory,
                                  model_value - theory))  # fmt: skip
    return out
