"""`explore`: one offline page over every head of a model, tied to the corpus statistics.

The page (:mod:`~tl_leadterms.explorer.page`) shows a layers × heads grid coloured by a score
you pick, a panel per head and a word box over the corpus statistics (docs/guides/explorer.md);
the numbers are computed here (:mod:`~tl_leadterms.explorer.data`), the page only draws them.
"""

from pathlib import Path
from typing import Any

from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import tokenizer_for
from tl_leadterms.analyses.atlas import CHARACTER_COLOURS, character_key
from tl_leadterms.analyses.attention import attention_scale
from tl_leadterms.analyses.decompose import decompose
from tl_leadterms.atomic import write_bytes
from tl_leadterms.checks import check_bool, check_stats, check_tokens, check_vocab, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.explorer.data import (
    GRID_SCORES,
    attention_data,
    head_summaries,
    neighbour_table,
    pair_tables,
)
from tl_leadterms.explorer.page import page
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.html import circuitsvis_library
from tl_leadterms.results.null import NullSpec, dimmed
from tl_leadterms.results.sections import Section
from tl_leadterms.results.tokens import encode_text, token_texts
from tl_leadterms.results.uncertainty import Uncertainty, shorthands
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import Schedule, ScheduleLike, term

__all__ = ["Explorer", "explore"]


class Explorer:
    """The explorer of one model: renders inline in a notebook, :meth:`save` writes the page.

    Attributes:
        data: the numbers on the page (``summary``, ``heads`` by label, ``words``), plain JSON.
        title: the page's title.
    """

    def __init__(self, data: dict[str, Any], title: str) -> None:
        self.data = data
        self.title = title

    def html(self) -> str:
        """The complete, self-contained page (circuitsvis inlined, no network)."""
        return page(self.data, circuitsvis_library(), self.title)

    def save(self, path: object) -> Path:
        """Write :meth:`html` to ``path`` atomically; returns the path."""
        return write_bytes(path, self.html().encode("utf-8"), parents=True)

    def iframe(self, height: int | None = None) -> str:
        """The page in an ``<iframe srcdoc=...>`` (escaped; scripts allowed, nothing else): how
        a notebook output or another page (:func:`~tl_leadterms.report.report`) embeds it
        without its ids and styles meeting theirs.

        Args:
            height: the frame's height in pixels, fixed. ``None`` (the default): the frame
                follows the page's height as heads are opened (docs/guides/explorer.md).

        >>> e = Explorer({"summary": {"n_layers": 2, "n_heads": 1}, "heads": {}, "words": {}}, "t")
        >>> 'style="width:100%;height:400px' in e.iframe(height=400)
        True
        """
        import html
        import uuid

        if height is not None:
            positive_int("height", height)
        source = html.escape(self.html(), quote=True)
        frame_id = f"tl-explorer-{uuid.uuid4().hex[:12]}"
        n_layers = int(self.data.get("summary", {}).get("n_layers", 1))
        first = (
            height if height is not None else max(420, 330 + 22 * n_layers)
        )  # before a head opens
        style = f"width:100%;height:{first}px;border:1px solid rgba(128,128,128,.45)"
        frame = (f'<iframe class="tl-explorer" id="{frame_id}" srcdoc="{source}" '
                 f'style="{style}" sandbox="allow-scripts"></iframe>')  # fmt: skip
        script = _HOST.replace("FRAME_ID", frame_id).replace("FOLLOW", str(height is None).lower())
        return frame + script

    def _repr_html_(self) -> str:
        return self.iframe()

    def report_section(self) -> Section:
        """The explorer embedded in a report (:meth:`iframe`)."""
        return Section("explorer", "Explorer", self.iframe())

    def __repr__(self) -> str:
        s = self.data["summary"]
        return (f"Explorer({self.title!r}: {s['n_layers']} layers × {s['n_heads']} heads, "
                f"{len(s['tokens'])} text tokens, "
                f"{len(self.data['words'].get('tokens', ()))} words)")  # fmt: skip


#: the host's side of the frame: it tells the frame its theme (dark where its text is light) when
#: the frame loads or posts and when the host's theme changes, and follows the height the frame
#: posts (``{"tl_explorer_height": px}``, explorer.js) when FOLLOW; only this frame's messages
_HOST = """<script>(function(){var f=document.getElementById("FRAME_ID");if(!f)return;
function theme(){var c=getComputedStyle(f.parentElement).color.match(/[\\d.]+/g)||[0,0,0],
w=f.contentWindow;if(w)w.postMessage({tl_theme:+c[0]+ +c[1]+ +c[2]>384?"dark":"light"},"*");}
f.addEventListener("load",theme);new MutationObserver(theme).observe(document.body,
{attributes:true});window.addEventListener("message",function(e){if(!f.contentWindow||
e.source!==f.contentWindow||!e.data)return;theme();var h=Number(e.data.tl_explorer_height);
if(FOLLOW&&isFinite(h)&&h>0)f.style.height=Math.ceil(Math.min(h,20000))+"px";});})();</script>"""


def _labeller(tokenizer: Any):
    if tokenizer is None:
        return lambda ids: [str(i) for i in ids]
    return lambda ids: [tokenizer.decode([int(i)]) for i in ids]


