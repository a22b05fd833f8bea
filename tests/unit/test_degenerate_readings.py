"""Degenerate readings named, not printed as numbers (issue 42), each on a constructed model; and
the covariance protocol in one call, with its sweep's baseline.

Expected values are written from the documented definitions: a common share is
``|c| / (|s| + |c|)`` of the two parts of a numerator; ``explained`` is undefined below a KL gap
of ``UNIGRAM_GAP``; a fitted scale at the edge of its search is printed as that edge.
"""

import html
import inspect
import math

import pytest
import torch

from tests.unit.test_reference import markov_tokens
from tl_leadterms import corpus_stats, covariance_similarity, output_agreement, paper_model, sweep
from tl_leadterms.analyses.attention import attention_agreement, plot_attention
from tl_leadterms.analyses.covariance import Compute, Protocol
from tl_leadterms.analyses.decompose.fit import dense_parts
from tl_leadterms.analyses.output.compute import UNIGRAM_GAP
from tl_leadterms.analyses.output.fit import at_bound
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.sweeps.analyses import choose_analyses, settings

V, T = 12, 8
LOWER_EDGE = "c at the search's lower edge"


# ---- shares stay in their range --------------------------------------------------------------


def test_common_share_of_opposing_parts_stays_in_range():
    g = torch.Generator().manual_seed(3)
    T_map = torch.randn(V, V, generator=g, dtype=torch.float64) + 2.0  # a large common part
    T_c = T_map - T_map.mean(0) - T_map.mean(1, keepdim=True) + T_map.mean()
    common = T_map - T_c
    # M: the token-specific part against T's, the common part with it, nearly cancelling
    s_part = -float((T_c * T_c).sum())
    k = 1.02 * -s_part / float((common * common).sum())
    M = -T_c + k * common
    specific, share = dense_parts(M[None], T_map)
    c_part = float((M * T_map).sum()) - s_part
    assert abs(s_part + c_part) < 0.05 * abs(s_part)  # the raw numerator nearly vanishes
    assert 1 - s_part / (s_part + c_part) > 10  # the former "share of the sum" left [0, 1]
    assert float(share[0]) == pytest.approx(abs(c_part) / (abs(s_part) + abs(c_part)), rel=1e-9)
    assert 0 <= float(share[0]) <= 1 and float(specific[0]) == pytest.approx(-1.0)


# ---- output_agreement: the unigram baseline and fitted scales at their bound ----------------


@pytest.fixture(scope="module")
def uniform_run():
    # a near-uniform corpus and the untrained (zero) paper model: the model is at its unigram
    tokens = torch.randint(0, V, (4096, T + 1), generator=torch.Generator().manual_seed(1))
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    return stats, tokens, paper_model(d_vocab=V, n_ctx=T, n_layers=1)


def test_explained_is_undefined_at_the_unigram_baseline(uniform_run):
    stats, tokens, model = uniform_run
    out = output_agreement(model, stats, tokens[:64, :-1], fit=True, null=9, progress=False)
    gap = out.metadata["unigram_kl"]
    assert 0 < gap < UNIGRAM_GAP == 1e-3
    reason = f"undefined: the model is at its unigram baseline (KL gap {gap:.1e} < 0.001)"
    for name in ("leading", "bigram"):
        row = out.row(name)
        assert math.isnan(row["explained"]) and row["reason"] == reason
    assert out.row("leading").get("verdict") is None  # no score, no verdict
    line = f"leading: explained {reason}"
    assert line in repr(out).splitlines() and html.escape(line) in out._repr_html_()
    from tl_leadterms.analyses.output import report_section

    assert html.escape(line) in report_section(out).findings  # and the report says so


def test_fitted_scales_the_calibration_cannot_vouch_for_are_flagged(uniform_run):
    stats, tokens, model = uniform_run
    out = output_agreement(model, stats, tokens[:64, :-1], fit=True, progress=False)
    lead = out.row("leading")
    # a uniform model: the value and attention terms change no prediction, so the KL pins
    # neither c_V nor c_W (where the fit left them non-zero)
    flagged = [c for c in ("c_V", "c_W") if lead[c] != 0]
    assert flagged and lead["c_at_bound"] == ", ".join(flagged)
    text = repr(out)
    row = next(s for s in text.splitlines() if s.split()[0] == "leading")
    assert row.count("*") == len(flagged)
    assert f"leading: * {lead['c_at_bound']} at the fit's bound" in text
    assert f"* {lead['c_at_bound']} at the fit&#x27;s bound" in out._repr_html_()


def test_at_bound_rules():
    def kl(c_O, c_V, c_W):  # pins c_O at 2 and c_V at 3, never reads c_W
        return (c_O - 2.0) ** 2 + (c_V - 3.0) ** 2 + 1.0 + 0.0 * c_W

    assert at_bound(kl, (2.0, 3.0, 0.0)) is None  # c_W = 0: not fitted, not flagged
    assert at_bound(kl, (2.0, 3.0, 5.0)) == "c_W"  # the KL does not pin it
    assert at_bound(kl, (2.0, -3.0, 0.0)) == "c_V"  # against the theory's sign
    assert at_bound(kl, (2.0e3, 3.0, 0.0)) == "c_O"  # s·η beyond the scan's 1e3
    assert at_bound(lambda c: (c - 2.0) ** 2 + 1.0, (2.0,)) is None


# ---- attention: a scale at the edge of its search ---------------------------------------------


def test_a_scale_at_the_lower_edge_is_printed_as_that_edge(capsys):
    from tl_leadterms.cli.demo import _print_agreement
    from tl_leadterms.data import generate_stories, train_word_tokenizer
    from tl_leadterms.explorer.data import attention_data

    stories = generate_stories(40, seed=1)
    tok = train_word_tokenizer(stories, 60)
    from tl_leadterms import make_windows

    windows = make_windows(stories, n_ctx=T, tokenizer=tok)[:32]
    stats = corpus_stats(windows, d_vocab=len(tok), tokenizer=tok, progress=False)
    model = paper_model(d_vocab=len(tok), n_ctx=T, n_layers=1, tokenizer=tok)  # W = 0: uniform
    text = "the little girl saw a red ball"
    ids = torch.tensor([tok.encode(text, add_special_tokens=False)[:T]])
    row = attention_agreement(model, stats, ids, progress=False).rows[0]
    assert row["scale_at_bound"] == "lower"
    assert LOWER_EDGE in repr(attention_agreement(model, stats, ids, progress=False))
    view = plot_attention(model, stats, text, tokenizer=tok)
    assert html.escape(LOWER_EDGE) in view.fragment(library=False)
    data = attention_data(model, stats, ids[0].tolist(), None)
    assert data["heads"]["L0H0"]["scale_text"].startswith(LOWER_EDGE)
    run = {"later": model, "later_step": 0, "model": model, "stats": stats, "text": text}
    _print_agreement(run, tok, 1.0, 0)  # a later checkpoint: c fitted per head
    printed = capsys.readouterr().out
    assert LOWER_EDGE in printed and "predicted uniform" in printed and "c = 0" not in printed


# ---- the covariance protocol in one call --------------------------------------------------------


@pytest.fixture(scope="module")
def protocol_case():
    tokens = markov_tokens(64, T + 1, V, seed=4)
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad and p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return stats, model


def test_covariance_signature_and_its_shorthands(protocol_case):
    stats, model = protocol_case
    assert len(inspect.signature(inspect.unwrap(covariance_similarity)).parameters) <= 12
    plain = covariance_similarity(model, stats, normalize="both", value_map="write",
                                  dtype=torch.float64, batch_size=4, progress=False)  # fmt: skip
    objects = covariance_similarity(
        model, stats, protocol=Protocol(normalize="both", value_map="write"),
        compute=Compute(dtype=torch.float64, batch_size=4), progress=False,
    )  # fmt: skip
    assert plain.rows == objects.rows and plain.metadata == objects.metadata
    assert [r["score"] for r in plain.rows] == [
        "attention", "attention_specific", "value_post", "value_post_specific", "value_attn",
        "value_attn_specific",
    ]  # fmt: skip
    raw_only = covariance_similarity(model, stats, protocol=Protocol(specific=False),
                                     progress=False)  # fmt: skip
    assert [r["score"] for r in raw_only.rows] == ["attention", "value_post", "value_attn"]
    with pytest.raises(LeadTermsError, match="normalize is given twice"):
        covariance_similarity(model, stats, protocol=Protocol(normalize="both"),
                              normalize="theory", progress=False)  # fmt: skip
    with pytest.raises(LeadTermsError, match="centre must be one of"):
        covariance_similarity(model, stats, centre="rows", progress=False)


