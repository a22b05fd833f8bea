"""Tests of the embedded story corpus and the tokenizers (tl_leadterms.data)."""

from __future__ import annotations

import math
import warnings
from collections import Counter, defaultdict
from itertools import pairwise

import numpy as np
import pytest
from transformers import PreTrainedTokenizerFast

from tests.conftest import unchecked
from tl_leadterms.data import (
    PLANTED,
    SETTINGS,
    generate_stories,
    read_corpus,
    tokenize_documents,
    train_bpe_tokenizer,
    train_word_tokenizer,
    vocab_hash,
    word_tokenize,
    write_corpus,
)
from tl_leadterms.errors import LeadTermsError

TRICKY = [
    "Don't stop!",
    "abc123 x_y-z 3.14",
    "Café  naïve\n\nÜber\tstraße",
    "e\u0301te",  # decomposed é: NFC makes it one letter
    "  leading and trailing  \n",
    'Hello,world..."quoted" (yes)?',
    "non\u00a0breaking\u2003spaces",
    "Ωmega ÅNGSTRÖM ﬁne İstanbul",
    "unit\x1fseparator\x0bvertical tab",
    "",
]


@pytest.fixture(scope="module")
def stories() -> list[str]:
    return generate_stories(3000, seed=0)


@pytest.fixture(scope="module")
def words(stories: list[str]) -> list[list[str]]:
    return [word_tokenize(s) for s in stories]


@pytest.fixture(scope="module")
def word_tok(stories: list[str]) -> PreTrainedTokenizerFast:
    return train_word_tokenizer(stories, 700)


# -- story generator -------------------------------------------------------------------------


def test_generation_is_deterministic_and_seeded() -> None:
    a = generate_stories(20, seed=3)
    assert a == generate_stories(20, seed=3)
    assert a[:7] == generate_stories(7, seed=3)  # story i depends only on (seed, i)
    b = generate_stories(20, seed=4)
    assert all(x != y for x, y in zip(a, b, strict=True))
    assert generate_stories(0) == []


def test_stories_look_like_stories(stories: list[str], words: list[list[str]]) -> None:
    lengths = [len(s.split()) for s in stories]
    assert min(lengths) >= 150
    assert 200 <= sum(lengths) / len(lengths) <= 400
    assert sum(len(w) >= 200 for w in words) > 0.7 * len(words)
    text = "".join(stories[:200])
    assert "\n" not in "".join(stories)
    for ch in ".,!?\"'":
        assert ch in text, ch
    assert any(c.isupper() for c in text) and any(c.islower() for c in text)
    assert all(s[0].isupper() or s[0] == '"' for s in stories)


def test_min_and_max_words_knobs() -> None:
    short = generate_stories(30, seed=1, min_words=40, max_words=60)
    assert all(len(s.split()) >= 40 for s in short)
    assert sum(len(s.split()) for s in short) / 30 < 150


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_stories": -1},
        {"n_stories": 2.0},
        {"n_stories": True},
        {"n_stories": 2, "seed": "0"},
        {"n_stories": 2, "min_words": 0},
        {"n_stories": 2, "min_words": 300, "max_words": 200},
    ],
)
def test_generate_rejects_bad_input(kwargs: dict) -> None:
    with pytest.raises(LeadTermsError) as err:
        unchecked(generate_stories)(**kwargs)
    assert isinstance(err.value, ValueError)


def test_vocabulary_is_large_with_frequency_spread(words: list[list[str]]) -> None:
    counts = Counter(w for doc in words for w in doc if w.isalpha())
    assert len(counts) >= 800
    assert sum(c >= 5 for c in counts.values()) >= 600  # a word-level vocab of >= 500 is real
    freqs = sorted(counts.values(), reverse=True)
    assert freqs[0] > 100 * freqs[400]  # Zipf-like spread, not flat


