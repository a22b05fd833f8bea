"""circuitsvis views: a model's attention next to the predicted one, and a token's neighbours."""

import html
import math
import statistics
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import tokenizer_for
from tl_leadterms.analyses.attention.fit import scale_text
from tl_leadterms.checks import (
    Layers,
    check_layers,
    check_stats,
    check_steps,
    check_vocab,
    positive_int,
)
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.findings import verdicts
from tl_leadterms.results.html import View
from tl_leadterms.results.labels import head_label, parse_head_label
from tl_leadterms.results.sections import Section, esc, step_text
from tl_leadterms.results.style import number
from tl_leadterms.results.tokens import encode_text, token_labels
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike, run_shorthands

__all__ = [
    "ATTENTION_VIEWS",
    "AttentionView",
    "agreement_section",
    "extreme_heads",
    "from_uniform",
    "plot_attention",
    "tv_from_uniform",
]


def _token_list(tokens: object, tokenizer: Any) -> list[int]:
    if isinstance(tokens, str):
        return encode_text(tokens, tokenizer, "tokens")
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


@run_shorthands
@torch.no_grad()
def plot_attention(
    model: Any,
    stats: CorpusStats,
    tokens: str | Sequence[int] | Tensor,
    *,
    layers: Layers = None,
    heads: int | Sequence[str] | None = None,
    tokenizer: Any = None,
    schedule: ScheduleLike = None,
    step: int | None = None,
) -> "AttentionView":
    """Attention heads on one sequence, next to the leading-term prediction and their agreement.

    The model runs once; its patterns also give :func:`~tl_leadterms.attention_agreement`'s
    rows (printed beside each view). The prediction is scaled by the training run when given,
    else by the scale ``c`` fitted to this sequence (the median over the layer's heads).

    Args:
        model: a HookedTransformer over the statistics' vocabulary.
        stats: corpus statistics (Q̄ and Δ).
        tokens: one sequence of token ids (``[pos]`` or ``[1, pos]``), or a string when a
            tokenizer is available (:func:`~tl_leadterms.adapters.view.tokenizer_for`);
            cut to ``stats.n_ctx`` (and the model's ``n_ctx``) positions.
        layers: which layers (default all).
        heads: ``None``: per layer one circuitsvis ``attention_heads`` view of all its heads
            (``"L{l}H{h}"``) and ``"L{l} predicted"``. A list of labels such as
            ``["L3H1", "L0H2"]``, or a number ``n`` (the ``n - n // 2`` heads that agree best
            and the ``n // 2`` that agree least, by rank correlation): one view per head, the
            head next to its layer's prediction.
        tokenizer: to encode a string and label the tokens (html-escaped, with their spaces).
        schedule: the training run of the paper model, if known (a
            :class:`~tl_leadterms.theory.Schedule` or an ``(lr, steps)`` pair).
        step: the training step of ``model``, for the captions of its report section (default:
            the schedule's ``steps``); give it for a checkpoint past the theorem's regime shown
            with a fitted scale.

    Returns:
        An :class:`AttentionView`; ``view.data`` holds ``tokens``, ``labels``, ``layers``,
        ``heads`` (the labels shown, or None), ``scale`` (per layer), ``fitted``, ``agreement``
        (rows of :func:`~tl_leadterms.attention_agreement`), ``actual`` and ``predicted`` (per
        layer, ``[heads, q, k]`` and ``[q, k]``), and what its report section says: ``text``,
        ``chosen`` (``"agreement"`` when ``heads`` was a number), ``lr``, ``steps``, ``step``.
    """
    from tl_leadterms.analyses.attention.compute import (
        attention_agreement,
        attention_scale,
        predict_attention,
    )

    stats = check_stats(stats)
    view = check_supported(model, caller="plot_attention")
    tokenizer = tokenizer_for(tokenizer, model, stats)
    check_vocab(stats, d_vocab=view.d_vocab, tokenizer=view.tokenizer)
    schedule = Schedule.of(schedule)
    fixed = attention_scale(schedule)
    ids = _token_list(tokens, tokenizer)[: min(stats.n_ctx, view.n_ctx)]
    bad = [i for i in ids if not 0 <= i < stats.d_vocab]
    if bad:
        raise LeadTermsError(f"token id {bad[0]} is outside [0, d_vocab={stats.d_vocab})")
    chosen = check_layers(layers, view.n_layers)
    wanted = _check_heads(heads, chosen, view.n_heads)
    if isinstance(wanted, list):
        chosen = sorted({int(label[1:].split("H")[0]) for label in wanted})
    batch = torch.tensor([ids])
    patterns = view.patterns(batch, chosen)
    cache = {view.hook_name("pattern", layer): p for layer, p in patterns.items()}
    agreement = attention_agreement(model, stats, batch, layers=chosen, cache=cache,
                                    schedule=schedule, progress=False).rows  # fmt: skip
    scale = {layer: (fixed, None) if fixed is not None else
             _median_scale([r for r in agreement if r["layer"] == layer])
             for layer in chosen}  # fmt: skip
    if isinstance(wanted, int):
        wanted = extreme_heads(agreement, wanted)
    how = (
        "scale c fitted to this sequence"
        if fixed is None
        else ", ".join(f"{k} = {v}" for k, v in schedule.to_dict().items() if v is not None)
    )
    labels = token_labels(ids, tokenizer)
    data = {"tokens": ids, "labels": labels, "layers": chosen, "heads": wanted,
            "fitted": fixed is None, "scale": {k: c for k, (c, _) in scale.items()},
            "agreement": agreement, "actual": {},
            "predicted": {}, "text": tokens if isinstance(tokens, str) else None,
            "chosen": "agreement" if isinstance(heads, int) else "given",
            "lr": schedule.lr, "steps": schedule.steps,
            "step": schedule.steps if step is None else check_steps(step, "step")}  # fmt: skip
    scored = {r["label"]: r for r in agreement}
    parts: list[Any] = []
    for layer in chosen:
        actual = patterns[layer][0].to(torch.float64).cpu()
        predicted = predict_attention(stats, batch, scale=scale[layer][0])[0].cpu()
        data["actual"][layer], data["predicted"][layer] = actual, predicted
        note = f"{how}; {scale_text(*scale[layer])}"
        if wanted is None:
            parts += _layer_view(layer, actual, predicted, labels, note, scored)
            continue
        for label in (h for h in wanted if h.startswith(f"L{layer}H")):
            head = int(label.split("H")[1])
            parts += _head_view(label, actual[head], predicted, labels, note, scored[label])
    return AttentionView(parts, title="Attention: model heads and leading-term prediction",
                         data=data)  # fmt: skip


