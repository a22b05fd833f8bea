"""circuitsvis views: a model's attention next to the predicted one, and a token's neighbours."""

import html
import statistics
from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import Tensor

from tl_leadterms.checks import Layers, check_layers, check_stats, check_vocab, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.plot.html import View
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule

__all__ = ["plot_associations", "plot_attention"]

# plot_associations: the three statistics of the paper's Figure 5, by the names the user passes
ASSOCIATIONS = {"bigram": "B_bar", "interchangeability": "Sigma_B", "context": "Phi_bar"}
_ALIASES = {v: k for k, v in ASSOCIATIONS.items()}
_HEADINGS = {
    "bigram": "bigram B̄ (next tokens)",
    "interchangeability": "interchangeable Σ_B̄",
    "context": "context Φ̄ (preceding tokens)",
}


def _label(tokenizer: Any, token_id: int) -> str:
    """The token's string, html-escaped (its id when there is no tokenizer)."""
    text = tokenizer.decode([token_id]) if tokenizer is not None else str(token_id)
    return html.escape(text, quote=False)  # quotes stay readable: labels are never attributes


def _encode(text: str, tokenizer: Any, what: str) -> list[int]:
    if tokenizer is None:
        raise LeadTermsError(
            f"{what} is a string ({text[:40]!r}); pass tokenizer= (or attach one to the model or "
            "as stats.tokenizer), or pass token ids"
        )
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if not ids:
        raise LeadTermsError(f"{what} {text!r} encodes to no tokens; pass some text")
    return [int(i) for i in ids]


def _token_list(tokens: object, tokenizer: Any) -> list[int]:
    if isinstance(tokens, str):
        return _encode(tokens, tokenizer, "tokens")
    try:
        t = torch.as_tensor(tokens)
    except (TypeError, ValueError, RuntimeError) as err:
        raise LeadTermsError(
            "tokens must be a 1-D list/tensor of token ids or a string, got "
            f"{type(tokens).__name__}"
        ) from err
    if t.dim() == 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 1 or t.is_floating_point() or t.dtype == torch.bool or t.numel() == 0:
        raise LeadTermsError(
            f"tokens must be one non-empty sequence of integer token ids ([pos] or [1, pos]), got "
            f"shape {tuple(t.shape)} and dtype {t.dtype}"
        )
    return [int(i) for i in t.tolist()]


def _rounded(x: Tensor) -> list:
    """Nested lists with 5 decimals: the page stays small, the picture does not change."""
    return torch.round(x.detach().to(torch.float64).cpu(), decimals=5).tolist()


def _pick_tokenizer(*candidates: Any) -> Any:
    return next((t for t in candidates if t is not None), None)