def test_planted_bigrams_are_the_only_followers(words: list[list[str]]) -> None:
    following: dict[str, Counter] = defaultdict(Counter)
    for doc in words:
        for a, b in pairwise(doc):
            if a in PLANTED["bigram"]:
                following[a][b] += 1
    for adj, nouns in PLANTED["bigram"].items():
        top = [w for w, _ in following[adj].most_common(len(nouns))]
        assert set(top) == set(nouns), (adj, following[adj].most_common(8))
        assert set(following[adj]) == set(nouns), adj  # never followed by anything else
        assert min(following[adj][n] for n in nouns) >= 100, adj
    assert len(PLANTED["bigram"]["red"]) >= 5


def _preceding(words: list[list[str]]) -> dict[str, Counter]:
    prev: dict[str, Counter] = defaultdict(Counter)
    for doc in words:
        for a, b in pairwise(doc):
            prev[b][a] += 1
    return prev


def _cosine(u: Counter, v: Counter) -> float:
    dot = sum(u[k] * v[k] for k in u)
    return dot / math.sqrt(sum(x * x for x in u.values()) * sum(x * x for x in v.values()))


def test_interchangeable_classes_share_contexts(words: list[list[str]]) -> None:
    prev = _preceding(words)
    assert _cosine(prev["he"], prev["she"]) > 0.99
    assert 0.8 < sum(prev["he"].values()) / sum(prev["she"].values()) < 1.25
    for slot in (".", ",", "then", "so", "and", '"'):
        assert prev["he"][slot] > 100 and prev["she"][slot] > 100, slot
    assert _cosine(prev["he"], prev["they"]) > 0.8
    names = PLANTED["interchangeable"][1]
    assert all(_cosine(prev[names[0]], prev[n]) > 0.95 for n in names[1:])
    emotions = PLANTED["interchangeable"][2]
    assert all(_cosine(prev[emotions[0]], prev[e]) > 0.97 for e in emotions[1:])


def test_she_is_among_the_most_interchangeable_with_he(words: list[list[str]]) -> None:
    """Sigma = B̄ᵀB̄ with B̄[i, j] = #(i, j)/N - α_i/|V| (previous-token vectors, centred)."""
    docs = words[:1500]
    vocab = sorted({w for doc in docs for w in doc})
    index = {w: i for i, w in enumerate(vocab)}
    ids = [np.array([index[w] for w in doc]) for doc in docs]
    prev = np.concatenate([d[:-1] for d in ids])
    nxt = np.concatenate([d[1:] for d in ids])
    v = len(vocab)
    b = np.bincount(prev * v + nxt, minlength=v * v).reshape(v, v) / prev.size
    b_bar = b - (np.bincount(prev, minlength=v) / prev.size)[:, None] / v
    sigma_he = b_bar.T @ b_bar[:, index["he"]]
    sigma_he[index["he"]] = -np.inf
    top5 = [vocab[i] for i in np.argsort(-sigma_he)[:5]]
    assert "she" in top5[:2], top5


def test_topic_words_stay_in_their_setting(words: list[list[str]]) -> None:
    places = set(SETTINGS)
    for place, topic in PLANTED["context"].items():
        assert place in places
        for word in topic:
            n_total = n_after_place = 0
            for doc in words:
                seen_place = False
                for w in doc:
                    seen_place = seen_place or w == place
                    if w == word:
                        n_total += 1
                        n_after_place += seen_place
            assert n_total >= 50, (place, word)
            assert n_after_place == n_total, (place, word, n_after_place, n_total)


def test_pond_is_a_top_context_of_fish(words: list[list[str]]) -> None:
    """Average earlier-word distribution of "fish", minus the corpus unigram frequencies."""
    unigram = Counter(w for doc in words for w in doc)
    total = sum(unigram.values())
    before: Counter = Counter()
    n_fish = 0
    for doc in words:
        earlier: Counter = Counter()
        for t, w in enumerate(doc):
            if w == "fish" and t > 0:
                n_fish += 1
                for k, c in earlier.items():
                    before[k] += c / t
            earlier[w] += 1
    lift = {k: before[k] / n_fish - unigram[k] / total for k in before}
    top10 = sorted(lift, key=lift.get, reverse=True)[:10]
    assert "pond" in top10[:3], top10
    pond_stories = [doc for doc in words if "fish" in doc]
    assert all(doc.count("pond") >= 3 for doc in pond_stories)
    assert all(doc.index("pond") < doc.index("fish") for doc in pond_stories)


