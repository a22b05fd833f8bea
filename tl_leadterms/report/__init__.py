"""`report`: one self-contained HTML file with what a model learned from its corpus.

The file opens offline in any browser: no CDN, no network. From the top: **Findings** (sentences
written from the numbers, :mod:`~tl_leadterms.report.findings`); the provenance of the
statistics and the model; the :func:`~tl_leadterms.decompose` results as layer × head heatmaps
of cosine, explained share and character, with the full table (one ``<tr
class="decompose-row" data-label="L0H0">`` per weight, layer and head) in a ``<details>``
element, collapsed beyond a few layers (:mod:`~tl_leadterms.report.tables` documents the
thresholds below which no character and no implied s·η are shown); a head atlas grid when
given; the actual and predicted attention of a handful of heads (optionally of a later
checkpoint than the decomposition) with their distance from uniform and their agreement;
association lists of chosen words, ranked by a named scoring (cosine by default), with a text
shaded on a diverging scale; and the
training-history, sweep and score figures as embedded PNGs. Every optional part that is missing
is left out with a note.
"""

import datetime
import os
import sys
import types
from pathlib import Path
from typing import Any

from tl_leadterms.adapters.view import tokenizer_for
from tl_leadterms.atomic import write_text
from tl_leadterms.checks import check_bool, check_stats, check_steps
from tl_leadterms.errors import LeadTermsError, check_choice
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel
from tl_leadterms.report import sections
from tl_leadterms.report.findings import findings
from tl_leadterms.report.markup import page
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.stats.neighbours import SCORINGS
from tl_leadterms.theory import Schedule, ScheduleLike, run_shorthands
from tl_leadterms.version import __version__

__all__ = ["report", "statistics_needed"]


def statistics_needed(*, model: bool, words: bool) -> tuple[str, ...] | None:
    """The statistics :func:`report` reads, as ``want=`` of :meth:`CorpusStats.load`.

    With a model, every stored table (``None``): its decomposition and attention views use them
    all. Otherwise the association lists of ``words`` need Φ̄ (B̄ and Σ_B̄ come from the sparse
    counts, always read), and the provenance alone needs the counts.

    >>> statistics_needed(model=False, words=True)
    ('Phi_bar',)
    """
    if model:
        return None
    return ("Phi_bar",) if words else ("B_bar",)


def _check_args(path, stats, text, title) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a file path such as 'report.html', got {path!r}")
    path = Path(path)
    if path.is_dir():
        raise LeadTermsError(f"{str(path)!r} is a folder; pass a file path such as report.html")
    check_stats(stats)
    for name, value in (("text", text), ("title", title)):
        if value is not None and not isinstance(value, str):
            raise LeadTermsError(f"{name} must be a string or None, got {value!r}")
    return path


