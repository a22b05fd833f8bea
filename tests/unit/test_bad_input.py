"""Bad input to the statistics gets a LeadTermsError that names the value and the fix."""

import numpy as np
import pytest
import torch

from tests.conftest import unchecked
from tl_leadterms import LeadTermsError, corpus_stats, make_windows

stats_of = unchecked(corpus_stats)


@pytest.mark.parametrize(
    ("tokens", "match"),
    [
        (torch.tensor([[0, 1, 9]]), r"token id 9 at \[0, 2\] is outside \[0, d_vocab=9\)"),
        (torch.tensor([[0, -1, 2]]), r"token id -1 at \[0, 1\] is outside"),
        (torch.tensor([[0.0, 1.0, 2.0]]), r"must be integers, got dtype torch.float32"),
        (np.array([[0.5, 1.0]]), r"must be integers, got dtype torch.float64"),
        (torch.tensor([[True, False]]), r"must be integers, got dtype torch.bool"),
        (torch.tensor([[3], [4]]), r"windows have 1 token\(s\); each window needs at least 2"),
        (
            torch.tensor([1, 2, 3]),
            r"expected a 2-D array \[n_sequences, T \+ 1\], got shape \(3,\)",
        ),
        (torch.zeros(0, 5, dtype=torch.long), r"the corpus is empty"),
        ([], r"the corpus is empty"),
        ([[0, 1, 2], [3, 4]], r"windows have different lengths \[2, 3\]"),
        ([torch.tensor([[0, 1, 2]]), torch.tensor([[0, 1]])], r"windows have length 2 but earlier"),
        ("hello world", r"cannot read token windows from a str"),
        (42, r"cannot read token windows from a int"),
    ],
)
def test_bad_tokens(tokens, match):
    with pytest.raises(LeadTermsError, match=match):
        stats_of(tokens, d_vocab=9, progress=False)


@pytest.mark.parametrize(
    ("vocab", "match"),
    [
        ([1, 2, 2], r"vocab lists token id 2 2 times"),
        ([1, 12], r"vocab contains token id 12, outside \[0, d_vocab=9\)"),
        ([-1, 3], r"vocab contains token id -1"),
        ([], r"non-empty 1-D list of integer token ids"),
        ([1.5, 2.0], r"integer token ids"),
        (0, r"vocab=0: keep at least one token"),
        ("abc", r"vocab must be None, an int k or a list"),
    ],
)
def test_bad_vocab(vocab, match):
    tokens = torch.randint(0, 9, (4, 6))
    with pytest.raises(LeadTermsError, match=match):
        stats_of(tokens, d_vocab=9, vocab=vocab, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_vocab": 0}, r"d_vocab must be a positive int, got 0"),
        ({"d_vocab": 9, "dtype": torch.float16}, r"dtype must be torch.float64 or torch.float32"),
        ({"d_vocab": 9, "batch_size": 0}, r"batch_size must be a positive int"),
        ({"d_vocab": 9, "centre_vocab": 0}, r"centre_vocab must be >= 1"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(LeadTermsError, match=match):
        stats_of(torch.randint(0, 9, (4, 6)), progress=False, **kwargs)


def test_dataset_without_input_ids():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"text": ["a b", "c d"]})
    with pytest.raises(LeadTermsError, match=r"no 'input_ids' column"):
        stats_of(ds, d_vocab=9, progress=False)


def test_top_errors():
    s = corpus_stats(torch.randint(0, 9, (4, 6)), d_vocab=9, vocab=[1, 2, 3], progress=False)
    with pytest.raises(LeadTermsError, match=r"token id 5 is not in the kept vocabulary"):
        s.top("B_bar", 5)
    with pytest.raises(LeadTermsError, match=r"token id 20 is outside \[0, d_vocab=9\)"):
        s.top("B_bar", 20)
    with pytest.raises(LeadTermsError, match=r"unknown statistic 'Foo'"):
        s.top("Foo", 1)
    with pytest.raises(LeadTermsError, match=r"pass tokenizer="):
        s.top("B_bar", "red")


def test_make_windows_modes_and_errors():
    docs = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [10, 11, 12, 13]]
    chunked = make_windows(docs, n_ctx=3, eos_id=0)
    assert chunked.tolist() == [[1, 2, 3, 4], [5, 6, 7, 0], [8, 9, 0, 10], [11, 12, 13, 0]]
    assert make_windows(docs, n_ctx=3, mode="truncate").tolist() == [[1, 2, 3, 4], [10, 11, 12, 13]]
    assert make_windows(docs, n_ctx=1, max_windows=2).tolist() == [[1, 2], [3, 4]]
    assert chunked.dtype == torch.int64
    with pytest.raises(LeadTermsError, match=r"no window of 9 tokens could be made from 3"):
        make_windows(docs, n_ctx=8, mode="truncate")
    with pytest.raises(LeadTermsError, match=r"mode='slide' is not one of"):
        unchecked(make_windows)(docs, n_ctx=3, mode="slide")
    with pytest.raises(LeadTermsError, match=r"n_ctx must be an int >= 1"):
        unchecked(make_windows)(docs, n_ctx=0)
    with pytest.raises(LeadTermsError, match=r"documents are texts: pass tokenizer="):
        make_windows(["some text"], n_ctx=3)


@pytest.mark.parametrize("bad", [[[5, 400000, 3]], [[1, -2, 3]], [[0.5, 1.0, 2.0]]])
def test_public_accumulators_validate_ids_before_the_kernels(bad):
    from tl_leadterms.stats import ContextAccumulator, resolve_vocab

    acc = ContextAccumulator(resolve_vocab(None, 9))
    with pytest.raises(LeadTermsError, match=r"ContextAccumulator.update"):
        acc.update(torch.tensor(bad))
    assert acc.n_sequences == 0


