"""The report section of a decomposition: its heatmaps (layer × head), its full table one
click away (key columns first, the rest folded under it; a row dimmed by its verdict), the
scores figure with their bands, and its findings in sentences. Two thresholds keep the page
from implying what the numbers do not show: :data:`EXPLAINED_FLOOR` (no "character" below
it) and :data:`COSINE_FLOOR` (no implied ``s·η`` below it, nor where the verdict greys the row).
"""

import math

from tl_leadterms.results.findings import common, names, null_and_ci
from tl_leadterms.results.null import FAINT, dimmed
from tl_leadterms.results.sections import Section, esc, figure_block, step_text
from tl_leadterms.results.style import SEQUENTIAL, colour, column_format, ink, number
from tl_leadterms.theory import FAMILIES

__all__ = [
    "COSINE_FLOOR",
    "EXPLAINED_FLOOR",
    "SMALL_LAYERS",
    "character_code",
    "decompose_table",
    "heatmaps",
    "report_section",
    "shown_character",
    "shown_implied",
]

#: below this R² (``explained``) a row has no character
EXPLAINED_FLOOR = 0.05
#: below this cosine no implied s·η is shown
COSINE_FLOOR = 0.2
#: up to this many layers the full table is shown open; beyond, collapsed under the heatmaps
SMALL_LAYERS = 4
_CHARACTER_COLOURS = {"B": "#f4a582", "I": "#92c5de", "C": "#b8e186", "P": "#d8b365",
                      "AS": "#c2a5cf", "PT": "#fddbc7", "M": "#dddddd"}  # fmt: skip


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def shown_character(row: dict) -> str:
    """The row's character, or "–" when its R² is below :data:`EXPLAINED_FLOOR`."""
    explained = row.get("explained")
    if not _finite(explained) or explained < EXPLAINED_FLOOR:
        return "–"
    return str(row.get("character", "–"))


def shown_implied(row: dict) -> float | None:
    """The implied s·η where the cosine is clearly positive (see the module), else None."""
    cosine = row.get("cosine")
    if not _finite(cosine) or cosine < COSINE_FLOOR or dimmed(row):
        return None
    return row.get("implied_s_lr")


def character_code(character: str) -> str:
    """A short code for a character: the initials of each part.

    >>> character_code("bigram∘context-like"), character_code("attention statistic-like")
    ('B∘C', 'AS')
    """
    if character in ("–", "zero"):
        return character
    name = character.removesuffix("-like")
    return "∘".join("".join(w[0].upper() for w in part.split()) for part in name.split("∘"))


#: the full table's key columns (shown when the rows have them) and the folded ones
_KEY = ("cosine", "interval", "excess", "specific", "q", "verdict", "character")
_MORE = ("implied s·η", "explained", *FAMILIES, "z", "p", "null_mean", "null_sd", "lo", "hi",
         "corrected", "excess_share", "common_share")  # fmt: skip


def _value(row: dict, column: str) -> object:
    """What the full table shows of ``column`` (the interval as one cell)."""
    if column == "interval":
        return None if row.get("lo") is None else (row["lo"], row["hi"])
    shown = {"character": shown_character, "implied s·η": shown_implied}.get(column)
    return shown(row) if shown else {**row, **row["family_shares"]}.get(column)


