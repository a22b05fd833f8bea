"""The analyses of a :func:`~tl_leadterms.sweeps.run.sweep`, their null and interval
options, and the settings a results file records.

Named analyses (``"decompose"``, ``"covariance"``) get the sweep's keywords they accept, among
them ``null=``, ``ci=`` and ``bootstrap=`` exactly as :func:`~tl_leadterms.decompose` and
:func:`~tl_leadterms.covariance_similarity` take them: each checkpoint's rows are those functions'
own, null and interval columns included (:data:`~.sweep_table.EXTRA_COLUMNS`). The settings a
results file is written with hold these options (permutations, seeds, level, resamples) and a
content hash of the statistics, so a resume with other options is refused.

>>> options = uncertainty_options(None, Uncertainty(null=20, seed=3))
>>> options["null"]
NullSpec(permutations=20, seed=3, reference=None, negligible=0.01)
>>> setting_value(options["null"])
{'permutations': 20, 'seed': 3, 'reference': None}
"""

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.registry import analysis, sweepable
from tl_leadterms.results.bootstrap import BootstrapSpec
from tl_leadterms.results.null import NEGLIGIBLE, NullSpec
from tl_leadterms.results.table import EXTRA_COLUMNS
from tl_leadterms.results.uncertainty import Uncertainty
from tl_leadterms.stats.blocks import BlockStats
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.sweeps.fingerprint import checkpoint_fingerprint
from tl_leadterms.sweeps.results import jsonable
from tl_leadterms.theory import Schedule

__all__ = [
    "DEFAULT",
    "NAMES",
    "Analysis",
    "analyse",
    "choose_analyses",
    "full_stats",
    "setting_value",
    "settings",
    "stats_fingerprint",
    "uncertainty_options",
]

#: the analyses a sweep runs by name (the registry's, :mod:`tl_leadterms.registry`)
NAMES = sweepable()
#: what a sweep runs when no analyses are named (``"output"`` needs held-out ``tokens=``)
DEFAULT = ("decompose", "covariance")
FORMAT = 1
#: keywords that change where or how fast a sweep runs, not its rows: a resume may differ in them
NOT_SETTINGS = ("device", "progress", "batch_size", "theory")
#: how ``centre="tokens"`` is recorded since its rows changed (``value`` was the token-specific
#: score; now the raw one, the specific score its own ``_specific`` rows): a file written with
#: the former meaning is not resumed into the new one
_MOVED = "tokens (value: the raw score; the token-specific score in _specific rows)"


class Analysis(NamedTuple):
    """One analysis of a sweep: its label, function ``fn(model, stats, **kwargs)``, keywords,
    and whether it is a named one (which gets block statistics when ``ci`` is asked for)."""

    label: str
    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    named: bool = False


def _one(item: object, common: dict[str, Any], extra: dict[str, Any]) -> Analysis:
    label, fn, kwargs = None, item, {}
    if isinstance(item, tuple):
        if len(item) != 3 or not isinstance(item[0], str) or not isinstance(item[2], dict):
            raise LeadTermsError(
                f"an analysis tuple is (label, name_or_callable, kwargs dict), got {item!r}"
            )
        label, fn, kwargs = item[0], item[1], dict(item[2])
    if isinstance(fn, str):
        if fn not in NAMES:
            raise LeadTermsError(
                f"unknown analysis {fn!r}; use one of {NAMES} or pass a callable "
                "f(model, stats) returning dicts with layer, head, score, value"
            )
        accepted = analysis(fn).accepts()
        merged = {k: v for k, v in common.items() if k in accepted}
        merged.update({k: v for k, v in extra.items() if k in accepted})
        merged.update(kwargs)
        return Analysis(label or fn, analysis(fn).sweep_rows, merged, True)
    if callable(fn):
        return Analysis(label or getattr(fn, "__name__", type(fn).__name__), fn, kwargs)
    raise LeadTermsError(f"analysis {item!r} is neither a name in {NAMES} nor callable")


def choose_analyses(
    analyses: object, common: dict[str, Any], extra: dict[str, Any]
) -> list[Analysis]:
    """The analyses of a sweep; named ones get the ``common`` and ``extra`` keywords they take
    (an unknown ``extra`` keyword is refused)."""
    if isinstance(analyses, str) or callable(analyses):
        analyses = (analyses,)
    if not isinstance(analyses, (list, tuple)) or not analyses:
        raise LeadTermsError(
            f"analyses must be a non-empty list of names {NAMES}, callables f(model, stats) "
            f"or (label, name_or_callable, kwargs) tuples, got {analyses!r}"
        )
    out = [_one(item, common, extra) for item in analyses]
    labels = [a.label for a in out]
    if len(set(labels)) != len(labels):
        raise LeadTermsError(
            f"analysis labels must be unique, got {labels}; label them with tuples"
        )
    named = [a[1] if isinstance(a, tuple) else a for a in analyses]
    named = [n for n in named if isinstance(n, str)]
    unused = [k for k in extra if not any(k in analysis(n).accepts() for n in named)]
    ray = [k for k in unused if k in ("address", "num_cpus", "resources")]
    if ray:
        raise LeadTermsError(
            f"{', '.join(ray)}= choose the Ray cluster: pass executor=RayExecutor("
            + ", ".join(f"{k}={extra[k]!r}" for k in ray)
            + ")"
        )
    if unused:
        raise LeadTermsError(
            f"keyword(s) {unused} are not taken by any of the analyses {named}; check the "
            "spelling, or pass them in a (label, name, kwargs) tuple"
        )
    return out


