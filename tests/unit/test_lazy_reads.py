"""``top`` and ``report`` read only the tables they need; dense tables are read in verified
row blocks (issue 10): the streamed checksum is the whole-tensor checksum, a flipped bit in a
needed table is refused naming it, an unneeded corrupt table is never read, and row-block
neighbours equal those of the full matrix."""

import hashlib
import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tl_leadterms import CorpusStats, corpus_stats
from tl_leadterms.cli import main
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats import io as scan
from tl_leadterms.stats.neighbours import RowScorer, scored_row
from tl_leadterms.stats.provenance import TensorDigest, tensor_checksum

D_VOCAB, KEEP = 40, 30


@pytest.fixture(scope="module")
def stats_file(tmp_path_factory):
    torch.manual_seed(0)
    tokens = torch.randint(0, D_VOCAB, (60, 9))
    stats = corpus_stats(tokens, d_vocab=D_VOCAB, vocab=KEEP, dtype=torch.float32, progress=False)
    path = tmp_path_factory.mktemp("lazy") / "s.safetensors"
    stats.save(path)
    return path


def flipped(path, tmp_path, name, bit=0):
    """A copy of ``path`` with one low mantissa bit of tensor ``name``'s first entry flipped."""
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[:8], "little")
    begin = json.loads(data[8 : 8 + header_len])[name]["data_offsets"][0]
    data[8 + header_len + begin] ^= 1 << bit  # the low byte of a little-endian float
    out = tmp_path / f"flipped_{name.replace('/', '_')}.safetensors"
    out.write_bytes(bytes(data))
    return out


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- the streamed checksum ----------------------------------------------------------------------
@pytest.mark.parametrize("rows", [1, 3, 7])
def test_digest_over_row_blocks_is_the_whole_tensor_checksum(rows):
    t = torch.randn(7, 5, dtype=torch.float32)
    digest = TensorDigest(t.dtype, t.shape)
    for start in range(0, 7, rows):
        digest.update(t[start : start + rows])
    plain = hashlib.sha256(b"torch.float32(7, 5)" + t.numpy().tobytes()).hexdigest()
    assert digest.hexdigest() == tensor_checksum(t) == plain


def test_scan_table_blocks_are_the_stored_table(stats_file):
    stored = CorpusStats.load(stats_file).Phi_bar
    starts, blocks = [], []
    scan.scan_table(stats_file, "Phi_bar", lambda s, b: (starts.append(s), blocks.append(b)),
                  block_bytes=7 * KEEP * 4)  # fmt: skip
    assert starts == list(range(0, KEEP, 7)) and torch.equal(torch.cat(blocks), stored)


def test_scan_table_refuses_a_flipped_bit_naming_the_tensor(stats_file, tmp_path):
    bad = flipped(stats_file, tmp_path, "Q_bar/values")
    with pytest.raises(LeadTermsError, match="tensor Q_bar/values does not match its checksum"):
        scan.scan_table(bad, "Q_bar", lambda s, b: None, block_bytes=64)
    scan.scan_table(bad, "Phi_bar", lambda s, b: None)  # another table of the file is fine


# -- CLI top: only what it needs ------------------------------------------------------------------
def reference_top(path, name, token_id, k):
    """Top ``k`` (id, score) of the full stored matrix, sorted plainly."""
    stats = CorpusStats.load(path)
    kept = stats.kept.tolist()
    row = getattr(stats, name)[kept.index(token_id)].tolist()
    order = sorted(range(len(row)), key=lambda j: -row[j])[:k]
    return [(kept[j], row[j]) for j in order]


def parsed(line):
    """``"7: 3 (0.1), 5 (0.02)"`` -> [(3, 0.1), (5, 0.02)]."""
    items = line.split(": ", 1)[1].split(", ")
    return [(int(i.split(" (")[0]), float(i.split(" (")[1].rstrip(")"))) for i in items]


@pytest.mark.parametrize("matrix,name", [("context", "Phi_bar"), ("attention", "Q_bar")])
def test_top_in_row_blocks_equals_the_full_matrix(stats_file, capsys, monkeypatch, matrix, name):
    monkeypatch.setattr(scan, "ROW_BLOCK_BYTES", 4 * KEEP * 4)  # blocks of four rows
    kept = load_file(stats_file)["kept"].tolist()
    tokens = [kept[0], kept[13], kept[-1]]
    code, out, _ = run(["top", str(stats_file), *map(str, tokens), "--matrix", matrix, "-k", "5",
                        "--scoring", "raw", "--exclude", "none"], capsys)  # fmt: skip
    assert code == 0
    for token, line in zip(tokens, out.strip().splitlines(), strict=True):
        expected = reference_top(stats_file, name, token, 5)
        got = parsed(line)
        assert [t for t, _ in got] == [t for t, _ in expected]
        assert all(
            math.isclose(a, b, rel_tol=1e-2) for (_, a), (_, b) in zip(got, expected, strict=True)
        )


