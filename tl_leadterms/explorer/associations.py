"""``plot_associations``: a word's association lists beside the text shaded by them."""

import html
from typing import Any, Literal

import torch

from tl_leadterms.checks import check_stats, positive_int
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.results.html import View
from tl_leadterms.results.tokens import encode_text, shaded_tokens, token_label, token_labels
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.neighbours import SCORINGS, scored_row
from tl_leadterms.stats.scoring import DEFAULT_EXCLUDE, DEFAULT_SCORING

__all__ = ["ASSOCIATIONS", "HEADINGS", "plot_associations"]

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
        cells = []
        for kd in ASSOCIATIONS:
            if i < len(neighbours[kd]):
                n = neighbours[kd][i]
                cells.append(
                    f"<td>{token_label(tokenizer, n.token_id)} <small>{n.score:.3g}</small></td>"
                )
            else:
                cells.append("<td></td>")
        rows.append(f'<tr class="association-row"><td>{i + 1}</td>{"".join(cells)}</tr>')
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
        full = (
            (
                stats.row(key, row_index)
                if scoring == "raw"
                else scored_row(
                    stats.matrix(key), row_index, scoring, symmetric_gram=key == "Sigma_B"
                )
            )
            .to(torch.float64)
            .cpu()
        )
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
