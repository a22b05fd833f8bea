"""Issue 18, the in-process part: hostile JSON, half precision, unsigned ids, degenerate tables,
atomic sets, special files and results files that are not ours."""

import os
import stat
import threading

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tl_leadterms import CorpusStats, LeadTermsError, corpus_stats
from tl_leadterms.atomic import atomic_path, atomic_set, write_text
from tl_leadterms.jsontext import MAX_DEPTH, parse_json
from tl_leadterms.stats.tokens import check_batch
from tl_leadterms.sweeps.results import ResultsFile

D_VOCAB = 12


@pytest.fixture(scope="module")
def stats():
    g = torch.Generator().manual_seed(0)
    return corpus_stats(torch.randint(0, D_VOCAB, (8, 7), generator=g), d_vocab=D_VOCAB)


def _rewrite_metadata(path, raw: str) -> None:
    with safe_open(path, framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118
    save_file(tensors, str(path), metadata={"tl_leadterms": raw})


# -- hostile JSON ------------------------------------------------------------------------------
def test_deeply_nested_metadata_is_one_error_not_a_recursion_error(stats, tmp_path):
    path = tmp_path / "s.safetensors"
    stats.save(path)
    _rewrite_metadata(path, "[" * 100_000 + "]" * 100_000)  # json.loads: RecursionError
    with pytest.raises(LeadTermsError, match=f"nested deeper than {MAX_DEPTH} levels"):
        CorpusStats.load(path)


def test_parse_json_bounds_depth_and_keeps_surrogates():
    assert parse_json('{"a": {"b": [1]}}', where="x") == {"a": {"b": [1]}}
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(LeadTermsError, match="x: JSON nested deeper"):
        parse_json(deep, where="x")
    # a lone surrogate comes back escaped: no stream, pandas or Arrow column can hold it
    assert parse_json('{"\\udcff": ["\\ud800"]}', where="x") == {"\\udcff": ["\\ud800"]}


def test_text_with_lone_surrogates_is_written_escaped(tmp_path):
    path = write_text(tmp_path / "label.txt", "step\udcff")
    assert path.read_text() == "step\\udcff"


def test_a_torn_line_differs_from_a_foreign_file(tmp_path):
    foreign = tmp_path / "config.json"
    foreign.write_text('{"lr": 0.1, "steps": 3}\n')  # complete JSON, not a sweep record
    with pytest.raises(LeadTermsError, match="is not a results file"), ResultsFile(foreign, {}):
        pass
    assert foreign.read_text() == '{"lr": 0.1, "steps": 3}\n'  # untouched, nothing moved aside
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "config.json"
    ]


def test_a_symlinked_results_file_shares_the_lock_of_its_target(tmp_path):
    real = tmp_path / "r.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with (
        ResultsFile(real, {"a": 1}),
        pytest.raises(LeadTermsError, match="another sweep"),
        ResultsFile(link, {"a": 1}),
    ):
        pass


# -- half precision: refused, end to end --------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_statistics_are_refused(stats, dtype):
    with pytest.raises(LeadTermsError, match=r"must be torch\.float64 or torch\.float32"):
        stats.to(dtype=dtype)
    with pytest.raises(LeadTermsError, match="Phi_bar's dtype must be"):
        CorpusStats(
            vocab=stats.vocab, n_sequences=stats.n_sequences, n_ctx=stats.n_ctx,
            pair_codes=stats.pair_codes, pair_counts=stats.pair_counts,
            unigram_counts=stats.unigram_counts, Phi_bar=stats.Phi_bar.to(dtype),
            G_bar=None, Q_bar=None, Delta=None,
        )  # fmt: skip
    assert stats.to(dtype=torch.float32).dtype == torch.float32  # the supported ones still work


# -- ids and degenerate tables -------------------------------------------------------------------
def test_a_huge_unsigned_id_is_named_as_given():
    ids = np.array([[1, 2, 2**63 + 5]], dtype=np.uint64)
    with pytest.raises(LeadTermsError, match=f"token id {2**63 + 5} at \\[0, 2\\]"):
        check_batch(ids, D_VOCAB)
    with pytest.raises(LeadTermsError, match=f"token id {2**63 + 5} at \\[0, 2\\]"):
        check_batch(torch.from_numpy(ids), D_VOCAB)


def test_top_of_an_all_zero_statistic_says_so():
    one_token = torch.full((4, 6), 3)  # Q̄ is zero up to rounding
    stats = corpus_stats(one_token, d_vocab=D_VOCAB)
    found = stats.top("Q_bar", 3)
    assert len(found) == 0 and "zero up to rounding" in found.note


# -- atomic sets and special files --------------------------------------------------------------
def test_an_atomic_set_lands_together_or_not_at_all(tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("old tokenizer")
    (tmp_path / "tok" / "other.txt").write_text("kept")
    (tmp_path / "stats.bin").write_text("old stats")
    with pytest.raises(RuntimeError, match="disk"), atomic_set() as out:
        out.file(tmp_path / "stats.bin").write_text("new stats")
        (out.files_in(tmp_path / "tok") / "tokenizer.json").write_text("new tok")
        raise RuntimeError("disk gone half-way")
    assert (tmp_path / "stats.bin").read_text() == "old stats"
    assert (tmp_path / "tok" / "tokenizer.json").read_text() == "old tokenizer"
    with atomic_set() as out:
        out.file(tmp_path / "stats.bin").write_text("new stats")
        (out.files_in(tmp_path / "tok") / "tokenizer.json").write_text("new tok")
    assert (tmp_path / "stats.bin").read_text() == "new stats"
    assert (tmp_path / "tok" / "tokenizer.json").read_text() == "new tok"
    assert (tmp_path / "tok" / "other.txt").read_text() == "kept"
    assert sorted(p.name for p in tmp_path.rglob(".*")) == []  # no temporaries left


def test_a_fifo_is_streamed_to_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("data", fifo.read_bytes()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(timeout=30)
    assert got["data"] == b"through the pipe"
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a character device needs root")
def test_a_character_device_and_a_link_to_it_are_never_replaced(stats, tmp_path):
    null = tmp_path / "null"  # the same device as /dev/null, in a folder of the test's own
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    link = tmp_path / "out.safetensors"
    link.symlink_to(null)
    stats.save(link)
    with atomic_path(null) as tmp:
        tmp.write_bytes(b"x" * 1000)
    assert stat.S_ISCHR(null.stat().st_mode) and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null", "out.safetensors"]


def test_a_socket_is_refused(tmp_path):
    import socket

    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(LeadTermsError, match="is a socket, not a file"):
            write_text(path, "x")


def test_a_surrogate_label_in_a_results_file_reads_back_printable(tmp_path):
    path = tmp_path / "r.jsonl"
    with ResultsFile(path, {"a": 1}) as results:
        results.append({"checkpoint": "step\udcff", "rows": []})
    with ResultsFile(path, {"a": 1}) as results:
        assert list(results.records) == ["step\\udcff"]
        "".join(results.records).encode("utf-8")  # printable
