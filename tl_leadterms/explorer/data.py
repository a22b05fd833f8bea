"""The numbers behind :func:`~tl_leadterms.explorer.build.explore`, as plain JSON-ready data.

Everything the page shows is computed here once, in Python, and embedded in the page; the
browser only draws. Per head (``"L{l}H{h}"``): the decomposition rows of its query-key map
``W`` and its value path (cosine with the leading term, explained ``R²``, Shapley shares per
component and family, interval, null), its attention on the text and the predicted attention
at its fitted scale, TransformerLens's detector scores, the token pairs its ``W`` scores
highest next to the pairs ``Q̄`` scores highest, and its value map's top input → output pairs
next to the value leading term's. Token pairs are ranked among the ``pair_tokens`` most
frequent kept tokens (a ``[pair_tokens, pair_tokens]`` block of each map, so a 50k vocabulary
costs no ``[k, k]`` product per head). For the word box, every kept token's bigram,
interchangeability and context lists and the text's tokens scored by the same rows
(:func:`neighbour_table`).
"""

import math
from typing import Any

import torch
from torch import Tensor
from transformer_lens import FactoredMatrix
from transformer_lens.utilities import get_act_name

from tl_leadterms.adapters import factored
from tl_leadterms.analyses.atlas import DETECTORS, detector_scores
from tl_leadterms.analyses.attention import attention_agreement, predicted_scores, scale_text
from tl_leadterms.analyses.decompose import leading_map
from tl_leadterms.explorer.associations import ASSOCIATIONS, HEADINGS
from tl_leadterms.progress import progress_bar
from tl_leadterms.results.labels import head_label
from tl_leadterms.stats.neighbours import best, fed_scorer, row_blocks
from tl_leadterms.stats.scoring import DEFAULT_SCORING, MEANINGS

__all__ = ["GRID_SCORES", "attention_data", "head_summaries", "neighbour_table", "pair_tables"]

#: the per-head scores the grid can be coloured by: key -> (row, column, label)
GRID_SCORES = {
    "cosine": ("W", "cosine", "cos(W, Q̄)"),
    "explained": ("W", "explained", "explained R² of W"),
    "z": ("W", "z", "null z of cos(W, Q̄)"),
    "value_cosine": ("V", "cosine", "cos(value path, its leading term)"),
    "rank_correlation": (None, "rank_correlation", "rank corr. with predicted attention"),
}


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, tensors and dictionaries are converted recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Tensor):
        return _clean(value.tolist())
    return value


def head_summaries(decomposition: Any, agreement: Any, detectors: dict | None) -> dict:
    """Per head label: ``W`` and ``V`` decomposition rows, agreement, detectors, grid scores."""
    out: dict[str, dict[str, Any]] = {}
    for r in decomposition.rows:
        if r["layer"] is None or r["head"] is None:
            continue
        key = "W" if r["weight"] == "W" else "V"
        label = head_label(r["layer"], r["head"])
        head = out.setdefault(label, {"label": label, "layer": r["layer"], "head": r["head"]})
        head[key] = _clean(dict(r))
    for r in agreement.rows if agreement is not None else []:
        head = out.get(r["label"].split("/")[0])
        if head is not None:
            head["agreement"] = _clean(dict(r))
    for head in out.values():
        at = (head["layer"], head["head"])
        head["detectors"] = (
            {name: _clean(float(detectors[name][at])) for name in DETECTORS} if detectors else {}
        )
        scores = {}
        for name, (row, column, _) in GRID_SCORES.items():
            source = head.get(row, {}) if row else head.get("agreement", {})
            scores[name] = source.get(column)
        scores["character"] = head.get("W", {}).get("character", "")
        head["scores"] = scores
    return out