def test_write_and_read_corpus(tmp_path) -> None:
    path = tmp_path / "corpus.txt"
    assert write_corpus(path, 12, seed=5) == path
    text = path.read_text(encoding="utf-8")
    assert text == "\n\n".join(generate_stories(12, seed=5)) + "\n"
    assert read_corpus(path) == generate_stories(12, seed=5)
    write_corpus(path, 3, seed=5)  # overwrites in place
    assert read_corpus(path) == generate_stories(3, seed=5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]  # no temp files left
    with pytest.raises(LeadTermsError, match="does not exist"):
        write_corpus(tmp_path / "missing" / "c.txt", 2)


# -- tokenizers ------------------------------------------------------------------------------


def test_word_tokenize_reference() -> None:
    assert word_tokenize("Don't stop!") == ["don", "'", "t", "stop", "!"]
    assert word_tokenize("abc123 x_y-z") == ["abc", "1", "2", "3", "x", "_", "y", "-", "z"]
    assert word_tokenize("Café  naïve\n\nÜber\tx") == ["café", "naïve", "über", "x"]
    assert word_tokenize("e\u0301te") == ["éte"]
    assert word_tokenize(" \n\t ") == []


@pytest.mark.parametrize("text", TRICKY)
def test_pretokenizer_agrees_with_reference(text: str, word_tok) -> None:
    backend = word_tok.backend_tokenizer
    normalized = backend.normalizer.normalize_str(text)
    pieces = [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(normalized)]
    assert pieces == word_tokenize(text)


def test_full_word_pipeline_agrees_on_stories_and_tricky_strings(stories: list[str]) -> None:
    tok = train_word_tokenizer([*stories[:300], *TRICKY], 5000)  # every word in the vocab
    for text in [*stories[:300], *TRICKY]:
        assert tok.tokenize(text) == word_tokenize(text)


def test_word_tokenizer_vocab_specials_and_unknowns(word_tok, words: list[list[str]]) -> None:
    assert len(word_tok) == 700
    assert word_tok.convert_ids_to_tokens([0, 1]) == ["[UNK]", "[EOS]"]
    assert word_tok.unk_token == "[UNK]"
    assert word_tok.eos_token == word_tok.bos_token == word_tok.pad_token == "[EOS]"
    vocab = word_tok.get_vocab()
    counts = Counter(w for doc in words for w in doc)
    assert all(w in vocab for w, _ in counts.most_common(600))
    unk = word_tok.unk_token_id
    assert word_tok.encode("zzyzx fish", add_special_tokens=False) == [unk, vocab["fish"]]
    batch = word_tok("Hello world", return_tensors="pt")
    assert batch["input_ids"].shape == (1, 3)
    assert batch["input_ids"][0, 0].item() == word_tok.bos_token_id  # BOS prepended
    ids = word_tok("Lily saw a red ball!", add_special_tokens=False)["input_ids"]
    assert word_tok.decode(ids) == "lily saw a red ball !"
    padded = word_tok(["a red ball", "fish"], padding=True, truncation=True, return_tensors="pt")
    assert padded["input_ids"].shape == (2, 4)
    assert padded["attention_mask"].sum().item() == 6


def test_word_tokenizer_is_deterministic(stories: list[str], word_tok) -> None:
    again = train_word_tokenizer(stories, 700)
    assert vocab_hash(again) == vocab_hash(word_tok)
    assert vocab_hash(train_word_tokenizer(stories, 650)) != vocab_hash(word_tok)
    assert len(vocab_hash(word_tok)) == 64
    assert vocab_hash(word_tok.backend_tokenizer) == vocab_hash(word_tok)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((["a b"], 2), "vocab_size"),
        ((["a b"], "10"), "vocab_size"),
        (("just one string", 10), "list of texts"),
        (([b"bytes"], 10), "not a str"),
    ],
)
def test_word_tokenizer_rejects_bad_input(args, match: str) -> None:
    with pytest.raises(LeadTermsError, match=match):
        unchecked(train_word_tokenizer)(*args)


