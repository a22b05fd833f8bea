"""`OutputAgreement`: the table that :func:`tl_leadterms.output_agreement` returns."""

from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.bootstrap import ci_note
from tl_leadterms.results.table import ResultTable, cell

__all__ = ["PREDICTORS", "OutputAgreement"]

#: the predictors of an output agreement, in the order tables print them
PREDICTORS = ("leading", "bigram", "unigram")

_COLUMNS = ("predictor", "explained", "kl", "top1", "top5", "c_O", "c_V", "c_W", "c_at_bound")
_OPTIONAL = ("reason", "null_mean", "excess", "null_sd", "z", "p", "q", "verdict", "reference",
             "lo", "hi", "ci_level")  # fmt: skip
#: the text table's null columns, effect first: (column, width)
_NULL = (("null_mean", 9), ("excess", 9), ("z", 7), ("p", 6))


def _fmt(value: Any, width: int = 9) -> str:
    return cell(value, width)


class OutputAgreement(ResultTable):
    """How well three predictors built from the statistics match a model's next tokens.

    One row per predictor: ``"leading"`` (the leading-term model), ``"bigram"`` (its ``W_O``
    term only, ``sη·B̄[x_t]``) and ``"unigram"`` (the smoothed token frequencies). Row fields:
    ``kl`` (mean over held-out positions of ``KL(model ‖ predictor)`` in nats),
    ``kl_per_position`` (its mean at each position ``t``), ``top1`` (share of positions where
    both put their largest probability on the same outcome), ``top5`` (share where the model's
    top token is among the predictor's five most likely), ``explained`` (``1 − kl / kl of the
    unigram``: the share of the KL gap between the unigram and the model that the predictor
    closes; NaN with a ``reason`` when the gap is below
    :data:`~tl_leadterms.analyses.output.compute.UNIGRAM_GAP`: the model is at its unigram
    baseline) and the coefficients it used (``c_O``, ``c_V``, ``c_W``; NaN where they do not
    apply), with ``c_at_bound`` naming the fitted ones the calibration cannot vouch for
    (:func:`~tl_leadterms.analyses.output.fit.at_bound`; None: none, or not fitted). With
    ``null=``: ``score`` (= ``explained``), ``null_mean``, ``excess``, ``null_sd``, ``z``,
    ``p``, ``q`` and ``verdict`` (and ``reference``) on the leading row; with ``ci=``:
    ``lo``/``hi`` of its ``explained``.

    ``metadata["fitted"]`` holds the scalars ``fit=True`` found (and the calibration KL).
    """

    KEYS: ClassVar[tuple[str, ...]] = ("predictor",)
    COLUMNS: ClassVar[tuple[str, ...]] = _COLUMNS
    SCORE: ClassVar[str | None] = "explained"
    GRID: ClassVar[tuple[str, str] | None] = None
    HIDDEN: ClassVar[tuple[str, ...]] = ("kl_per_position",)

    def row(self, predictor: str = "leading", **where: Any) -> dict[str, Any]:
        """The row of one predictor (``"leading"``, ``"bigram"`` or ``"unigram"``)."""
        if not where and predictor not in {r["predictor"] for r in self.rows}:
            raise LeadTermsError(f"no predictor {predictor!r}; choose one of {list(PREDICTORS)}")
        return super().row(predictor, **where)

    @property
    def kl(self) -> float:
        """Mean KL(model ‖ leading-term model) over the held-out positions."""
        return self.row("leading")["kl"]

    @property
    def explained(self) -> float:
        """Share of the unigram → model KL gap the leading-term model explains."""
        return self.row("leading")["explained"]

    def to_pandas(self):
        """One row per predictor (``kl_per_position`` stays a list)."""
        import pandas as pd

        extra = [c for c in _OPTIONAL if any(c in r for r in self.rows)]
        return pd.DataFrame(self.rows, columns=[*_COLUMNS, *extra, "kl_per_position"])

    def per_position(self):
        """A DataFrame: one row per position, one ``kl:<predictor>`` column per predictor."""
        import pandas as pd

        return pd.DataFrame({f"kl:{r['predictor']}": r["kl_per_position"] for r in self.rows})

    def __repr__(self) -> str:
        meta, null = self.metadata, self.has("p")
        fitted = meta.get("fitted")
        how = "fitted scalars" if fitted else f"s·η = {_fmt(meta.get('s_lr'), 0).strip()}"
        lines = [
            f"OutputAgreement of {meta.get('model_name')!r}: {meta['n_windows']} held-out "
            f"windows × {meta['n_ctx']} positions, k={meta['k']}"
            + (" (+ bucket)" if meta.get("bucket") else "")
            + f", {meta['n_layers']} layer(s), {how}",
            f"{'predictor':<9} {'explained':>9} "
            + ("".join(f"{c:>{w}} " for c, w in _NULL) + f"{'verdict':<17} " if null else "")
            + f"{'KL':>9} {'top-1':>9} {'top-5':>9} {'c_O':>10} {'c_V':>10} {'c_W':>10}"
            + ("  CI (distribution-level explained)" if self.has("lo") else ""),
        ]
        for r in self.rows:
            flagged = (r.get("c_at_bound") or "").split(", ")
            line = f"{r['predictor']:<9} {_fmt(r['explained'])} " + (
                "".join(f"{_fmt(r.get(c), w)} " for c, w in _NULL)
                + f"{r.get('verdict') or '-':<17} " if null else "")  # fmt: skip
            line += f"{_fmt(r['kl'])} {_fmt(r['top1'])} {_fmt(r['top5'])} " + " ".join(
                _fmt(r[c]) + ("*" if c in flagged else " ") for c in ("c_O", "c_V", "c_W")
            )
            if "lo" in r:
                line += f"  [{r['lo']:.4f}, {r['hi']:.4f}]"
            lines.append(line)
        note = ci_note(meta)
        return "\n".join(lines + ([note] if note else []) + self.notes())

    def notes(self) -> list[str]:
        """The null's note, why an ``explained`` is undefined, which fitted ``c`` are flagged."""
        out = super().notes()
        out += [f"{r['predictor']}: explained {r['reason']}" for r in self.rows if r.get("reason")]
        out += [f"{r['predictor']}: * {r['c_at_bound']} at the fit's bound (implied s·η negative "
                "or outside the scan's [0.01, 1000], or not pinned by the calibration KL: read "
                "as at least or at most)" for r in self.rows if r.get("c_at_bound")]  # fmt: skip
        return out

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.output.figure.plot_output` of this table (its keywords)."""
        from tl_leadterms.analyses.output.figure import plot_output

        return plot_output(self, **kwargs)
