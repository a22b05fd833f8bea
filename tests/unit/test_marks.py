"""Intervals of samples about as noisy as their scores are marked the same way in every table
(:mod:`tl_leadterms.results.marks`): a text table puts ``†`` after the interval and a note under
it, the HTML table dashes the whisker and says why in its legend; unmarked rows carry neither."""

import torch

from tl_leadterms import block_stats, decompose, paper_model, train
from tl_leadterms.results.bootstrap import ci_cell
from tl_leadterms.results.marks import WIDE_MARK, WIDE_NOISE_SHARE, is_wide, wide_note
from tl_leadterms.results.table import ResultTable
from tl_leadterms.results.table_html import table_html


def _row(share):
    return {"layer": 0, "head": 0, "score": 0.9, "lo": 0.8, "hi": 0.95, "corrected": 0.9,
            "noise_share": share}  # fmt: skip


def test_the_mark_starts_at_the_threshold():
    assert is_wide(_row(WIDE_NOISE_SHARE)) and not is_wide(_row(WIDE_NOISE_SHARE - 1e-9))
    assert not is_wide(_row(float("nan"))) and not is_wide({"lo": 0.1})
    wide, plain = ci_cell(_row(0.7)), ci_cell(_row(0.2))
    assert len(wide) == len(plain) == 33
    assert wide.endswith(WIDE_MARK) and plain.endswith(" ") and wide[:-1] == plain[:-1]
    assert wide_note([_row(0.2)]) is None
    assert wide_note([_row(0.2), _row(2.0)]).startswith(f"{WIDE_MARK} noise_share >= 0.5")


def test_the_html_table_dashes_the_whisker_of_a_marked_row():
    marked = table_html(ResultTable([_row(0.7), {**_row(0.2), "head": 1}], {}))
    assert marked.count('class="tl-ci tl-wide"') == 1 and marked.count('class="tl-ci"') == 1
    assert marked.count('stroke-dasharray="2 1.5"') == 1 and "dashed whisker" in marked
    plain = table_html(ResultTable([_row(0.2)], {}))
    assert "tl-wide" not in plain and "dashed whisker" not in plain and WIDE_MARK not in plain


def _chain(n: int, g: torch.Generator, transition: torch.Tensor) -> torch.Tensor:
    """``n`` windows of 9 tokens of a Markov chain over 8 tokens."""
    x = torch.zeros(n, 9, dtype=torch.long)
    x[:, 0] = torch.randint(0, 8, (n,), generator=g)
    for t in range(1, 9):
        x[:, t] = torch.multinomial(transition[x[:, t - 1]], 1, generator=g)[:, 0]
    return x


def test_decompose_marks_the_rows_whose_share_passes_the_threshold():
    """Near a cosine of 1 a held-out sample's noise is large against the distance from 1: of
    this model's rows (true cosines near 1, 1,000 held-out windows) some pass the threshold and
    some do not, and exactly those that do are marked, in the text table and in the HTML."""
    g = torch.Generator().manual_seed(0)
    transition = torch.softmax(2.0 * torch.randn(8, 8, generator=g, dtype=torch.float64), 1)
    model = paper_model(d_vocab=8, n_ctx=8, n_layers=1, dtype=torch.float64)
    train(model, _chain(2000, g, transition), lr=0.5, steps=6, progress=False)
    blocks = block_stats(_chain(1000, g, transition), d_vocab=8, blocks=10, progress=False)
    d = decompose(model, blocks, ci=0.9, bootstrap=12, per_head=True, progress=False)
    wide = [is_wide(r) for r in d.rows]
    assert any(wide) and not all(wide), [r["noise_share"] for r in d.rows]
    lines = repr(d).splitlines()
    rows = [line for line in lines if line.split()[0] in ("W_O", "V", "W", "P")]
    assert [f"]{WIDE_MARK}" in line for line in rows] == wide
    assert lines[-1] == wide_note(d.rows)
    assert d._repr_html_().count("tl-wide") == sum(wide)
