"""The fast statistics against the plain dense one-hot reference of docs/math.md#statistics."""

import pickle

import numpy as np
import pytest
import torch

from tests.reference import dense_corpus_stats
from tl_leadterms import LeadTermsError, corpus_stats
from tl_leadterms.stats import AttentionAccumulator, ContextAccumulator, resolve_vocab
from tl_leadterms.stats.driver import composed_from_counts

STATS = ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar", "Delta")


def markov_windows(n: int, t: int, v: int, seed: int = 0) -> torch.Tensor:
    """Windows from a random sparse Markov chain, so every statistic has structure."""
    g = torch.Generator().manual_seed(seed)
    trans = torch.rand(v, v, generator=g) ** 6
    out = torch.empty(n, t + 1, dtype=torch.long)
    out[:, 0] = torch.randint(0, v, (n,), generator=g)
    for i in range(t):
        out[:, i + 1] = torch.multinomial(trans[out[:, i]], 1, generator=g).squeeze(1)
    return out


def assert_matches(stats, ref, tol=1e-10):
    for name in STATS:
        mine, theirs = getattr(stats, name), ref[name]
        assert mine.shape == theirs.shape, name
        scale = theirs.abs().max()
        err = (mine - theirs).abs().max()
        assert err <= tol * scale, f"{name}: max abs diff {err:.3e} vs scale {scale:.3e}"


BACKENDS = ("numba", "torch")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("v", "t", "n", "batch_size"),
    [(17, 9, 13, 4), (31, 12, 20, None), (5, 1, 7, 3), (40, 6, 3, 1)],
)
def test_six_statistics_equal_dense_reference(v, t, n, batch_size, backend):
    tokens = markov_windows(n, t, v, seed=v + t)
    stats = corpus_stats(tokens, d_vocab=v, batch_size=batch_size, progress=False, backend=backend)
    ref = dense_corpus_stats(tokens, v)
    assert_matches(stats, ref)
    # non-degenerate data; with T = 1 there is no key besides the query, so Q̄ = Δ = 0 exactly
    assert all(ref[name].abs().max() > 0 for name in STATS if t > 1 or name[0] not in "QD")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("centre_vocab", [None, 9, 40])
def test_restricted_vocabulary_equals_reference(centre_vocab, backend):
    v, tokens = 40, markov_windows(24, 10, 40, seed=3)
    kept = [7, 3, 39, 0, 12, 21, 5, 30, 8]  # not sorted: the order is the matrix order
    stats = corpus_stats(
        tokens, d_vocab=v, vocab=kept, centre_vocab=centre_vocab, progress=False, backend=backend
    )
    ref = dense_corpus_stats(tokens, v, kept=kept, centre_vocab=centre_vocab)
    assert_matches(stats, ref)
    assert stats.kept.tolist() == kept
    assert stats.centre_vocab == (centre_vocab or v)


def test_top_k_vocabulary_keeps_most_frequent_input_tokens():
    v, tokens = 30, markov_windows(16, 11, 30, seed=5)
    stats = corpus_stats(tokens, d_vocab=v, vocab=6, progress=False)
    counts = torch.bincount(tokens[:, :-1].reshape(-1), minlength=v)
    expected = sorted(range(v), key=lambda i: (-int(counts[i]), i))[:6]
    assert stats.kept.tolist() == expected
    assert_matches(stats, dense_corpus_stats(tokens, v, kept=expected))


@pytest.mark.parametrize("accumulate", [torch.float32, torch.float64])
@pytest.mark.parametrize("backend", BACKENDS)
def test_float32_close_to_float64(backend, accumulate):
    tokens = markov_windows(32, 16, 25, seed=7)
    s64 = corpus_stats(tokens, d_vocab=25, progress=False)
    s32 = corpus_stats(
        tokens,
        d_vocab=25,
        dtype=torch.float32,
        progress=False,
        backend=backend,
        accumulate_dtype=accumulate,
    )
    for name in STATS:
        a, b = getattr(s64, name), getattr(s32, name)
        assert b.dtype == torch.float32
        assert (a - b.double()).abs().max() <= 1e-5 * a.abs().max(), name


