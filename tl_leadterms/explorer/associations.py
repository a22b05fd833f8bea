"""``plot_associations``: a word's association lists beside the text shaded by them;
:func:`associations`: several words' at once, as one result that renders in a notebook and in a
report."""

import html
from typing import Any, Literal

import torch

from tl_leadterms.checks import check_stats, positive_int
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.results.html import View
from tl_leadterms.results.sections import Section, esc, note
from tl_leadterms.results.tokens import encode_text, shaded_tokens, token_label, token_labels
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.neighbours import SCORINGS, scored_row
from tl_leadterms.stats.scoring import DEFAULT_EXCLUDE, DEFAULT_SCORING

__all__ = ["ASSOCIATIONS", "HEADINGS", "Associations", "associations", "plot_associations"]

# the three statistics of the paper's Figure 5, by the names the user passes
ASSOCIATIONS = {"bigram": "B_bar", "interchangeability": "Sigma_B", "context": "Phi_bar"}
_ALIASES = {v: k for k, v in ASSOCIATIONS.items()}
HEADINGS = {
    "bigram": "bigram B̄ (next tokens)",
    "interchangeability": "interchangeable Σ_B̄",
    "context": "context Φ̄ (preceding tokens)",
}


def _kind(kind: object) -> str:
    name = _ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    if name not in ASSOCIATIONS:
        raise LeadTermsError(
            f"unknown kind {kind!r}; choose one of {sorted(ASSOCIATIONS)} (or {sorted(_ALIASES)})"
        )
    return name


def plot_associations(
    stats: CorpusStats,
    token: int | str,
    tokenizer: Any = None,
    *,
    k: int = 10,
    text: str | None = None,
    kind: Literal[
        "bigram", "interchangeability", "context", "B_bar", "Sigma_B", "Phi_bar"
    ] = "context",
    scoring: str = DEFAULT_SCORING,
    exclude: Any = DEFAULT_EXCLUDE,
) -> View:
    """A token's top-``k`` bigram, interchangeable and context neighbours (paper Fig. 5).

    Args:
        stats: corpus statistics.
        token: a token id, or a string (one token) with a tokenizer.
        tokenizer: encodes strings and labels tokens; defaults to ``stats.tokenizer``.
        k: neighbours per statistic.
        text: optional text (needs a tokenizer) shown as shaded tokens (plain HTML), each
            token shaded by its association with ``token`` under ``kind``: the value of row
            ``token`` of that statistic at the text token (0 outside the kept vocabulary), on a
            diverging scale centred at 0 whose full colour is the largest ``|value|`` of that
            row (see :mod:`tl_leadterms.results.tokens`); tokens are shown with their spaces.
        kind: ``"bigram"``, ``"interchangeability"`` or ``"context"`` (or ``"B_bar"``,
            ``"Sigma_B"``, ``"Phi_bar"``).
        scoring: how neighbours are ranked and the text shaded: ``"cosine"`` (default, as
            :meth:`CorpusStats.top`), ``"ppmi"`` or ``"raw"`` (the paper's values;
            :mod:`tl_leadterms.stats.neighbours`).
        exclude: token ids left out of the lists, or ``"special"`` (default: the tokenizer's
            special tokens), as in :meth:`CorpusStats.top`.

    Returns:
        A :class:`View`; ``view.data`` holds ``token_id``, ``neighbours`` (per kind, the
        :meth:`CorpusStats.top` list), ``scoring`` and, with ``text``, ``kind``, ``text_tokens``,
        ``labels``, ``values`` and ``scale``.
    """
    stats = check_stats(stats)
    tokenizer = tokenizer if tokenizer is not None else stats.tokenizer
    kind = _kind(kind)
    positive_int("k", k)
    if text is not None and not isinstance(text, str):
        raise LeadTermsError(f"text must be a str or None, got {type(text).__name__}")
    token_id = stats.token_id_of(token, tokenizer)
    row_index = stats.vocab.position(token_id)  # clear error when out of range or not kept
    name = token_label(tokenizer, token_id)
    check_choice("scoring", scoring, SCORINGS)
    neighbours = {
        kd: stats.top(
            ASSOCIATIONS[kd], token_id, n=k, tokenizer=tokenizer, scoring=scoring, exclude=exclude
        )
        for kd in ASSOCIATIONS
    }
    head = "".join(f"<th>{html.escape(HEADINGS[kd])}</th>" for kd in ASSOCIATIONS)
    rows = []
    for i in range(max(len(v) for v in neighbours.values())):
        cells = "".join(
            f"<td>{token_label(tokenizer, v[i].token_id)} <small>{v[i].score:.3g}</small></td>"
            if i < len(v)
            else "<td></td>"
            for v in neighbours.values()
        )
        rows.append(f'<tr class="association-row"><td>{i + 1}</td>{cells}</tr>')
    table = (
        '<table class="associations" style="border-collapse: collapse;">'
        f"<caption>top {k} neighbours of <strong>{name}</strong> (id {token_id}; "
        f"{scoring} scoring)</caption>"
        f"<tr><th>#</th>{head}</tr>{''.join(rows)}</table>"
    )
    parts: list[Any] = [table]
    data: dict[str, Any] = {"token_id": token_id, "neighbours": neighbours, "scoring": scoring}
    if text is not None:
        ids = encode_text(text, tokenizer, "text")
        key = ASSOCIATIONS[kind]
        if scoring == "raw":
            full = stats.row(key, row_index)
        else:
            full = scored_row(
                stats.matrix(key), row_index, scoring, symmetric_gram=key == "Sigma_B"
            )
        full = full.to(torch.float64).cpu()
        index_map = stats.vocab.index_map()
        values = []
        for i in ids:
            if not 0 <= i < stats.d_vocab:
                raise LeadTermsError(
                    f"text token id {i} is outside the statistics' d_vocab={stats.d_vocab}; use "
                    "the tokenizer the statistics were computed with"
                )
            j = i if index_map is None else int(index_map[i])
            values.append(float(full[j]) if j < stats.k else 0.0)
        labels = token_labels(ids, tokenizer)
        scale = float(full.abs().max()) if full.numel() else 0.0
        parts.append(
            f"<p>The text's tokens shaded by their {html.escape(HEADINGS[kind])} association "
            f"with <strong>{name}</strong> ({scoring} scoring; full colour: the largest |value| "
            "of its row).</p>"
        )
        parts.append(shaded_tokens(labels, values, scale=scale))
        data.update(kind=kind, text_tokens=ids, labels=labels, values=values, scale=scale)
    return View(parts, title=f"Associations of {html.unescape(name)}", data=data)


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


