"""On a real-text GPT-NeoX series, the paper's value score is high, the null explains it, and
what is left after removing the component every token shares is small early; the table, the
report and the sweep figure say so."""

import json
import re

import pytest

from tl_leadterms.loading.series import load_windows, train_neox_series
from tl_leadterms.reports import report
from tl_leadterms.stats import corpus_stats
from tl_leadterms.sweeps.run import sweep

EARLY = "step4"


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    out = tmp_path_factory.mktemp("series")
    train_neox_series(out, n_stories=60, vocab_size=120, n_ctx=16, d_model=16, n_layers=2,
                      n_heads=2, steps=4, batch_size=8, lr=3e-3, checkpoints=[0, 4],
                      progress=False)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def stats(series):
    d_vocab = json.loads((series / "series.json").read_text())["d_vocab"]
    return corpus_stats(load_windows(series), d_vocab=d_vocab, progress=False)


@pytest.fixture(scope="module")
def table(series, stats):
    return sweep(series, stats, analyses=["covariance"], null=9, progress=False)


def _rows(table, checkpoint: str, score: str) -> list[dict]:
    return [r for r in table.rows if r["analysis"] == "covariance" and r["checkpoint"] == checkpoint
            and r["score"] == score and r["head"] is None]  # fmt: skip


def test_raw_value_score_high_excess_small_specific_small_early(table):
    raw_rows = _rows(table, EARLY, "value_post")
    specific_rows = _rows(table, EARLY, "value_post_specific")  # the same call, its own null
    assert len(raw_rows) == len(specific_rows) == 2
    for raw, tok in zip(raw_rows, specific_rows, strict=True):
        assert raw["value"] > 0.6  # what the paper's protocol shows
        assert abs(raw["excess"]) < 0.01 and raw["verdict"] == "negligible"  # the null explains it
        assert raw["common_share"] > 0.99  # ... it is what every token shares
        assert tok["value"] < 0.15 and tok.get("common_share") is None  # a share of the raw only
        assert raw["vs_baseline"] > 0.5  # ... and it rose from the untrained model's
        assert raw["q"] > 0.05  # nothing stands out at step 4
    for r in table.rows:  # every row of a sweep with null= has the effect size, q and a verdict
        assert {"excess", "excess_share", "q", "verdict", "vs_baseline"} <= set(r)


def test_table_report_and_figure_say_so(table, stats, tmp_path):
    text = repr(table)
    block = text[text.index("covariance: value_post\n") :]
    lines = block.splitlines()
    assert lines[2].strip().startswith("L0") and lines[3].strip().startswith("vs baseline")
    assert lines[4].strip().startswith("excess")
    assert any(line.strip().startswith("common share") for line in lines[:12])
    assert text.splitlines()[-1].startswith(
        "common_share ≥ 0.9 (the raw score is mostly a direction"
    )
    page = report(tmp_path / "r.html", table, stats=stats,
                  progress=False).read_text(encoding="utf-8")  # fmt: skip
    findings = re.search(r'<ul class="findings">(.*?)</ul>', page, re.S).group(1)
    sentence = re.search(r"Sweep covariance value_post: the share of the raw score carried by "
                         r"what every token shares \(common_share\) is median ([01]\.\d+)",
                         findings)  # fmt: skip
    assert sentence is not None and float(sentence.group(1)) > 0.99
    assert "Sweep covariance value_post: score" in findings
    assert "excess over the null mean" in findings and "against the baseline step0" in findings
    assert "covariance: value_post — score, null band and excess" in page
