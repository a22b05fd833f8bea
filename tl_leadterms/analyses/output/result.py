"""`OutputAgreement`: the table that :func:`tl_leadterms.output_agreement` returns."""

from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.style import number
from tl_leadterms.results.table import ResultTable

__all__ = ["PREDICTORS", "OutputAgreement"]

#: the predictors of an output agreement, in the order tables print them
PREDICTORS = ("leading", "bigram", "unigram")

_COLUMNS = ("predictor", "explained", "kl", "top1", "top5", "c_O", "c_V", "c_W", "c_at_bound")
_OPTIONAL = ("reason", "null_mean", "excess", "null_sd", "z", "p", "q", "verdict", "reference",
             "lo", "hi", "ci_level")  # fmt: skip


class OutputAgreement(ResultTable):
    """How well three predictors built from the statistics match a model's next tokens.

    One row per predictor: ``"leading"`` (the leading-term model), ``"bigram"`` (its ``W_O``
    term only) and ``"unigram"`` (the smoothed token frequencies); docs/guides/next-token.md
    explains the scores. Row fields: ``kl`` (mean ``KL(model ‖ predictor)``, nats),
    ``kl_per_position``, ``top1``, ``top5``, ``explained`` (``1 − kl / kl of the unigram``; NaN
    with a ``reason`` when that gap is below
    :data:`~tl_leadterms.analyses.output.compute.UNIGRAM_GAP`), the coefficients used (``c_O``,
    ``c_V``, ``c_W``; NaN where they do not apply) and ``c_at_bound`` (the fitted ones the
    calibration cannot vouch for: :func:`~tl_leadterms.analyses.output.fit.at_bound`). With
    ``null=`` the leading row has ``score`` (= ``explained``) and the null's columns; with
    ``ci=``, ``lo``/``hi`` of its ``explained``. ``metadata["fitted"]`` holds the fitted scalars.
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

    def title(self) -> str:
        meta = self.metadata
        how = "fitted scalars" if meta.get("fitted") else f"s·η = {number(meta.get('s_lr'))}"
        return (f"OutputAgreement of {meta.get('model_name')!r}: {meta['n_windows']} held-out "
                f"windows × {meta['n_ctx']} positions, k={meta['k']}"
                + (" (+ bucket)" if meta.get("bucket") else "")
                + f", {meta['n_layers']} layer(s), {how}")  # fmt: skip

    def cell(self, row: dict[str, Any], column: str) -> Any:
        """A fitted ``c`` flagged in ``c_at_bound`` reads with a ``*`` (see :meth:`notes`)."""
        value = super().cell(row, column)
        flagged = (row.get("c_at_bound") or "").split(", ")
        return f"{number(value)}*" if column in flagged and column.startswith("c_") else value

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