def word_pairs(words: object) -> list[tuple[str, Any]]:
    """``words`` (a word, a list, or a dict kind -> words) as ``(kind, word)`` pairs; a list
    is read as context."""
    if isinstance(words, str):
        words = [words]
    if isinstance(words, dict):
        if any(k not in ASSOCIATIONS for k in words) or not all(
            isinstance(v, (list, tuple)) for v in words.values()
        ):
            raise LeadTermsError(
                f"words must map kinds {tuple(ASSOCIATIONS)} to lists of words, got {words!r}; "
                "e.g. words={'bigram': ['red'], 'context': ['fish']}"
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
        f"{esc(', '.join(SCORINGS))}; pass associations(..., scoring=...) to change it; "
        "formulas in tl_leadterms.stats.neighbours.)</p>"
    )


class Associations:
    """Several words' association lists beside a text shaded by them (:func:`associations`):
    renders in a notebook, and as the association section of a report.

    Attributes:
        views: ``(kind, word, View or None, error or None)`` per word, in order.
        caption: the HTML sentence naming the scoring.
    """

    def __init__(self, views: list[tuple[str, Any, Any, str | None]], caption: str) -> None:
        self.views, self.caption = views, caption

    def _repr_html_(self) -> str:
        parts = [self.caption]
        for kind, word, view, error in self.views:
            if view is None:
                parts.append(note(f"{word!r}: {error}"))
            else:
                attrs = f'data-word="{esc(word)}" data-kind="{esc(kind)}"'
                inner = view.fragment(library=False)
                parts.append(f'<div class="view association" {attrs}>{inner}</div>')
        return "\n".join(parts)

    def report_section(self) -> Section:
        return Section("associations", "Association lists", self._repr_html_())


def associations(
    stats: CorpusStats,
    words: object,
    *,
    text: str | None = None,
    tokenizer: Any = None,
    scoring: str = DEFAULT_SCORING,
    exclude_special: bool = True,
) -> Associations:
    """Each word's neighbours under ``scoring`` (:func:`plot_associations` per word), and
    ``text`` shaded by its association with the word; a caption names the scoring.

    Args:
        stats: corpus statistics.
        words: a word, a list of words (context associations), or a dict kind -> words
            (``{"bigram": ["red"], "context": ["fish"]}``); a word that never occurred gets a
            note instead of its lists.
        text: a text shaded by each word's association (needs a tokenizer).
        tokenizer: encodes words and text; default ``stats.tokenizer``.
        scoring: ``"cosine"`` (default, as :meth:`CorpusStats.top`), ``"ppmi"`` or ``"raw"``.
        exclude_special: leave the tokenizer's special tokens out of the lists.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats
        >>> stats = corpus_stats(torch.randint(0, 12, (16, 9)), d_vocab=12, progress=False)
        >>> [w for _, w, *_ in associations(stats, [3, 5]).views]
        [3, 5]
    """
    stats = check_stats(stats)
    tokenizer = tokenizer if tokenizer is not None else stats.tokenizer
    pairs = word_pairs(words)
    check_choice("associations", scoring, SCORINGS)
    exclude, excluded = _special_tokens(tokenizer) if exclude_special else ([], [])
    views = []
    for kind, word in pairs:
        try:  # a word that never occurred gets a note, not a list of empty tables
            stats.check_occurred(stats.vocab.position(stats.token_id_of(word, tokenizer)), word)
            view = plot_associations(stats, word, tokenizer, kind=kind, text=text,
                                     scoring=scoring, exclude=exclude or None)  # fmt: skip
            views.append((kind, word, view, None))
        except LeadTermsError as err:
            views.append((kind, word, None, str(err)))
    return Associations(views, scoring_caption(scoring, excluded))


def _special_tokens(tokenizer: Any) -> tuple[list[int], list[str]]:
    ids = [int(i) for i in getattr(tokenizer, "all_special_ids", None) or []]
    names = [str(t) for t in getattr(tokenizer, "all_special_tokens", None) or []]
    return ids, names if len(names) == len(ids) else [str(i) for i in ids]
