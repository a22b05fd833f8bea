"""Predicted attention on real text, and how well a model's attention agrees with it.

The leading terms predict every layer's attention (MATH.md §3)::

    A = S(Mask(c·X Q̄ Xᵀ + c·DM(Δ))),   c = (3C(s,4) + 2C(s,3))·η⁴

where ``X`` is the one-hot of the input tokens (a token outside the statistics' kept vocabulary
is a zero row). :func:`predict_attention` computes it; :func:`attention_agreement` compares it
with a model's ``hook_pattern`` per layer and head.
"""

import math
from typing import Any

import torch
from jaxtyping import Float, Int
from torch import Tensor
from tqdm.auto import tqdm
from transformer_lens.utilities import get_act_name

from tl_leadterms.analyzers import basis
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.corpus import CorpusStats

__all__ = ["AttentionAgreement", "attention_agreement", "predict_attention"]

# the temperature fit scans c over this many log-spaced values, then refines around the best
_GRID = torch.logspace(-3, 6, 37)


def _check_stats_tokens(stats: object, tokens: object) -> Int[Tensor, "batch pos"]:
    if not isinstance(stats, CorpusStats):
        raise LeadTermsError(
            f"stats must be a CorpusStats (from tl_leadterms.corpus_stats), got "
            f"{type(stats).__name__}"
        )
    if not isinstance(tokens, Tensor):
        try:
            tokens = torch.as_tensor(tokens)
        except (TypeError, ValueError) as err:
            raise LeadTermsError("tokens must be a [batch, pos] tensor of token ids") from err
    if tokens.dim() == 1:
        tokens = tokens[None]
    if tokens.dim() != 2 or tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise LeadTermsError(
            f"tokens must be a [batch, pos] integer tensor, got shape {tuple(tokens.shape)} and "
            f"dtype {tokens.dtype}"
        )
    if tokens.numel() == 0:
        raise LeadTermsError("tokens is empty; pass at least one sequence of one token")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= stats.d_vocab:
        raise LeadTermsError(
            f"token ids must lie in [0, {stats.d_vocab}) (the statistics' d_vocab); found "
            f"{low if low < 0 else high}"
        )
    if tokens.shape[1] > stats.n_ctx:
        raise LeadTermsError(
            f"sequences have {tokens.shape[1]} positions but Δ covers offsets 0..{stats.n_ctx - 1}"
            f" (the statistics' T); pass at most {stats.n_ctx} positions"
        )
    return tokens.long()


def predicted_scores(stats: CorpusStats, tokens: Tensor) -> Float[Tensor, "batch query key"]:
    """``X Q̄ Xᵀ + DM(Δ)`` (unscaled, unmasked above the diagonal: −inf there)."""
    Q, Delta = stats.Q_bar, stats.Delta
    k = stats.k
    padded = torch.zeros(k + 1, k + 1, dtype=Q.dtype, device=Q.device)
    padded[:k, :k] = Q
    index_map = stats.vocab.index_map(Q.device)
    idx = tokens.to(Q.device) if index_map is None else index_map[tokens.to(Q.device)]
    scores = padded[idx[:, :, None], idx[:, None, :]]  # [batch, query, key]
    n = tokens.shape[1]
    offset = torch.arange(n, device=Q.device)[:, None] - torch.arange(n, device=Q.device)[None]
    scores = scores + torch.where(offset >= 0, Delta[offset.clamp(min=0)], 0.0)
    return scores.masked_fill(offset < 0, -math.inf)


def predict_attention(
    stats: CorpusStats,
    tokens,
    *,
    lr: float | None = None,
    steps: int | None = None,
    temperature: float | None = None,
) -> Float[Tensor, "batch query key"]:
    """The attention pattern the leading terms predict for ``tokens``, in every layer.

    Args:
        stats: corpus statistics (Q̄ and Δ).
        tokens: ``[batch, pos]`` (or ``[pos]``) input token ids, ``pos ≤ stats.n_ctx``.
        lr, steps: the training run; the scale is ``c = (3C(s,4) + 2C(s,3))·η⁴``.
        temperature: the scale ``c`` directly (e.g. one fitted by
            :func:`attention_agreement`); give either this or ``lr`` and ``steps``.

    Returns:
        ``[batch, query, key]`` rows summing to 1, zero above the diagonal.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats, predict_attention
        >>> tokens = torch.randint(0, 10, (32, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=10, progress=False)
        >>> A = predict_attention(stats, tokens[:2, :8], lr=1.0, steps=10)
        >>> A.shape, bool(torch.allclose(A.sum(-1), torch.ones(2, 8, dtype=A.dtype)))
        (torch.Size([2, 8, 8]), True)
    """
    tokens = _check_stats_tokens(stats, tokens)
    scale = _scale(lr, steps, temperature)
    return torch.softmax(scale * predicted_scores(stats, tokens), dim=-1)