@shorthands
def explore(
    model: ReadableModel,
    stats: CorpusStats,
    *,
    text: str | TokenWindows | None = None,
    tokenizer: Any = None,
    words: list[str] | None = None,
    schedule: ScheduleLike = None,
    null: int | NullSpec | None = 99,
    uncertainty: Uncertainty | None = None,
    pair_tokens: int = 300,
    n: int = 8,
    title: str = "tl_leadterms explorer",
    progress: bool = True,
) -> Explorer:
    """Build the explorer of every head of ``model`` (see the module docstring).

    Args:
        model: a HookedTransformer (any model :func:`~tl_leadterms.decompose` reads).
        stats: corpus statistics over its vocabulary.
        text: the text whose attention the panels show (needs a tokenizer), or its token ids;
            cut to the statistics' and the model's ``n_ctx``.
        tokenizer: encodes ``text`` and labels tokens (default: the one rule of
            :func:`~tl_leadterms.adapters.view.tokenizer_for`: the model's, then the stats').
        words: the word box's first word is ``words[0]`` (it answers every kept token).
        schedule: the training run, if known (the prediction's scale; else fitted): a
            :class:`~tl_leadterms.theory.Schedule`, an ``(lr, steps)`` pair or the run's
            ``TrainHistory``.
        null: permutations of the null for each head's ``excess``, ``z``, ``p``, ``q`` and
            ``verdict`` (None: no null), shorthand for ``uncertainty.null``. The default 99 lets
            a head that beats every permutation stand out as soon as a fifth of the grid's
            ``W`` and value rows do too (Benjamini–Hochberg over all of them); a head the null
            is too small to decide is said so in one line, not faded.
        uncertainty: the whole :class:`~tl_leadterms.results.uncertainty.Uncertainty` of the
            decomposition the panels show.
        pair_tokens: token pairs are ranked among this many most frequent kept tokens.
        n: entries per pair table and association list.
        title: the page's title.
        progress: progress bars over the decomposition, the attention and the pair tables
            (shown only where a step is slow).

    Returns:
        An :class:`Explorer`.
    """
    stats = check_stats(stats)
    view = check_supported(model, caller="explore")
    positive_int("pair_tokens", pair_tokens)
    positive_int("n", n)
    check_bool("progress", progress)
    tokenizer = tokenizer_for(tokenizer, model, stats)
    check_vocab(stats, d_vocab=view.d_vocab, tokenizer=view.tokenizer)
    ids = _text_ids(text, tokenizer, view.d_vocab)[: min(stats.n_ctx, model.cfg.n_ctx)]
    labels = _labeller(tokenizer)
    schedule = Schedule.of(schedule)
    sure = Uncertainty.of(uncertainty)
    if sure.null is None:  # null= (default 99) unless uncertainty holds one
        sure = Uncertainty.of(sure, null=null)
    pw = weights_for_stats(model, stats)  # converted once, for decompose and the pair tables
    d = decompose(pw, stats, weights=["W", "V"], per_head=True, progress=progress,
                  schedule=schedule, uncertainty=sure)  # fmt: skip
    fixed = attention_scale(schedule)
    attn = attention_data(model, stats, ids, fixed, progress=progress, schedule=schedule)
    heads = head_summaries(d, attn["agreement"], attn["detectors"])
    pairs = pair_tables(pw, stats, labels, pair_tokens=pair_tokens, k=n, progress=progress)
    word_ids = [encode_text(w, tokenizer, "word")[0] for w in words or []]
    for label, head in heads.items():
        head["attention"] = attn["heads"].get(label)
        head["pairs"] = pairs["heads"].get(label)
    summary = {
        "title": title, "n_layers": model.cfg.n_layers, "n_heads": model.cfg.n_heads,
        "tokens": labels(ids), "text": token_texts(ids, tokenizer), "scores": attn["scores"],
        "theory": pairs["theory"],
        "pair_tokens": pairs["pair_tokens"], "value_term": term(pw.value_weight).target.formula,
        "colours": CHARACTER_COLOURS,
        "score_names": {**{n: v[2] for n, v in GRID_SCORES.items()}, "character": "character of W"},
        "heads": [_cell(h) for h in heads.values()],
        "notes": d.notes(),
        "first_word": labels(word_ids[:1])[0] if word_ids else None,
        "meta": f"{d.title()}; text of {len(ids)} tokens; token pairs among the "
                f"{pairs['pair_tokens']} most frequent kept tokens",
    }  # fmt: skip
    data = {"summary": summary, "heads": heads,
            "words": neighbour_table(stats, ids, labels, n, tokenizer)}  # fmt: skip
    return Explorer(data, title)


def _cell(head: dict[str, Any]) -> dict[str, Any]:
    """What the grid draws of a head: its scores, and its ``W`` row's verdict, which fades the
    cell as every table dims a row (:func:`~tl_leadterms.results.null.dimmed`)."""
    scores = dict(head["scores"])
    scores["character_key"] = character_key(scores.get("character") or "")
    W = head.get("W", {})
    return {
        "label": head["label"],
        "scores": scores,
        "verdict": W.get("verdict"),
        "faint": dimmed(W),
    }


def _text_ids(text: Any, tokenizer: Any, d_vocab: int) -> list[int]:
    """The token ids of the text the panels show (``text=``: a string or its token ids)."""
    if text is None:
        raise LeadTermsError(
            "explore needs a text for its attention panels and shaded word box: pass "
            "text='the little girl saw a red ball' (with a tokenizer) or text=[token ids]"
        )
    ids = encode_text(text, tokenizer, "text") if isinstance(text, str) else text
    return check_tokens(ids, d_vocab, min_len=2, layout="[pos]", name="text").flatten().tolist()