def test_flat_codes_switch_to_int64_before_they_can_overflow():
    from tl_leadterms.stats.tables import PairLayout, code_dtype, flat_parts, pair_codes
    from tl_leadterms.stats.vocab import KeptVocab

    big = KeptVocab(100_000, torch.arange(33_000), 100_000)  # 2·k² > 2³¹
    assert code_dtype(big) == torch.int64
    assert code_dtype(KeptVocab(100_000, torch.arange(32_767), 100_000)) == torch.int32
    idx = torch.tensor([[big.k, big.k, 5]])  # two dropped tokens, then a kept one
    rows, cols = flat_parts(idx, big)
    layout = PairLayout(3, torch.float64, torch.device("cpu"), code_dtype(big))
    codes = pair_codes(rows, cols.index_select(1, layout.key), layout, big)
    assert codes.min() >= 0 and codes.max() == big.k * big.k


def test_passes_that_read_different_windows_are_refused():
    class Shrinking:
        """A loader that yields less the second time (like a sampling loader)."""

        def __init__(self):
            self.calls = 0

        def __iter__(self):
            self.calls += 1
            batches = [torch.randint(0, 9, (4, 6)), torch.randint(0, 9, (4, 6))]
            return iter(batches[: 3 - self.calls])

    with pytest.raises(LeadTermsError, match=r"8 windows in pass one but 4 in pass two"):
        stats_of(Shrinking(), d_vocab=9, progress=False)


def test_large_user_batches_are_split():
    from tl_leadterms.stats.tokens import TokenSource, default_batch_size

    big = torch.randint(0, 9, (3 * default_batch_size(5) + 1, 6))
    sizes = [b.shape[0] for b in TokenSource([big], 9)]
    assert max(sizes) == default_batch_size(5) and sum(sizes) == big.shape[0]


def test_empty_batches_are_skipped():
    tokens = torch.randint(0, 9, (4, 6))
    a = corpus_stats([tokens[:2], [], tokens[2:]], d_vocab=9, progress=False)
    b = corpus_stats(tokens, d_vocab=9, progress=False)
    torch.testing.assert_close(a.Q_bar, b.Q_bar)


@pytest.mark.parametrize(
    ("docs", "match"),
    [
        ([[1.7, 2.2, 3.9, 4.5]], r"document 0 has dtype float64; token ids must be integers"),
        ([5, 6, 7, 8], r"document 0 is a single token id \(5\)"),
        ([torch.zeros(2, 3, dtype=torch.long)], r"document 0 has shape \(2, 3\)"),
    ],
)
def test_make_windows_rejects_malformed_documents(docs, match):
    with pytest.raises(LeadTermsError, match=match):
        make_windows(docs, n_ctx=2, eos_id=0)


def test_vocab_accepts_ordered_iterables_and_refuses_sets():
    tokens = torch.randint(0, 9, (4, 6))
    as_list = corpus_stats(tokens, d_vocab=9, vocab=[4, 2, 7], progress=False)
    for form in (iter([4, 2, 7]), torch.tensor([4, 2, 7]), np.array([4, 2, 7]), (4, 2, 7)):
        other = corpus_stats(tokens, d_vocab=9, vocab=form, progress=False)
        assert other.kept.tolist() == [4, 2, 7]
        torch.testing.assert_close(other.Q_bar, as_list.Q_bar)
    with pytest.raises(LeadTermsError, match=r"vocab is a set, which has no order"):
        stats_of(tokens, d_vocab=9, vocab={4, 2, 7}, progress=False)


def test_a_kept_vocab_object_is_checked_like_a_list(tmp_path):
    from tl_leadterms import CorpusStats
    from tl_leadterms.stats import KeptVocab, resolve_vocab

    tokens = torch.randint(0, 3, (2, 5))
    with pytest.raises(LeadTermsError, match=r"token id -1, outside"):
        stats_of(tokens, d_vocab=3, vocab=KeptVocab(3, torch.tensor([-1, 0]), 3), progress=False)
    with pytest.raises(LeadTermsError, match=r"lists token id 1 2 times"):
        stats_of(tokens, d_vocab=3, vocab=KeptVocab(3, torch.tensor([1, 1]), 3), progress=False)
    with pytest.raises(LeadTermsError, match=r"centre_vocab=7 disagrees"):
        stats_of(tokens, d_vocab=3, vocab=resolve_vocab([0, 1], 3), centre_vocab=7, progress=False)
    int32_ids = KeptVocab(3, torch.tensor([2, 0], dtype=torch.int32), 3)
    s = corpus_stats(tokens, d_vocab=3, vocab=int32_ids, progress=False)
    s.save(tmp_path / "s.safetensors")
    assert CorpusStats.load(tmp_path / "s.safetensors").kept.tolist() == [2, 0]


def test_numpy_integer_sizes_and_a_leading_empty_batch(tmp_path):
    tokens = torch.randint(0, 3, (2, 5))
    stats_of(tokens, d_vocab=np.int64(3), progress=False).save(
        tmp_path / "s.safetensors"
    )  # as users run
    assert corpus_stats([[], tokens.tolist()], d_vocab=3, progress=False).n_sequences == 2


def test_accumulators_refuse_non_float_dtypes():
    from tl_leadterms.stats import ContextAccumulator, resolve_vocab

    with pytest.raises(LeadTermsError, match=r"accumulates in torch.float32 or torch.float64"):
        ContextAccumulator(resolve_vocab(None, 3), dtype=torch.int64)