def test_top_reads_only_the_needed_table(stats_file, tmp_path, capsys):
    kept = load_file(stats_file)["kept"].tolist()
    for unneeded, matrix in (("Phi_bar/values", "bigram"), ("Q_bar/values", "context"),
                             ("Q_bar/mask", "interchangeability")):  # fmt: skip
        code, out, err = run(["top", str(flipped(stats_file, tmp_path, unneeded)), str(kept[0]),
                              "--matrix", matrix], capsys)  # fmt: skip
        assert code == 0 and out.startswith(f"{kept[0]}: "), err
    code, out, err = run(["top", str(flipped(stats_file, tmp_path, "Phi_bar/values")),
                          str(kept[0]), "--matrix", "context"], capsys)  # fmt: skip
    assert code == 2 and not out and "tensor Phi_bar/values does not match its checksum" in err
    code, _, err = run(["top", str(flipped(stats_file, tmp_path, "pair_counts")), str(kept[0]),
                        "--matrix", "context"], capsys)  # fmt: skip
    assert code == 2 and "tensor pair_counts does not match its checksum" in err


def test_top_of_a_token_that_never_occurs_says_so(tmp_path, capsys):
    tokens = torch.randint(0, 5, (20, 6))  # ids 5 .. 7 never occur
    stats = corpus_stats(tokens, d_vocab=8, dtype=torch.float32, progress=False)
    stats.save(tmp_path / "s.safetensors")
    code, out, _ = run(["top", str(tmp_path / "s.safetensors"), "6", "--matrix", "context"],
                       capsys)  # fmt: skip
    assert code == 0 and "never occurs" in out


# -- RowScorer: row blocks against plain formulas on the full matrix ----------------------------
def plain_scores(M, i, scoring, gram):
    M = np.asarray(M, dtype=np.float64)
    if scoring == "cosine" and gram:
        d = np.sqrt(np.clip(np.diag(M), 0, None))
        denom = d[i] * d
    elif scoring == "cosine":
        denom = np.sqrt((M**2).sum(1))[i] * np.sqrt((M**2).sum(0))
    else:
        P = np.clip(M, 0, None)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.divide(P[i] * P.sum(), P[i].sum() * P.sum(0),
                              out=np.zeros(M.shape[1]), where=P.sum(0) > 0)  # fmt: skip
        return np.where(ratio > 0, np.log(np.where(ratio > 0, ratio, 1)).clip(0), 0)
    return np.divide(M[i], denom, out=np.zeros(M.shape[1]), where=denom > 0)


@pytest.mark.parametrize("scoring,gram", [("cosine", False), ("cosine", True), ("ppmi", False)])
def test_row_blocks_score_as_the_full_matrix(scoring, gram):
    torch.manual_seed(1)
    M = torch.randn(9, 9)
    if gram:
        M = M.T @ M
    for i in (0, 4, 8):
        scorer = RowScorer(9, [i], scoring, symmetric_gram=gram)
        for start in (6, 0, 3):  # blocks of three rows, in any order
            scorer.update(start, M[start : start + 3])
        expected = plain_scores(M.numpy(), i, scoring, gram)
        assert np.allclose(scorer.scored(i).numpy(), expected, atol=1e-6)
        assert np.allclose(scored_row(M, i, scoring, symmetric_gram=gram).numpy(), expected,
                           atol=1e-6)  # fmt: skip


# -- report: only the tables it shows --------------------------------------------------------------
def test_report_without_model_reads_no_dense_table(stats_file, tmp_path, capsys):
    bad = flipped(stats_file, tmp_path, "Phi_bar/values")
    code, _, err = run(["report", str(bad), "-o", str(tmp_path / "r.html"), "--quiet"], capsys)
    assert code == 2 and "nothing to report" in err and "checksum" not in err, err
    code, _, err = run(["report", str(bad), "-o", str(tmp_path / "r.html"), "--words", "3",
                        "--quiet"], capsys)  # fmt: skip
    assert code == 2 and "tensor Phi_bar/values does not match its checksum" in err