def _rows_html(rows: list[dict], columns: list[str], css: str) -> str:
    """``<table class=css>``: weight, where, target and ``columns``, rows ``{css}-row``."""
    values = {c: [_value(r, c) for r in rows] for c in columns}
    ends = [e for v in values.get("interval", []) if v is not None for e in v]
    fmt = {c: column_format(v) for c, v in values.items()} | {"interval": column_format(ends)}
    head = "".join(f"<th>{esc(c)}</th>" for c in ("weight", "where", "target", *columns))
    body = []
    for i, r in enumerate(rows):
        label = r["label"]
        cells = "".join(f"<td>{esc(v)}</td>" for v in (
            r["weight"], label if r["layer"] is not None else "-", r["target"]))  # fmt: skip
        for c in columns:
            v = values[c][i]
            text = f"{fmt[c](v[0])} – {fmt[c](v[1])}" if c == "interval" and v else fmt[c](v)
            kind = ' class="num"' if isinstance(v, (int, float, tuple)) else ""
            cells += f"<td{kind}>{esc(text)}</td>"
        ident = f"decompose-{r['weight']}-{label}".replace(" ", "_")
        dim = " data-dim" if dimmed(r) else ""
        body.append(f'<tr class="{css}-row"{dim} id="{esc(css + ident[9:])}" data-weight='
                    f'"{esc(r["weight"])}" data-label="{esc(label)}">{cells}</tr>')  # fmt: skip
    return (f'<div class="table-scroll"><table class="{css}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")  # fmt: skip


def decompose_table(d) -> str:
    """The full table inside ``<details>`` (open up to :data:`SMALL_LAYERS` layers): the key
    columns, one ``<tr class="decompose-row">`` per row, the others folded under it."""
    meta = d.metadata
    have = {c for r in d.rows for c in r} | {"character"}
    have |= {"interval"} if "lo" in have else set()
    key = [c for c in _KEY if c in have]
    more = [c for c in _MORE if c in have or c in FAMILIES or c == "implied s·η"]
    lr, steps = meta.get("lr"), meta.get("steps")
    caption = f"k={meta['k']}, T={meta['n_ctx']}, {meta['n_sequences']} sequences" + (
        f"; lr·steps = {lr * steps:.4g}" if lr is not None and steps is not None else ""
    )
    layers = {r["layer"] for r in d.rows if r["layer"] is not None}
    is_open = " open" if len(layers) <= SMALL_LAYERS else ""
    thresholds = (
        f"character only where explained ≥ {EXPLAINED_FLOOR}; implied s·η only where cosine ≥ "
        f"{COSINE_FLOOR}"
        + (" and the verdict is not " + " or ".join(FAINT) if "verdict" in have else "")
    )
    dim = f" Dimmed: verdict {' or '.join(FAINT)}." if "verdict" in have else ""
    return (
        f'<details class="decompose-details"{is_open}><summary>Full table: {len(d.rows)} rows '
        f"({esc(caption)}; {esc(thresholds)}){dim}</summary>{_rows_html(d.rows, key, 'decompose')}"
        f'<details class="decompose-more"><summary>{len(more)} more columns: '
        f"{esc(', '.join(more))}</summary>{_rows_html(d.rows, more, 'decompose-more')}</details>"
        "</details>"
    )


def _grid(rows: list[dict]) -> tuple[list[int], list, dict]:
    layers = sorted({r["layer"] for r in rows})
    heads = sorted({r["head"] for r in rows}, key=lambda h: -1 if h is None else h)
    return layers, heads, {(r["layer"], r["head"]): r for r in rows}


def _cell(metric: str, row: dict | None) -> str:
    if row is None:
        return "<td></td>"
    tip = (
        f"{row['label']} {row['weight']}: cosine {number(row['cosine'], 4)}, explained "
        f"{number(row['explained'], 4)}, {shown_character(row)}"
        + (f", {row['verdict']}" if row.get("verdict") else "")
    )
    if metric == "character":
        code = character_code(shown_character(row))
        fill = "#ffffff" if code == "–" else _fill(code)
        return (f'<td title="{esc(tip)}" style="background:{fill};color:{ink(fill)}">'
                f"{esc(code)}</td>")  # fmt: skip
    value = row[metric]
    if not _finite(value):
        return f'<td title="{esc(tip)}">–</td>'
    fill = colour(value) if metric == "cosine" else colour(value, (SEQUENTIAL, 0.0, 1.0))
    return (f'<td title="{esc(tip)}" style="background:{fill};color:{ink(fill)}">'
            f"{number(value, 2)}</td>")  # fmt: skip


def _fill(code: str) -> str:
    return _CHARACTER_COLOURS.get(code.split("∘")[0], "#eeeeee")


def _heatmap(weight: str, metric: str, rows: list[dict]) -> str:
    layers, heads, at = _grid(rows)
    top = "".join(f"<th>{'all' if h is None else f'H{h}'}</th>" for h in heads)
    body = "".join(
        f"<tr><th>L{layer}</th>{''.join(_cell(metric, at.get((layer, h))) for h in heads)}</tr>"
        for layer in layers
    )
    return (
        f'<table class="heatmap" data-weight="{esc(weight)}" data-metric="{metric}">'
        f"<caption>{esc(weight)}</caption><tr><th></th>{top}</tr>{body}</table>"
    )


def heatmaps(d) -> str:
    """Layer × head heatmaps of cosine, explained share (R²) and character, one per weight."""
    by_weight: dict[str, list[dict]] = {}
    for r in d.rows:
        if r["layer"] is not None:
            by_weight.setdefault(r["weight"], []).append(r)
    if not by_weight:
        return ""
    titles = {
        "cosine": "Cosine with the leading term (blue −1, white 0, red +1)",
        "explained": f"Explained share R² on the basis ({SEQUENTIAL}: dark 0, yellow 1)",
        "character": f"Character (none where R² < {EXPLAINED_FLOOR})",
    }
    out = []
    for metric, title in titles.items():
        grids = "".join(_heatmap(w, metric, rows) for w, rows in by_weight.items())
        out.append(
            f'<h3>{esc(title)}</h3><div class="heatmaps" data-metric="{metric}">{grids}</div>'
        )
    codes = sorted({character_code(shown_character(r)) for r in d.rows} - {"–", "zero"})
    names = {character_code(shown_character(r)): shown_character(r) for r in d.rows}
    legend = "".join(
        f'<span style="background:{_fill(c)};color:{ink(_fill(c))}">{esc(c)} = {esc(names[c])}'
        "</span>"
        for c in codes
    )
    if legend:
        out.append(f'<p class="legend">{legend} (hover a cell for its numbers)</p>')
    return "\n".join(out)


def _characters(rows: list[dict]) -> list[str]:
    out = []
    for weight in dict.fromkeys(r["weight"] for r in rows):
        mine = [r for r in rows if r["weight"] == weight]
        groups: dict[str, list[str]] = {}
        for r in mine:
            groups.setdefault(shown_character(r), []).append(r["label"])
        named = [f"{c} in {names(ls)}" for c, ls in groups.items() if c != "–"]
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
                f"{names(unexplained)}"
            )
        out.append(text)
    return out


