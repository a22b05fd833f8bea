"""`output_agreement`: how much of a model's next-token behaviour its leading terms explain
(docs/guides/next-token.md): ``KL(model ‖ predictor)`` and top-1/top-5 agreement per held-out
position for the leading-term model, its ``W_O`` term alone and the unigram, over the kept
tokens plus one *bucket* for the others (:mod:`tl_leadterms.analyses.output.predictors`).
"""

import math
from typing import Any

import torch
from tqdm.auto import tqdm

from tl_leadterms.adapters.support import check_finite
from tl_leadterms.adapters.view import own_tokenizer
from tl_leadterms.analyses.output.fit import at_bound, fit_bigram, fit_leading, mean_kl, scores
from tl_leadterms.analyses.output.predictors import LeadingPredictor, unigram_log_probs, with_bucket
from tl_leadterms.analyses.output.result import OutputAgreement
from tl_leadterms.checks import check_bool, check_tokens, check_vocab, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.bootstrap import add_interval
from tl_leadterms.results.null import NullSpec, add_verdicts, permutations, summarize
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike

__all__ = ["UNIGRAM_GAP", "model_log_probs", "output_agreement"]

_CHUNK_ELEMENTS = 2**26  # logits per model forward chunk (256 MiB in float32)
#: the unigram → model KL gap (nats) below which ``explained`` is undefined: the model is at its
#: unigram baseline, no predictor has a gap to close, and 1 − kl/gap divides rounding noise
UNIGRAM_GAP = 1e-3


