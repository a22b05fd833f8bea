"""The one significance rule (results.null.verdict) on constructed cases, and the same marking
in every view: the text table, the HTML table, the report's findings, the explorer's data and
the command line's output.

Expected verdicts are written from the rule's wording (docs/guides/effect-sizes.md): negligible
when |excess| < 0.01, unreachable when 1/(R + 1) > 0.05 or a row that beat every permutation
still has q > 0.05, stands out when q ≤ 0.05 with a positive excess, else not distinguished.
"""

import json
import math
import re

import numpy as np
import pytest
import torch

from tests.unit.test_reference import markov_tokens
from tl_leadterms import corpus_stats, decompose, explore, paper_model, train
from tl_leadterms.analyses.decompose import report_section
from tl_leadterms.cli import main
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.tiny import save_tiny_model
from tl_leadterms.results.null import NullSpec, add_verdicts, verdict

V, T = 20, 8
UNREACHABLE_LINE = "null of 9 permutations: no row can reach q ≤ 0.05"


@pytest.mark.parametrize(
    ("row", "R", "expected"),
    [
        ({"p": 0.01, "q": 0.01, "excess": 0.3}, 99, "stands out"),
        ({"p": 0.01, "q": 0.01, "excess": 0.004}, 99, "negligible"),  # tiny but significant
        ({"p": 0.01, "q": 0.01, "excess": -0.009}, 99, "negligible"),
        ({"p": 0.3, "q": 0.4, "excess": 0.2}, 99, "not distinguished"),
        ({"p": 0.1, "q": 0.1, "excess": 0.5}, 9, "unreachable"),  # 1/(9 + 1) > 0.05
        ({"p": 0.5, "q": 0.5, "excess": 0.5}, 9, "unreachable"),  # no row of this null can
        ({"p": 0.01, "q": 0.08, "excess": 0.5}, 99, "unreachable"),  # at its floor, q above α
        ({"p": 0.05, "q": 0.05, "excess": 0.5}, 19, "stands out"),  # the floor is α itself
        ({"p": 0.02, "q": 0.08, "excess": 0.5}, 99, "not distinguished"),  # one draw beat it
        ({"p": math.nan, "q": math.nan, "excess": math.nan}, 99, None),
        ({"cosine": 0.9}, 99, None),
    ],
)
def test_the_rule_from_its_wording(row, R, expected):
    assert verdict(row, R) == expected


def test_the_threshold_is_an_option_of_the_null():
    row = {"p": 0.01, "q": 0.01, "excess": 0.03}
    assert verdict(row, 99) == "stands out"
    assert verdict(row, 99, negligible=0.05) == "negligible"
    (marked,) = add_verdicts([dict(row)], NullSpec(99, negligible=0.05))
    assert marked["verdict"] == "negligible" and marked["q"] == 0.01
    with pytest.raises(Exception, match="negligible must be a number in"):
        NullSpec(99, negligible=1.5)


def test_q_is_benjamini_hochberg_and_floor_rows_are_unreachable_among_many():
    # 2 rows beat all of 99 draws among 20: q = 0.01·20/2 = 0.1 > 0.05 -> unreachable, not grey
    rows = [{"p": 0.01, "excess": 0.4}] * 2 + [{"p": 0.6, "excess": 0.2}] * 18
    rows = add_verdicts([dict(r) for r in rows], NullSpec(99))
    assert [r["q"] for r in rows[:2]] == pytest.approx([0.1, 0.1])
    assert [r["verdict"] for r in rows[:3]] == ["unreachable", "unreachable", "not distinguished"]


# ---- the views of one table ------------------------------------------------------------------


@pytest.fixture(scope="module")
def stats():
    return corpus_stats(markov_tokens(96, T + 1, V, seed=6), d_vocab=V, progress=False)


@pytest.fixture(scope="module")
def trained(stats):
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2)
    train(model, markov_tokens(96, T + 1, V, seed=6), lr=1.0, steps=3, progress=False)
    return model


def _grey_rows(html: str) -> int:
    """Dimmed rows of the main table (the folded one under it repeats them)."""
    return len(re.findall(r'<tr class="tl-row tl-dim"', html.split("<details", 1)[0]))