@torch.no_grad()
def plot_attention(
    model: Any,
    stats: CorpusStats,
    tokens: str | Sequence[int] | Tensor,
    *,
    layers: Layers = None,
    tokenizer: Any = None,
    lr: float | None = None,
    steps: int | None = None,
    s_lr: float | None = None,
) -> View:
    """Each layer's attention heads on one sequence, next to the leading-term prediction.

    The model runs once (``run_with_cache`` on ``hook_pattern``); the same cache serves the
    scale fit. Per layer, one circuitsvis ``attention_heads`` view holds the model's heads
    (``"L{l}H{h}"``) and the predicted pattern (``"L{l} predicted"``) of
    :func:`~tl_leadterms.predict_attention`: scaled by the training run when given (``lr`` and
    ``steps``, or ``s_lr``), else by the scale ``c`` :func:`~tl_leadterms.attention_agreement`
    fits to this sequence (the median over the layer's heads).

    Args:
        model: a HookedTransformer over the statistics' vocabulary.
        stats: corpus statistics (Q̄ and Δ).
        tokens: one sequence of token ids (``[pos]`` or ``[1, pos]``), or a string when a
            tokenizer is available (``tokenizer``, ``model.tokenizer`` or ``stats.tokenizer``);
            cut to ``stats.n_ctx`` (and the model's ``n_ctx``) positions.
        layers: which layers (default all).
        tokenizer: to encode a string and label the tokens (labels are html-escaped).
        lr, steps, s_lr: the training run of the paper model, if known.

    Returns:
        A :class:`View`; ``view.data`` holds ``tokens``, ``layers``, ``scale`` (per layer),
        ``fitted``, ``actual`` and ``predicted`` (per layer, ``[heads, q, k]`` and ``[q, k]``).
    """
    from transformer_lens.utilities import get_act_name

    from tl_leadterms.analyzers.attention import (
        attention_agreement,
        attention_scale,
        predict_attention,
    )

    stats = check_stats(stats)
    cfg = getattr(model, "cfg", None)
    if cfg is None or not hasattr(model, "run_with_cache"):
        raise LeadTermsError(
            f"model must be a HookedTransformer (with .cfg and run_with_cache), got "
            f"{type(model).__name__}"
        )
    tokenizer = _pick_tokenizer(tokenizer, getattr(model, "tokenizer", None), stats.tokenizer)
    check_vocab(stats, d_vocab=cfg.d_vocab, tokenizer=getattr(model, "tokenizer", None))
    schedule = Schedule.of(lr, steps, s_lr)
    fixed = attention_scale(lr, steps, s_lr, None)
    ids = _token_list(tokens, tokenizer)[: min(stats.n_ctx, cfg.n_ctx)]
    bad = [i for i in ids if not 0 <= i < stats.d_vocab]
    if bad:
        raise LeadTermsError(f"token id {bad[0]} is outside [0, d_vocab={stats.d_vocab})")
    chosen = check_layers(layers, cfg.n_layers)
    batch = torch.tensor([ids])
    names = {get_act_name("pattern", layer) for layer in chosen}
    device = next(model.parameters()).device
    _, cache = model.run_with_cache(batch.to(device), names_filter=lambda n: n in names)
    if fixed is not None:
        scale = dict.fromkeys(chosen, fixed)
    else:
        agreement = attention_agreement(
            model, stats, batch, layers=chosen, cache=cache, progress=False
        )
        scale = {
            layer: statistics.median(r["scale"] for r in agreement.rows if r["layer"] == layer)
            for layer in chosen
        }
    how = (
        "scale c fitted to this sequence"
        if fixed is None
        else ", ".join(f"{k} = {v}" for k, v in schedule.to_dict().items() if v is not None)
    )
    labels = [_label(tokenizer, i) for i in ids]
    data = {"tokens": ids, "labels": labels, "layers": chosen, "fitted": fixed is None,
            "scale": scale, "actual": {}, "predicted": {}}  # fmt: skip
    parts: list[Any] = []
    for layer in chosen:
        actual = cache[get_act_name("pattern", layer)][0].to(torch.float64).cpu()
        predicted = predict_attention(stats, batch, scale=scale[layer])[0].cpu()
        data["actual"][layer], data["predicted"][layer] = actual, predicted
        parts += _layer_view(layer, actual, predicted, labels, f"{how}; c = {scale[layer]:.4g}")
    return View(parts, title="Attention: model heads and leading-term prediction", data=data)


def _layer_view(layer: int, actual: Tensor, predicted: Tensor, labels: list[str], how: str):
    """A caption and one circuitsvis view: the layer's heads, then the prediction."""
    import circuitsvis.attention

    heads = [f"L{layer}H{h}" for h in range(actual.shape[0])]
    caption = (
        f"<p>Layer {layer}: heads {', '.join(heads)} and <strong>L{layer} predicted</strong> "
        f"(the leading terms, {html.escape(how)}).</p>"
    )
    view = circuitsvis.attention.attention_heads(
        attention=_rounded(torch.cat([actual, predicted[None].to(actual)], dim=0)),
        tokens=labels,
        attention_head_names=[*heads, f"L{layer} predicted"],
        mask_upper_tri=True,
    )
    return [caption, view]


def _kind(kind: object) -> str:
    name = _ALIASES.get(kind, kind) if isinstance(kind, str) else kind
    if name not in ASSOCIATIONS:
        raise LeadTermsError(
            f"unknown kind {kind!r}; choose one of {sorted(ASSOCIATIONS)} (or {sorted(_ALIASES)})"
        )
    return name