@torch.no_grad()
def model_log_probs(
    model: Any, tokens: torch.Tensor, kept: torch.Tensor | None, dtype=torch.float32
) -> torch.Tensor:
    """The model's next-token log-probabilities over the kept tokens (+ bucket), in ``dtype``."""
    d_vocab = model.cfg.d_vocab
    chunk = max(1, _CHUNK_ELEMENTS // (tokens.shape[1] * d_vocab))
    keep = None
    if kept is not None:
        keep = torch.zeros(d_vocab, dtype=torch.bool, device=tokens.device)
        keep[kept.to(tokens.device)] = True
        kept = kept.to(tokens.device)
    out = []
    for start in range(0, tokens.shape[0], chunk):
        logits = model(tokens[start : start + chunk]).to(dtype)
        if keep is None:
            out.append(torch.log_softmax(logits, dim=-1))
            continue
        # one normaliser for both parts, no full-vocabulary log-softmax materialised
        total = logits.logsumexp(-1, keepdim=True)
        part = logits[..., kept.to(logits.device)]
        bucket = logits.masked_fill_(keep.to(logits.device), -math.inf).logsumexp(-1, keepdim=True)
        out.append(torch.cat([part, bucket], dim=-1) - total)
    return torch.cat(out)


def _split(n: int, fit: bool, calibration: float) -> int:
    """How many leading windows calibrate the fit (0 without ``fit``)."""
    if not fit:
        return 0
    if not (isinstance(calibration, float) and 0.0 < calibration < 1.0):
        raise LeadTermsError(f"calibration must be a float in (0, 1), got {calibration!r}")
    n_cal = min(n - 1, max(1, round(n * calibration)))
    if n < 2:
        raise LeadTermsError(
            f"fit=True needs at least 2 windows (a calibration and a held-out part); got {n}"
        )
    return n_cal


def _coefficients(schedule: Schedule, fit: bool) -> tuple[float, float, float] | None:
    if schedule.s_lr is None:
        if not fit:
            raise LeadTermsError(
                "output_agreement needs the training run to scale the leading terms: "
                "schedule=Schedule(lr=..., steps=...) or Schedule(s_lr=...); for a model whose "
                "s·η is unknown pass fit=True"
            )
        return None
    return tuple(schedule.coefficient(w) for w in ("W_O", "V", "W"))


def _row(name: str, model_lp, pred_lp, kl_unigram: float | None, c, flags=None) -> dict:
    kl, top1, top5 = scores(model_lp, pred_lp)
    mean = float(kl.mean())
    row = {"predictor": name, "kl": mean, "explained": math.nan, "top1": float(top1),
           "top5": float(top5), "c_O": c[0], "c_V": c[1], "c_W": c[2], "c_at_bound": flags,
           "kl_per_position": kl.mean(0).tolist()}  # fmt: skip
    if kl_unigram is not None and kl_unigram < UNIGRAM_GAP:
        row["reason"] = (f"undefined: the model is at its unigram baseline (KL gap "
                         f"{kl_unigram:.1e} < {UNIGRAM_GAP:g})")  # fmt: skip
    elif kl_unigram:
        row["explained"] = 1.0 - mean / kl_unigram
    return row


@shorthands
@torch.no_grad()
def output_agreement(
    model: ReadableModel,
    stats: CorpusStats | BlockStats,
    tokens: TokenWindows,
    *,
    schedule: ScheduleLike = None,
    fit: bool = False,
    calibration: float = 0.5,
    n_layers: int | None = None,
    null: int | NullSpec | None = None,
    ci: float | None = None,
    uncertainty: Uncertainty | None = None,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
) -> OutputAgreement:
    """Compare ``model``'s next-token distributions with its leading-term model's.

    Args:
        model: the paper model or any TransformerLens model (anything ``to_paper`` reads, and
            any other model whose ``model(tokens)`` returns next-token logits and whose
            ``cfg`` has ``d_vocab``, ``n_ctx``, ``n_layers``); its vocabulary must be the
            statistics'.
        stats: corpus statistics (a :class:`~tl_leadterms.CorpusStats`, or a ``BlockStats`` for
            ``ci=``).
        tokens: held-out input windows ``[n, T]`` (``T`` at most the model's ``n_ctx``); every
            position is scored.
        schedule: the training run that scales the leading terms (a
            :class:`~tl_leadterms.theory.Schedule`, an ``(lr, steps)`` pair or the run's
            ``TrainHistory``).
        fit: fit ``c_O``, ``c_V``, ``c_W`` (shared by all layers) on the first ``calibration``
            share of the windows and score the rest (see
            :mod:`tl_leadterms.analyses.output.fit`); the bigram baseline's ``c_O`` is fitted too.
        calibration: share of the windows used to fit (``fit=True`` only).
        n_layers: depth of the leading-term model (default: the model's).
        null: the permutation null of the leading row's ``explained`` (the theory's tokens
            relabelled, coefficients kept), ``R`` or a
            :class:`~tl_leadterms.results.null.NullSpec` (shorthand for ``uncertainty.null``)
            and, with ``NullSpec(reference=...)``, the reference model's ``explained``.
        ci: a level (shorthand for ``uncertainty.ci``): a bootstrap interval of the
            distribution-level ``explained`` over corpus blocks, none for statistics of the
            model's training windows (needs ``BlockStats``; each resample rebuilds the three
            predictors, coefficients kept).
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` (null,
            interval, its bootstrap and the ``population`` the scores answer for).
        dtype: precision of the comparison (float32; the model runs in its own, its logits are
            cast).
        progress: a progress bar over the null draws and bootstrap resamples.

    Returns:
        An :class:`~tl_leadterms.analyses.output.result.OutputAgreement`.

    Example:
        >>> import torch
        >>> from tl_leadterms import Schedule, corpus_stats, output_agreement
        >>> from tl_leadterms.models import leading_model
        >>> tokens = torch.randint(0, 12, (64, 9), generator=torch.Generator().manual_seed(0))
        >>> stats = corpus_stats(tokens, d_vocab=12, progress=False)
        >>> run = Schedule(s_lr=2.0)
        >>> model = leading_model(stats, schedule=run)
        >>> out = output_agreement(model, stats, tokens[:8, :-1], schedule=run)
        >>> out.kl < 1e-6, round(out.explained, 4)
        (True, 1.0)
    """
    sure = Uncertainty.of(uncertainty, null=null, ci=ci).resolve(stats, model)
    stats, boot, spec = sure.stats, sure.boot, sure.null
    if not callable(model) or getattr(model, "cfg", None) is None:
        raise LeadTermsError(
            f"output_agreement runs the model, got a {type(model).__name__}: pass the model "
            "itself (the paper model or a TransformerLens model), not its PaperWeights"
        )
    check_finite(model)
    check_vocab(stats, d_vocab=model.cfg.d_vocab, tokenizer=own_tokenizer(model))
    fit, progress = check_bool("fit", fit), check_bool("progress", progress)
    tokens = check_tokens(tokens, model.cfg.d_vocab, max_len=model.cfg.n_ctx,
                          max_len_hint=f" the model's n_ctx={model.cfg.n_ctx}")  # fmt: skip
    n_layers = model.cfg.n_layers if n_layers is None else positive_int("n_layers", n_layers)
    schedule = Schedule.of(schedule)
    known = _coefficients(schedule, fit)
    n_cal = _split(tokens.shape[0], fit, calibration)
    device = next(iter(model.parameters())).device
    tokens = tokens.to(device)
    index = stats.vocab.index_map(device)
    x = (tokens if index is None else index[tokens]).to(stats.device)
    model_lp = model_log_probs(model, tokens, stats.kept, dtype).to(stats.device)
    pred = LeadingPredictor.shared(stats, dtype=dtype)  # its bases outlive this call

    def leading(p, xs, c):
        if isinstance(c[1], float) and c[1] == 0.0:  # no value term: attention changes nothing
            return with_bucket(p.bigram_logits(xs, c[0]), stats.d_vocab)
        return with_bucket(p.logits(xs, *c, n_layers=n_layers), stats.d_vocab)

    fitted, flags = None, (None, None)
    c_lead, c_bigram = known, None if known is None else (known[0], 0.0, 0.0)
    if fit:
        cal_x, cal_lp = x[:n_cal], model_lp[:n_cal]
        with torch.enable_grad():
            c_O = fit_bigram(lambda c: mean_kl(cal_lp, leading(pred, cal_x, (c, 0.0, 0.0))))
            starts = [(c_O, 0.0, 0.0)] + ([known] if known else [])
            fitted = fit_leading(lambda *c: mean_kl(cal_lp, leading(pred, cal_x, c)), starts)
        c_lead, c_bigram = (fitted["c_O"], fitted["c_V"], fitted["c_W"]), (c_O, 0.0, 0.0)
        fitted["bigram_c_O"] = c_O
        flags = (at_bound(lambda *c: mean_kl(cal_lp, leading(pred, cal_x, c)), c_lead),
                 at_bound(lambda c: mean_kl(cal_lp, leading(pred, cal_x, (c, 0.0, 0.0))),
                          (c_O,)))  # fmt: skip
        x, model_lp = x[n_cal:], model_lp[n_cal:]
    unigram = unigram_log_probs(stats, dtype).expand_as(model_lp)
    uni_row = _row("unigram", model_lp, unigram, None, (math.nan,) * 3)
    kl_uni = uni_row["kl"]
    uni_row["explained"] = 0.0  # by definition
    rows = [
        _row("leading", model_lp, leading(pred, x, c_lead), kl_uni, c_lead, flags[0]),
        _row("bigram", model_lp, leading(pred, x, c_bigram), kl_uni, c_bigram, flags[1]),
        uni_row,
    ]
    if spec is not None:
        perms = permutations(stats.k, spec.permutations, spec.seed)
        draws = [1.0 - mean_kl(model_lp, leading(pred.permuted(p), x, c_lead)).item() / kl_uni
                 for p in tqdm(perms, desc="null", disable=not progress)]  # fmt: skip
        rows[0].update(summarize(rows[0]["explained"], torch.tensor(draws)))
        add_verdicts(rows[:1], spec)
        reference = spec.reference_model(model)
        if reference is not None:
            ref = output_agreement(
                reference,
                stats,
                tokens[n_cal:],
                n_layers=n_layers,
                schedule=schedule,
                fit=False,
                dtype=dtype,
            )
            rows[0]["reference"] = ref.explained
    if boot is not None:
        add_interval(rows[:1], _bootstrap(boot, model_lp, x, c_lead, leading, dtype, progress),
                     boot, "explained")  # fmt: skip
    metadata = {
        "model_name": getattr(model.cfg, "model_name", None), "k": stats.k,
        "d_vocab": stats.d_vocab, "bucket": stats.k < stats.d_vocab, "n_layers": n_layers,
        "n_windows": int(x.shape[0]), "n_calibration": n_cal, "n_ctx": int(x.shape[1]),
        "stats_n_ctx": stats.n_ctx, **schedule.to_dict(), "fitted": fitted,
        "unigram_kl": kl_uni,
    }  # fmt: skip
    return OutputAgreement(rows, metadata | sure.metadata())


def _bootstrap(boot, model_lp, x, c, leading, dtype, progress) -> torch.Tensor:
    """``[R, 1]`` explained shares of the leading-term model on each bootstrap resample."""
    out = []
    for resampled in tqdm(boot.resamples(), total=boot.spec.resamples, desc="bootstrap",
                          disable=not progress):  # fmt: skip
        pred = LeadingPredictor(resampled, dtype=dtype)
        uni = unigram_log_probs(resampled, dtype).expand_as(model_lp)
        kl = mean_kl(model_lp, leading(pred, x, c)).item()
        out.append([1.0 - kl / mean_kl(model_lp, uni).item()])
    return torch.tensor(out, dtype=torch.float64)
