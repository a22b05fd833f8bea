"""Checkpoint-sweep heatmaps: a score over checkpoints × layers (or heads), and its null excess."""

import math

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.figures import (
    check_result,
    heatmap,
    legend_outside,
    new_figure,
    save_figure,
)
from tl_leadterms.results.findings import (
    HOLD_COSINE,
    common,
    explained_text,
    first_below,
    row_excess,
)
from tl_leadterms.results.null import NEGLIGIBLE, VERDICTS
from tl_leadterms.results.sections import Section, esc, figure_block
from tl_leadterms.theory import score_name

__all__ = ["plot_sweep", "plot_sweep_null", "report_section"]


def plot_sweep(table: object, score: object, *, analysis: object = None, path: object = None):
    """Heatmap of one score of a checkpoint sweep: layers × checkpoints, annotated.

    The colour scale follows the values (sequential over their range; diverging around 0 when
    they have both signs) and the numbers carry the decimals that tell them apart, each black
    or white, whichever reads better on its cell.

    Args:
        table: a :class:`~tl_leadterms.sweeps.SweepTable` (from :func:`~tl_leadterms.sweep`).
        score: the score's name (see ``table.scores()``).
        analysis: which analysis, when several report a score of that name.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (shows itself in a
        notebook; ``.savefig`` as any matplotlib figure).
    """
    check_result(table, "SweepTable", "sweep")
    if not isinstance(score, str) or (analysis is not None and not isinstance(analysis, str)):
        raise LeadTermsError(
            f"score and analysis must be strings (got {score!r}, {analysis!r}); scores: "
            f"{table.scores()}"
        )
    score = score_name(score)
    grid = table.pivot(score, analysis=analysis)
    if grid.empty:
        raise LeadTermsError(
            f"score {score!r} has no layer-level rows (only per-head ones); scores: "
            f"{table.scores()}"
        )
    values = grid.to_numpy(dtype=float)
    whole = "W_O" if "W_O" in score else "model"  # a layer-free row: W_O or a whole-model score
    rows = [(whole if layer == "-" else f"L{layer}") for layer in grid.index]
    cols = [str(c) for c in grid.columns]
    fig, (ax,) = new_figure(max(5.0, 2.2 + 0.9 * len(cols)), 1.6 + 0.45 * len(rows))
    heatmap(ax, fig, values, rows, cols, label=score, fontsize="small")
    ax.set_xlabel("checkpoint")
    ax.set_ylabel("layer")
    ax.set_title(score if analysis is None else f"{analysis}: {score}", fontsize="small")
    save_figure(fig, path)
    return fig


def plot_sweep_null(table: object, score: object, *, analysis: object = None, path: object = None):
    """One score of a sweep with ``null=`` across checkpoints: raw score, null band, excess.

    One panel per layer (layer-level rows, all on one y-scale): the score (``value``) and the
    grey band ``null_mean ± 2·null_sd``, the baseline checkpoint's value dotted; with a
    ``specific`` column (decompose's token-specific score) that too, dashed. A last panel has
    each layer's ``excess = value − null_mean`` on its own axis, the negligible band
    ``±NEGLIGIBLE`` shaded: a score that sits on the top of its null band has an excess near 0
    whatever its height.

    Args:
        table: a :class:`~tl_leadterms.sweeps.SweepTable` whose rows have ``null_mean`` (a sweep
            with ``null=``).
        score: the score's name (see ``table.scores()``).
        analysis: which analysis, when several report a score of that name.
        path: when given, the figure is also written there as PNG (atomically).

    Returns:
        An :class:`~tl_leadterms.results.inline_figure.InlineFigure` (shows itself in a
        notebook; ``.savefig`` as any matplotlib figure).
    """
    check_result(table, "SweepTable", "sweep")
    score = score_name(score)
    rows = [r for r in table.rows if r["score"] == score and r["head"] is None
            and (analysis is None or r["analysis"] == analysis)]  # fmt: skip
    if not any(r.get("null_mean") is not None for r in rows):
        raise LeadTermsError(
            f"score {score!r} has no layer-level rows with a null (sweep with null=R); "
            f"scores: {table.scores()}"
        )
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    fig, axes = new_figure(max(6.0, 2.4 + 0.6 * len(table.checkpoints)),
                           1.4 + 1.7 * (len(layers) + 1), len(layers) + 1)  # fmt: skip
    x = list(range(len(table.checkpoints)))
    excess_ax = axes[-1]
    for i, (ax, layer) in enumerate(zip(axes, layers, strict=False)):
        found = {r["checkpoint"]: r for r in rows if r["layer"] == layer}

        def get(key: str, found: dict = found) -> list[float]:
            values = [found.get(c, {}).get(key) for c in table.checkpoints]
            return [math.nan if v is None else float(v) for v in values]

        mean, sd, value = get("null_mean"), get("null_sd"), get("value")
        ax.fill_between(x, [m - 2 * s for m, s in zip(mean, sd, strict=True)],
                        [m + 2 * s for m, s in zip(mean, sd, strict=True)], color="0.8",
                        alpha=0.8, label="null mean ± 2 sd")  # fmt: skip
        ax.plot(x, value, marker=".", color="tab:blue", label=score)
        base = found.get(table.metadata.get("baseline"), {}).get("value")
        if base is not None:
            ax.axhline(base, ls=":", color="tab:blue", label="baseline")
        if any(r.get("specific") is not None for r in found.values()):
            ax.plot(x, get("specific"), "--", marker=".", color="tab:green", label="specific")
        name = "W_O" if layer is None else f"L{layer}"
        excess_ax.plot(x, [v - m for v, m in zip(value, mean, strict=True)], marker="x",
                       color=f"C{i}", label=f"excess {name}")  # fmt: skip
        ax.set_ylabel(name)
    if len(layers) > 1:
        for ax in axes[1:-1]:
            ax.sharey(axes[0])
    excess_ax.axhspan(-NEGLIGIBLE, NEGLIGIBLE, color="0.85", label="negligible")
    excess_ax.axhline(0.0, color="black", lw=0.5)
    excess_ax.set_ylabel("excess = value − null mean")
    excess_ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                     frameon=False)  # fmt: skip
    for ax in axes:
        ax.set_xticks(x, table.checkpoints, rotation=45 if len(x) > 6 else 0, fontsize="small")
        ax.grid(alpha=0.3)
    legend_outside(fig, axes[:-1])
    axes[0].set_title(score if analysis is None else f"{analysis}: {score}", fontsize="small")
    axes[-1].set_xlabel("checkpoint")
    save_figure(fig, path)
    return fig


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _layer_rows(table, analysis: str, score: str) -> list[dict]:
    return [r for r in table.rows if r["analysis"] == analysis and r["score"] == score
            and r["head"] is None]  # fmt: skip