@torch.no_grad()
def attention_data(model: Any, stats: Any, ids: list[int], fixed: float | None, *,
                   progress: bool = False, schedule: Any = None) -> dict:  # fmt: skip
    """The model's attention on ``ids`` per head (lower triangle, per mille) and what the
    prediction needs: the raw scores ``X Q̄ Xᵀ + DM(Δ)`` (lower triangle) and each head's scale
    ``c`` (the training run's, else fitted to this text); the page applies ``S(Mask(c·s))``."""
    batch = torch.tensor([ids])
    layers = list(range(model.cfg.n_layers))
    names = {get_act_name("pattern", layer) for layer in layers}
    device = next(model.parameters()).device
    _, cache = model.run_with_cache(batch.to(device), names_filter=lambda n: n in names)
    agreement = attention_agreement(model, stats, batch, cache=cache, progress=progress,
                                    schedule=schedule)  # fmt: skip
    scores = predicted_scores(stats, batch)[0].to(torch.float64).cpu()
    scale = {r["label"].split("/")[0]: (r["scale"], r["scale_at_bound"]) for r in agreement.rows}
    heads = {}
    for layer in layers:
        pattern = cache[get_act_name("pattern", layer)][0].to(torch.float64).cpu()
        for h in range(pattern.shape[0]):
            label = head_label(layer, h)
            c, edge = (fixed, None) if fixed is not None else scale.get(label, (0.0, None))
            heads[label] = {"actual": _lower(torch.round(pattern[h] * 1000).long()),
                            "scale": _clean(float(c)),
                            "scale_text": scale_text(c, edge)}  # fmt: skip
    rows = [[float(f"{v:.6g}") for v in row] for row in _lower(scores)]
    return {"heads": heads, "scores": rows, "agreement": agreement,
            "detectors": detector_scores(model, batch)}  # fmt: skip


def _lower(x: Tensor) -> list[list]:
    """Row ``q`` of a causal ``[q, k]`` map up to the diagonal (keys ``0..q``)."""
    return [x[q, : q + 1].tolist() for q in range(x.shape[0])]


def _candidates(stats: Any, n: int) -> tuple[Tensor, Tensor]:
    """Matrix positions and token ids of the ``n`` most frequent kept tokens."""
    counts = stats.unigram.to(torch.float64).cpu()
    positions = counts.topk(min(n, counts.numel())).indices.sort().values
    ids = positions if stats.kept is None else stats.kept.cpu()[positions]
    return positions, ids


def _blocks(
    pw: Any, weight: str, layer: int, ids: Tensor, gemm_dtype: torch.dtype = torch.float64
) -> Tensor:
    """``[h, c, c]`` (float64): every head's ``W`` or value map of ``layer`` among ``ids``.

    A model with embeddings has per-head maps ``L·A_h·B_h·R`` with shared outer factors
    (:meth:`~tl_leadterms.adapters.PaperWeights.sandwich`): only the ``c`` rows of ``L`` and
    columns of ``R`` are read, ``O(c·d_model·(d_head + c))`` per head, never the
    ``[d_vocab, d_head]`` factors of the whole vocabulary. These three products are the pair
    tables' only ``O(c²·r)`` work; ``gemm_dtype`` is the dtype they run in (the result is
    returned in float64 either way).
    """
    s = pw.sandwich(weight, layer)
    if s is not None:
        s = s.restrict(ids, ids)
        left = s.left.detach().to(gemm_dtype) @ s.A.detach().to(gemm_dtype)  # [h, c, r]
        right = s.B.detach().to(gemm_dtype) @ s.right.detach().to(gemm_dtype)  # [h, r, c]
        return (left @ right).to(torch.float64).cpu()
    block = factored.restrict((pw.W if weight == "W" else pw.V)[layer], ids, ids)
    block = block.AB if isinstance(block, FactoredMatrix) else block
    return block.detach().to(torch.float64).cpu()


def _top(block: Tensor, ids: list[int], labels: dict[int, str], k: int) -> list[list]:
    """The ``k`` largest entries of a ``[c, c]`` block: ``[row token, col token, value]``."""
    values, index = block.flatten().topk(min(k, block.numel()))
    n = block.shape[1]
    out = []
    for v, flat in zip(values.tolist(), index.tolist(), strict=True):
        i, j = divmod(flat, n)
        out.append([labels[ids[i]], labels[ids[j]], _clean(v)])
    return out