def test_sweep_settings_stay_and_the_former_centre_is_not_resumed(protocol_case):
    stats, _ = protocol_case
    chosen = choose_analyses("covariance", {}, {"normalize": "both", "value_map": "write"})
    assert settings(chosen, stats)["analyses"] == {
        "covariance": {"normalize": "both", "value_map": "write"}
    }  # as files written before record it: they resume
    moved = choose_analyses("covariance", {}, {"centre": "tokens"})
    assert settings(moved, stats)["analyses"]["covariance"]["centre"] != "tokens"
    nulled = choose_analyses("covariance", {"null": 9}, {})
    assert settings(nulled, stats)["analyses"]["covariance"]["null"] == 9


def test_a_sweep_shows_its_baseline(protocol_case):
    stats, model = protocol_case
    trained = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    trained.load_state_dict(model.state_dict())
    from tl_leadterms import train

    train(trained, markov_tokens(64, T + 1, V, seed=4), lr=1.0, steps=2, progress=False)
    table = sweep([("late", trained), ("untrained", model)], stats, analyses="covariance",
                  normalize="both", progress=False)  # fmt: skip
    assert table.metadata["baseline"] == "late"  # no steps known: the first checkpoint
    for r in table.rows:
        key = (r["score"], r["layer"], r["head"])
        first = next(
            b
            for b in table.rows
            if b["checkpoint"] == "late" and (b["score"], b["layer"], b["head"]) == key
        )
        assert r["vs_baseline"] == pytest.approx(r["value"] - first["value"], abs=1e-12)
    text = repr(table)
    assert "vs baseline" in text and "baseline: late" in text
    # with steps, the step-0 checkpoint is the baseline wherever it comes
    from tl_leadterms.sweeps import SweepTable

    rows = [{"checkpoint": c, "step": s, "layer": 0, "head": None, "analysis": "covariance",
             "score": "value_post", "value": v, "common_share": 0.9995}
            for c, s, v in (("step64", 64, 0.83), ("step0", 0, 0.97))]  # fmt: skip
    table = SweepTable(rows, ["step64", "step0"], {})
    assert table.metadata["baseline"] == "step0"
    assert [r["vs_baseline"] for r in table.rows] == pytest.approx([0.83 - 0.97, 0.0])
    assert "common_share ≥ 0.9" in repr(table) and "value_post L0 step64" in repr(table)


def test_a_distributed_sweep_writes_the_theory_file_of_the_option_objects(protocol_case,
                                                                          tmp_path):  # fmt: skip
    from tl_leadterms.analyses.covariance import prepare_theory
    from tl_leadterms.analyses.covariance.theory_file import load_theory

    stats, _ = protocol_case
    path = tmp_path / "theory.safetensors"
    kwargs = {"theory": path, "protocol": Protocol(normalize="both"),
              "compute": Compute(dtype=torch.float32)}  # fmt: skip
    assert prepare_theory(stats, kwargs, None)
    assert load_theory(path, stats, dtype=torch.float32).dtype == torch.float32
    with pytest.raises(LeadTermsError, match="dtype='float32'"):
        load_theory(path, stats)  # written for float32, as the Compute asked


def test_each_row_has_the_interval_of_its_own_score(protocol_case):
    """The factored bootstrap (the model's factors reused on every resample) against scoring
    each resample's statistics from scratch, for the raw and the specific rows alike."""
    from tl_leadterms import block_stats
    from tl_leadterms.results.bootstrap import BootstrapSpec, add_interval
    from tl_leadterms.results.uncertainty import Uncertainty

    _, model = protocol_case
    blocks = block_stats(markov_tokens(64, T + 1, V, seed=9), d_vocab=V, blocks=4, progress=False)
    sure = Uncertainty(ci=0.9, bootstrap=BootstrapSpec(3, seed=1))
    sim = covariance_similarity(model, blocks, uncertainty=sure, progress=False)
    boot = sure.resolve(blocks, model).boot
    draws = torch.tensor([[r["value"] for r in covariance_similarity(model, s, progress=False).rows]
                          for s in boot.resamples()], dtype=torch.float64)  # fmt: skip
    want = [{"value": r["value"]} for r in sim.rows]
    add_interval(want, draws, boot, "value")
    assert any(r["score"].endswith("_specific") for r in sim.rows)
    for got, ref in zip(sim.rows, want, strict=True):
        assert got["lo"] == pytest.approx(ref["lo"], abs=1e-9), got["score"]
        assert got["hi"] == pytest.approx(ref["hi"], abs=1e-9), got["score"]
