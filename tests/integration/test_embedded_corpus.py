"""On the embedded story corpus the planted associations come out on top (paper Fig. 5)."""

import pytest

from tl_leadterms import corpus_stats, make_windows
from tl_leadterms.data import PLANTED, generate_stories, train_word_tokenizer


@pytest.fixture(scope="module")
def corpus():
    stories = generate_stories(2000, seed=0)
    tokenizer = train_word_tokenizer(stories, 1500)
    windows = make_windows(stories, n_ctx=64, tokenizer=tokenizer)
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    return stats, tokenizer


def names(neighbours):
    return [n.token for n in neighbours]


@pytest.mark.parametrize("adjective", ["red", *sorted(set(PLANTED["bigram"]) - {"red"})[:3]])
def test_planted_nouns_are_the_top_bigrams(corpus, adjective):
    stats, _ = corpus
    planted = PLANTED["bigram"][adjective]
    top = names(stats.top("B_bar", adjective, n=len(planted)))
    assert set(top) == set(planted), f"{adjective}: top {top}, planted {planted}"


def test_red_is_followed_by_the_papers_nouns(corpus):
    stats, _ = corpus
    top5 = names(stats.top("bigram", "red", n=5))
    assert {"ball", "car", "dress", "balloon", "truck"} <= set(top5)


def test_she_is_interchangeable_with_he(corpus):
    stats, _ = corpus
    assert "she" in names(stats.top("Sigma_B", "he", n=5))


def test_pond_is_context_of_fish(corpus):
    stats, _ = corpus
    assert "pond" in names(stats.top("Phi_bar", "fish", n=10))


def test_provenance_records_the_tokenizer(corpus):
    stats, tokenizer = corpus
    assert stats.metadata["tokenizer_vocab_hash"]
    assert stats.metadata["d_vocab"] == len(tokenizer)


def test_windows_from_a_text_dataset_match_the_list_path(corpus):
    datasets = pytest.importorskip("datasets")
    _, tokenizer = corpus
    stories = generate_stories(50, seed=3)
    from_list = make_windows(stories, n_ctx=32, tokenizer=tokenizer)
    from_dataset = make_windows(
        datasets.Dataset.from_dict({"text": stories}), n_ctx=32, tokenizer=tokenizer
    )
    assert from_list.equal(from_dataset)
    truncated = make_windows(stories, n_ctx=32, tokenizer=tokenizer, mode="truncate")
    assert truncated.shape == (50, 33)  # every story is longer than 33 tokens


def test_loading_with_another_tokenizer_is_refused(corpus, tmp_path):
    from tl_leadterms import CorpusStats, LeadTermsError

    stats, tokenizer = corpus
    path = tmp_path / "stats.safetensors"
    stats.save(path)
    assert CorpusStats.load(path, tokenizer=tokenizer).top("bigram", "red", n=1)
    other = train_word_tokenizer(generate_stories(100, seed=9), 300)
    with pytest.raises(LeadTermsError, match="vocabulary differs"):
        CorpusStats.load(path, tokenizer=other)