@run_shorthands
def report(
    path: str | os.PathLike,
    stats: CorpusStats,
    *,
    model: ReadableModel | None = None,
    tokenizer: Any = None,
    text: str | None = None,
    history: Any = None,
    decomposition: Any = None,
    sweep_table: Any = None,
    words: Any = None,
    title: str | None = None,
    schedule: ScheduleLike = None,
    association_stats: Any = None,
    heads: int | list[str] | None = None,
    atlas_html: str | None = None,
    head_atlas: Any = None,
    associations: str = "cosine",
    exclude_special: bool = True,
    attention_model: Any = None,
    attention_step: int | None = None,
    progress: bool = True,
    explorer: Any = None,
    held_out: Any = None,
) -> Path:
    """Write one self-contained HTML report (works offline, no CDN) and return its path.

    Args:
        path: the ``.html`` file to write (atomically; parent folders are created).
        stats: the :class:`~tl_leadterms.CorpusStats` everything is read against.
        model: a HookedTransformer: its config and weight processing go in the provenance, it
            is decomposed when ``decomposition`` is not given, and its attention is shown on
            ``text``.
        tokenizer: reads ``words`` and ``text``; default: the one rule of
            :func:`~tl_leadterms.adapters.view.tokenizer_for` (the model's, then the stats').
        text: a sample text for the attention views (actual heads next to the prediction).
        history: a :class:`~tl_leadterms.training.TrainHistory` (loss and cosine curves).
        decomposition: a :class:`~tl_leadterms.analyses.decompose.Decomposition` to show
            instead of computing one.
        sweep_table: a :class:`~tl_leadterms.sweeps.SweepTable`: one heatmap per score.
        words: association lists (each word's bigram, interchangeability and context
            neighbours): a list of words, or a dict ``{"bigram": ["red"], ...}`` whose kind
            shades ``text`` by that association (a list shades by context).
        title: the page title.
        schedule: the training run, for ``decompose`` and the predicted attention (a
            :class:`~tl_leadterms.theory.Schedule`, an ``(lr, steps)`` pair or the run's
            ``TrainHistory``).
        association_stats: statistics for the association lists only (default ``stats``),
            e.g. of a larger corpus than the model's training windows.
        heads: which heads get an attention view: labels such as ``["L3H1", "L0H2"]``, or a
            number ``n`` of the best and worst agreeing heads. Default: every head when the
            model has at most :data:`~tl_leadterms.report.sections.ATTENTION_VIEWS`, else that
            many (best and worst agreeing).
        atlas_html: the HTML of a head atlas grid (trusted, e.g. from
            :mod:`tl_leadterms.analyses.atlas.figure`), shown in its own section.
        head_atlas: a head atlas object with an ``.html()`` method (used when ``atlas_html``
            is not given).
        associations: how the association lists are ranked and the text shaded: ``"cosine"``
            (default: row and column normalised, reads best), ``"ppmi"`` or ``"raw"`` (the
            paper's values); a caption above the lists names it
            (:mod:`tl_leadterms.stats.neighbours` has the formulas).
        exclude_special: leave the tokenizer's special tokens out of the association lists.
        attention_model: a later checkpoint of the same run whose attention is shown instead
            of ``model``'s (e.g. once the attention is visibly non-uniform); its prediction
            uses the scale ``c`` fitted per layer, and the page says which step each view
            shows.
        attention_step: the training step of ``attention_model``, for those captions.
        progress: a tqdm bar over the sections.
        explorer: an :class:`~tl_leadterms.explorer.Explorer` (from
            :func:`~tl_leadterms.explore`), or True to build one of ``model`` on ``text``:
            embedded (an iframe, offline) at the top of the decomposition section, above the
            static heatmaps.
        held_out: a :class:`~tl_leadterms.analyses.decompose.Decomposition` of the same model
            against statistics of held-out windows (e.g.
            ``decompose(model, block_stats(held_out_windows, ...), ci=0.95)``), shown after
            ``decomposition``: its scores estimate the distribution-level cosines, with their
            intervals, where those of the training windows are exact (the findings say which
            number answers which question).

    Returns:
        The path written.

    Example:
        >>> import tempfile, torch
        >>> from tl_leadterms import corpus_stats, paper_model
        >>> from tl_leadterms.report import report
        >>> stats = corpus_stats(torch.randint(0, 12, (16, 9)), d_vocab=12, progress=False)
        >>> out = report(tempfile.mkdtemp() + "/r.html", stats=stats, progress=False,
        ...              model=paper_model(d_vocab=12, n_ctx=8, n_layers=1))
        >>> out.read_text().count('class="decompose-row"')  # W_O, V, W, P
        4
    """
    path = _check_args(path, stats, text, title)
    schedule = Schedule.of(schedule)
    lr, steps = schedule.lr, schedule.steps
    assoc = stats if association_stats is None else association_stats
    if not isinstance(assoc, type(stats)):
        raise LeadTermsError(
            f"association_stats must be a CorpusStats or None, got {type(assoc).__name__}"
        )
    pairs = [] if words is None else sections.word_pairs(words)
    check_choice("associations", associations, SCORINGS)
    check_bool("exclude_special", exclude_special)
    if attention_step is not None:
        check_steps(attention_step, "attention_step")
    tokenizer = tokenizer_for(tokenizer, model, stats)
    title = title or "tl_leadterms report"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    atlas_body = sections.atlas(atlas_html, head_atlas)  # checks the argument before any work
    weights_meta = None
    if model is not None:
        from tl_leadterms.adapters import to_paper

        weights_meta = to_paper(model).metadata
    elif decomposition is not None:
        weights_meta = decomposition.metadata.get("model")
    library = [False]  # the circuitsvis bundle goes once, before the first view that needs it

    def fragment(view) -> str:
        html_text = view.fragment(library=not library[0])
        library[0] = library[0] or "CircuitsVis=" in html_text
        return html_text

    explorer = _explorer(explorer, model, stats, text, tokenizer, schedule, progress)
    bar = progress_bar(total=6, desc="report", disable=not progress)
    if decomposition is None and model is not None:
        from tl_leadterms.analyses.decompose import decompose

        decomposition = decompose(model, stats, schedule=schedule, per_head=True,
                                  progress=progress)  # fmt: skip
    bar.update()
    # the attention views run first: their circuitsvis bundle must precede later views
    attention_body, agreement = sections.attention(
        model,
        stats,
        text,
        tokenizer,
        lr,
        steps,
        heads,
        fragment,
        later=attention_model,
        later_step=attention_step,
    )
    bar.update()
    association_body = sections.associations(assoc, pairs, tokenizer, text, fragment,
                                              associations, exclude_special)  # fmt: skip
    bar.update()
    figure_body = sections.figures(history, sweep_table, decomposition)
    bar.update()
    has_atlas = atlas_html is not None or head_atlas is not None
    told = findings(decomposition, agreement=agreement, history=history,
                    sweep_table=sweep_table, atlas=has_atlas, held_out=held_out)  # fmt: skip
    held_body = "" if held_out is None else (
        "<h3>Against held-out windows of the same corpus</h3>"
        + sections.decomposition(held_out))  # fmt: skip
    body = [
        ("findings", "Findings", told),
        ("provenance", "Provenance",
         sections.provenance(stats, tokenizer, model, weights_meta, lr, steps, date)),
        ("decompose", "Decomposition into corpus statistics",
         ("" if explorer is None else explorer.iframe()) + sections.decomposition(decomposition)
         + held_body),
        ("atlas", "Head atlas", atlas_body),
        ("attention", "Attention on a sample text", attention_body),
        ("associations", "Association lists", association_body),
        ("figures", "Figures", figure_body),
    ]  # fmt: skip
    bar.update()
    write_text(path, page(title, date, __version__, body), parents=True)
    bar.update()
    bar.close()
    return path


def _explorer(explorer: Any, model: Any, stats: Any, text: Any, tokenizer: Any, schedule,
              progress: bool):  # fmt: skip
    """``explorer=``: None, an Explorer as it is, or True: one built of ``model`` on ``text``."""
    from tl_leadterms.explorer.build import Explorer, explore

    if explorer is None or isinstance(explorer, Explorer):
        return explorer
    if explorer is not True:
        raise LeadTermsError(f"explorer must be an Explorer, True or None, got {explorer!r}")
    if model is None or text is None:
        raise LeadTermsError("explorer=True builds the explorer of model= on text=: pass both")
    return explore(model, stats, text=text, tokenizer=tokenizer, schedule=schedule,
                   progress=progress)  # fmt: skip


class _CallableReportModule(types.ModuleType):
    """This subpackage, callable as :func:`report`.

    ``tl_leadterms.report`` names both this subpackage and its function. The package imports its
    public names lazily, so once anything has imported the subpackage, Python's import system
    binds ``tl_leadterms.report`` to the module, and ``from tl_leadterms import report`` would
    hand out the module. Calling the module calls the function, so either object works.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Path:
        return report(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableReportModule
