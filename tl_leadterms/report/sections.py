"""The report's sections, each a function returning the HTML of its body."""

from collections.abc import Callable
from typing import Any

from tl_leadterms.adapters.view import model_view
from tl_leadterms.analyses.attention import tv_from_uniform
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.report.markup import esc, kv_table, note, num
from tl_leadterms.report.tables import decompose_table, heatmaps
from tl_leadterms.stats.neighbours import SCORINGS
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
    "scoring_caption",
    "word_pairs",
]

ASSOCIATIONS = ("bigram", "interchangeability", "context")
#: a model with more heads than this shows this many attention views (best and worst agreeing)
ATTENTION_VIEWS = 4
#: what each association scoring means, for the caption above the lists
SCORING_MEANINGS = {
    "raw": "the statistic's own values, as the paper prints them (its Figure 5); on real "
    "corpora the most frequent tokens top every list",
    "cosine": "each entry divided by the norms of its row and of its column (for Σ_B̄ the "
    "cosine of the two tokens' B̄ columns), so a neighbour ranks by how much of its own mass "
    "it shares with the word rather than by how frequent it is; the values rank the list and "
    "are not bounded by 1 except for Σ_B̄ (for B̄ and Φ̄ they scale with 1/‖M‖)",
    "ppmi": "positive pointwise mutual information of the statistic's positive part read as "
    "co-occurrence weights, max(0, log(M_ij·S / (r_i·c_j))): frequency-corrected",
}


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
        facts = model_view(model, caller="report").config_facts()
        parts.append(kv_table([(k, v) for k, v in facts.items() if v is not None],
                              "provenance model"))  # fmt: skip
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
    lr, steps = d.metadata.get("lr"), d.metadata.get("steps")
    when = (
        f'<p class="decompose-step">The weights at {esc(_step_text(lr, steps))}.</p>'
        if steps is not None
        else ""
    )
    return when + reading(d.metadata) + heatmaps(d) + "\n" + decompose_table(d)


def reading(metadata: dict) -> str:
    """One caption: which question the scores answer (exact for the training windows, or an
    estimate of the distribution-level score) and why there is an interval or none."""
    from tl_leadterms.results.bootstrap import ci_note

    answers = (metadata.get("population") or {}).get("answers")
    text = ci_note(metadata) or (f"({answers})" if answers else None)
    return f'<p class="decompose-reading">{esc(text[1:-1])}.</p>' if text else ""


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


def scoring_caption(scoring: str, excluded: list[str]) -> str:
    """The sentence above the association lists: which scoring ranks them, what it means, and
    which tokens are left out.

    >>> scoring_caption("raw", [])[:60]
    '<p class="association-scoring" data-scoring="raw">Neighbours'
    """
    check_choice("associations", scoring, SCORINGS)
    left_out = (
        f" Special tokens ({', '.join(excluded)}) are left out of the lists." if excluded else ""
    )
    return (
        f'<p class="association-scoring" data-scoring="{esc(scoring)}">Neighbours ranked by '
        f"<strong>{esc(scoring)}</strong> scoring: {esc(SCORING_MEANINGS[scoring])}. The text "
        f"is shaded by the same scoring.{esc(left_out)} (Scorings: "
        f"{esc(', '.join(SCORINGS))}; pass report(..., associations=...) to change it; "
        "formulas in tl_leadterms.stats.neighbours.)</p>"
    )


def _special_tokens(tokenizer) -> tuple[list[int], list[str]]:
    ids = [int(i) for i in getattr(tokenizer, "all_special_ids", None) or []]
    names = [str(t) for t in getattr(tokenizer, "all_special_tokens", None) or []]
    return ids, names if len(names) == len(ids) else [str(i) for i in ids]


def associations(stats, pairs, tokenizer, text, fragment: Callable, scoring: str = "raw",
                 exclude_special: bool = False) -> str:  # fmt: skip
    """Each word's neighbours under ``scoring``, and ``text`` shaded by its association with
    the word; a caption on top names the scoring (see :func:`scoring_caption`)."""
    check_choice("associations", scoring, SCORINGS)
    if not pairs:
        return note("No words given: pass words=[...] for association lists.")
    from tl_leadterms.explorer import plot_associations

    exclude, excluded = _special_tokens(tokenizer) if exclude_special else ([], [])
    parts = [scoring_caption(scoring, excluded)]
    for kind, word in pairs:
        try:
            # a word that never occurred gets a note, not a list of empty tables
            token_id = stats.token_id_of(word, tokenizer)
            stats.check_occurred(stats.vocab.position(token_id), word)
            view = plot_associations(stats, word, tokenizer, kind=kind, text=text,
                                     scoring=scoring, exclude=exclude or None)  # fmt: skip
        except LeadTermsError as err:
            parts.append(note(f"{word!r}: {err}"))
            continue
        parts.append(
            f'<div class="view association" data-word="{esc(word)}" '
            f'data-kind="{esc(kind)}">{fragment(view)}</div>'
        )
    return "\n".join(parts)


def _step_text(lr, steps) -> str:
    if steps is None:
        return "the given weights"
    return f"step {steps}" + (f" (s·η = {lr * steps:g})" if lr is not None else "")


def _attention_rows(view, step) -> list[dict]:
    """The agreement rows of the heads shown, each with ``tv_actual``, ``tv_predicted``
    (:func:`tv_from_uniform`) and ``step``."""
    data = view.data
    shown = data["heads"]
    rows = []
    for r in data["agreement"]:
        if shown is not None and r["label"] not in shown:
            continue
        actual = data["actual"][r["layer"]][r["head"]]
        predicted = data["predicted"][r["layer"]]
        rows.append(r | {"tv_actual": tv_from_uniform(actual),
                         "tv_predicted": tv_from_uniform(predicted), "step": step})  # fmt: skip
    return rows


def _attention_table(rows: list[dict]) -> str:
    head = ("head", "step", "TV from uniform: head", "TV from uniform: predicted",
            "rank correlation", "JS divergence", "scale c")  # fmt: skip
    body = "".join(
        f'<tr class="attention-row" data-head="{esc(r["label"])}" '
        f'data-tv-actual="{r["tv_actual"]:.6g}" data-tv-predicted="{r["tv_predicted"]:.6g}" '
        f'data-rank-correlation="{r["rank_correlation"]:.6g}"><td>{esc(r["label"])}</td>'
        f"<td>{esc(r['step'] if r['step'] is not None else '–')}</td>"
        + "".join(f'<td class="num">{num(r[c], 3)}</td>' for c in ("tv_actual", "tv_predicted"))
        + f'<td class="num">{num(r["rank_correlation"], 3)}</td>'
        f'<td class="num">{r["js_divergence"]:.3g}</td><td class="num">{r["scale"]:.4g}</td></tr>'
        for r in rows
    )
    titles = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="attention-summary"><tr>{titles}</tr>{body}</table>'


