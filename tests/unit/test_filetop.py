"""``tl-leadterms top``'s reader (:mod:`tl_leadterms.stats.filetop`, the standard library alone)
against the statistics in memory: the rows it reads are the dense matrices' rows bit for bit, its
lists are :meth:`CorpusStats.top`'s, for files with the recorded scoring totals and without them
(computed with numpy then), and the totals it reads are verified."""

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tl_leadterms import CorpusStats, corpus_stats
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.filetop import StatsFile

KEYS = ("B_bar", "Sigma_B", "Phi_bar", "Q_bar")


def _windows(d_vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    p = 1.0 / torch.arange(1, d_vocab + 1, dtype=torch.float64) ** 1.1  # Zipf: many rare tokens
    return torch.multinomial(p, 50 * 13, replacement=True, generator=gen).reshape(50, 13)


CASES = [(torch.float64, None), (torch.float32, None), (torch.float64, 25)]


@pytest.fixture(scope="module", params=CASES, ids=["f64", "f32", "kept"])
def saved(request, tmp_path_factory):
    dtype, keep = request.param
    stats = corpus_stats(_windows(40, 1), d_vocab=40, vocab=keep, dtype=dtype, progress=False)
    path = tmp_path_factory.mktemp("filetop") / "s.safetensors"
    stats.save(path)
    return stats, path


def without_totals(path, out):
    """A copy of ``path`` as a file written before the totals were recorded (the metadata
    checksum leaves out the tensor checksums, so it still holds)."""
    tensors = load_file(path)
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(json.loads(f.read(n))["__metadata__"]["tl_leadterms"])
    dropped = [name for name in tensors if name.rsplit("/", 1)[-1] in
               ("column_sq", "column_pos", "diagonal", "shift", "constant")]  # fmt: skip
    assert len(dropped) == 9
    for name in dropped:
        del tensors[name], meta["checksums"][name]
    save_file(tensors, str(out), metadata={"tl_leadterms": json.dumps(meta)})
    return out


def dense(stats, key):
    """The matrix ``key`` as the statistics in memory hold it, in float64 numpy."""
    return stats.matrix(key).double().numpy()


def test_rows_are_the_matrices_rows_bit_for_bit(saved):
    stats, path = saved
    f = StatsFile(path)
    for key in KEYS:
        M = dense(stats, key)
        for i in range(stats.k):
            assert np.array_equal(np.array(f.row(key, i)), M[i]), (key, i)


def plain_ranking(stats, key, i, scoring, n):
    """The reference list, written plainly from the dense matrix: token ids and scores."""
    M = dense(stats, key)
    row = M[i].copy()
    if scoring == "cosine" and key == "Sigma_B":
        d = np.sqrt(np.clip(np.diag(M), 0, None))
        with np.errstate(divide="ignore", invalid="ignore"):
            row = np.where(d[i] * d > 0, row / (d[i] * d), 0.0)
    elif scoring == "cosine":
        denom = np.linalg.norm(row) * np.sqrt((M**2).sum(0))
        with np.errstate(divide="ignore", invalid="ignore"):
            row = np.where(denom > 0, row / denom, 0.0)
    elif scoring == "ppmi":
        P, cols = np.clip(row, 0, None), np.clip(M, 0, None).sum(0)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(P * cols > 0, P * cols.sum() / (P.sum() * cols), 0.0)
        row = np.where(ratio > 0, np.log(np.where(ratio > 0, ratio, 1.0)).clip(0), 0.0)
    if key == "Sigma_B":
        row[i] = -np.inf
    order = sorted((j for j in range(len(row)) if np.isfinite(row[j])), key=lambda j: -row[j])
    ids = stats.kept.tolist() if stats.kept is not None else list(range(stats.k))
    return [(ids[j], float(row[j])) for j in order[:n]]


def tie_groups(items):
    """The token ids of a ranked list in groups of equal scores (to 1e-12), the last group
    left out (a list cut at n may cut a group)."""
    groups = []
    for token, value in items:
        if groups and math.isclose(value, groups[-1][0], rel_tol=1e-12, abs_tol=1e-300):
            groups[-1][1].add(token)
        else:
            groups.append((value, {token}))
    return [g for _, g in groups[:-1]]


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded_totals", "computed_totals"])
def test_lists_are_corpus_stats_top_and_the_plain_formulas(saved, recorded, tmp_path):
    stats, path = saved
    f = StatsFile(path if recorded else without_totals(path, tmp_path / "old.safetensors"))
    ids = stats.kept.tolist() if stats.kept is not None else list(range(stats.k))
    occurring = [t for t, c in zip(ids, stats.unigram_counts.tolist(), strict=True) if c > 0]
    checked, tol = 0, 1e-9 if stats.dtype == torch.float64 else 1e-6  # float32: its rounding
    for key in KEYS:
        for scoring in ("raw", "cosine", "ppmi"):
            for token in occurring[:6] + occurring[-4:]:
                got = f.top(key, token, 8, scoring, [], token)
                if key == "Sigma_B" and scoring == "ppmi":
                    assert got is None  # left to CorpusStats.top
                    continue
                api = [(n.token_id, n.score) for n in
                       stats.top(key, token, n=8, scoring=scoring, exclude=())]  # fmt: skip
                i = stats.vocab.position(token)
                plain = plain_ranking(stats, key, i, scoring, 8)
                if recorded:  # the very totals CorpusStats.top sums: the very lists
                    assert [t for t, _ in got] == [t for t, _ in api], (key, scoring, token)
                else:  # totals summed in another order: ties may be broken otherwise
                    assert tie_groups(got) == tie_groups(api), (key, scoring, token)
                for (_, a), (_, b), (_, c) in zip(got, api, plain, strict=True):
                    assert math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-300), (key, scoring)
                    assert math.isclose(a, c, rel_tol=tol, abs_tol=1e-12), (key, scoring)
                if scoring == "raw":
                    assert got == api  # the very entries of the matrices
                checked += 1
    assert checked == 4 * 3 * 10 - 10


