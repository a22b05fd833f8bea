"""The "Findings" section: what the numbers say, in sentences, at the top of the report.

Each finding is read off the tables below it, with the documented thresholds of
:mod:`tl_leadterms.report.tables` and ``HOLD_COSINE``: across training steps (a history or a
sweep), "the theory stops holding" at the first step where a weight's cosine with its leading
term falls below ``HOLD_COSINE``, and the leading-term model stops explaining the model's next
tokens at the first step where its share of the unigram → model KL gap (``output_explained``)
falls below ``HOLD_EXPLAINED``. With a null, a row "stands out" when its Benjamini–Hochberg
q-value over the table's rows is at most ``Q_LEVEL`` (0.05) and its excess over the null mean is
positive; the excess (score − null mean) is quoted as the size, never ``z``. Where the rows
carry ``common_share``, a sentence says how much of the score is common to all tokens.
"""

import math
from typing import Any

from tl_leadterms.report.markup import esc
from tl_leadterms.report.tables import EXPLAINED_FLOOR, P_LEVEL, shown_character
from tl_leadterms.results.null import Q_LEVEL, qvalues

__all__ = ["HOLD_COSINE", "HOLD_EXPLAINED", "findings"]

#: the cosine below which the leading term no longer describes a weight
HOLD_COSINE = 0.9
#: the explained share of the KL gap below which the leading-term model no longer predicts
HOLD_EXPLAINED = 0.9
_LISTED = 8  # labels named in one sentence before "and N more"


def _names(labels: list[str]) -> str:
    shown = ", ".join(labels[:_LISTED])
    return shown + (f" and {len(labels) - _LISTED} more" if len(labels) > _LISTED else "")


def _characters(rows: list[dict]) -> list[str]:
    out = []
    for weight in dict.fromkeys(r["weight"] for r in rows):
        mine = [r for r in rows if r["weight"] == weight]
        groups: dict[str, list[str]] = {}
        for r in mine:
            groups.setdefault(shown_character(r), []).append(r["label"])
        named = [f"{c} in {_names(ls)}" for c, ls in groups.items() if c != "–"]
        cosines = [r["cosine"] for r in mine if math.isfinite(r["cosine"])]
        span = (
            f"cosine with its leading term {min(cosines):.3f} to {max(cosines):.3f}"
            if cosines
            else "no finite cosine"
        )
        count = f"{len(mine)} row" + ("s" if len(mine) > 1 else "")
        text = f"<b>{esc(weight)}</b> ({count}): {esc(span)}; " + (
            esc("; ".join(named)) if named else "no character"
        )
        unexplained = groups.get("–", [])
        if unexplained:
            text += esc(
                f"; {len(unexplained)} explain less than R² {EXPLAINED_FLOOR} (no character): "
                f"{_names(unexplained)}"
            )
        out.append(text)
    return out


def _question(metadata: dict) -> list[str]:
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


def _null_and_ci(rows: list[dict], metadata: dict | None = None) -> list[str]:
    metadata = metadata or {}
    out = _question(metadata)
    tested = [r for r in rows if isinstance(r.get("p"), (int, float)) and math.isfinite(r["p"])]
    if tested:
        null = [f"{r['weight']} {r['label']}" for r in tested if r["p"] >= P_LEVEL]
        tests = (metadata.get("null") or {}).get("tests")
        out.append(
            esc(
                f"Null baseline: {len(null)} of {len(tested)} scores are indistinguishable from "
                f"the null (p ≥ {P_LEVEL})"
                + (f": {_names(null)}." if null else ".")
                + (f" It tests {tests}." if tests else "")
            )
        )
        out.append(esc(_stand_out(tested)))
    else:
        out.append(
            esc(
                "No null baseline in these rows (no null_mean, null_sd, z, p columns): a cosine "
                "here has no reference; random-init models can score high too."
            )
        )
    with_ci = [r for r in rows if "lo" in r and "hi" in r and math.isfinite(r["hi"] - r["lo"])]
    widths = sorted(r["hi"] - r["lo"] for r in with_ci)
    if widths:
        outside = sum(not r["lo"] <= _raw(r) <= r["hi"] for r in with_ci if _raw(r) is not None)
        out.append(
            esc(
                f"Confidence intervals (lo, hi) over {len(widths)} scores: median width "
                f"{_width(widths[len(widths) // 2])}, widest {_width(widths[-1])}; each is of "
                "the distribution-level score, built around its bias-corrected estimate "
                "(column corrected)"
                + (
                    f"; {outside} raw scores lie outside their interval (the raw score is biased "
                    "towards 0 by the statistics' noise)."
                    if outside
                    else "."
                )
            )
        )
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