def _median_scale(rows: list[dict]) -> tuple[float, str | None]:
    """A layer's one ``c``: the median of its heads' fitted scales, at the search's edge when
    the middle head(s) are all at that edge."""
    ranked = sorted(rows, key=lambda r: r["scale"])
    sides = {r["scale_at_bound"] for r in ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]}
    return statistics.median(r["scale"] for r in rows), sides.pop() if len(sides) == 1 else None


#: a model with more heads than this shows this many attention views (best and worst agreeing)
ATTENTION_VIEWS = 4


class AttentionView(View):
    """The views :func:`plot_attention` draws, with their report section: each shown head's
    distance from uniform attention beside its agreement with the prediction, and the views."""

    def summary(self) -> list[dict]:
        """The agreement rows of the heads shown, each with ``tv_actual``, ``tv_predicted``
        (:func:`tv_from_uniform`) and ``step``."""
        data, rows = self.data, []
        for r in data["agreement"]:
            if data["heads"] is not None and r["label"] not in data["heads"]:
                continue
            rows.append(r | {"tv_actual": tv_from_uniform(data["actual"][r["layer"]][r["head"]]),
                             "tv_predicted": tv_from_uniform(data["predicted"][r["layer"]]),
                             "step": data["step"]})  # fmt: skip
        return rows

    def report_section(self) -> Section:
        data, rows = self.data, self.summary()
        shown = data["heads"]
        which = "every head" if shown is None else f"heads {', '.join(shown)}" + (
            " (the best and worst agreeing with the prediction)"
            if data["chosen"] == "agreement" else "")  # fmt: skip
        step = data["step"]
        if data["fitted"] and step is not None:
            when = (
                f"The attention of a later checkpoint of the same run, <strong>step {step}"
                "</strong>. By this step the attention weights have grown enough for the patterns "
                "to be visibly non-uniform, and the theory's own scale c(s·η) no longer applies: "
                "the prediction is the leading-term scores under the scale c fitted to this "
                "checkpoint (per layer, the median of its heads' fitted c)."
            )
        else:
            when = f"The attention of the model at {esc(step_text(data['lr'], step))}."
        text = data["text"] if data["text"] is not None else " ".join(data["labels"])
        body = (
            f'<p class="attention-step" data-step="{esc("" if step is None else step)}">{when}'
            f'</p><p>Text: <q class="sample-text">{esc(text)}</q> (first '
            f"{len(data['tokens'])} tokens; {esc(which)})</p><p>Distance from uniform attention: "
            "the largest total variation ½ Σ_k |p − 1/(q+1)| over the query rows; beside it each "
            f"head's agreement with the prediction.</p>{_summary_table(rows)}"
            f'<div class="view attention">{self.fragment(library=False)}</div>'
        )
        return Section("attention", "Attention on a sample text", body, _findings(rows))