def test_exclusions_and_a_token_that_never_occurs(saved):
    stats, path = saved
    f = StatsFile(path)
    ids = stats.kept.tolist() if stats.kept is not None else list(range(stats.k))
    counts = stats.unigram_counts.tolist()
    token = ids[counts.index(max(counts))]
    first = f.top("Phi_bar", token, 3, "cosine", [], token)
    rest = f.top("Phi_bar", token, 2, "cosine", [first[0][0]], token)
    assert rest == first[1:]
    absent = [t for t, c in zip(ids, counts, strict=True) if c == 0]
    if absent:
        assert "never occurs" in f.top("B_bar", absent[0], 3, "raw", [], absent[0])


def test_the_totals_read_are_verified(saved, tmp_path):
    _, path = saved
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    start = json.loads(data[8 : 8 + n])["Phi_bar/column_sq"]["data_offsets"][0]
    data[8 + n + start] ^= 1
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data))
    f = StatsFile(bad)
    token = f.token_id(0)
    assert isinstance(f.top("Phi_bar", token, 3, "raw", [], token), (list, str))  # not read
    with pytest.raises(
        LeadTermsError, match=r"tensor Phi_bar/column_sq does not match its checksum"
    ):
        f.top("Phi_bar", token, 3, "cosine", [], token)


def test_the_totals_are_summed_over_the_scorers_row_blocks():
    """What a file records is what CorpusStats.top's scorer sums, over the same row blocks
    (here a matrix of two blocks, so the order of summation shows)."""
    from tl_leadterms.stats import io, neighbours

    k = 2100
    M = torch.randn(k, k, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    step = neighbours.block_rows(k)
    assert step < k
    got = io._column_totals(lambda a, b: M[a:b], k)
    for part, scoring in (("column_sq", "cosine"), ("column_pos", "ppmi")):
        scorer = neighbours.RowScorer(k, [0], scoring, symmetric_gram=False)
        for start in range(0, k, step):
            scorer.update(start, M[start : start + step])
        assert torch.equal(got[part], scorer.totals), part
    torch.testing.assert_close(got["column_sq"], (M * M).sum(0), rtol=1e-12, atol=0)


def test_loading_ignores_the_totals(saved):
    stats, path = saved
    loaded = CorpusStats.load(path)
    for name in ("Phi_bar", "Q_bar", "B_bar", "Sigma_B"):
        assert torch.equal(getattr(loaded, name), getattr(stats, name)), name
