"""The result of :func:`~tl_leadterms.analyzers.covariance.covariance_similarity`."""

import math

from tl_leadterms.analyzers.table import ResultTable
from tl_leadterms.errors import LeadTermsError

__all__ = ["SCORES", "CovarianceSimilarity"]

#: the scores of the covariance protocol, in the order tables print them
SCORES = ("attention", "value_post", "value_attn")


class CovarianceSimilarity(ResultTable):
    """Scores of :func:`covariance_similarity`: one row per (layer, head, score).

    Row fields: ``layer``, ``head`` (None for the layer-level scores), ``score``
    (``"attention"``, ``"value_post"`` or ``"value_attn"``) and ``value`` (the cosine). With
    ``null=`` the rows also hold ``null_mean``, ``null_sd``, ``z``, ``p`` (and ``reference``);
    the key ``score`` still names the score (what the other results call ``score``, the
    cosine, is ``value`` here).
    """

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
        layer_rows: dict[int, dict[str, float]] = {}
        head_rows: dict[int, list[float]] = {}
        for r in self.rows:
            if r["head"] is None:
                layer_rows.setdefault(r["layer"], {})[r["score"]] = r["value"]
            else:
                head_rows.setdefault(r["layer"], []).append(r["value"])
        for layer, vals in layer_rows.items():
            lines.append(
                f"{layer:>5} " + " ".join(f"{vals.get(s, math.nan):10.4f}" for s in SCORES)
            )
        for layer, vals in head_rows.items():
            lines.append(f"L{layer} heads (attention): " + " ".join(f"{v:.3f}" for v in vals))
        return "\n".join(lines)
