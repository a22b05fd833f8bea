"""`explore`: one offline page over every head of a model, tied to the corpus statistics.

The page (:mod:`~tl_leadterms.explorer.page`) shows a layers × heads grid coloured by a
score you pick (cosine of ``W`` with ``Q̄``, explained ``R²``, null ``z``, the value path's
cosine, agreement with the predicted attention, or the character of ``W``). Clicking a head
opens its panel: the decomposition of its ``W`` and value path with Shapley shares and
intervals, its attention on the text next to the predicted attention (circuitsvis, inlined
once), the token pairs its ``W`` scores highest next to ``Q̄``'s, its value map's top input →
output tokens next to the value leading term's, and TransformerLens's detector scores. A word
box lists a token's bigram / interchangeability / context neighbours and shades the text by
them. The numbers are computed here (:mod:`~tl_leadterms.explorer.data`); the page only
draws them, loading each head's data when it is clicked.
"""

from pathlib import Path
from typing import Any

import torch

from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.adapters.support import check_supported
from tl_leadterms.analyses.atlas.figure import CHARACTER_COLOURS, character_key
from tl_leadterms.analyses.attention.compute import attention_scale
from tl_leadterms.analyses.decompose.compute import decompose
from tl_leadterms.atomic import write_bytes
from tl_leadterms.checks import check_bool, check_stats, check_vocab, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.explorer.data import (
    GEMM_DTYPES,
    GRID_SCORES,
    attention_data,
    head_summaries,
    pair_tables,
    word_lists,
)
from tl_leadterms.explorer.page import page
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.html import circuitsvis_library
from tl_leadterms.results.tokens import encode_text, token_texts
from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import term

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
                follows the page's height (the page posts it to its host whenever it changes:
                a head's panel opens, a word is typed), so the whole explorer is in the host's
                own scroll and none of it below the fold of a nested one; before the page has
                drawn, and where the host runs no scripts, an estimate of the page's first
                height.

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
        first = height if height is not None else self._first_height()
        style = f"width:100%;height:{first}px;border:1px solid #ddd"
        frame = (f'<iframe class="tl-explorer" id="{frame_id}" srcdoc="{source}" '
                 f'style="{style}" sandbox="allow-scripts"></iframe>')  # fmt: skip
        if height is not None:
            return frame
        return frame + _FOLLOW_HEIGHT.replace("FRAME_ID", frame_id)

    def _first_height(self) -> int:
        """About the page's height before a head is opened: title, grid, legend, word box."""
        n_layers = int(self.data.get("summary", {}).get("n_layers", 1))
        return max(420, 330 + 22 * n_layers)

    def _repr_html_(self) -> str:
        return self.iframe()

    def __repr__(self) -> str:
        s = self.data["summary"]
        return (f"Explorer({self.title!r}: {s['n_layers']} layers × {s['n_heads']} heads, "
                f"{len(s['tokens'])} text tokens, {len(self.data['words'])} words)")  # fmt: skip


#: the host's side of the frame's height: the page posts ``{"tl_explorer_height": px}`` (see
#: explorer.js); only messages from this frame's own window resize it
_FOLLOW_HEIGHT = """<script>(function(){var f=document.getElementById("FRAME_ID");
if(!f)return;window.addEventListener("message",function(e){
if(!f.contentWindow||e.source!==f.contentWindow||!e.data)return;
var h=Number(e.data.tl_explorer_height);
if(isFinite(h)&&h>0)f.style.height=Math.ceil(Math.min(h,20000))+"px";});})();</script>"""


def _labeller(tokenizer: Any):
    if tokenizer is None:
        return lambda ids: [str(i) for i in ids]
    return lambda ids: [tokenizer.decode([int(i)]) for i in ids]


