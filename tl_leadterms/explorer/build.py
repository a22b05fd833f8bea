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

from tl_leadterms.adapters.convert import weights_for_stats
from tl_leadterms.adapters.support import check_supported
from tl_leadterms.analyses.atlas.figure import CHARACTER_COLOURS, character_key
from tl_leadterms.analyses.attention.compute import attention_scale
from tl_leadterms.analyses.decompose.compute import decompose
from tl_leadterms.atomic import write_bytes
from tl_leadterms.checks import check_stats, check_vocab, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.explorer.data import (
    GRID_SCORES,
    attention_data,
    head_summaries,
    pair_tables,
    word_lists,
)
from tl_leadterms.explorer.page import page
from tl_leadterms.protocols import ReadableModel, TokenWindows
from tl_leadterms.results.html import circuitsvis_library
from tl_leadterms.results.tokens import encode_text
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

    def iframe(self, height: int = 900) -> str:
        """The page in an ``<iframe srcdoc=...>`` (escaped; scripts allowed, nothing else): how
        a notebook output or another page (:func:`~tl_leadterms.report.report`) embeds it
        without its ids and styles meeting theirs."""
        import html

        positive_int("height", height)
        source = html.escape(self.html(), quote=True)
        style = f"width:100%;height:{height}px;border:1px solid #ddd"
        return (f'<iframe class="tl-explorer" srcdoc="{source}" style="{style}" '
                'sandbox="allow-scripts"></iframe>')  # fmt: skip

    def _repr_html_(self) -> str:
        return self.iframe()

    def __repr__(self) -> str:
        s = self.data["summary"]
        return (f"Explorer({self.title!r}: {s['n_layers']} layers × {s['n_heads']} heads, "
                f"{len(s['tokens'])} text tokens, {len(self.data['words'])} words)")  # fmt: skip


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

    Returns:
        An :class:`Explorer`.
    """
    stats = check_stats(stats)
    check_supported(model, caller="explore")
    positive_int("pair_tokens", pair_tokens)
    positive_int("n", n)
    tokenizer = next((t for t in (tokenizer, getattr(model, "tokenizer", None), stats.tokenizer)
                      if t is not None), None)  # fmt: skip
    check_vocab(stats, d_vocab=model.cfg.d_vocab, tokenizer=getattr(model, "tokenizer", None))
    ids = _text_ids(text, tokens, tokenizer)[: min(stats.n_ctx, model.cfg.n_ctx)]
    labels = _labeller(tokenizer)
    run = {"lr": lr, "steps": steps, "s_lr": s_lr}
    pw = weights_for_stats(model, stats)  # converted once, for decompose and the pair tables
    d = decompose(pw, stats, weights=["W", "V"], null=null, per_head=True, progress=False, **run)
    attn = attention_data(model, stats, ids, attention_scale(lr, steps, s_lr, None), **run)
    heads = head_summaries(d, attn["agreement"], attn["detectors"])
    pairs = pair_tables(pw, stats, labels, pair_tokens=pair_tokens, k=n)
    word_ids = [encode_text(w, tokenizer, "word")[0] for w in words or []]
    for label, head in heads.items():
        head["attention"] = attn["heads"].get(label)
        head["pairs"] = pairs["heads"].get(label)
    summary = {
        "title": title, "n_layers": model.cfg.n_layers, "n_heads": model.cfg.n_heads,
        "tokens": labels(ids), "scores": attn["scores"], "theory": pairs["theory"],
        "pair_tokens": pairs["pair_tokens"], "value_term": term(pw.value_weight).target.formula,
        "colours": CHARACTER_COLOURS,
        "score_names": {**{n: v[2] for n, v in GRID_SCORES.items()}, "character": "character of W"},
        "heads": [_cell(h) for h in heads.values()],
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
    if (text is None) == (tokens is None):
        raise LeadTermsError("pass the text to explore as text='...' or tokens=[ids], not both")
    if text is not None:
        if not isinstance(text, str):
            raise LeadTermsError(f"text must be a str, got {type(text).__name__}")
        ids = encode_text(text, tokenizer, "text")
    else:
        import torch

        ids = torch.as_tensor(tokens).flatten().tolist()
    if len(ids) < 2:
        raise LeadTermsError(f"the text has {len(ids)} tokens; give at least 2")
    return [int(i) for i in ids]
