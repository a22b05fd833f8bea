"""`leading_model`: the paper's model with every weight set to its leading term
(docs/guides/next-token.md#the-leading-term-model; the paper's Eqs. 12-13), a real
:class:`~tl_leadterms.models.PaperModel` whose coefficients come from
:class:`tl_leadterms.theory.Schedule` and maps from the theorem's table.
"""

import torch

from tl_leadterms.checks import check_stats, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.models.paper import PaperModel, paper_model
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike, run_shorthands, term

__all__ = ["leading_model", "leading_weights"]


def leading_weights(
    stats: CorpusStats,
    schedule: Schedule,
    n_ctx: int,
) -> dict[str, torch.Tensor]:
    """The leading term of ``W_O``, ``V``, ``W`` and ``P`` (one map each, valid in every layer).

    Args:
        stats: corpus statistics.
        schedule: the training run (:meth:`Schedule.of`); it must know ``s·η``.
        n_ctx: length of ``P``; offsets the statistics do not have (``>= stats.n_ctx``) are 0.

    Returns:
        ``{"W_O": [k, k], "V": [k, k], "W": [k, k], "P": [n_ctx]}``.
    """
    if schedule.s_lr is None:
        raise LeadTermsError(
            "the leading-term model needs the training run: pass lr= and steps=, or s_lr= (s·η)"
        )
    out = {}
    for weight in ("W_O", "V", "W", "P"):
        t = term(weight)
        out[weight] = schedule.coefficient(weight) * t.target.build(stats)
    P = out["P"][:n_ctx]
    out["P"] = torch.nn.functional.pad(P, (0, n_ctx - len(P)))  # 0 beyond the statistics' T
    return out


@run_shorthands
@torch.no_grad()
def leading_model(
    stats: CorpusStats,
    *,
    schedule: ScheduleLike = None,
    n_layers: int = 1,
    n_ctx: int | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> PaperModel:
    """The paper model whose ``W_O``, ``V``, ``W``, ``P`` are their leading terms.

    Args:
        stats: corpus statistics (:func:`tl_leadterms.corpus_stats`). With a vocabulary
            restriction the model's vocabulary is the ``k`` kept tokens (index ``i`` is token id
            ``stats.kept[i]``); feed it kept indices.
        schedule: the training run (a :class:`~tl_leadterms.theory.Schedule` or an
            ``(lr, steps)`` pair): ``lr`` and ``steps`` for the exact coefficients, or only
            ``s_lr = s·η`` for their gradient-flow limits.
        n_layers: ``L``; every layer gets the same ``V``, ``W`` and ``P``.
        n_ctx: the model's context length ``T`` (default the statistics' ``T``); ``P`` is
            zero at offsets the statistics do not cover.
        device, dtype: where (default: the CPU) and in which precision to build the model.

    Returns:
        A :class:`~tl_leadterms.models.PaperModel` (a HookedTransformer) in eval mode.

    Example:
        >>> import torch
        >>> from tl_leadterms import corpus_stats
        >>> from tl_leadterms.models import leading_model
        >>> stats = corpus_stats(torch.randint(0, 10, (16, 7)), d_vocab=10, progress=False)
        >>> model = leading_model(stats, schedule=(0.1, 4), n_layers=2)
        >>> torch.allclose(model.W_O_paper, 0.4 * stats.B_bar.float())
        True
        >>> model(torch.tensor([[1, 2, 3]])).shape
        torch.Size([1, 3, 10])
    """
    stats = check_stats(stats)
    schedule = Schedule.of(schedule)
    n_layers = positive_int("n_layers", n_layers)
    n_ctx = stats.n_ctx if n_ctx is None else positive_int("n_ctx", n_ctx)
    tokenizer = stats.tokenizer if stats.kept is None else None
    if tokenizer is not None and len(tokenizer) != stats.k:
        tokenizer = None
    model = paper_model(
        d_vocab=stats.k, n_ctx=n_ctx, n_layers=n_layers, tokenizer=tokenizer, device=device,
        dtype=dtype,
    )  # fmt: skip
    weights = leading_weights(stats, schedule, n_ctx)
    for name, param in model.paper_parameters().items():
        value = weights[name.split(".")[0]]
        param.copy_(value.reshape(param.shape).to(param.device, param.dtype))
    return model.eval()