def full_stats(stats: object) -> CorpusStats:
    """The statistics to score: ``stats`` itself, or a ``BlockStats``'s whole-corpus ones."""
    if isinstance(stats, BlockStats):
        return stats.full()
    if isinstance(stats, CorpusStats):
        return stats
    raise LeadTermsError(
        f"stats must be a CorpusStats (from tl_leadterms.corpus_stats) or a BlockStats (from "
        f"tl_leadterms.block_stats, needed for ci=), got {type(stats).__name__}"
    )


def uncertainty_options(stats: object, uncertainty: Uncertainty) -> dict[str, Any]:
    """The named analyses' keywords of ``uncertainty`` as a results file records them
    (``null``, ``ci``, ``bootstrap``, ``population``; empty when none is asked for, so a plain
    sweep's settings stay as they were); ``ci`` needs a ``BlockStats``."""
    if uncertainty.ci is not None and not isinstance(stats, BlockStats):
        raise LeadTermsError(
            f"ci={uncertainty.ci} needs statistics kept per block of windows: pass "
            "stats=tl_leadterms.block_stats(tokens, d_vocab, blocks=20) instead of a "
            f"{type(stats).__name__} (it keeps no blocks to resample), or drop ci"
        )
    return uncertainty.settings()


def _check_rows(rows: Any, analysis: str, label: str) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        if not isinstance(r, dict) or not {"layer", "score", "value"} <= set(r):
            raise LeadTermsError(
                f"analysis {analysis!r} returned {r!r} for checkpoint {label!r}; each row must be "
                "a dict with layer, head, score and value"
            )
        row = {"layer": r["layer"], "head": r.get("head"), "score": str(r["score"])}
        for key in ("value", *(k for k in EXTRA_COLUMNS if k in r)):
            value = r[key]
            if isinstance(value, torch.Tensor):
                value = value.detach().item()
            is_number = value is not None and not isinstance(value, str)
            row[key] = float(value) if is_number else (value or float("nan"))
        out.append(row)
    return out


def analyse(model, stats: Any, chosen: list[Analysis], label: str) -> list[dict[str, Any]]:
    """The rows of every analysis on one model (``stats``: a CorpusStats or a BlockStats)."""
    from tl_leadterms.adapters.view import model_view, own_tokenizer
    from tl_leadterms.checks import check_vocab

    full = full_stats(stats)
    try:
        view = model_view(model, caller="sweep")
        d_vocab, tokenizer = view.d_vocab, view.tokenizer
    except LeadTermsError:  # a custom analysis may take any model; it checks its own input
        d_vocab, tokenizer = None, own_tokenizer(model)
    check_vocab(full, d_vocab=d_vocab, tokenizer=tokenizer, what=f"checkpoint {label!r}")
    rows = []
    for a in chosen:
        given = stats if a.named and a.kwargs.get("ci") is not None else full
        with torch.no_grad():
            found = a.fn(model, given, **a.kwargs)
        rows.extend({"analysis": a.label, **r} for r in _check_rows(found, a.label, label))
    return rows


def stats_fingerprint(stats: CorpusStats | BlockStats) -> str:
    """A content hash of the statistics (sparse counts, kept ids, Δ; for a ``BlockStats`` also
    every block's counts and Q̄) for the resume check."""
    digest = hashlib.sha256()
    full = full_stats(stats)
    parts = [full.pair_codes, full.pair_counts, full.unigram_counts, full.Delta]
    if full.kept is not None:
        parts.append(full.kept)
    if isinstance(stats, BlockStats):
        parts.append(torch.tensor([x for bound in stats.bounds for x in bound]))
        for counts, Q_bar in zip(stats.counts, stats.Q_bars, strict=True):
            parts += [counts.pair_codes, counts.pair_counts, counts.unigram_counts, Q_bar]
    for part in parts:
        digest.update(part.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def setting_value(value: Any) -> Any:
    """A keyword as the results file records it: a ``NullSpec``, ``BootstrapSpec`` or other
    option object (the covariance ``Protocol``, ``Compute``) as its fields (a reference model by
    its fingerprint; where and how fast it runs left out), anything else as it is."""
    if isinstance(value, NullSpec):
        reference = value.reference
        if reference is not None and not isinstance(reference, str):
            reference = checkpoint_fingerprint(reference)
        out = {"permutations": value.permutations, "seed": value.seed, "reference": reference}
        # recorded only when not the default, so files written before it resume
        return out | ({} if value.negligible == NEGLIGIBLE else {"negligible": value.negligible})
    if isinstance(value, BootstrapSpec):
        return {"resamples": value.resamples, "seed": value.seed, "method": value.method,
                "exact": value.exact}  # fmt: skip
    if isinstance(value, Schedule):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):  # Protocol, Compute
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                if f.name not in NOT_SETTINGS}  # fmt: skip
    return value


def settings(chosen: list[Analysis], stats: CorpusStats | BlockStats) -> dict[str, Any]:
    """What a resumed sweep must share with the results file: the analyses (null and interval
    options included) and the statistics."""
    full = full_stats(stats)
    described = {
        "d_vocab": full.d_vocab,
        "k": full.k,
        "n_ctx": full.n_ctx,
        "n_sequences": full.n_sequences,
        "content": stats_fingerprint(stats),  # same shape, other corpus: no resume
    }
    if isinstance(stats, BlockStats):
        described["blocks"] = stats.n_blocks
    return jsonable(
        {
            "format": FORMAT,
            # where and how fast it ran does not change the rows: resume on any device
            "analyses": {
                a.label: {
                    k: _MOVED if (k, v) == ("centre", "tokens") else setting_value(v)
                    for k, v in a.kwargs.items()
                    if k not in NOT_SETTINGS
                }
                for a in chosen
            },
            "stats": described,
        }
    )