def test_a_null_too_small_says_so_in_one_line_in_every_view(trained, stats):
    d = decompose(trained, stats, schedule=(1.0, 3), null=9, per_head=True, progress=False)
    tested = [r for r in d.rows if r.get("verdict")]
    # the trained model's weights are their leading terms: every excess is large
    assert tested and all(r["excess"] > 0.5 for r in tested)
    assert {r["verdict"] for r in tested} == {"unreachable"}
    text, html = repr(d), d._repr_html_()
    assert text.count(UNREACHABLE_LINE) == 1 and text.splitlines()[-1].endswith("pass null=99")
    assert html.count(UNREACHABLE_LINE) == 1 and _grey_rows(html) == 0
    said = " ".join(report_section(d).findings)
    assert said.count(UNREACHABLE_LINE) == 1 and f"{len(tested)} unreachable" in said
    explorer = explore(trained, stats, text=[1, 4, 2, 7, 3], schedule=(1.0, 3), null=9,
                       pair_tokens=10, n=3, progress=False)  # fmt: skip
    summary = explorer.data["summary"]
    assert not any(h["faint"] for h in summary["heads"])
    assert {h["verdict"] for h in summary["heads"]} == {"unreachable"}
    assert len(summary["notes"]) == 1 and UNREACHABLE_LINE in summary["notes"][0]


def test_a_tiny_but_significant_excess_is_negligible_in_every_view(trained, stats):
    # W of layer 0 = a constant map (what every token shares; Q̄ sums to 0, so it adds nothing
    # to ⟨W, Q̄⟩) plus a trace of Q̄: every permutation scores below it, by a cosine of ~0.004
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2)
    model.load_state_dict(trained.state_dict())
    Q = stats.Q_bar.float()
    with torch.no_grad():
        model.blocks[0].attn.W_Q.copy_((torch.ones(V, V) + 0.004 * Q / Q.norm() * V)[None])
    d = decompose(model, stats, schedule=(1.0, 3), null=19, per_head=True, progress=False)
    row = d.row("W", 0)
    assert row["p"] == pytest.approx(1 / 20) and row["z"] > 3  # as strong as this null gets
    assert 0 < row["excess"] < 0.01 and row["verdict"] == "negligible"
    others = [r for r in d.rows if r.get("verdict") and r is not row]
    assert all(r["verdict"] == "stands out" for r in others)  # the rest of the model: its terms
    line = next(s for s in repr(d).splitlines() if s.startswith("W      L0H0"))
    assert "negligible" in line
    html = d._repr_html_()
    assert _grey_rows(html) == 1  # that row, and only it
    grey = re.search(r'<tr class="tl-row tl-dim">(.*?)</tr>', html, re.S).group(1)
    assert ">L0H0<" in grey and ">W<" in grey
    explorer = explore(model, stats, text=[1, 4, 2, 7, 3], schedule=(1.0, 3), null=19,
                       pair_tokens=10, n=3, progress=False)  # fmt: skip
    cells = {h["label"]: h for h in explorer.data["summary"]["heads"]}
    assert cells["L0H0"]["verdict"] == "negligible" and cells["L0H0"]["faint"]
    assert cells["L1H0"]["verdict"] == "stands out" and not cells["L1H0"]["faint"]
    said = " ".join(report_section(d).findings)
    assert "1 negligible" in said


def test_the_command_line_prints_the_table_and_its_rows_say_the_same(tmp_path, capsys):
    folder = save_tiny_model("gpt_neox", tmp_path / "neox", d_vocab=V, n_layers=1, d_model=16,
                             n_heads=2, n_ctx=T)  # fmt: skip
    windows = tmp_path / "ids.npy"
    np.save(windows, markov_tokens(64, T + 1, V, seed=2).numpy())
    stats_path = tmp_path / "stats.safetensors"
    assert main(["stats", str(windows), "-o", str(stats_path), "--d-vocab", str(V),
                 "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["decompose", str(folder), str(stats_path), "--null", "9", "--quiet"]) == 0
    text = capsys.readouterr().out
    assert main(["decompose", str(folder), str(stats_path), "--null", "9", "--json",
                 "-o", str(tmp_path / "d.json")]) == 0  # fmt: skip
    rows = json.loads((tmp_path / "d.json").read_text())["rows"]
    from tl_leadterms import CorpusStats

    direct = decompose(load_model(str(folder), device="cpu"), CorpusStats.load(stats_path),
                       null=9, per_head=True, progress=False)  # fmt: skip
    assert text.strip() == repr(direct).strip()  # the CLI prints the table itself
    assert [r.get("verdict") for r in rows] == [r.get("verdict") for r in direct.rows]
    assert {r["verdict"] for r in rows if r.get("verdict")} <= {"unreachable", "negligible"}
    if any(r.get("verdict") == "unreachable" for r in rows):
        assert text.count(UNREACHABLE_LINE) == 1