def _scale(lr: object, steps: object, temperature: object) -> float:
    if temperature is not None:
        if lr is not None or steps is not None:
            raise LeadTermsError("give either temperature or (lr, steps), not both")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
            raise LeadTermsError(f"temperature must be a number, got {temperature!r}")
        return float(temperature)
    if lr is None or steps is None:
        raise LeadTermsError(
            "the scale of the prediction needs lr and steps (c = (3C(s,4) + 2C(s,3))·lr⁴), "
            "or temperature="
        )
    for name, value in (("lr", lr), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise LeadTermsError(f"{name} must be a positive number, got {value!r}")
    return basis.coefficient("attention", float(lr), float(steps))


def _js_divergence(p: Tensor, q: Tensor) -> Tensor:
    """Jensen-Shannon divergence (natural log, in [0, ln 2]) of rows; 0·log 0 = 0."""
    m = 0.5 * (p + q)

    def kl(a: Tensor, b: Tensor) -> Tensor:
        return torch.where(a > 0, a * (a.clamp(min=1e-300).log() - b.clamp(min=1e-300).log()), 0.0)

    return 0.5 * (kl(p, m) + kl(q, m)).sum(-1)


def _ranks(x: Tensor, valid: Tensor) -> Tensor:
    """Average ranks (ties share their mean rank, 0-based) of ``x`` among the valid entries.

    A row of ties (uniform attention) gets a constant rank, so its correlation is undefined
    rather than an artefact of index order.
    """
    out = torch.empty(x.shape, dtype=torch.float64)
    rows_x, rows_v, flat = (
        x.reshape(-1, x.shape[-1]),
        valid.reshape(-1, x.shape[-1]),
        out.view(-1, x.shape[-1]),
    )
    for start in range(0, rows_x.shape[0], 256):  # bounded [rows, n, n] comparisons
        a, v = rows_x[start : start + 256], rows_v[start : start + 256]
        other = v[:, None, :]
        below = ((a[:, None, :] < a[:, :, None]) & other).sum(-1)
        equal = ((a[:, None, :] == a[:, :, None]) & other).sum(-1)
        flat[start : start + 256] = below + (equal - 1) / 2
    return out


def _rank_correlation(actual: Tensor, scores: Tensor, valid: Tensor) -> Tensor:
    """Spearman correlation of each row over its valid (causal) keys; NaN for < 3 keys."""
    n = valid.sum(-1, keepdim=True).to(torch.float64)
    ra, rs = _ranks(actual, valid), _ranks(scores, valid)
    ra = torch.where(valid, ra - (n - 1) / 2, 0.0)
    rs = torch.where(valid, rs - (n - 1) / 2, 0.0)
    num = (ra * rs).sum(-1)
    den = (ra.square().sum(-1) * rs.square().sum(-1)).sqrt()
    out = num / torch.where(den > 0, den, 1.0)
    return torch.where((n.squeeze(-1) >= 3) & (den > 0), out, math.nan)


_ROWS = slice(1, None)  # the first query attends to itself only: nothing to compare


def _js(actual: Tensor, scores: Tensor, scale: float) -> float:
    """Mean JS divergence over query rows 2..T at scale ``c``."""
    predicted = torch.softmax(scale * scores, dim=-1)
    return float(_js_divergence(actual[..., _ROWS, :], predicted[..., _ROWS, :]).mean())


def _rank(actual: Tensor, scores: Tensor) -> float:
    """Mean rank correlation over query rows 2..T (independent of the scale)."""
    valid = torch.isfinite(scores[..., _ROWS, :])
    rho = _rank_correlation(actual[..., _ROWS, :], scores[..., _ROWS, :], valid)
    return float(rho[~rho.isnan()].mean()) if (~rho.isnan()).any() else math.nan


def _fit_scale(actual: Tensor, scores: Tensor) -> float:
    """The ``c`` minimising the mean JS divergence: a log grid, then a golden-section search."""
    losses = [_js(actual, scores, float(c)) for c in _GRID]
    best = int(torch.tensor(losses).argmin())
    low = math.log(float(_GRID[max(best - 1, 0)]))
    high = math.log(float(_GRID[min(best + 1, len(_GRID) - 1)]))
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(30):
        a, b = high - golden * (high - low), low + golden * (high - low)
        if _js(actual, scores, math.exp(a)) < _js(actual, scores, math.exp(b)):
            high = b
        else:
            low = a
    return math.exp(0.5 * (low + high))


class AttentionAgreement:
    """Per (layer, head): how close the model's attention is to the leading-term prediction.

    Row fields: ``layer``, ``head``, ``label`` (``"L{l}H{h}"``), ``js_divergence`` (mean
    Jensen-Shannon divergence of the pattern rows, natural log, 0 = identical, ln 2 ≈ 0.693 =
    disjoint), ``rank_correlation`` (mean Spearman correlation of each row's keys, model pattern
    against predicted scores) and ``temperature`` (the scale ``c`` used: from lr and steps, or
    fitted per head to minimise the JS divergence).
    """

    def __init__(self, rows: list[dict[str, Any]], metadata: dict[str, Any]) -> None:
        self.rows = rows
        self.metadata = metadata

    def row(self, layer: int, head: int = 0) -> dict[str, Any]:
        for row in self.rows:
            if row["layer"] == layer and row["head"] == head:
                return row
        raise LeadTermsError(f"no row for layer {layer}, head {head}")

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [dict(r) for r in self.rows], "metadata": dict(self.metadata)}

    def to_pandas(self):
        import pandas as pd

        return pd.DataFrame(self.rows)

    def __repr__(self) -> str:
        lines = [
            f"AttentionAgreement ({self.metadata['n_sequences']} sequences of "
            f"{self.metadata['n_positions']} tokens; temperature "
            f"{'fitted per head' if self.metadata['fitted'] else 'from lr and steps'})",
            f"{'head':<7} {'JS div.':>10} {'rank corr.':>10} {'temperature':>12}",
        ]
        for r in self.rows:
            lines.append(
                f"{r['label']:<7} {r['js_divergence']:10.3e} {r['rank_correlation']:10.5f} "
                f"{r['temperature']:12.4g}"
            )
        return "\n".join(lines)


