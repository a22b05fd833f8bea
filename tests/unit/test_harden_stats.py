"""Issue 10 in the stats layer: memory plans, lazy statistics, provenance, degenerate statistics."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tests.reference import dense_corpus_stats
from tl_leadterms import CorpusStats, LeadTermsError, corpus_stats
from tl_leadterms.stats import memory
from tl_leadterms.stats.degenerate import degenerate_reason, negligible
from tl_leadterms.stats.memory import check_memory, plan_memory
from tl_leadterms.stats.provenance import ids_vocab_hash

GiB = 2**30


def windows(n=24, t=9, d_vocab=12, seed=0):
    return torch.randint(0, d_vocab, (n, t + 1), generator=torch.Generator().manual_seed(seed))


# -- 1. memory plan -------------------------------------------------------------------------
def test_plan_counts_the_tables_alive_at_each_peak():
    k, d = 20_000, 20_000**2 * 4  # float32 result, float64 sums: pass two in two row halves
    plan = plan_memory(50_304, k=k, dtype=torch.float32)
    half_table = 10_001 * k * 8
    pairs = 16 * 2**24  # the sparse bigram counts: 2**24 distinct pairs when N·T is unknown
    assert plan.stages["pass two"] == 3 * d + half_table + pairs + (64 << 20)
    assert plan.peak_stage == "pass two"
    only = plan_memory(50_304, dtype=torch.float32, accumulate_dtype=torch.float32,
                       want=("B_bar", "Phi_bar"), n_positions=25_600_000)  # fmt: skip
    assert set(only.stages) == {"pass one"}  # no Ḡ, no pass two
    assert only.peak < 24 * GiB < plan_memory(50_304).peak  # Pythia's full vocabulary fits


def test_a_plan_over_the_available_memory_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda: 8 * GiB)
    with pytest.raises(LeadTermsError) as err:
        corpus_stats(windows(d_vocab=50_304), d_vocab=50_304, progress=False)  # 3 tables of 20 GB
    message = str(err.value)
    assert "need about 56.6 GiB" in message and "only 8.0 GiB is available" in message
    assert "--keep" in message and "--dtype float32" in message and "\n" not in message
    check_memory(plan_memory(50_304, k=2000), available=8 * GiB)  # fits: no error


# -- lazily computed statistics ---------------------------------------------------------------
def test_only_b_and_phi_skip_pass_two_and_missing_ones_say_how():
    tokens = windows()
    ref = dense_corpus_stats(tokens, 12)
    stats = corpus_stats(tokens, d_vocab=12, want=("B_bar", "Phi_bar"), progress=False)
    torch.testing.assert_close(stats.B_bar, ref["B_bar"])
    torch.testing.assert_close(stats.Phi_bar, ref["Phi_bar"])
    assert stats.metadata["statistics"] == ["B_bar", "Phi_bar"]
    for name in ("G_bar", "Q_bar", "Delta"):
        with pytest.raises(LeadTermsError, match=rf"no {name} .*want=None"):
            getattr(stats, name)
    with pytest.raises(LeadTermsError, match="want= names"):
        corpus_stats(tokens, d_vocab=12, want=("Q",), progress=False)


def test_lazy_file_reads_only_the_table_asked_for(tmp_path):
    path = tmp_path / "s.safetensors"
    corpus_stats(windows(), d_vocab=12, progress=False).save(path)
    loaded = CorpusStats.load(path, want=("B_bar",))
    assert not loaded.has("Phi_bar") and loaded.has("B_bar")
    torch.testing.assert_close(loaded.B_bar, dense_corpus_stats(windows(), 12)["B_bar"])
    partial = tmp_path / "p.safetensors"
    corpus_stats(windows(), d_vocab=12, want=("Phi_bar",), progress=False).save(partial)
    assert CorpusStats.load(partial, want=("Phi_bar",)).Phi_bar.shape == (12, 12)
    with pytest.raises(LeadTermsError, match=r"holds no \['Q_bar'\]"):
        CorpusStats.load(partial, want=("Q_bar",))


# -- 4. vocabulary hash -----------------------------------------------------------------------
def test_token_array_stats_record_a_vocabulary_hash_of_the_ids(tmp_path):
    kept = corpus_stats(windows(), d_vocab=12, vocab=[3, 1, 4], progress=False)
    assert kept.metadata["vocab_hash"] == ids_vocab_hash(12, torch.tensor([3, 1, 4]))
    assert kept.metadata["vocab_hash"] != ids_vocab_hash(12, None)
    kept.save(tmp_path / "s.safetensors")
    assert CorpusStats.load(tmp_path / "s.safetensors").metadata["vocab_hash"].startswith("ids:")


# -- 5. checksums, overflow ---------------------------------------------------------------
def _rewrite(path, tensors=None, meta=None):
    loaded = load_file(path)
    with safe_open(path, framework="pt") as f:
        header = json.loads(f.metadata()["tl_leadterms"])
    if tensors:
        tensors(loaded)
    if meta:
        meta(header)
    save_file(loaded, path, metadata={"tl_leadterms": json.dumps(header)})


def _flip_bit(tensors):
    d = tensors["Delta"].clone()  # stored as it is (Ḡ is rebuilt on load, not stored)
    d.view(torch.int64)[2] ^= 1 << 20  # one bit of one float64 entry
    tensors["Delta"] = d


@pytest.mark.parametrize(
    ("tensors", "meta", "match"),
    [
        (_flip_bit, None, "tensor Delta does not match its checksum"),
        (None, lambda m: m.update(n_sequences=m["n_sequences"] * 10), "metadata does not match"),
        (None, lambda m: m.update(n_sequences=10**30), r"not positive integers below 2\*\*53"),
        (None, lambda m: m.update(n_sequences=1e30), r"not positive integers below 2\*\*53"),
    ],
)
def test_edited_or_corrupted_files_are_refused(tmp_path, tensors, meta, match):
    path = tmp_path / "s.safetensors"
    corpus_stats(windows(), d_vocab=12, progress=False).save(path)
    _rewrite(path, tensors, meta)
    with pytest.raises(LeadTermsError, match=match):
        CorpusStats.load(path)


# -- 6. degenerate statistics -------------------------------------------------------------------
def test_one_repeated_token_makes_q_and_delta_degenerate():
    stats = corpus_stats(torch.full((16, 9), 5), d_vocab=12, progress=False)
    assert stats.metadata["degenerate"] == {
        "Phi_bar": False, "G_bar": False, "Q_bar": True, "Delta": True,
    }  # fmt: skip
    assert "Q̄ is zero up to rounding" in degenerate_reason(stats, "Q_bar")
    assert degenerate_reason(corpus_stats(windows(), d_vocab=12, progress=False), "Q_bar") is None


def test_negligible_is_relative_to_the_scale_and_the_summing_dtype():
    noise = torch.full((4, 4), 1e-15, dtype=torch.float64)  # norm 4e-15
    assert negligible(noise, scale=1.0)  # below 1e3 · 2.2e-16
    assert not negligible(noise, scale=1e-3)
    assert negligible(noise.float(), scale=1e-6)  # summed in float32: 1e3 · 1.2e-7 · 1e-6
    assert not negligible(noise.float(), scale=1e-6, summed_in=torch.float64)


def test_top_says_a_token_never_occurred():
    tokens = windows() % 10  # ids 10 and 11 never occur
    stats = corpus_stats(tokens, d_vocab=12, progress=False)
    for matrix in ("bigram", "context"):
        out = stats.top(matrix, 11)  # no arbitrary score-0 neighbours: an empty list that says why
        assert len(out) == 0 and "never occurs in the corpus" in out.note
    assert len(stats.top("bigram", 3, n=2)) == 2
