"""Findings: what a result's numbers say, in sentences, for the top of a report.

Each analysis writes its own findings (:class:`~tl_leadterms.results.sections.Section`); the
sentences every result with a null, an interval or a common component shares live here. With a
null, the rows are counted by their ``verdict`` (the one rule of
:func:`~tl_leadterms.results.null.verdict`: "stands out", "negligible", "not distinguished",
"unreachable"); the excess (score − null mean) is quoted as the size, never ``z``. A score whose
``common_share`` is at least ``COMMON_BOUND`` is mostly a direction every token shares. Across
training steps (a history or a sweep), "the theory stops holding" at the first step where a
weight's cosine with its leading term falls below ``HOLD_COSINE``, and the leading-term model
stops explaining the model's next tokens at the first step where its share of the unigram →
model KL gap (``output_explained``) falls below ``HOLD_EXPLAINED``.

>>> names([f"L{i}" for i in range(10)])
'L0, L1, L2, L3, L4, L5, L6, L7 and 2 more'
"""

import math
from typing import Any

from tl_leadterms.results.null import VERDICTS, reach_note
from tl_leadterms.results.sections import esc

__all__ = [
    "COMMON_BOUND",
    "HOLD_COSINE",
    "HOLD_EXPLAINED",
    "common",
    "common_note",
    "explained_text",
    "first_below",
    "names",
    "null_and_ci",
    "question",
    "row_excess",
    "verdicts",
]

#: the cosine below which the leading term no longer describes a weight
HOLD_COSINE = 0.9
#: the explained share of the KL gap below which the leading-term model no longer predicts
HOLD_EXPLAINED = 0.9
#: a ``common_share`` at or above this: the score is mostly a direction every token shares
COMMON_BOUND = 0.9
_LISTED = 8  # labels named in one sentence before "and N more"


def names(labels: list[str]) -> str:
    shown = ", ".join(labels[:_LISTED])
    return shown + (f" and {len(labels) - _LISTED} more" if len(labels) > _LISTED else "")


def question(metadata: dict) -> list[str]:
    """Which question the scores answer (the statistics' population), in one sentence."""
    reading = metadata.get("population")
    if not reading:
        return []
    if reading["population"] == "training":
        text = (
            "The statistics are the model's own training windows: each score says how "
            "closely the weight matches the leading term of that data, exactly (no "
            "sampling uncertainty); it is not an estimate for the corpus distribution."
        )
    else:
        text = ("The statistics are a sample of the corpus, not the model's training windows"
                + (" (assumed: no record of the windows the model was trained on)"
                   if reading["source"] == "assumed" else "")
                + ": each score estimates the distribution-level score, the one against the "
                "statistics of the whole distribution.")  # fmt: skip
    return [esc(text)]


def null_and_ci(rows: list[dict], metadata: dict | None = None) -> list[str]:
    metadata = metadata or {}
    out = question(metadata)
    tested, null = [r for r in rows if r.get("verdict") in VERDICTS], metadata.get("null") or {}
    tests = f" It tests {null['tests']}." if null.get("tests") else ""
    out.append(esc(verdicts(tested, null.get("permutations")) + tests if tested else
                   "No null baseline in these rows (no null_mean, null_sd, z, p columns): a cosine "
                   "here has no reference; random-init models can score high too."))  # fmt: skip
    with_ci = [r for r in rows if "lo" in r and "hi" in r and math.isfinite(r["hi"] - r["lo"])]
    widths = sorted(r["hi"] - r["lo"] for r in with_ci)
    if widths:
        outside = sum(not r["lo"] <= _raw(r) <= r["hi"] for r in with_ci if _raw(r) is not None)
        out.append(esc(
            f"Confidence intervals (lo, hi) over {len(widths)} scores: median width "
            f"{_width(widths[len(widths) // 2])}, widest {_width(widths[-1])}; each is of the "
            "distribution-level score, built around its bias-corrected estimate (column corrected)"
            + (f"; {outside} raw scores lie outside their interval (the raw score is biased "
               "towards 0 by the statistics' noise)." if outside else ".")))  # fmt: skip
    elif (metadata.get("ci") or {}).get("why"):
        out.append(esc(metadata["ci"]["why"][0].upper() + metadata["ci"]["why"][1:] + "."))
    else:
        out.append(esc("No confidence intervals in these rows (no lo, hi columns)."))
    return out


def _raw(row: dict) -> float | None:
    """A row's raw score: ``cosine`` (decompose, atlas) or ``value`` (covariance, sweeps)."""
    return row.get("cosine", row.get("value"))


def _width(w: float) -> str:
    """A width with 2 significant digits, however small (``0.00012``, not ``0``)."""
    return f"{w:.2g}" if w == 0 or 1e-4 <= abs(w) < 1e4 else f"{w:.2e}"


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def row_excess(r: dict) -> float:
    if _finite(r.get("excess")):
        return float(r["excess"])
    score, mean = r.get("score", r.get("cosine")), r.get("null_mean")
    return float(score) - float(mean) if _finite(score) and _finite(mean) else math.nan