def test_full_vocabulary_identities():
    tokens = markov_windows(16, 8, 20, seed=11)
    s = corpus_stats(tokens, d_vocab=20, progress=False)
    assert s.B_bar.sum(1).abs().max() < 1e-15  # rows of B̄ sum to zero
    assert s.Phi_bar.sum(0).abs().max() < 1e-15  # columns of Φ̄ sum to zero
    assert torch.equal(s.Sigma_B, s.Sigma_B.T)
    assert s.unigram.sum().item() == pytest.approx(1.0)
    assert s.n_positions == 16 * 8


def test_orientation_is_pinned_by_a_planted_corpus():
    # token 1 ("red") is always followed by 2 ("ball"); 3 ("pond") opens every window twice,
    # 4 ("fish") comes late and never precedes pond: B̄[red, ball] > 0 > B̄[ball, red] and
    # Φ̄[fish, pond] > 0 > Φ̄[pond, fish] (a large vocabulary keeps the centring small).
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(40):
        row = [
            3,
            3,
            *rng.integers(5, 150, size=5).tolist(),
            1,
            2,
            *rng.integers(5, 150, size=2),
            4,
            5,
        ]
        rows.append(row)
    s = corpus_stats(torch.tensor(rows), d_vocab=200, progress=False)
    assert s.B_bar[1, 2] > 0.5 / s.n_ctx and s.B_bar[2, 1] < 0
    assert s.Phi_bar[4, 3] > 0 > s.Phi_bar[3, 4]
    assert s.top("bigram", 1, n=1, scoring="raw")[0].token_id == 2
    assert s.top("context", 4, n=1, scoring="raw")[0].token_id == 3


def test_input_forms_agree():
    v, tokens = 15, markov_windows(12, 7, 15, seed=2)
    base = corpus_stats(tokens, d_vocab=v, progress=False)
    forms = {
        "numpy": tokens.numpy(),
        "int32": tokens.int(),
        "list": tokens.tolist(),
        "batches": [tokens[:5], tokens[5:]],
        "generator": (b for b in tokens.split(4)),
    }
    for name, form in forms.items():
        other = corpus_stats(form, d_vocab=v, progress=False)
        assert other.n_sequences == 12, name
        for stat in STATS:
            torch.testing.assert_close(getattr(other, stat), getattr(base, stat), msg=name)


def test_datasets_input_ids_column():
    datasets = pytest.importorskip("datasets")
    v, tokens = 15, markov_windows(10, 6, 15, seed=4)
    ds = datasets.Dataset.from_dict({"input_ids": tokens.tolist()})
    base = corpus_stats(tokens, d_vocab=v, progress=False)
    other = corpus_stats(ds, d_vocab=v, batch_size=3, progress=False)
    for stat in STATS:
        torch.testing.assert_close(getattr(other, stat), getattr(base, stat))


