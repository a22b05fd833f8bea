"""`report`: one self-contained HTML file with what a model learned from its corpus.

The file opens offline in any browser: no CDN, no network. It holds the provenance of the
statistics and the model, the :func:`~tl_leadterms.decompose` table (one ``<tr
class="decompose-row" data-label="L0H0">`` per weight, layer and head), association lists of
chosen words, the actual and predicted attention on a text, and the training-history and sweep
figures as embedded PNGs. Every optional part that is missing is left out with a note.
"""

import datetime
import html
import json
import math
import os
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from tl_leadterms.atomic import write_text
from tl_leadterms.checks import check_stats
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import FAMILIES, Schedule
from tl_leadterms.version import __version__

__all__ = ["report"]

ASSOCIATIONS = ("bigram", "interchangeability", "context")
_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
td, th { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f4f4f4; } .note { color: #777; font-style: italic; }
.view { margin: .5em 0 1.5em; } pre { background: #f8f8f8; padding: .5em; overflow-x: auto; }
img { max-width: 100%; }
"""


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


def _short(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _kv_table(items: list[tuple[str, object]], css: str) -> str:
    rows = "".join(
        f"<tr><th>{_esc(key)}</th><td>{_esc(_short(value))}</td></tr>" for key, value in items
    )
    return f'<table class="{css}">{rows}</table>'


def _num(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if abs(value) < 1e4 else f"{value:.3e}"


# -- sections -------------------------------------------------------------------------------
def _provenance(stats, tokenizer, model, weights_meta, lr, steps, date) -> str:
    corpus = [
        ("d_vocab", stats.d_vocab),
        ("kept tokens (k)", f"{stats.k} ({'all' if stats.kept is None else 'restricted'})"),
        ("n_ctx (T)", stats.n_ctx),
        ("n_sequences", stats.n_sequences),
        ("centre_vocab", stats.centre_vocab),
    ]
    shown = {"d_vocab", "n_ctx", "n_sequences", "centre_vocab", "n_kept"}
    corpus += [(k, v) for k, v in sorted(stats.metadata.items()) if k not in shown]
    tok_name = getattr(tokenizer, "name_or_path", None) or stats.metadata.get("tokenizer_name")
    parts = [
        "<h3>Corpus statistics</h3>",
        _kv_table(corpus, "provenance corpus"),
        "<h3>Tokenizer</h3>",
        _kv_table(
            [("name", tok_name or "none"), ("size", len(tokenizer) if tokenizer else "-")],
            "provenance tokenizer",
        ),
        "<h3>Model</h3>",
    ]
    if model is not None and hasattr(model, "cfg"):
        keys = (
            "model_name", "original_architecture", "n_layers", "n_heads", "d_model", "d_head",
            "d_mlp", "d_vocab", "n_ctx", "attn_only", "act_fn", "normalization_type",
            "positional_embedding_type",
        )  # fmt: skip
        cfg = [(k, getattr(model.cfg, k)) for k in keys if hasattr(model.cfg, k)]
        parts.append(_kv_table(cfg, "provenance model"))
    elif weights_meta is None:
        parts.append(_note("No model given: the decompose table and attention views are left out."))
    if weights_meta:
        parts.append("<h4>Weight processing (to_paper)</h4>")
        parts.append(_kv_table(sorted(weights_meta.items()), "provenance weights"))
    run = [("tl_leadterms", __version__), ("generated", date)]
    run += [("lr", lr)] if lr is not None else []
    run += [("steps", steps)] if steps is not None else []
    parts += ["<h3>Run</h3>", _kv_table(run, "provenance run")]
    return "\n".join(parts)


def _decompose_table(d) -> str:
    meta = d.metadata
    cols = ("weight", "where", "target", "cosine", "implied s·η", "explained")
    fams = FAMILIES
    head = "".join(f"<th>{_esc(c)}</th>" for c in (*cols, *fams, "character"))
    body = []
    for r in d.rows:
        fam = r["family_shares"]
        label = r["label"]
        ident = f"decompose-{r['weight']}-{label}".replace(" ", "_")
        cells = [
            _esc(r["weight"]),
            _esc(label if r["layer"] is not None else "-"),
            _esc(r["target"]),
        ]
        nums = [_num(r["cosine"], 6), _num(r["implied_s_lr"]), _num(r["explained"])]
        nums += [_num(fam.get(f)) for f in fams]
        row = "".join(f"<td>{c}</td>" for c in cells)
        row += "".join(f'<td class="num">{n}</td>' for n in nums)
        row += f"<td>{_esc(r['character'])}</td>"
        body.append(
            f'<tr class="decompose-row" id="{_esc(ident)}" data-weight="{_esc(r["weight"])}" '
            f'data-label="{_esc(label)}">{row}</tr>'
        )
    lr, steps = meta.get("lr"), meta.get("steps")
    caption = f"k={meta['k']}, T={meta['n_ctx']}, {meta['n_sequences']} sequences" + (
        f"; lr·steps = {lr * steps:.4g}" if lr is not None and steps is not None else ""
    )
    return (
        f"<p>{_esc(caption)}</p>"
        f'<table class="decompose"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _words(words: object) -> list[tuple[str, str]]:
    """``words`` as ``(kind, word)`` pairs."""
    if isinstance(words, str):
        words = [words]
    if isinstance(words, dict):
        bad = [k for k in words if k not in ASSOCIATIONS]
        if bad or not all(isinstance(v, (list, tuple)) for v in words.values()):
            raise LeadTermsError(
                f"words must map kinds {ASSOCIATIONS} to lists of words, got {words!r}; e.g. "
                "words={'bigram': ['red'], 'context': ['fish']}"
            )
        pairs = [(kind, w) for kind, ws in words.items() for w in ws]
    elif isinstance(words, (list, tuple)):
        pairs = [("context", w) for w in words]
    else:
        raise LeadTermsError(
            f"words must be None, a word, a list of words or a dict kind -> words, got {words!r}"
        )
    if not all(isinstance(w, (str, int)) and not isinstance(w, bool) for _, w in pairs):
        raise LeadTermsError(f"words must be strings or token ids, got {words!r}")
    return pairs


def _check_args(path, stats, text, title, lr, steps) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a file path such as 'report.html', got {path!r}")
    path = Path(path)
    if path.is_dir():
        raise LeadTermsError(f"{str(path)!r} is a folder; pass a file path such as report.html")
    check_stats(stats)
    for name, value in (("text", text), ("title", title)):
        if value is not None and not isinstance(value, str):
            raise LeadTermsError(f"{name} must be a string or None, got {value!r}")
    Schedule.of(lr, steps)
    return path


def report(
    path: str | os.PathLike,
    *,
    stats: CorpusStats,
    model: Any = None,
    tokenizer: Any = None,
    text: str | None = None,
    history: Any = None,
    decomposition: Any = None,
    sweep_table: Any = None,
    words: Any = None,
    title: str | None = None,
    lr: float | None = None,
    steps: int | None = None,
    association_stats: Any = None,
    progress: bool = True,
) -> Path:
    """Write one self-contained HTML report (works offline, no CDN) and return its path.

    Args:
        path: the ``.html`` file to write (atomically; parent folders are created).
        stats: the :class:`~tl_leadterms.CorpusStats` everything is read against.
        model: a HookedTransformer: its config and weight processing go in the provenance, it
            is decomposed when ``decomposition`` is not given, and its attention is shown on
            ``text``.
        tokenizer: reads ``words`` and ``text``; defaults to ``stats.tokenizer``, then
            ``model.tokenizer``.
        text: a sample text for the attention views (actual heads next to the prediction).
        history: a :class:`~tl_leadterms.TrainHistory` (loss and cosine curves).
        decomposition: a :class:`~tl_leadterms.Decomposition` to show instead of computing one.
        sweep_table: a :class:`~tl_leadterms.SweepTable`: one heatmap per score.
        words: association lists (each word's bigram, interchangeability and context
            neighbours): a list of words, or a dict ``{"bigram": ["red"], ...}`` whose kind
            shades ``text`` by that association (a list shades by context).
        title: the page title.
        lr, steps: the training run, for ``decompose`` and the predicted attention.
        association_stats: statistics for the association lists only (default ``stats``),
            e.g. of a larger corpus than the model's training windows.
        progress: a tqdm bar over the sections.

    Returns:
        The path written.

    Example:
        >>> import tempfile, torch
        >>> from tl_leadterms import corpus_stats, paper_model
        >>> from tl_leadterms.report import report
        >>> stats = corpus_stats(torch.randint(0, 12, (16, 9)), 12, progress=False)
        >>> out = report(tempfile.mkdtemp() + "/r.html", stats=stats, progress=False,
        ...              model=paper_model(d_vocab=12, n_ctx=8, n_layers=1))
        >>> out.read_text().count('class="decompose-row"')  # W_O, V, W, P
        4
    """
    path = _check_args(path, stats, text, title, lr, steps)
    assoc = stats if association_stats is None else association_stats
    if not isinstance(assoc, type(stats)):
        raise LeadTermsError(
            f"association_stats must be a CorpusStats or None, got {type(assoc).__name__}"
        )
    pairs = [] if words is None else _words(words)
    if tokenizer is None:
        tokenizer = stats.tokenizer or getattr(model, "tokenizer", None)
    title = title or "tl_leadterms report"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    weights_meta = None
    if model is not None:
        from tl_leadterms.adapters import to_paper

        weights_meta = to_paper(model).metadata
    elif decomposition is not None:
        weights_meta = decomposition.metadata.get("model")

    sections: list[tuple[str, str, str]] = []  # (id, heading, body)
    library = [False]  # the circuitsvis bundle goes once, before the first view that needs it

    def fragment(view) -> str:
        html_text = view.fragment(library=not library[0])
        library[0] = library[0] or "CircuitsVis=" in html_text
        return html_text

    bar = tqdm(total=6, desc="report", disable=not progress)
    sections.append(
        (
            "provenance",
            "Provenance",
            _provenance(stats, tokenizer, model, weights_meta, lr, steps, date),
        )
    )
    bar.update()

    if decomposition is None and model is not None:
        from tl_leadterms.analyzers.decompose import decompose

        decomposition = decompose(model, stats, lr=lr, steps=steps)
    body = (
        _decompose_table(decomposition)
        if decomposition is not None
        else _note("No model or decomposition given: pass model= to decompose its weights.")
    )
    sections.append(("decompose", "Decomposition into corpus statistics", body))
    bar.update()

    if pairs:
        from tl_leadterms.plot import plot_associations

        parts = []
        for kind, word in pairs:
            try:
                view = plot_associations(assoc, word, tokenizer, kind=kind, text=text)
            except LeadTermsError as err:
                parts.append(_note(f"{word!r}: {err}"))
                continue
            parts.append(
                f'<div class="view association" data-word="{_esc(word)}" '
                f'data-kind="{_esc(kind)}">{fragment(view)}</div>'
            )
        body = "\n".join(parts)
    else:
        body = _note("No words given: pass words=[...] for association lists.")
    sections.append(("associations", "Association lists", body))
    bar.update()

    if text is None:
        body = _note("No text given: pass text= (and a model) for attention views.")
    elif model is None:
        body = _note("Attention views need a model; only the text was given.")
    else:
        from tl_leadterms.plot import plot_attention

        view = plot_attention(model, stats, text, tokenizer=tokenizer, lr=lr, steps=steps)
        n = len(view.data.get("tokens", []))
        body = (
            f'<p>Text: <q class="sample-text">{_esc(text)}</q> (first {n} tokens shown)</p>'
            f'<div class="view attention">{fragment(view)}</div>'
        )
    sections.append(("attention", "Attention on a sample text", body))
    bar.update()

    figures = []
    if history is not None or sweep_table is not None:
        import matplotlib.pyplot as plt

        from tl_leadterms.plot import figure_html, plot_history, plot_sweep

        def add(make, caption: str) -> None:
            try:
                fig = make()
            except LeadTermsError as err:
                figures.append(_note(f"{caption}: {err}"))
                return
            figures.append(
                f'<figure class="figure">{figure_html(fig, caption)}'
                f"<figcaption>{_esc(caption)}</figcaption></figure>"
            )
            plt.close(fig)

        if history is not None:
            add(lambda: plot_history(history), "Training history: loss and cosines")
        if sweep_table is not None:
            figures.append(f'<pre class="sweep">{_esc(repr(sweep_table))}</pre>')
            for analysis, score in sweep_table.scores():
                add(
                    lambda a=analysis, s=score: plot_sweep(sweep_table, s, analysis=a),
                    f"sweep {analysis}: {score}",
                )
    body = "\n".join(figures) or _note("No training history or sweep table given.")
    sections.append(("figures", "Figures", body))
    bar.update()

    toc = "".join(f'<li><a href="#{sid}">{_esc(head)}</a></li>' for sid, head, _ in sections)
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f'<h1 class="title">{_esc(title)}</h1>',
        f"<p>Generated {_esc(date)} by tl_leadterms {_esc(__version__)}.</p><ul>{toc}</ul>",
    ]
    for sid, head, body in sections:
        page.append(f'<section id="{sid}"><h2>{_esc(head)}</h2>\n{body}\n</section>')
    page.append("</body></html>")
    content = "\n".join(page)
    write_text(path, content, parents=True)
    bar.update()
    bar.close()
    return path