def attention(model, stats, text, tokenizer, lr, steps, heads, fragment, *,
              later=None, later_step=None) -> tuple[str, list]:  # fmt: skip
    """The attention views, a table of each shown head's distance from uniform attention and
    agreement, and the agreement rows (with ``tv_actual``, ``tv_predicted``, ``step``; empty
    without a model and a text).

    ``later``: a later checkpoint of the same run (at ``later_step``) shown instead of
    ``model``: past the theorem's small-s·η regime its prediction uses the scale ``c`` fitted
    per layer (:func:`~tl_leadterms.attention_agreement`), not the run's. ``heads=None`` shows
    every head when the model has at most :data:`ATTENTION_VIEWS`, else the best and worst
    agreeing ones (see :func:`tl_leadterms.analyses.attention.plot_attention`).
    """
    if text is None:
        return note("No text given: pass text= (and a model) for attention views."), []
    if model is None and later is None:
        return note("Attention views need a model; only the text was given."), []
    from tl_leadterms.analyses.attention import plot_attention

    shown_model = model if later is None else later
    if later is not None:
        lr_view, steps_view, step = None, None, later_step
    else:
        lr_view, steps_view, step = lr, steps, steps
    shown_view = model_view(shown_model, caller="report")
    n_heads = shown_view.n_layers * shown_view.n_heads
    if heads is None and n_heads > ATTENTION_VIEWS:
        heads = ATTENTION_VIEWS
    view = plot_attention(shown_model, stats, text, tokenizer=tokenizer, lr=lr_view,
                          steps=steps_view, heads=heads)  # fmt: skip
    n = len(view.data["tokens"])
    shown = view.data["heads"]
    which = (
        "every head"
        if shown is None
        else f"heads {', '.join(shown)}"
        + (" (the best and worst agreeing with the prediction)" if isinstance(heads, int) else "")
    )
    if later is not None:
        when = (
            "The attention of a later checkpoint of the same run, "
            f"<strong>{esc(_step_text(lr, step))}</strong>; the decomposition above is at "
            f"{esc(_step_text(lr, steps))}, where the leading terms hold. By this step the "
            "attention weights have grown enough for the patterns to be visibly non-uniform, "
            "and the theory's own scale c(s·η) no longer applies: the prediction is the "
            "leading-term scores under the scale c fitted to this checkpoint (per layer, the "
            "median of its heads' fitted c)."
        )
    else:
        when = f"The attention of the model at {esc(_step_text(lr, steps))}."
    rows = _attention_rows(view, step)
    body = (
        f'<p class="attention-step" data-step="{esc("" if step is None else step)}">{when}</p>'
        f'<p>Text: <q class="sample-text">{esc(text)}</q> (first {n} tokens; {esc(which)})</p>'
        f"<p>Distance from uniform attention: the largest total variation "
        f"½ Σ_k |p − 1/(q+1)| over the query rows; beside it each head's agreement with the "
        f"prediction.</p>{_attention_table(rows)}"
        f'<div class="view attention">{fragment(view)}</div>'
    )
    return body, rows


def atlas(atlas_html: str | None, head_atlas: Any) -> str:
    """The head atlas grid: ``atlas_html`` as given (trusted HTML), a
    :class:`~tl_leadterms.analyses.atlas.HeadAtlas` drawn by
    :func:`tl_leadterms.analyses.atlas.figure.atlas_html`, or any object with an ``.html()``
    method."""
    from tl_leadterms.analyses.atlas import HeadAtlas
    from tl_leadterms.analyses.atlas import atlas_html as draw_atlas

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
        return note(
            "No head atlas given: in Python, pass report(head_atlas=...) (or atlas_html=) for "
            "the grid; tl-leadterms demo draws one."
        )
    if not isinstance(atlas_html, str):
        raise LeadTermsError(f"atlas_html must be a string of HTML, got {atlas_html!r}")
    return f'<div class="view atlas">{atlas_html}</div>'


def _has_null(table, analysis: str, score: str) -> bool:
    return any(r["analysis"] == analysis and r["score"] == score and r["head"] is None
               and r.get("null_mean") is not None for r in table.rows)  # fmt: skip


def figures(history, sweep_table, decomposition_) -> str:
    """Training history, sweep heatmaps and, when the rows have them, scores with CI and null
    bands, as embedded PNGs."""
    from tl_leadterms.analyses.decompose import plot_scores
    from tl_leadterms.results.html import figure_html
    from tl_leadterms.sweeps import plot_sweep, plot_sweep_null
    from tl_leadterms.training import plot_history

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
            if _has_null(sweep_table, analysis, score):
                add(lambda a=analysis, s=score: plot_sweep_null(sweep_table, s, analysis=a),
                    f"sweep {analysis}: {score} — raw score, null band and excess")  # fmt: skip
    rows = decomposition_.rows if decomposition_ is not None else []
    if any("lo" in r or "null_mean" in r for r in rows):
        add(lambda: plot_scores(decomposition_), "Scores with their CI band and null band")
    elif rows:
        out.append(note("No lo/hi or null_mean/null_sd columns in the decomposition: no bands."))
    return "\n".join(out) or note("No training history or sweep table given.")