def _effects(table) -> list[str]:
    """Per score with a null or a common share: its range, excess over the null and common
    share."""
    out = []
    for analysis, score in table.scores():
        rows = [r for r in _layer_rows(table, analysis, score) if _finite(r.get("value"))]
        if not any(_finite(r.get("null_mean")) or _finite(r.get("common_share")) for r in rows):
            continue
        values = sorted(r["value"] for r in rows)
        text = f"Sweep {analysis} {score}: score {values[0]:.3f} to {values[-1]:.3f}"
        excess = [row_excess(r) for r in rows if _finite(r.get("null_mean"))]
        if excess:
            text += f"; excess over the null mean {min(excess):.3g} to {max(excess):.3g}"
            said = [r["verdict"] for r in rows if r.get("verdict") in VERDICTS]
            text += "".join(f", {said.count(v)} of {len(said)} {v}" for v in VERDICTS
                            if said.count(v))  # fmt: skip
        start = [r["vs_baseline"] for r in rows if _finite(r.get("vs_baseline"))]
        if start:
            text += (f"; against the baseline {table.metadata.get('baseline')} "
                     f"{min(start):+.3g} to {max(start):+.3g}")  # fmt: skip
        out.append(esc(text + "."))
        out += common(rows, f"Sweep {analysis} {score}")
    return out


def _holds(table) -> list[str]:
    """Per cosine score, where it first falls below ``HOLD_COSINE``; where the leading-term
    model's explained share first falls below ``HOLD_EXPLAINED``."""
    out = []
    for analysis, score in table.scores():
        grid = table.pivot(score, analysis=analysis)
        if grid.empty or not (score.startswith("cos") or score == "output_explained"):
            continue
        cols = [str(c) for c in grid.columns]
        if score == "output_explained":
            out.append(esc(explained_text("Sweep", cols, [float(v) for v in grid.iloc[0]])))
            continue
        hits = ((layer, first_below(cols, [float(v) for v in values]))
                for layer, values in grid.iterrows())  # fmt: skip
        broken = [f"layer {layer} at {h[0]} ({h[1]:.3f})" for layer, h in hits if h is not None]
        text = (f"Sweep {score}: below {HOLD_COSINE} from " + "; ".join(broken) if broken
                else f"Sweep {score}: ≥ {HOLD_COSINE} at every checkpoint and layer")  # fmt: skip
        out.append(esc(text + "."))
    return out


def report_section(table) -> Section:
    """The report section of a sweep table: the table, one heatmap per score (and, with a
    null, the score with its null band, and its excess), and what the scores say."""
    parts = [f'<pre class="sweep">{esc(repr(table))}</pre>']
    for analysis, score in table.scores():
        parts.append(figure_block(lambda a=analysis, s=score: plot_sweep(table, s, analysis=a),
                                  f"sweep {analysis}: {score}"))  # fmt: skip
        if any(r.get("null_mean") is not None for r in _layer_rows(table, analysis, score)):
            parts.append(figure_block(
                lambda a=analysis, s=score: plot_sweep_null(table, s, analysis=a),
                f"sweep {analysis}: {score} — score, null band and excess"))  # fmt: skip
    findings = tuple(_effects(table) + _holds(table))
    return Section("sweep", "Checkpoint sweep", "\n".join(parts), findings)