@pytest.mark.parametrize("backend", BACKENDS)
def test_shard_merge_equals_whole_corpus(backend):
    v, tokens = 26, markov_windows(30, 10, 26, seed=8)
    kept = resolve_vocab(list(range(0, 26, 2)), v)
    whole = corpus_stats(tokens, d_vocab=v, vocab=kept.kept.tolist(), progress=False)

    shards = [tokens[:7], tokens[7:19], tokens[19:]]
    first = [ContextAccumulator(kept, backend=backend).update(shard) for shard in shards]
    merged = first[0].merge(first[1]).merge(first[2]).result()
    assert merged.n_sequences == 30
    torch.testing.assert_close(merged.Phi_bar, whole.Phi_bar, rtol=0, atol=1e-15)
    assert torch.equal(merged.unigram_counts, whole.unigram_counts)
    assert torch.equal(merged.pair_codes, whole.pair_codes)
    assert torch.equal(merged.pair_counts, whole.pair_counts)

    g_bar = composed_from_counts(merged, kept)
    second = [AttentionAccumulator(g_bar, kept, backend=backend).update(s) for s in shards]
    q_bar, delta = second[2].merge(second[0]).merge(second[1]).result()
    torch.testing.assert_close(q_bar, whole.Q_bar, rtol=0, atol=1e-15)
    torch.testing.assert_close(delta, whole.Delta, rtol=0, atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_weighted_windows_count_as_repeated_windows(backend):
    """``update(batch, weights=w)`` (a resample's multiplicities) against the dense reference
    of the batch with window ``i`` repeated ``w[i]`` times; a weight of 1 everywhere changes
    no bit; bad weights are refused with the shape they need."""
    v, tokens = 20, markov_windows(12, 9, 20, seed=3)
    kept = resolve_vocab(list(range(1, 20, 2)), v)
    w = torch.tensor([2, 0, 1, 3, 1, 1, 0, 2, 1, 1, 4, 1])
    repeated = tokens.repeat_interleave(w, dim=0)
    want = dense_corpus_stats(repeated, v, kept=kept.kept.tolist())
    g_bar = torch.as_tensor(want["G_bar"], dtype=torch.float64)
    acc = AttentionAccumulator(g_bar, kept, backend=backend)
    q_bar, delta = acc.update(tokens[:5], weights=w[:5]).update(tokens[5:], weights=w[5:]).result()
    assert acc.n_sequences == int(w.sum())
    torch.testing.assert_close(q_bar, want["Q_bar"].double(), rtol=0, atol=1e-13)
    torch.testing.assert_close(delta, want["Delta"].double(), rtol=0, atol=1e-13)
    ones = AttentionAccumulator(g_bar, kept, backend=backend)
    plain = AttentionAccumulator(g_bar, kept, backend=backend)
    got = ones.update(tokens, weights=torch.ones(12, dtype=torch.long)).result()
    assert all(torch.equal(a, b) for a, b in zip(got, plain.update(tokens).result(), strict=True))
    for bad in (
        torch.ones(11, dtype=torch.long),
        torch.ones(12),
        -torch.ones(12, dtype=torch.long),
    ):
        with pytest.raises(LeadTermsError, match="12 non-negative integers"):
            AttentionAccumulator(g_bar, kept, backend=backend).update(tokens, weights=bad)


def ship(acc):
    """Pickle as Ray does (protocol 5, buffers out of band) and load from read-only buffers."""
    buffers = []
    data = pickle.dumps(acc, protocol=5, buffer_callback=buffers.append)
    frozen = [memoryview(bytes(b.raw())) for b in buffers]  # bytes: read-only, as Ray maps them
    return pickle.loads(data, buffers=frozen), len(buffers)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shipped_shards_merge_to_the_whole_corpus(backend):
    v, tokens = 26, markov_windows(30, 10, 26, seed=8)
    kept = resolve_vocab(list(range(0, 26, 2)), v)
    whole = corpus_stats(tokens, d_vocab=v, vocab=kept.kept.tolist(), progress=False)
    shards = [tokens[:7], tokens[7:19], tokens[19:]]

    first = [ship(ContextAccumulator(kept, backend=backend).update(s)) for s in shards]
    assert all(n_buffers >= 1 for _, n_buffers in first)  # the tables travel out of band
    merged = first[0][0].merge(first[1][0]).merge(first[2][0]).result()
    assert torch.equal(merged.pair_codes, whole.pair_codes)
    assert torch.equal(merged.pair_counts, whole.pair_counts)
    torch.testing.assert_close(merged.Phi_bar, whole.Phi_bar, rtol=0, atol=1e-15)

    g_bar = composed_from_counts(merged, kept)
    second = []
    for shard in shards:
        acc = AttentionAccumulator(g_bar, kept, backend=backend).update(shard)
        second.append(ship(acc.drop_g_bar())[0])
    q_bar, delta = second[1].merge(second[0]).merge(second[2]).result()
    torch.testing.assert_close(q_bar, whole.Q_bar, rtol=0, atol=1e-15)
    torch.testing.assert_close(delta, whole.Delta, rtol=0, atol=1e-15)
    with pytest.raises(LeadTermsError, match="without Ḡ"):
        second[2].update(shards[0])


def test_pass_two_refuses_a_different_g_bar():

    kept = resolve_vocab(None, 6)
    a = AttentionAccumulator(torch.zeros(6, 6, dtype=torch.float64), kept)
    b = AttentionAccumulator(torch.ones(6, 6, dtype=torch.float64), kept)
    a.update(torch.randint(0, 6, (2, 4)))
    b.update(torch.randint(0, 6, (2, 4)))
    with pytest.raises(LeadTermsError, match="different Ḡ"):
        a.merge(b)


def test_top_returns_readable_neighbours_and_excludes_self_for_sigma():
    tokens = markov_windows(20, 10, 12, seed=9)
    s = corpus_stats(tokens, d_vocab=12, progress=False)
    top = s.top("Sigma_B", 3, n=4, scoring="raw")
    assert len(top) == 4 and all(n.token_id != 3 for n in top)
    scores = [n.score for n in top]
    assert scores == sorted(scores, reverse=True)
    row = s.Sigma_B[3].clone()
    row[3] = -float("inf")
    assert top[0].token_id == int(row.argmax())
    assert s.top("Phi_bar", 3, n=2, scoring="raw")[0].token_id == int(s.Phi_bar[3].argmax())


def test_repr_names_the_sizes():
    s = corpus_stats(markov_windows(4, 5, 9), d_vocab=9, vocab=[1, 2, 3], progress=False)
    lines = repr(s).splitlines()
    assert lines[0] == "CorpusStats"
    rows = dict(line.split(None, 1) for line in lines[1:])
    assert rows["d_vocab"] == "9 (3 kept)" and rows["n_ctx"] == "5"
    assert rows["n_sequences"] == "4 (20 positions)" and rows["dtype"] == "float64 on cpu"
    # aligned: every value starts in the same column
    assert (
        len({line.index(value) for line, value in zip(lines[1:], rows.values(), strict=True)}) == 1
    )
    html = s._repr_html_()
    assert "white-space:nowrap" in html and html.count("<tr>") == len(rows)
    assert '<td style="text-align:left">9 (3 kept)</td>' in html


def test_release_reuses_the_table_and_finishes_the_accumulator():

    tokens = markov_windows(6, 5, 8, seed=12)
    kept = resolve_vocab(None, 8)
    acc = ContextAccumulator(kept).update(tokens)
    copy = acc.result().Phi_bar
    released = acc.result(release=True).Phi_bar
    torch.testing.assert_close(released, copy, rtol=0, atol=0)
    with pytest.raises(LeadTermsError, match=r"finished by result\(release=True\)"):
        acc.update(tokens)
    with pytest.raises(LeadTermsError, match=r"finished by result\(release=True\)"):
        ContextAccumulator(kept).update(tokens).merge(acc)


def test_blockwise_symmetrise_equals_the_plain_formula():
    from tl_leadterms.stats.algebra import symmetrise_

    m = torch.randn(10, 10, dtype=torch.float64)
    expected = (m + m.T) / 2
    torch.testing.assert_close(symmetrise_(m.clone(), block=3), expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("backend", BACKENDS)
def test_centred_bigram_products_equal_dense_algebra(backend):
    from tl_leadterms.stats.algebra import CentredBigram

    s = corpus_stats(
        markov_windows(20, 9, 30, seed=13), d_vocab=30, vocab=list(range(25)), progress=False
    )
    op = CentredBigram(
        s.pair_codes,
        s.pair_counts,
        s.unigram_counts,
        s.n_positions,
        s.centre_vocab,
        s.dtype,
        backend=backend,
    )
    b_bar = s.B_bar  # from the counts; checked against the one-hot reference elsewhere
    m = torch.randn(25, 7, dtype=torch.float64)
    torch.testing.assert_close(op.times(m), b_bar @ m, rtol=0, atol=1e-15)
    torch.testing.assert_close(op.t_times(m), b_bar.T @ m, rtol=0, atol=1e-15)
    torch.testing.assert_close(op.gram(), b_bar.T @ b_bar, rtol=0, atol=1e-15)
    torch.testing.assert_close(op.composed(s.Phi_bar), b_bar.T @ b_bar @ s.Phi_bar)


def test_float64_accumulation_removes_float32_summation_error():
    tokens = markov_windows(1500, 64, 12, seed=21)  # a small vocabulary: cells collect many sums
    exact = corpus_stats(tokens, d_vocab=12, progress=False)
    plain = corpus_stats(
        tokens, d_vocab=12, dtype=torch.float32, accumulate_dtype=torch.float32, progress=False
    )
    mixed = corpus_stats(tokens, d_vocab=12, dtype=torch.float32, progress=False)  # float64 sums
    assert mixed.metadata["accumulate_dtype"] == "float64"
    assert mixed.Q_bar.dtype == mixed.Phi_bar.dtype == torch.float32
    for name in ("Phi_bar", "Q_bar", "Delta"):
        ref = getattr(exact, name)
        err_plain = (getattr(plain, name).double() - ref).norm() / ref.norm()
        err_mixed = (getattr(mixed, name).double() - ref).norm() / ref.norm()
        assert err_mixed < 1e-6 < err_plain, (name, err_mixed, err_plain)


def test_top_reads_the_bigram_row_from_the_counts():
    import numpy as np

    s = corpus_stats(
        markov_windows(10, 8, 15, seed=22), d_vocab=15, vocab=[3, 9, 1, 14], progress=False
    )
    for i, token in enumerate([3, 9, 1, 14]):
        torch.testing.assert_close(s.bigram.row(i), s.B_bar[i], rtol=0, atol=0)
        assert s.top("bigram", np.int64(token), n=1) == s.top("bigram", token, n=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_query_row_groups_add_up_to_the_whole(backend):
    v, tokens = 20, markov_windows(12, 9, 20, seed=31)
    kept = resolve_vocab([5, 0, 17, 3, 9, 12, 2], v)  # dropped tokens: index k = 7
    whole = corpus_stats(tokens, d_vocab=v, vocab=kept.kept.tolist(), progress=False)
    q_rows, delta = [], 0
    for rows in [(0, 3), (3, 4), (4, 8)]:  # the last range holds the dropped sentinel k
        acc = AttentionAccumulator(whole.G_bar, kept, backend=backend, rows=rows)
        block, part = acc.update(tokens).result()
        q_rows.append(block)
        delta = delta + part
    torch.testing.assert_close(torch.cat(q_rows), whole.Q_bar, rtol=0, atol=1e-15)
    torch.testing.assert_close(delta, whole.Delta, rtol=0, atol=1e-15)
    with pytest.raises(LeadTermsError, match=r"rows=\(3, 9\) is not a range"):
        AttentionAccumulator(whole.G_bar, kept, rows=(3, 9))


def test_float32_delta_is_rounded_once_across_row_groups():
    # Δ's two row-group parts nearly cancel here; rounding each before adding cost 6e-3.
    m = 20000
    rows = [[5, 0, 1]] * m + [[0, 5, 1]] * m + [[0, 0, 1]] * m + [[2, 3, 4]] * 50 + [[4, 2, 3]] * 50
    tokens = torch.tensor(rows)
    exact = corpus_stats(tokens, d_vocab=6, progress=False)
    f32 = corpus_stats(tokens, d_vocab=6, dtype=torch.float32, progress=False)
    err = (f32.Delta.double() - exact.Delta).abs().max() / exact.Delta.abs().max()
    assert err < 1e-6


def test_padded_slot_of_a_foreign_matrix_is_never_trusted():
    tokens = markov_windows(6, 5, 3, seed=41)
    kept = resolve_vocab([0, 2], 3)
    s = corpus_stats(tokens, d_vocab=3, vocab=[0, 2], progress=False)
    buf = torch.zeros(5, dtype=torch.float64)
    buf[:4] = s.G_bar.reshape(-1)
    acc = AttentionAccumulator(buf[:4].view(2, 2), kept, backend="torch")
    buf[4] = 123.0  # the caller's memory just past its matrix
    torch.testing.assert_close(acc.update(tokens).result()[1], s.Delta, rtol=0, atol=1e-15)


def test_offloaded_context_map_gives_the_same_statistics_and_leaves_nothing(tmp_path):
    tokens = markov_windows(40, 12, 20, seed=3)
    dead = tmp_path / ".Phi_bar.parked.999999999.0123456789ab.tmp.parked"
    dead.write_bytes(b"left by a killed run")  # a pid that cannot exist: swept
    plain = corpus_stats(tokens, d_vocab=20, vocab=12, dtype=torch.float32, progress=False)
    parked = corpus_stats(
        tokens, d_vocab=20, vocab=12, dtype=torch.float32, progress=False, offload=tmp_path
    )
    for name in STATS:
        assert torch.equal(getattr(parked, name), getattr(plain, name)), name
    assert list(tmp_path.iterdir()) == []


def test_offload_saves_one_table_in_the_plan():
    from tl_leadterms.stats.memory import plan_memory

    kept = plan_memory(50_304, k=20_000, dtype=torch.float32)
    parked = plan_memory(50_304, k=20_000, dtype=torch.float32, offload=True)
    assert kept.stages["pass two"] - parked.stages["pass two"] == 20_000**2 * 4
    assert parked.stages["results"] < parked.peak