def _summary_table(rows: list[dict]) -> str:
    head = ("head", "step", "TV from uniform: head", "TV from uniform: predicted",
            "rank correlation", "JS divergence", "scale c")  # fmt: skip
    body = "".join(
        f'<tr class="attention-row" data-head="{esc(r["label"])}" '
        f'data-tv-actual="{r["tv_actual"]:.6g}" data-tv-predicted="{r["tv_predicted"]:.6g}" '
        f'data-rank-correlation="{r["rank_correlation"]:.6g}"><td>{esc(r["label"])}</td>'
        f"<td>{esc(r['step'] if r['step'] is not None else '–')}</td>"
        + "".join(
            f'<td class="num">{number(r[c])}</td>'
            for c in ("tv_actual", "tv_predicted", "rank_correlation", "js_divergence")
        )
        + f"<td>{esc(scale_text(r['scale'], r['scale_at_bound']))}</td></tr>"
        for r in rows
    )
    titles = "".join(f"<th>{esc(h)}</th>" for h in head)
    return f'<table class="attention-summary"><tr>{titles}</tr>{body}</table>'


def _findings(agreement: list[dict]) -> tuple[str, ...]:
    """The best and least agreeing heads and, with ``tv_actual``, how far from uniform."""
    rows = sorted((r for r in agreement if math.isfinite(r["rank_correlation"])),
                  key=lambda r: r["rank_correlation"])  # fmt: skip
    if not rows:
        return ()
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
    return (esc(text),)


def agreement_section(table: Any) -> Section:
    """The report section of an :class:`~tl_leadterms.attention_agreement` table: the best and
    least agreeing heads and, with a null, its rows' verdicts."""
    tested = [r for r in table.rows if r.get("verdict")]
    said = (esc(verdicts(tested, table.metadata["null"]["permutations"])),) if tested else ()
    return Section("attention", "Attention agreement", table._repr_html_(),
                   _findings(table.rows) + said)  # fmt: skip


def _check_heads(heads: object, layers: list[int], n_heads: int) -> int | list[str] | None:
    if heads is None:
        return None
    if isinstance(heads, int) and not isinstance(heads, bool):
        return positive_int("heads", heads)
    if isinstance(heads, str):
        heads = [heads]
    if not isinstance(heads, (list, tuple)) or not heads:
        raise LeadTermsError(
            f"heads must be None, a number of heads or labels such as ['L0H1'], got {heads!r}"
        )
    out = []
    for label in heads:
        parsed = parse_head_label(label)
        if parsed is None or parsed[0] not in layers or parsed[1] >= n_heads:
            raise LeadTermsError(
                f"head {label!r} is not 'L<layer>H<head>' with layer in {layers} and head < "
                f"{n_heads}; e.g. heads=['L{layers[0]}H0']"
            )
        out.append(head_label(*parsed))
    return list(dict.fromkeys(out))


