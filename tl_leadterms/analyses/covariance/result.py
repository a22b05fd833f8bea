"""The result of :func:`~tl_leadterms.analyses.covariance.compute.covariance_similarity`."""

from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.bootstrap import ci_cell, ci_header, ci_note
from tl_leadterms.results.findings import common_note
from tl_leadterms.results.style import number
from tl_leadterms.results.table import ResultTable

__all__ = ["SCORES", "SPECIFIC", "CovarianceSimilarity"]

#: the scores of the covariance protocol (the paper's, raw), in the order tables print them
SCORES = ("attention", "value_post", "value_attn")
#: the suffix of each score's token-specific row (``"attention_specific"``)
SPECIFIC = "_specific"
#: the text table's columns, effect first: (column, heading, width)
_COLUMNS = (("value", "value", 9), ("excess", "excess", 9), ("common_share", "common", 7),
            ("z", "z", 9), ("p", "p", 7), ("q", "q", 7))  # fmt: skip


class CovarianceSimilarity(ResultTable):
    """Scores of :func:`covariance_similarity`: two rows per (layer, head, map).

    Row fields: ``layer``, ``head`` (None for the layer-level scores), ``score`` and ``value``.
    ``score`` names the map and which score of it the row holds: ``"attention"``,
    ``"value_post"``, ``"value_attn"`` hold the paper's raw score (rows centred over features
    only, as before) with ``common_share`` (the share of its numerator's parts carried by what
    every token shares, in ``[0, 1]``); ``"attention_specific"``, ``"value_post_specific"``,
    ``"value_attn_specific"`` the token-specific score of the same map (both covariances
    double-centred; absent with ``Protocol(specific=False)``). With ``null=`` and ``ci=`` each
    row has its own null's and interval's columns (:func:`covariance_similarity`). A raw row
    whose ``common_share`` reaches :data:`~tl_leadterms.results.findings.COMMON_BOUND` is
    mostly a direction every token shares: the tables say so under them (:meth:`notes`).
    """

    #: every score a row can name, in display order: the raw ones, then the specific ones
    SCORES: ClassVar[tuple[str, ...]] = (*SCORES, *(s + SPECIFIC for s in SCORES))

    KEYS = ("score", "layer", "head")
    COLUMNS = ("layer", "head", "score", "value")
    SCORE = "value"
    SCORE_RANGE = (-1.0, 1.0)
    GROUP = ("score",)

    def value(self, score: str, layer: int, head: int | None = None) -> float:
        """One score, e.g. ``sim.value("attention", 3)`` or ``sim.value("attention", 3, 5)``."""
        for r in self.rows:
            if r["score"] == score and r["layer"] == layer and r["head"] == head:
                return r["value"]
        have = sorted({(r["score"], r["layer"], r["head"]) for r in self.rows}, key=str)
        raise LeadTermsError(
            f"no score {score!r} for layer={layer!r}, head={head!r}; rows: {have[:12]}"
        )

    def table(self, heads: bool = False):
        """Layers × scores (``heads=True``: layers × heads of the per-head attention scores)."""
        df = self.to_pandas()
        if heads:
            df = df[df["head"].notna() & (df["score"] == "attention")].astype({"head": int})
            return df.pivot(index="layer", columns="head", values="value")
        df = df[df["head"].isna()]
        return df.pivot(index="layer", columns="score", values="value")[
            [s for s in self.SCORES if s in set(df["score"])]
        ]

    def notes(self) -> list[str]:
        """The null's note, and which raw scores are mostly a direction every token shares."""
        note = common_note([r for r in self.rows if r["head"] is None])
        return super().notes() + ([note] if note else [])

    def __repr__(self) -> str:
        m = self.metadata
        shown = [c for c in _COLUMNS if any(c[0] in r for r in self.rows)]
        verdict = any("verdict" in r for r in self.rows)
        lines = [
            f"CovarianceSimilarity of {m['model_name']!r} with the leading terms "
            f"({m['n_tokens']} tokens, normalize={m['normalize']!r}, "
            f"value_map={m['value_map']!r}, LayerNorm {m['normalization_type']})",
            f"{'layer':>5} {'score':<20} "
            + " ".join(f"{h:>{w}}" for _, h, w in shown)
            + ("  verdict" if verdict else ""),
        ]
        heads: dict[tuple[int, str], list[float]] = {}
        for r in self.rows:
            if r["head"] is not None:
                heads.setdefault((r["layer"], r["score"]), []).append(r["value"])
                continue
            lines.append(f"{r['layer']:>5} {r['score']:<20} "
                         + " ".join(f"{number(r.get(c)):>{w}}" for c, _, w in shown)
                         + (f"  {r.get('verdict') or '-'}" if verdict else ""))  # fmt: skip
        lines += [f"L{layer} heads ({score}): " + " ".join(number(v) for v in vals)
                  for (layer, score), vals in heads.items()]  # fmt: skip
        with_ci = [r for r in self.rows if r["head"] is None and "lo" in r]
        if with_ci:
            lines.append(f"{'layer':>5} {'score':<20} {ci_header(with_ci)}")
            lines += [f"{r['layer']:>5} {r['score']:<20} {ci_cell(r)}" for r in with_ci]
        note = ci_note(m)
        return "\n".join(lines + ([note] if note else []) + self.notes())

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.covariance.figure.plot_covariance` of this table (its
        keywords)."""
        from tl_leadterms.analyses.covariance.figure import plot_covariance

        return plot_covariance(self, **kwargs)