def _excess(r: dict) -> float:
    if _finite(r.get("excess")):
        return float(r["excess"])
    score, mean = r.get("score", r.get("cosine")), r.get("null_mean")
    return float(score) - float(mean) if _finite(score) and _finite(mean) else math.nan


def _stand_out(tested: list[dict]) -> str:
    """Which rows stand out after Benjamini–Hochberg, and how large their excess is."""
    qs = [r["q"] if _finite(r.get("q")) else math.nan for r in tested]
    if not all(_finite(q) for q in qs):
        qs = qvalues([r["p"] for r in tested])
    excess = [_excess(r) for r in tested]
    out = [f"{r['weight']} {r['label']}" for r, q, e in zip(tested, qs, excess, strict=True)
           if q <= Q_LEVEL and e > 0]  # fmt: skip
    sizes = sorted(e for e in excess if math.isfinite(e))
    text = (
        f"After Benjamini–Hochberg over the {len(tested)} scores, {len(out)} stand out "
        f"(q ≤ {Q_LEVEL}, excess > 0)" + (f": {_names(out)}" if out else "")
    )
    smallest = min(r["p"] for r in tested)
    if smallest > Q_LEVEL:  # q ≥ p: the null is too small for any score to stand out
        text += (
            f". No score could: the smallest p here is {smallest:.3g}, and a permutation p is at "
            f"least 1/(R + 1); pass null=R with R ≥ {math.ceil(1 / Q_LEVEL) - 1} (more for "
            "many rows)"
        )
    if sizes:
        text += (
            f". Excess over the null mean (score − null mean, the effect size): median "
            f"{sizes[len(sizes) // 2]:.3g}, largest {sizes[-1]:.3g}; z is not a size (a narrow "
            "null makes a small excess look large)."
        )
    return text + ("" if sizes else ".")


def _common(rows: list[dict], what: str) -> list[str]:
    """How much of the scores is common to all tokens (rows with ``common_share``)."""
    shares = sorted(r["common_share"] for r in rows if _finite(r.get("common_share")))
    specific = sorted(r["specific"] for r in rows if _finite(r.get("specific")))
    if not shares:
        return []
    text = (
        f"{what}: the share of the raw score carried by what every token shares "
        f"(common_share) is median {shares[len(shares) // 2]:.3f} "
        f"(from {shares[0]:.3f} to {shares[-1]:.3f})"
    )
    if specific:
        text += (
            f"; with that removed (double-centred over tokens) the token-specific score runs "
            f"from {specific[0]:.3f} to {specific[-1]:.3f}"
        )
    return [esc(text + ".")]


def _sweep_effects(table: Any) -> list[str]:
    """Per sweep score with a null or a common share: raw range, excess, common share."""
    out = []
    for analysis, score in table.scores():
        rows = [r for r in table.rows if r["analysis"] == analysis and r["score"] == score
                and r["head"] is None and _finite(r.get("value"))]  # fmt: skip
        values = sorted(r["value"] for r in rows)
        if not rows or not any(_finite(r.get("null_mean")) or _finite(r.get("common_share"))
                               for r in rows):  # fmt: skip
            continue
        text = f"Sweep {analysis} {score}: score {values[0]:.3f} to {values[-1]:.3f}"
        excess = [_excess(r) for r in rows if _finite(r.get("null_mean"))]
        if excess:
            text += f"; excess over the null mean {min(excess):.3g} to {max(excess):.3g}"
            q = [r["q"] for r in rows if _finite(r.get("q"))]
            if q:
                text += f", {sum(v <= Q_LEVEL for v in q)} of {len(q)} rows with q ≤ {Q_LEVEL}"
        out.append(esc(text + "."))
        out += _common(rows, f"Sweep {analysis} {score}")
    return out


def _first_below(
    steps: list, values: list[float], threshold: float = HOLD_COSINE
) -> tuple[Any, float] | None:
    """The first (step, value) below ``threshold``; NaN (a weight still zero) is skipped."""
    for step, value in zip(steps, values, strict=True):
        if isinstance(value, (int, float)) and value < threshold:
            return step, value
    return None