def _token_id(token: object, tokenizer: Any) -> int:
    if isinstance(token, str):
        ids = _encode(token, tokenizer, "token")
        if len(ids) != 1:
            raise LeadTermsError(
                f"{token!r} is {len(ids)} tokens ({ids}) for this tokenizer; pass one token or "
                "its id"
            )
        return ids[0]
    if isinstance(token, Tensor) and token.numel() == 1 and not token.is_floating_point():
        token = token.item()
    if isinstance(token, bool) or not isinstance(token, int):
        raise LeadTermsError(f"token must be a token id or a string, got {token!r}")
    return token


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
) -> View:
    """A token's top-``k`` bigram, interchangeable and context neighbours (paper Fig. 5).

    Args:
        stats: corpus statistics.
        token: a token id, or a string (one token) with a tokenizer.
        tokenizer: encodes strings and labels tokens; defaults to ``stats.tokenizer``.
        k: neighbours per statistic.
        text: optional text (needs a tokenizer) shown as circuitsvis ``colored_tokens``, each
            token shaded by its association with ``token`` under ``kind``: the value of row
            ``token`` of that statistic at the text token (0 outside the kept vocabulary).
        kind: ``"bigram"``, ``"interchangeability"`` or ``"context"`` (or ``"B_bar"``,
            ``"Sigma_B"``, ``"Phi_bar"``).

    Returns:
        A :class:`View`; ``view.data`` holds ``token_id``, ``neighbours`` (per kind, the
        :meth:`CorpusStats.top` list) and, with ``text``, ``kind``, ``text_tokens`` and
        ``values``.
    """
    stats = check_stats(stats)
    tokenizer = tokenizer if tokenizer is not None else stats.tokenizer
    kind = _kind(kind)
    positive_int("k", k)
    if text is not None and not isinstance(text, str):
        raise LeadTermsError(f"text must be a str or None, got {type(text).__name__}")
    token_id = _token_id(token, tokenizer)
    row_index = stats.vocab.position(token_id)  # clear error when out of range or not kept
    name = _label(tokenizer, token_id)
    neighbours = {kd: stats.top(ASSOCIATIONS[kd], token_id, k, tokenizer) for kd in ASSOCIATIONS}
    head = "".join(f"<th>{html.escape(_HEADINGS[kd])}</th>" for kd in ASSOCIATIONS)
    rows = []
    for i in range(max(len(v) for v in neighbours.values())):
        cells = []
        for kd in ASSOCIATIONS:
            if i < len(neighbours[kd]):
                n = neighbours[kd][i]
                cells.append(
                    f"<td>{_label(tokenizer, n.token_id)} <small>{n.score:.3g}</small></td>"
                )
            else:
                cells.append("<td></td>")
        rows.append(f'<tr class="association-row"><td>{i + 1}</td>{"".join(cells)}</tr>')
    table = (
        '<table class="associations" style="border-collapse: collapse;">'
        f"<caption>top {k} neighbours of <strong>{name}</strong> (id {token_id})</caption>"
        f"<tr><th>#</th>{head}</tr>{''.join(rows)}</table>"
    )
    parts: list[Any] = [table]
    data: dict[str, Any] = {"token_id": token_id, "neighbours": neighbours}
    if text is not None:
        import circuitsvis.tokens

        ids = _encode(text, tokenizer, "text")
        row = stats.row(ASSOCIATIONS[kind], row_index).to(torch.float64).cpu()
        index_map = stats.vocab.index_map()
        values = []
        for i in ids:
            if not 0 <= i < stats.d_vocab:
                raise LeadTermsError(
                    f"text token id {i} is outside the statistics' d_vocab={stats.d_vocab}; use "
                    "the tokenizer the statistics were computed with"
                )
            j = i if index_map is None else int(index_map[i])
            values.append(float(row[j]) if j < stats.k else 0.0)
        labels = [_label(tokenizer, i) for i in ids]
        parts.append(
            f"<p>The text's tokens shaded by their {html.escape(_HEADINGS[kind])} association "
            f"with <strong>{name}</strong>.</p>"
        )
        parts.append(circuitsvis.tokens.colored_tokens(tokens=labels, values=values))
        data.update(kind=kind, text_tokens=ids, labels=labels, values=values)
    return View(parts, title=f"Associations of {html.unescape(name)}", data=data)