def _reading(metadata: dict) -> str:
    """One caption: which question the scores answer (exact for the training windows, or an
    estimate of the distribution-level score) and why there is an interval or none."""
    from tl_leadterms.results.bootstrap import ci_note

    answers = (metadata.get("population") or {}).get("answers")
    text = ci_note(metadata) or (f"({answers})" if answers else None)
    return f'<p class="decompose-reading">{esc(text[1:-1])}.</p>' if text else ""


def _figure(d) -> str:
    """The scores with their interval and null bands, when the rows have them."""
    from tl_leadterms.analyses.decompose.figure import plot_scores

    if not any("lo" in r or "null_mean" in r for r in d.rows):
        return ""
    return figure_block(lambda: plot_scores(d), "Scores with their CI band and null band")


def report_section(d) -> Section:
    """The report section of a :class:`~tl_leadterms.analyses.decompose.Decomposition`: its
    step, which question it answers, the heatmaps, the full table and the scores figure; its
    findings are each weight's character and range, the null and the interval, and how much of
    the score is common to all tokens. Against held-out windows (statistics of another sample
    than the model's training windows, with an interval) it is titled so, and its findings say
    so."""
    meta = d.metadata
    lr, steps = meta.get("lr"), meta.get("steps")
    when = (f'<p class="decompose-step">The weights at {esc(step_text(lr, steps))}.</p>'
            if steps is not None else "")  # fmt: skip
    body = when + _reading(meta) + heatmaps(d) + "\n" + decompose_table(d) + _figure(d)
    held_out = (meta.get("population") or {}).get("population") == "distribution" and bool(
        (meta.get("ci") or {}).get("blocks")
    )
    if held_out:
        prefix = esc("Against held-out windows of the same corpus: ")
        said = [prefix + s for s in null_and_ci(d.rows, meta) if not s.startswith("No null")]
        return Section("decompose", "Against held-out windows of the same corpus", body,
                       tuple(said))  # fmt: skip
    said = _characters(d.rows) + null_and_ci(d.rows, meta) + common(d.rows, "Common to all tokens")
    return Section("decompose", "Decomposition into corpus statistics", body, tuple(said))