def _across_steps(history: Any, sweep_table: Any) -> list[str]:
    out = []
    if history is not None and history.cosines:
        broken = {}
        for name, values in history.cosines.items():
            hit = _first_below(history.steps, values)
            if hit is not None:
                broken[name] = hit
        last = history.steps[-1]
        if broken:
            where = "; ".join(f"{n} at step {s} (cosine {v:.3f})" for n, (s, v) in broken.items())
            out.append(esc(f"Training history: the theory stops holding (cosine < "
                           f"{HOLD_COSINE}) for {where}."))  # fmt: skip
        else:
            out.append(esc(f"Training history: every weight keeps cosine ≥ {HOLD_COSINE} with its "
                           f"leading term through step {last}."))  # fmt: skip
    if history is not None and getattr(history, "scores", {}).get("output_explained"):
        out.append(esc(_explained_text("Training history", history.steps,
                                       history.scores["output_explained"])))  # fmt: skip
    if sweep_table is not None:
        out += _sweep_effects(sweep_table)
        for analysis, score in sweep_table.scores():
            if score == "output_explained":
                grid = sweep_table.pivot(score, analysis=analysis)
                if not grid.empty:
                    values = [float(v) for v in grid.iloc[0]]
                    out.append(esc(_explained_text("Sweep", [str(c) for c in grid.columns],
                                                   values)))  # fmt: skip
                continue
            if not score.startswith("cos"):
                continue
            grid = sweep_table.pivot(score, analysis=analysis)
            if grid.empty:  # per-head rows only
                continue
            cols = [str(c) for c in grid.columns]
            broken = []
            for layer, values in grid.iterrows():
                hit = _first_below(cols, [float(v) for v in values])
                if hit is not None:
                    broken.append(f"layer {layer} at {hit[0]} ({hit[1]:.3f})")
            text = (
                f"Sweep {score}: below {HOLD_COSINE} from " + "; ".join(broken)
                if broken
                else f"Sweep {score}: ≥ {HOLD_COSINE} at every checkpoint and layer"
            )
            out.append(esc(text + "."))
    return out


def _explained_text(where: str, steps: list, values: list[float]) -> str:
    """One sentence: where the leading-term model's explained KL gap first falls below
    ``HOLD_EXPLAINED``."""
    hit = _first_below(steps, values, HOLD_EXPLAINED)
    if hit is None:
        return (f"{where}: the leading-term model explains at least {HOLD_EXPLAINED:.0%} of the "
                f"unigram → model KL gap at every step through {steps[-1]}.")  # fmt: skip
    return (f"{where}: the leading-term model's share of the unigram → model KL gap first falls "
            f"below {HOLD_EXPLAINED:.0%} at {hit[0]} ({hit[1]:.3f}).")  # fmt: skip


def _attention(agreement: list[dict] | None) -> list[str]:
    rows = [r for r in agreement or [] if math.isfinite(r["rank_correlation"])]
    if not rows:
        return []
    rows = sorted(rows, key=lambda r: r["rank_correlation"])
    best, worst = rows[-1], rows[0]
    step = rows[0].get("step")
    text = (
        f"Attention on the sample text{f' at step {step}' if step is not None else ''}: best "
        f"agreement with the prediction {best['label']} (rank correlation "
        f"{best['rank_correlation']:.3f}, JS {best['js_divergence']:.3g}), least {worst['label']} "
        f"(rank correlation {worst['rank_correlation']:.3f}, JS {worst['js_divergence']:.3g})."
    )
    if all("tv_actual" in r for r in rows):
        far = max(rows, key=lambda r: r["tv_actual"])
        text += (
            f" Largest distance from uniform attention (total variation): {far['tv_actual']:.3f} "
            f"({far['label']}), predicted {max(r['tv_predicted'] for r in rows):.3f}"
            + (" — the patterns are close to uniform." if far["tv_actual"] < 0.05 else ".")
        )
    return [esc(text)]


def findings(
    decomposition: Any = None,
    *,
    agreement: list[dict] | None = None,
    history: Any = None,
    sweep_table: Any = None,
    atlas: bool = False,
    held_out: Any = None,
) -> str:
    """The findings as an HTML list (``<ul class="findings">``), each item escaped.

    ``held_out``: a decomposition of the same model against held-out statistics; its sentences
    (which question its scores answer, its intervals) follow the decomposition's.

    >>> print(findings())  # doctest: +ELLIPSIS
    <ul class="findings"><li>No decomposition...</li><li>No head atlas given...</li></ul>
    """
    items = []
    if decomposition is not None:
        items += _characters(decomposition.rows)
        items += _null_and_ci(decomposition.rows, getattr(decomposition, "metadata", None))
        items += _common(decomposition.rows, "Common to all tokens")
        if held_out is not None:
            said = _null_and_ci(held_out.rows, held_out.metadata)
            items += [esc("Against held-out windows of the same corpus: ") + item
                      for item in said if not item.startswith("No null baseline")]  # fmt: skip
    else:
        items.append(esc("No decomposition: pass model= or decomposition= for the characters."))
    items += _attention(agreement)
    items += _across_steps(history, sweep_table)
    items.append(
        esc("The head atlas is below.")
        if atlas
        else esc("No head atlas given (pass atlas_html= or head_atlas=).")
    )
    return '<ul class="findings">' + "".join(f"<li>{i}</li>" for i in items) + "</ul>"