def test_special_tokens_must_start_with_unk_eos() -> None:
    with pytest.raises(LeadTermsError, match="special_tokens"):
        train_word_tokenizer(["a b"], 10, special_tokens=("[EOS]", "[UNK]"))
    tok = train_word_tokenizer(["a b c"], 10, special_tokens=("[UNK]", "[EOS]", "[SEP]"))
    assert tok.convert_ids_to_tokens([0, 1, 2]) == ["[UNK]", "[EOS]", "[SEP]"]


def test_save_and_load_round_trip(tmp_path, word_tok, stories: list[str]) -> None:
    word_tok.save_pretrained(tmp_path / "word")
    loaded = PreTrainedTokenizerFast.from_pretrained(tmp_path / "word")
    assert vocab_hash(loaded) == vocab_hash(word_tok)
    assert (loaded.unk_token, loaded.eos_token, loaded.bos_token, loaded.pad_token) == (
        "[UNK]",
        "[EOS]",
        "[EOS]",
        "[EOS]",
    )
    assert tokenize_documents(stories[:20], loaded) == tokenize_documents(stories[:20], word_tok)
    assert loaded("Hello world")["input_ids"] == word_tok("Hello world")["input_ids"]


def test_bpe_round_trip(tmp_path, stories: list[str]) -> None:
    bpe = train_bpe_tokenizer(stories[:300], 600)
    assert len(bpe) == 600
    assert bpe.convert_ids_to_tokens([0, 1]) == ["[UNK]", "[EOS]"]
    for text in (stories[0], "Café ☃ naïve\n\n  spaces\tand tabs", "don't!"):
        ids = bpe.encode(text, add_special_tokens=False)
        assert bpe.unk_token_id not in ids
        assert bpe.decode(ids) == text
    assert len(bpe.encode(stories[1], add_special_tokens=False)) < len(stories[1]) / 2.5
    bpe.save_pretrained(tmp_path / "bpe")
    loaded = PreTrainedTokenizerFast.from_pretrained(tmp_path / "bpe")
    assert loaded.encode(stories[2]) == bpe.encode(stories[2])
    with pytest.raises(LeadTermsError, match="byte symbols"):
        train_bpe_tokenizer(stories[:10], 100)


def test_tokenize_documents(word_tok, stories: list[str]) -> None:
    docs = stories[:50]
    ids = tokenize_documents(docs, word_tok)
    assert ids == [word_tok.encode(d, add_special_tokens=False) for d in docs]
    with_eos = tokenize_documents(docs, word_tok, add_eos=True)
    assert all([*a, word_tok.eos_token_id] == b for a, b in zip(ids, with_eos, strict=True))
    assert tokenize_documents(docs, word_tok.backend_tokenizer, add_eos=True) == with_eos
    assert tokenize_documents([], word_tok) == []
    with pytest.raises(LeadTermsError, match="tokenizer"):
        tokenize_documents(docs, object())


@pytest.mark.hooked
def test_hooked_transformer_accepts_the_tokenizer(word_tok, tmp_path) -> None:
    tl = pytest.importorskip("transformer_lens")
    cfg = tl.HookedTransformerConfig(
        n_layers=1, d_model=16, n_ctx=32, d_head=8, n_heads=2, d_vocab=len(word_tok),
        act_fn="relu", attn_only=True,
    )  # fmt: skip
    word_tok.save_pretrained(tmp_path / "tok")
    for tok in (word_tok, PreTrainedTokenizerFast.from_pretrained(tmp_path / "tok")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            model = tl.HookedTransformer(cfg, tokenizer=tok)
        tokens = model.to_tokens(["Lily saw a fish.", "red ball"])
        assert tokens.shape == (2, 6)
        assert (tokens[:, 0] == tok.bos_token_id).all()
        assert model.to_string(tokens[1, 1:3]) == "red ball"
        assert model(tokens).shape == (2, 6, len(word_tok))