def explore(
    model: ReadableModel,
    stats: CorpusStats,
    *,
    text: str | None = None,
    tokens: TokenWindows | None = None,
    tokenizer: Any = None,
    words: list[str] | None = None,
    null: int | None = 19,
    lr: float | None = None,
    steps: int | None = None,
    s_lr: float | None = None,
    pair_tokens: int = 300,
    n: int = 8,
    title: str = "tl_leadterms explorer",
    progress: bool = True,
    gemm_dtype: Any = None,
) -> Explorer:
    """Build the explorer of every head of ``model`` (see the module docstring).

    Args:
        model: a HookedTransformer (any model :func:`~tl_leadterms.decompose` reads).
        stats: corpus statistics over its vocabulary.
        text: the text whose attention the panels show (needs a tokenizer), cut to the
            statistics' and the model's ``n_ctx``; or pass ``tokens`` (token ids) instead.
        tokens: the token ids to show instead of ``text``.
        tokenizer: encodes ``text`` and labels tokens (default: the model's, then the stats').
        words: extra words for the word box (the text's tokens are always there).
        null: permutations of the null for each head's ``z``/``p`` (None: no null).
        lr, steps, s_lr: the training run, if known (the prediction's scale; else fitted).
        pair_tokens: token pairs are ranked among this many most frequent kept tokens.
        n: entries per pair table and association list.
        title: the page's title.
        progress: progress bars over the decomposition, the attention and the pair tables
            (shown only where a step is slow).
        gemm_dtype: the dtype of the pair tables' per-head block products of a model with
            embeddings (``L·A_h·B_h·R``), the explorer's own pure matrix products:
            ``torch.float64`` (default, also for ``None``) or ``torch.float32``. On the
            real-size benchmark model (30 layers × 9 heads, 300 and 1,000 pair tokens)
            float32 moved the values by at most 7.5e-7 of each block's largest entry, below
            the library's tolerance of 1e-6 but with little room, left every head's top 8
            pairs unchanged, and saved only 7-22% of that stage's CPU time
            (``benchmarks/results/explorer_precision.json``), so float64 stays the default.
            The decomposition and everything else stay in the statistics' dtype.

    Returns:
        An :class:`Explorer`.
    """
    stats = check_stats(stats)
    check_supported(model, caller="explore")
    positive_int("pair_tokens", pair_tokens)
    positive_int("n", n)
    check_bool("progress", progress)
    gemm_dtype = torch.float64 if gemm_dtype is None else gemm_dtype
    if gemm_dtype not in GEMM_DTYPES:
        raise LeadTermsError(
            f"gemm_dtype must be None, torch.float64 or torch.float32, got {gemm_dtype!r}"
        )
    tokenizer = next((t for t in (tokenizer, getattr(model, "tokenizer", None), stats.tokenizer)
                      if t is not None), None)  # fmt: skip
    check_vocab(stats, d_vocab=model.cfg.d_vocab, tokenizer=getattr(model, "tokenizer", None))
    ids = _text_ids(text, tokens, tokenizer)[: min(stats.n_ctx, model.cfg.n_ctx)]
    labels = _labeller(tokenizer)
    run = {"lr": lr, "steps": steps, "s_lr": s_lr}
    pw = weights_for_stats(model, stats)  # converted once, for decompose and the pair tables
    d = decompose(pw, stats, weights=["W", "V"], null=null, per_head=True, progress=progress,
                  **run)  # fmt: skip
    fixed = attention_scale(lr, steps, s_lr, None)
    attn = attention_data(model, stats, ids, fixed, progress=progress, **run)
    heads = head_summaries(d, attn["agreement"], attn["detectors"])
    pairs = pair_tables(pw, stats, labels, pair_tokens=pair_tokens, k=n, progress=progress,
                        gemm_dtype=gemm_dtype)  # fmt: skip
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
        "first_word": labels(word_ids[:1])[0] if word_ids else None,
        "meta": f"{d.title()}; text of {len(ids)} tokens; token pairs among the "
                f"{pairs['pair_tokens']} most frequent kept tokens",
    }  # fmt: skip
    data = {"summary": summary, "heads": heads,
            "words": word_lists(stats, ids, word_ids, labels, n)}  # fmt: skip
    return Explorer(data, title)


def _cell(head: dict[str, Any]) -> dict[str, Any]:
    """What the grid draws of a head: its scores and whether its null says it is faint."""
    scores = dict(head["scores"])
    scores["character_key"] = character_key(scores.get("character") or "")
    p = head.get("W", {}).get("p")
    return {"label": head["label"], "scores": scores, "faint": p is not None and p > 0.05}


def _text_ids(text: Any, tokens: Any, tokenizer: Any) -> list[int]:
    """The token ids of the text the panels show, from exactly one of ``text=`` / ``tokens=``."""
    if text is None and tokens is None:
        raise LeadTermsError(
            "explore needs a text for its attention panels and shaded word box: pass "
            "text='the little girl saw a red ball' (with a tokenizer) or tokens=[token ids]"
        )
    if text is not None and tokens is not None:
        raise LeadTermsError(
            "explore got both text= and tokens=; pass one of them (text='...' or tokens=[ids])"
        )
    if text is not None:
        if not isinstance(text, str):
            raise LeadTermsError(
                f"text must be a str, got {type(text).__name__}; pass token ids as tokens="
            )
        ids = encode_text(text, tokenizer, "text")
    else:
        import torch

        try:
            t = torch.as_tensor(tokens)
        except (TypeError, ValueError, RuntimeError) as err:
            raise LeadTermsError(
                f"tokens must be a list or tensor of token ids, got {type(tokens).__name__}"
            ) from err
        if t.is_floating_point() or t.dtype == torch.bool:
            raise LeadTermsError(f"tokens must be integer token ids, got dtype {t.dtype}")
        ids = t.flatten().tolist()
    if len(ids) < 2:
        raise LeadTermsError(f"the text has {len(ids)} tokens; give at least 2")
    return [int(i) for i in ids]