@torch.no_grad()
def attention_agreement(
    model,
    stats: CorpusStats,
    tokens,
    *,
    lr: float | None = None,
    steps: int | None = None,
    layers: int | list[int] | None = None,
    progress: bool = True,
) -> AttentionAgreement:
    """Compare every head's attention pattern on ``tokens`` with the leading-term prediction.

    The model is run once with hooks on ``hook_pattern``; each layer and head is compared with
    :func:`predict_attention` on the same tokens. With ``lr`` and ``steps`` the prediction's
    scale is the theory's ``c``; without them it is fitted per head (a model with embeddings
    has its own score scale).

    Args:
        model: any HookedTransformer over the statistics' vocabulary.
        stats: corpus statistics.
        tokens: ``[batch, pos]`` input token ids (``pos ≤ stats.n_ctx``).
        lr, steps: the training run, if known (the paper model).
        layers: which layers (default all).
        progress: show a tqdm bar over layers.
    """
    from tl_leadterms.analyzers.decompose import _layers

    tokens = _check_stats_tokens(stats, tokens)
    if model.cfg.d_vocab != stats.d_vocab:
        raise LeadTermsError(
            f"the statistics were computed for d_vocab={stats.d_vocab} but the model has "
            f"d_vocab={model.cfg.d_vocab}; compute them with the model's tokenizer"
        )
    fixed = None if lr is None and steps is None else _scale(lr, steps, None)
    chosen = _layers(layers, model.cfg.n_layers)
    names = {get_act_name("pattern", layer) for layer in chosen}
    device = next(model.parameters()).device
    _, cache = model.run_with_cache(tokens.to(device), names_filter=lambda n: n in names)
    scores = predicted_scores(stats, tokens).to(torch.float64).cpu()
    rows = []
    for layer in tqdm(chosen, desc="attention agreement", disable=not progress):
        pattern = cache[get_act_name("pattern", layer)].to(torch.float64).cpu()
        for head in range(pattern.shape[1]):
            actual = pattern[:, head]
            scale = fixed if fixed is not None else _fit_scale(actual, scores)
            js, rho = _js(actual, scores, scale), _rank(actual, scores)
            where = {"layer": layer, "head": head, "label": f"L{layer}H{head}"}
            rows.append(
                where | {"js_divergence": js, "rank_correlation": rho, "temperature": scale}
            )
    metadata = {"n_sequences": tokens.shape[0], "n_positions": tokens.shape[1],
                "fitted": fixed is None, "lr": lr, "steps": steps}  # fmt: skip
    return AttentionAgreement(rows, metadata)