def _label(r: dict) -> str:
    """``W L0H1`` (a weight and its head), ``value_post L1`` (a covariance score and layer)."""
    parts = [r.get("weight"), r.get("label"), r.get("score"), r.get("checkpoint")]
    if isinstance(r.get("score"), str) and r.get("label") is None and r.get("layer") is not None:
        parts.insert(3, f"L{r['layer']}" + ("" if r.get("head") is None else f"H{r['head']}"))
    words = [p for p in parts if isinstance(p, str)]
    return " ".join(dict.fromkeys(words))


def verdicts(tested: list[dict], permutations: int | None = None) -> str:
    """The rows counted and named by their ``verdict``, the one line of
    :func:`~tl_leadterms.results.null.reach_note` when some are unreachable, and how large the
    excess over the null is."""
    count = {v: [_label(r) for r in tested if r["verdict"] == v] for v in VERDICTS}
    text = f"Of the {len(tested)} scores with a null, " + ", ".join(
        f"{len(count[v])} {'stand out' if v == 'stands out' and len(count[v]) != 1 else v}"
        + (f" ({names(count[v])})" if count[v] else "")
        for v in VERDICTS if count[v] or v == "stands out") + "."  # fmt: skip
    note = reach_note(tested, permutations)
    if note:
        text += f" The {note}."
    sizes = sorted(e for e in map(row_excess, tested) if math.isfinite(e))
    if sizes:
        text += (
            f" Excess over the null mean (score − null mean, the effect size): median "
            f"{sizes[len(sizes) // 2]:.3g}, largest {sizes[-1]:.3g}; z is not a size (a narrow "
            "null makes a small excess look large)."
        )
    return text


def _specific(r: dict) -> Any:
    """A row's token-specific score: its ``specific`` column, or the value of a covariance
    ``<score>_specific`` row."""
    return r.get("specific", r.get("value") if str(r.get("score")).endswith("_specific") else None)


def common(rows: list[dict], what: str) -> list[str]:
    """How much of the scores is common to all tokens (rows with ``common_share``)."""
    shares = sorted(r["common_share"] for r in rows if _finite(r.get("common_share")))
    specific = sorted(v for v in map(_specific, rows) if _finite(v))
    if not shares:
        return []
    text = (
        f"{what}: the share of the raw score carried by what every token shares "
        f"(common_share) is median {shares[len(shares) // 2]:.3f} "
        f"(from {shares[0]:.3f} to {shares[-1]:.3f}; {sum(v >= COMMON_BOUND for v in shares)} "
        f"of {len(shares)} at least {COMMON_BOUND}: mostly a direction every token shares)"
    )
    if specific:
        text += (
            f"; with that removed (double-centred over tokens) the token-specific score runs "
            f"from {specific[0]:.3f} to {specific[-1]:.3f}"
        )
    return [esc(text + ".")]


def common_note(rows: list[dict]) -> str | None:
    """One line naming the rows whose ``common_share`` reaches :data:`COMMON_BOUND` (None when
    none does): their raw score is mostly a direction every token shares.

    >>> common_note([{"score": "value_post", "layer": 1, "common_share": 0.9995}])[-30:]
    'specific score): value_post L1'
    """
    mostly = [f"{r['score']} L{r['layer']}" + ("" if r.get("head") is None else f"H{r['head']}")
              + (f" {r['checkpoint']}" if "checkpoint" in r else "") for r in rows
              if _finite(r.get("common_share")) and r["common_share"] >= COMMON_BOUND]  # fmt: skip
    if not mostly:
        return None
    return (f"common_share ≥ {COMMON_BOUND} (the raw score is mostly a direction every token "
            "shares, a permutation of the tokens keeps it; read the token-specific score): "
            + names(mostly))  # fmt: skip


def first_below(
    steps: list, values: list[float], threshold: float = HOLD_COSINE
) -> tuple[Any, float] | None:
    """The first (step, value) below ``threshold``; NaN (a weight still zero) is skipped."""
    for step, value in zip(steps, values, strict=True):
        if isinstance(value, (int, float)) and value < threshold:
            return step, value
    return None


def explained_text(where: str, steps: list, values: list[float]) -> str:
    """One sentence: where the leading-term model's explained KL gap first falls below
    ``HOLD_EXPLAINED``."""
    hit = first_below(steps, values, HOLD_EXPLAINED)
    if hit is None:
        return (f"{where}: the leading-term model explains at least {HOLD_EXPLAINED:.0%} of the "
                f"unigram → model KL gap at every step through {steps[-1]}.")  # fmt: skip
    return (f"{where}: the leading-term model's share of the unigram → model KL gap first falls "
            f"below {HOLD_EXPLAINED:.0%} at {hit[0]} ({hit[1]:.3f}).")  # fmt: skip
