"""The result of :func:`~tl_leadterms.analyses.covariance.compute.covariance_similarity`."""

import math
from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.bootstrap import ci_cell, ci_header, ci_note
from tl_leadterms.results.table import ResultTable

__all__ = ["SCORES", "CovarianceSimilarity"]

#: the scores of the covariance protocol, in the order tables print them
SCORES = ("attention", "value_post", "value_attn")

# beneath each layer's values in the repr, effect size first
_BENEATH = {"excess": "excess", "q": "q", "raw": "raw", "specific": "specific",
            "common_share": "common"}  # fmt: skip


class CovarianceSimilarity(ResultTable):
    """Scores of :func:`covariance_similarity`: one row per (layer, head, score).

    Row fields: ``layer``, ``head`` (None for the layer-level scores), ``score``
    (``"attention"``, ``"value_post"`` or ``"value_attn"``) and ``value`` (the cosine). With
    ``null=`` the rows also hold ``null_mean``, ``null_sd``, ``z``, ``p``, ``excess``,
    ``excess_share`` and ``q`` (and ``reference``); the key ``score`` still names the score
    (what the other results call ``score``, the cosine, is ``value`` here). With ``ci=``:
    ``lo``, ``hi``, ``corrected`` (the estimate of the distribution-level score the
    interval is built around, bias-corrected; none for a model's own training windows) and
    ``ci_level``. Every row holds ``specific`` (the double-centred, token-specific cosine) and
    ``common_share`` (the share of the paper's cosine carried by what every token shares); with
    ``centre="tokens"`` ``value`` is the token-specific cosine and ``raw`` the paper's.
    """

    #: the protocol's three scores, in display order
    SCORES: ClassVar[tuple[str, ...]] = SCORES

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
            df = df[df["head"].notna()].astype({"head": int})
            return df.pivot(index="layer", columns="head", values="value")
        df = df[df["head"].isna()]
        return df.pivot(index="layer", columns="score", values="value")[list(SCORES)]

    def __repr__(self) -> str:
        m = self.metadata
        lines = [
            f"CovarianceSimilarity of {m['model_name']!r} with the leading terms "
            f"({m['n_tokens']} tokens, normalize={m['normalize']!r}, "
            f"value_map={m['value_map']!r}, LayerNorm {m['normalization_type']})",
            f"{'layer':>5} " + " ".join(f"{s:>10}" for s in SCORES),
        ]
        if m.get("centre") == "tokens":
            lines[0] += "; value = token-specific (centre='tokens')"
        layer_rows: dict[int, dict[str, dict]] = {}
        head_rows: dict[int, list[float]] = {}
        for r in self.rows:
            if r["head"] is None:
                layer_rows.setdefault(r["layer"], {})[r["score"]] = r
            else:
                head_rows.setdefault(r["layer"], []).append(r["value"])
        shown = [c for c in _BENEATH if any(c in r for r in self.rows)]
        for layer, found in layer_rows.items():
            lines.append(f"{layer:>5} " + self._cells(found, "value"))
            lines += [f"{_BENEATH[c]:>10} " + self._cells(found, c) for c in shown]
        for layer, vals in head_rows.items():
            lines.append(f"L{layer} heads (attention): " + " ".join(f"{v:.3f}" for v in vals))
        with_ci = [r for r in self.rows if r["head"] is None and "lo" in r]
        if with_ci:
            lines.append(f"{'layer':>5} {'score':<11} {ci_header(with_ci)}")
            lines += [f"{r['layer']:>5} {r['score']:<11} {ci_cell(r)}" for r in with_ci]
        note = ci_note(m)
        return "\n".join(lines + ([note] if note else []))

    @staticmethod
    def _cells(found: dict[str, dict], column: str) -> str:
        return " ".join(f"{found.get(s, {}).get(column, math.nan):10.4f}" for s in SCORES)

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.covariance.figure.plot_covariance` of this table (its
        keywords)."""
        from tl_leadterms.analyses.covariance.figure import plot_covariance

        return plot_covariance(self, **kwargs)