@torch.no_grad()
def pair_tables(
    pw: Any,
    stats: Any,
    labels: Any,
    *,
    pair_tokens: int,
    k: int,
    progress: bool = False,
    gemm_dtype: torch.dtype = torch.float64,
) -> dict:
    """Per head: top ``W`` pairs vs top ``Q̄`` pairs, top value pairs vs the value term's
    (the heads' block products in ``gemm_dtype``, see :func:`_blocks`)."""
    positions, ids = _candidates(stats, pair_tokens)
    id_list = ids.tolist()
    names = labels(id_list)
    name = dict(zip(id_list, names, strict=True))
    q_bar = leading_map(stats, "W")[positions][:, positions].to(torch.float64).cpu()
    value = leading_map(stats, pw.value_weight)[positions][:, positions]
    theory = {"W": _top(q_bar, id_list, name, k),
              "V": _top(value.to(torch.float64).cpu(), id_list, name, k)}  # fmt: skip
    heads = {}
    for layer in progress_bar(range(pw.n_layers), desc="explorer pairs", disable=not progress):
        W, V = (_blocks(pw, name, layer, ids, gemm_dtype) for name in ("W", "V"))
        for h in range(W.shape[0]):
            heads[head_label(layer, h)] = {"W": _top(W[h], id_list, name, k),
                                      "V": _top(V[h], id_list, name, k)}  # fmt: skip
    return {"heads": heads, "theory": theory, "pair_tokens": len(id_list)}


def neighbour_table(stats: Any, text_ids: list[int], labels: Any, n: int, tokenizer: Any) -> dict:
    """The word box's data: every kept token's top-``n`` neighbours under each statistic as
    :meth:`CorpusStats.top` lists them (its default scoring and special-token rule, through
    :meth:`CorpusStats.listed`), and the text's tokens scored by the same row.

    Compact, for ``k`` rows × 3 statistics: per statistic, per row (matrix order), its
    ``scale`` (the largest ``|score|`` among the tokens a list may hold, 4 digits), its list as
    ``[p1, v1, p2, v2, ...]`` (matrix positions; scores in hundredths of the scale,
    ``score ≈ v/100·scale``) and its values at the text's distinct kept tokens on the same
    scale (``None``: left out of the lists); ``0`` for a row without associations. ``text``
    maps each text token to its column among those (``-1``: not a kept token).
    """
    index_map = stats.vocab.index_map()
    where = [i if index_map is None else int(index_map[i]) for i in text_ids]
    columns = list(dict.fromkeys(p for p in where if p < stats.k))
    picked = torch.tensor(columns, dtype=torch.long)
    kinds = {}
    for kind, key in ASSOCIATIONS.items():
        source = stats.bigram if key == "B_bar" else stats.matrix(key)  # B̄ read by row blocks
        scorer = fed_scorer(source, (), DEFAULT_SCORING, symmetric_gram=key == "Sigma_B")
        scales, lists, shading = [], [], []
        for start, block in row_blocks(source):
            rows = scorer.scored_block(start, block)
            notes = stats.listed(key, start, rows, tokenizer=tokenizer)
            size = rows.abs().nan_to_num(0.0, 0.0, 0.0).amax(1)  # −inf: left out
            size[torch.tensor([bool(note) for note in notes])] = 0.0
            at_text = (100 * rows[:, picked] / size[:, None]).round().tolist()
            for row, scale, text in zip(rows, size.tolist(), at_text, strict=True):
                if not scale > 0:
                    scales.append(0), lists.append(0), shading.append(0)
                    continue
                scales.append(float(f"{scale:.4g}"))
                lists.append([x for v, j in best(row, n) for x in (j, round(100 * v / scale))])
                shading.append([int(v) if math.isfinite(v) else None for v in text])
        kinds[kind] = {"heading": HEADINGS[kind], "note": stats.degenerate_note(key) or "",
                       "scale": scales, "top": lists, "text": shading}  # fmt: skip
    ids = range(stats.k) if stats.kept is None else stats.kept.tolist()
    legend = (f"Scoring: {DEFAULT_SCORING}, as CorpusStats.top ranks (special tokens left out): "
              f"{MEANINGS[DEFAULT_SCORING]}. Numbers: each score ÷ the word's largest |score| "
              "in that statistic (1: its strongest association; below 0: less than expected). "
              "The text is shaded on the same scale, red above 0, blue below.")  # fmt: skip
    return {"scoring": DEFAULT_SCORING, "legend": legend, "n": n, "tokens": labels(list(ids)),
            "counts": stats.unigram_counts.tolist(), "text": [columns.index(p) if p < stats.k
            else -1 for p in where], "kinds": kinds}  # fmt: skip
