"""`report`: one self-contained HTML file composed from results that already exist.

Each result renders its own section (:class:`~tl_leadterms.results.sections.Section`): a
decomposition its heatmaps, full table and scores figure; a head atlas its grid; attention
views (:func:`~tl_leadterms.analyses.attention.plot_attention`) the views with each head's
distance from uniform attention; association lists
(:func:`~tl_leadterms.explorer.associations`) the lists and the shaded text; a training history
and a sweep table their figures; an explorer itself, in a frame; any other analysis its table.
Each section also writes the findings about its own result, which the page gathers on top,
followed by the provenance of the statistics, the model and the run. The page opens offline in
any browser: no CDN, no network.
"""

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any

from tl_leadterms.adapters.view import model_view, tokenizer_for
from tl_leadterms.atomic import write_text
from tl_leadterms.checks import check_bool, check_stats
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel
from tl_leadterms.reports.page import page
from tl_leadterms.results.sections import Section, kv_table, note
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.version import __version__

__all__ = ["provenance", "report", "statistics_needed"]


def statistics_needed(*, model: bool, words: bool) -> tuple[str, ...] | None:
    """The statistics a report's results read, as ``want=`` of :meth:`CorpusStats.load`.

    With a model, every stored table (``None``): its decomposition and attention views use them
    all. Otherwise the association lists of ``words`` need Φ̄ (B̄ and Σ_B̄ come from the sparse
    counts, always read), and the provenance alone needs the counts.

    >>> statistics_needed(model=False, words=True)
    ('Phi_bar',)
    """
    if model:
        return None
    return ("Phi_bar",) if words else ("B_bar",)


def report(
    path: str | os.PathLike,
    *results: Any,
    stats: CorpusStats | None = None,
    model: ReadableModel | None = None,
    title: str | None = None,
    progress: bool = True,
) -> Path:
    """Write one self-contained HTML report of ``results`` (works offline) and return its path.

    Args:
        path: the ``.html`` file to write (atomically; parent folders are created).
        *results: what to show, in the order given, each rendering its own section: a
            :func:`~tl_leadterms.decompose` result (one against held-out windows is titled so),
            a :func:`~tl_leadterms.head_atlas`,
            :func:`~tl_leadterms.analyses.attention.plot_attention`'s views,
            :func:`~tl_leadterms.explorer.associations`, a
            :class:`~tl_leadterms.training.TrainHistory`, a
            :class:`~tl_leadterms.sweeps.SweepTable`, an :func:`~tl_leadterms.explore`
            explorer, or any other analysis's result. Nothing is computed again.
        stats: the :class:`~tl_leadterms.CorpusStats` the results were computed against, for
            the provenance (optional).
        model: the model, for the provenance of its configuration (optional; read, not
            converted).
        title: the page title.
        progress: a tqdm bar over the sections.

    Returns:
        The path written.

    Example:
        >>> import tempfile, torch
        >>> from tl_leadterms import corpus_stats, decompose, paper_model
        >>> stats = corpus_stats(torch.randint(0, 12, (16, 9)), d_vocab=12, progress=False)
        >>> d = decompose(paper_model(d_vocab=12, n_ctx=8, n_layers=1), stats)
        >>> out = report(tempfile.mkdtemp() + "/r.html", d, stats=stats, progress=False)
        >>> out.read_text().count('class="decompose-row"')  # W_O, V, W, P
        4
    """
    path = _check_path(path)
    stats = None if stats is None else check_stats(stats)
    if title is not None and not isinstance(title, str):
        raise LeadTermsError(f"title must be a string or None, got {title!r}")
    check_bool("progress", progress)
    if not results:
        raise LeadTermsError(
            "report needs at least one result: e.g. report(path, decompose(model, stats), "
            "head_atlas(model, stats), history)"
        )
    sections = [_section(r) for r in progress_bar(results, desc="report", disable=not progress)]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    told = "".join(f"<li>{f}</li>" for s in sections for f in s.findings)
    top = [
        Section("findings", "Findings", f'<ul class="findings">{told}</ul>'),
        Section("provenance", "Provenance", provenance(stats, model, results, date)),
    ]
    text = page(title or "tl_leadterms report", date, __version__, top + _unique(sections))
    write_text(path, text, parents=True)
    return path


def _check_path(path: Any) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a file path such as 'report.html', got {path!r}")
    if Path(path).is_dir():
        raise LeadTermsError(f"{str(path)!r} is a folder; pass a file path such as report.html")
    return Path(path)


def _section(result: Any) -> Section:
    render = getattr(result, "report_section", None)
    if not callable(render):
        raise LeadTermsError(
            f"report takes results that render a section (decompose, head_atlas, plot_attention, "
            f"associations, a TrainHistory, a SweepTable, an explorer, ...), got "
            f"{type(result).__name__}"
        )
    return render()


def _unique(sections: list[Section]) -> list[Section]:
    """The sections with repeated ids numbered (``decompose``, ``decompose-2``, ...)."""
    seen: dict[str, int] = {}
    out = []
    for s in sections:
        seen[s.id] = seen.get(s.id, 0) + 1
        out.append(s if seen[s.id] == 1 else dataclasses.replace(s, id=f"{s.id}-{seen[s.id]}"))
    return out


def provenance(stats: Any, model: Any, results: tuple, date: str) -> str:
    """Where the statistics, the tokenizer, the model and the run come from: the statistics
    and the model as given, the weight processing and the run as the first result that
    records them."""
    meta = next((r.metadata for r in results if isinstance(getattr(r, "metadata", None), dict)
                 and isinstance(r.metadata.get("model"), dict)), {})  # fmt: skip
    parts = ["<h3>Corpus statistics</h3>"]
    if stats is None:
        parts.append(note("No statistics given: pass stats= for their provenance."))
    else:
        kept = "all" if stats.kept is None else "restricted"
        corpus = [("d_vocab", stats.d_vocab), ("kept tokens (k)", f"{stats.k} ({kept})"),
                  ("n_ctx (T)", stats.n_ctx), ("n_sequences", stats.n_sequences),
                  ("centre_vocab", stats.centre_vocab)]  # fmt: skip
        shown = {"d_vocab", "n_ctx", "n_sequences", "centre_vocab", "n_kept"}
        corpus += [(k, v) for k, v in sorted(stats.metadata.items()) if k not in shown]
        parts.append(kv_table(corpus, "provenance corpus"))
    tokenizer = tokenizer_for(None, model, stats)
    recorded = None if stats is None else stats.metadata.get("tokenizer_name")
    name = getattr(tokenizer, "name_or_path", None) or recorded
    parts += ["<h3>Tokenizer</h3>",
              kv_table([("name", name or "none"), ("size", len(tokenizer) if tokenizer else "-")],
                       "provenance tokenizer"), "<h3>Model</h3>"]  # fmt: skip
    if model is not None:
        facts = model_view(model, caller="report").config_facts()
        parts.append(kv_table([(k, v) for k, v in facts.items() if v is not None],
                              "provenance model"))  # fmt: skip
    elif not meta:
        parts.append(note("No model given: pass model= for its configuration."))
    if meta:
        parts += ["<h4>Weight processing (to_paper)</h4>",
                  kv_table(sorted(meta["model"].items()), "provenance weights")]  # fmt: skip
    run = [("tl_leadterms", __version__), ("generated", date)]
    run += [(k, meta[k]) for k in ("lr", "steps") if meta.get(k) is not None]
    parts += ["<h3>Run</h3>", kv_table(run, "provenance run")]
    return "\n".join(parts)
