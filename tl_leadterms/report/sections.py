"""The report's sections, each a function returning the HTML of its body."""

from collections.abc import Callable
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.report.markup import esc, kv_table, note
from tl_leadterms.report.tables import decompose_table, heatmaps
from tl_leadterms.version import __version__

__all__ = [
    "ASSOCIATIONS",
    "ATTENTION_VIEWS",
    "associations",
    "atlas",
    "attention",
    "decomposition",
    "figures",
    "provenance",
    "word_pairs",
]

ASSOCIATIONS = ("bigram", "interchangeability", "context")
#: a model with more heads than this shows this many attention views (best and worst agreeing)
ATTENTION_VIEWS = 4
_MODEL_KEYS = (
    "model_name", "original_architecture", "n_layers", "n_heads", "d_model", "d_head", "d_mlp",
    "d_vocab", "n_ctx", "attn_only", "act_fn", "normalization_type", "positional_embedding_type",
)  # fmt: skip


def provenance(stats, tokenizer, model, weights_meta, lr, steps, date) -> str:
    """Where the statistics, the tokenizer, the model and the run come from."""
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
        kv_table(corpus, "provenance corpus"),
        "<h3>Tokenizer</h3>",
        kv_table(
            [("name", tok_name or "none"), ("size", len(tokenizer) if tokenizer else "-")],
            "provenance tokenizer",
        ),
        "<h3>Model</h3>",
    ]
    if model is not None and hasattr(model, "cfg"):
        cfg = [(k, getattr(model.cfg, k)) for k in _MODEL_KEYS if hasattr(model.cfg, k)]
        parts.append(kv_table(cfg, "provenance model"))
    elif weights_meta is None:
        parts.append(note("No model given: the decompose table and attention views are left out."))
    if weights_meta:
        parts.append("<h4>Weight processing (to_paper)</h4>")
        parts.append(kv_table(sorted(weights_meta.items()), "provenance weights"))
    run = [("tl_leadterms", __version__), ("generated", date)]
    run += [("lr", lr)] if lr is not None else []
    run += [("steps", steps)] if steps is not None else []
    parts += ["<h3>Run</h3>", kv_table(run, "provenance run")]
    return "\n".join(parts)


def decomposition(d) -> str:
    """Heatmaps (layer × head) of the decomposition, then its full table (``<details>``)."""
    if d is None:
        return note("No model or decomposition given: pass model= to decompose its weights.")
    return heatmaps(d) + "\n" + decompose_table(d)


def word_pairs(words: object) -> list[tuple[str, str]]:
    """``words`` (a word, a list, or a dict kind -> words) as ``(kind, word)`` pairs."""
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


def associations(stats, pairs, tokenizer, text, fragment: Callable) -> str:
    """Each word's neighbours, and ``text`` shaded by its association with the word."""
    if not pairs:
        return note("No words given: pass words=[...] for association lists.")
    from tl_leadterms.plot import plot_associations

    parts = []
    for kind, word in pairs:
        try:
            # a word that never occurred gets a note, not a list of empty tables
            token_id = stats.token_id_of(word, tokenizer)
            stats.check_occurred(stats.vocab.position(token_id), word)
            view = plot_associations(stats, word, tokenizer, kind=kind, text=text)
        except LeadTermsError as err:
            parts.append(note(f"{word!r}: {err}"))
            continue
        parts.append(
            f'<div class="view association" data-word="{esc(word)}" '
            f'data-kind="{esc(kind)}">{fragment(view)}</div>'
        )
    return "\n".join(parts)


def attention(model, stats, text, tokenizer, lr, steps, heads, fragment) -> tuple[str, list]:
    """The attention views and the agreement rows (empty without a model and a text).

    ``heads=None`` shows every head when the model has at most :data:`ATTENTION_VIEWS`, else
    the best and worst agreeing ones (see :func:`tl_leadterms.plot.plot_attention`).
    """
    if text is None:
        return note("No text given: pass text= (and a model) for attention views."), []
    if model is None:
        return note("Attention views need a model; only the text was given."), []
    from tl_leadterms.plot import plot_attention

    if heads is None and model.cfg.n_layers * model.cfg.n_heads > ATTENTION_VIEWS:
        heads = ATTENTION_VIEWS
    view = plot_attention(model, stats, text, tokenizer=tokenizer, lr=lr, steps=steps,
                          heads=heads)  # fmt: skip
    n = len(view.data["tokens"])
    shown = view.data["heads"]
    which = (
        "every head"
        if shown is None
        else f"heads {', '.join(shown)}"
        + (" (the best and worst agreeing with the prediction)" if isinstance(heads, int) else "")
    )
    body = (
        f'<p>Text: <q class="sample-text">{esc(text)}</q> (first {n} tokens; {esc(which)})</p>'
        f'<div class="view attention">{fragment(view)}</div>'
    )
    return body, view.data["agreement"]


def atlas(atlas_html: str | None, head_atlas: Any) -> str:
    """The head atlas grid: ``atlas_html`` as given (trusted HTML), a
    :class:`~tl_leadterms.HeadAtlas` drawn by :func:`tl_leadterms.plot.atlas.atlas_html`, or any
    object with an ``.html()`` method."""
    from tl_leadterms.analyzers.atlas import HeadAtlas
    from tl_leadterms.plot.atlas import atlas_html as draw_atlas

    if atlas_html is None and isinstance(head_atlas, HeadAtlas):
        atlas_html = draw_atlas(head_atlas)
    elif atlas_html is None and head_atlas is not None:
        if not callable(getattr(head_atlas, "html", None)):
            raise LeadTermsError(
                f"head_atlas must be a HeadAtlas (tl_leadterms.head_atlas) or have an .html() "
                f"method, got {type(head_atlas).__name__}"
            )
        atlas_html = head_atlas.html()
    if atlas_html is None:
        return note("No head atlas given: pass head_atlas= (or atlas_html=) for the grid.")
    if not isinstance(atlas_html, str):
        raise LeadTermsError(f"atlas_html must be a string of HTML, got {atlas_html!r}")
    return f'<div class="view atlas">{atlas_html}</div>'


def figures(history, sweep_table, decomposition_) -> str:
    """Training history, sweep heatmaps and, when the rows have them, scores with CI and null
    bands, as embedded PNGs."""
    from tl_leadterms.plot import figure_html, plot_history, plot_scores, plot_sweep

    out: list[str] = []

    def add(make, caption: str) -> None:
        try:
            fig = make()
        except LeadTermsError as err:
            out.append(note(f"{caption}: {err}"))
            return
        out.append(
            f'<figure class="figure">{figure_html(fig, caption)}'
            f"<figcaption>{esc(caption)}</figcaption></figure>"
        )

    if history is not None:
        add(lambda: plot_history(history), "Training history: loss and 1 − cosine (log scale)")
    if sweep_table is not None:
        out.append(f'<pre class="sweep">{esc(repr(sweep_table))}</pre>')
        for analysis, score in sweep_table.scores():
            add(lambda a=analysis, s=score: plot_sweep(sweep_table, s, analysis=a),
                f"sweep {analysis}: {score}")  # fmt: skip
    rows = decomposition_.rows if decomposition_ is not None else []
    if any("lo" in r or "null_mean" in r for r in rows):
        add(lambda: plot_scores(decomposition_), "Scores with their CI band and null band")
    elif rows:
        out.append(note("No lo/hi or null_mean/null_sd columns in the decomposition: no bands."))
    return "\n".join(out) or note("No training history or sweep table given.")