def extreme_heads(agreement: list[dict], n: int) -> list[str]:
    """The ``n - n // 2`` heads with the highest and the ``n // 2`` with the lowest rank
    correlation (NaN counts as lowest), in layer order.

    >>> rows = [{"label": f"L0H{h}", "rank_correlation": r} for h, r in enumerate([.1, .9, .5])]
    >>> extreme_heads(rows, 2)
    ['L0H0', 'L0H1']
    """
    key = [(r["rank_correlation"] if r["rank_correlation"] == r["rank_correlation"] else -2.0,
            i) for i, r in enumerate(agreement)]  # fmt: skip
    order = [i for _, i in sorted(key, reverse=True)]
    top = order[: n - n // 2]
    low = [i for i in reversed(order) if i not in top][: n // 2]
    return [agreement[i]["label"] for i in sorted(top + low)]


def from_uniform(pattern: Tensor) -> float:
    """The largest ``|p − 1/(q+1)|`` of causal attention ``[..., q, k]``: how far it is from
    attending uniformly to every earlier position (0 for uniform attention).

    >>> from_uniform(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
    0.0
    """
    return float((pattern.to(torch.float64) - _uniform(pattern.shape[-1])).abs().max())


def tv_from_uniform(pattern: Tensor) -> float:
    """The largest total-variation distance from uniform causal attention over the query rows
    of ``pattern`` (``[..., q, k]``): ``max_q ½ Σ_k |p_qk − 1/(q+1)|`` (0 for uniform
    attention, at most ``1 − 1/(q+1)``).

    >>> import torch
    >>> tv_from_uniform(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
    0.5
    """
    uniform = _uniform(pattern.shape[-1])
    return float(0.5 * (pattern.to(torch.float64).cpu() - uniform).abs().sum(-1).max())


def _uniform(n: int) -> Tensor:
    """Uniform causal attention ``[n, n]`` in float64."""
    uniform = torch.tril(torch.ones(n, n, dtype=torch.float64))
    return uniform / uniform.sum(-1, keepdim=True)


def _agreement_text(row: dict) -> str:
    return (
        f"rank correlation {row['rank_correlation']:.3f}, JS divergence {row['js_divergence']:.3g}"
    )


def _head_view(label: str, actual: Tensor, predicted: Tensor, labels: list[str], how: str,
               row: dict):  # fmt: skip
    """A caption with the head's agreement and one view: the head, then its layer's prediction."""
    layer = label[1:].split("H")[0]
    caption = (
        f'<p class="agreement" data-head="{label}"><strong>{label}</strong>: '
        f"{_agreement_text(row)} with <strong>L{layer} predicted</strong> "
        f"(the leading terms, {html.escape(how)}). Largest distance from uniform attention: "
        f"{from_uniform(actual):.2g} (head), {from_uniform(predicted):.2g} (predicted).</p>"
    )
    both = torch.stack([actual, predicted.to(actual)])
    return [caption, _view(both, labels, [label, f"L{layer} predicted"])]


def _layer_view(layer: int, actual: Tensor, predicted: Tensor, labels: list[str], how: str,
                scored: dict):  # fmt: skip
    """A caption with each head's agreement and one view: the layer's heads, then the prediction."""
    heads = [head_label(layer, h) for h in range(actual.shape[0])]
    agree = "; ".join(f"{h}: {_agreement_text(scored[h])}" for h in heads)
    caption = (
        f'<p class="agreement" data-layer="{layer}">Layer {layer}: heads {", ".join(heads)} and '
        f"<strong>L{layer} predicted</strong> (the leading terms, {html.escape(how)}). "
        f"Agreement with the prediction: {agree}. Largest distance from uniform attention: "
        f"{from_uniform(actual):.2g} (heads), {from_uniform(predicted):.2g} (predicted).</p>"
    )
    both = torch.cat([actual, predicted[None].to(actual)], dim=0)
    return [caption, _view(both, labels, [*heads, f"L{layer} predicted"])]


def _view(attention: Tensor, labels: list[str], names: list[str]):
    """circuitsvis' ``attention_heads`` view of ``[heads, q, k]`` patterns (5 decimals)."""
    import circuitsvis.attention

    return circuitsvis.attention.attention_heads(
        attention=_rounded(attention),
        tokens=labels,
        attention_head_names=names,
        mask_upper_tri=True,
    )
