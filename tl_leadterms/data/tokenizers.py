"""Word-level and byte-level BPE tokenizers, wrapped for ``transformers`` and TransformerLens.

The word-level tokenizer is the paper's on TinyStories (:func:`word_tokenize` is its split). Both
trainers return a :class:`transformers.PreTrainedTokenizerFast` with ``unk_token="[UNK]"`` and
``[EOS]`` as eos, bos and pad token, that saves and loads offline; texts are trained on and encoded
:data:`PIECE` characters at a time (:func:`text_pieces`), so memory follows a piece, not the
document. The conventions and why: docs/guides/corpus-statistics.md#tokenizers."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import unicodedata
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import groupby
from typing import TYPE_CHECKING, Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from tl_leadterms.errors import LeadTermsError

if TYPE_CHECKING:  # imported by _train: vocab_hash (tl-leadterms top) needs no transformers
    from transformers import PreTrainedTokenizerFast

__all__ = [
    "PIECE",
    "document_ids",
    "text_pieces",
    "tokenize_documents",
    "train_bpe_tokenizer",
    "train_word_tokenizer",
    "vocab_hash",
    "word_tokenize",
]

UNK, EOS = "[UNK]", "[EOS]"
PIECE = 1 << 18
"""Characters of text trained on or encoded at a time (see :func:`text_pieces`)."""
_CUT = re.compile(r".+[ \t\n\r\f\v](?=[^ \t\n\r\f\v])", re.S)  # up to the last word start
_WORD_PATTERN = r"\p{L}+|[^\p{L}\s]"  # a run of letters, or one other non-space character
_NOT_WHITE_SPACE = "\x1c\x1d\x1e\x1f"  # str.isspace() but not Unicode White_Space


def word_tokenize(text: str) -> list[str]:
    """Pure-Python reference of the word-level split (no vocabulary, no ``[UNK]``).

    NFC-compose and lower-case ``text``; each maximal run of letters (``str.isalpha``) is a token,
    each other non-whitespace character is a token, and whitespace (Unicode ``White_Space``) is
    dropped. It agrees with the tokenizers pipeline on every character Python's Unicode database
    assigns (the Rust library may know newer letters).

    Examples:
        >>> word_tokenize("Don't  go!\\nCafé 42")
        ['don', "'", 't', 'go', '!', 'café', '4', '2']
    """
    text = unicodedata.normalize("NFC", text).lower()
    out: list[str] = []
    for is_letter, run in groupby(text, key=str.isalpha):
        if is_letter:
            out.append("".join(run))
        else:
            out.extend(ch for ch in run if not ch.isspace() or ch in _NOT_WHITE_SPACE)
    return out


def _check_texts(texts: Any, what: str) -> list[str]:
    """``texts`` as a list, after checking it is a collection of ``str`` (not one string)."""
    if isinstance(texts, str):
        raise LeadTermsError(
            f"{what} got a single string ({texts[:40]!r}...); pass a list of texts, e.g. [text]."
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise LeadTermsError(f"{what}: text {i} is a {type(t).__name__}, not a str: {t!r}.")
    return out


def text_pieces(text: str, size: int = PIECE) -> Iterator[str]:
    """``text`` in pieces of at most ``size`` characters, each cut just before the last whitespace
    character that a non-whitespace one follows (where a word starts, with its space); a piece with
    no such place is cut at ``size`` characters. Whitespace is ASCII's; a cut is never inside a
    character. Where the pre-tokenizer splits before whitespace (the word-level one, GPT-2's
    byte-level BPE), the pieces encode to the ids of the whole text, but a word longer than ``size``
    is split in two.

    >>> list(text_pieces("the cat  sat", 6)), list(text_pieces("abcdefgh", 3))
    (['the', ' cat ', ' sat'], ['abc', 'def', 'gh'])
    """
    start = 0
    while len(text) - start > size:
        found = _CUT.match(text, start, start + size + 2)
        end = found.end() - 1 if found else start + size
        yield text[start:end]
        start = end
    yield text[start:]


def document_ids(texts: Iterable[str], tokenizer: Any) -> Iterator[Sequence[int]]:
    """Each text's token ids (no added tokens), encoded about :data:`PIECE` characters at a
    time: short texts together in one batch (a list each), a long one a piece at a time (an
    ``array('q')``, 8 bytes a token)."""
    backend, batch, size = _backend(tokenizer), [], 0
    for n, text in enumerate(itertools.chain(texts, [None])):  # None: the end
        if text is not None and not isinstance(text, str):
            raise LeadTermsError(f"text {n} is a {type(text).__name__}, not a str: {text!r:.80}.")
        if batch and (text is None or size + len(text) > PIECE):
            yield from (e.ids for e in backend.encode_batch(batch, add_special_tokens=False))
            batch, size = [], 0
        if text is not None and len(text) > PIECE:
            ids = array("q")
            for piece in text_pieces(text):
                ids.extend(backend.encode(piece, add_special_tokens=False).ids)
            yield ids
        elif text is not None:
            batch.append(text)
            size += len(text)


def _check_specials(special_tokens: Any, vocab_size: Any) -> list[str]:
    """The special tokens as a list, after checking them and ``vocab_size``."""
    ok = isinstance(special_tokens, (list, tuple)) and all(
        isinstance(t, str) for t in special_tokens
    )
    specials = list(special_tokens) if ok else []
    if specials[:2] != [UNK, EOS] or len(set(specials)) != len(specials):
        raise LeadTermsError(
            f"special_tokens must start with {UNK!r}, {EOS!r} and have no repeats, got "
            f"{special_tokens!r}; add extra special tokens after these two."
        )
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise LeadTermsError(f"vocab_size must be an int, got {vocab_size!r}.")
    if vocab_size <= len(specials):
        raise LeadTermsError(
            f"vocab_size={vocab_size} leaves no room for words next to the {len(specials)} "
            "special tokens; pass a larger vocab_size."
        )
    return specials


def _train(tok: Tokenizer, trainer: Any, docs: list[str], name: str) -> PreTrainedTokenizerFast:
    """Train ``tok`` on ``docs``, a piece at a time, and wrap it with the package's special-token
    convention."""
    from transformers import PreTrainedTokenizerFast

    tok.train_from_iterator((p for d in docs for p in text_pieces(d)), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        eos_token=EOS,
        bos_token=EOS,
        pad_token=EOS,
        add_bos_token=True,
        clean_up_tokenization_spaces=False,
        name_or_path=name,
    )


def train_word_tokenizer(
    texts: Iterable[str], vocab_size: int, *, special_tokens: Sequence[str] = (UNK, EOS)
) -> PreTrainedTokenizerFast:
    """Train the paper's word-level tokenizer on ``texts``.

    Args:
        texts: the training texts (e.g. :func:`~tl_leadterms.data.generate_stories`).
        vocab_size: total vocabulary size, special tokens included; the most frequent words
            fill the rest (ties in alphabetical order). If the texts have fewer
            distinct words, the vocabulary is smaller.
        special_tokens: ``"[UNK]"`` and ``"[EOS]"`` (ids 0 and 1), then any extra ones.

    Returns:
        A ``PreTrainedTokenizerFast`` (unk ``[UNK]``; eos, bos and pad ``[EOS]``) whose decoder
        joins tokens with single spaces.

    Raises:
        LeadTermsError: for a bare string instead of a list, a non-str text, special tokens
            not starting with ``[UNK]``, ``[EOS]``, or a ``vocab_size`` too small.
    """
    specials = _check_specials(special_tokens, vocab_size)
    docs = _check_texts(texts, "train_word_tokenizer")
    tok = Tokenizer(models.WordLevel(unk_token=UNK))
    tok.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
    split = pre_tokenizers.Split(Regex(_WORD_PATTERN), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), split])
    trainer = trainers.WordLevelTrainer(
        vocab_size=vocab_size, min_frequency=1, special_tokens=specials, show_progress=False
    )
    return _train(tok, trainer, docs, "tl_leadterms-word-level")


def train_bpe_tokenizer(
    texts: Iterable[str], vocab_size: int, *, special_tokens: Sequence[str] = (UNK, EOS)
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE tokenizer (GPT-2 style) on ``texts``.

    Every byte is in the alphabet, so any text encodes without ``[UNK]`` and decodes back
    exactly. Case and whitespace are kept (no normaliser).

    Args:
        texts: the training texts.
        vocab_size: total vocabulary size, special tokens and the 256 byte symbols included.
        special_tokens: ``"[UNK]"`` and ``"[EOS]"`` (ids 0 and 1), then any extra ones.

    Returns:
        A ``PreTrainedTokenizerFast`` with the same special-token convention as
        :func:`train_word_tokenizer`.

    Raises:
        LeadTermsError: as :func:`train_word_tokenizer`, and for ``vocab_size`` below the
            byte alphabet plus the special tokens.
    """
    specials = _check_specials(special_tokens, vocab_size)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(alphabet) + len(specials):
        raise LeadTermsError(
            f"vocab_size={vocab_size} is below the {len(alphabet)} byte symbols plus "
            f"{len(specials)} special tokens; pass vocab_size >= {len(alphabet) + len(specials)}."
        )
    docs = _check_texts(texts, "train_bpe_tokenizer")
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    return _train(tok, trainer, docs, "tl_leadterms-byte-bpe")


def _backend(tokenizer: Any) -> Tokenizer:
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not isinstance(backend, Tokenizer):
        raise LeadTermsError(
            f"expected a PreTrainedTokenizerFast or a tokenizers.Tokenizer, got "
            f"{type(tokenizer).__name__}; use train_word_tokenizer or a fast HF tokenizer."
        )
    return backend


def vocab_hash(tokenizer: Any) -> str:
    """SHA-256 hex digest of the vocabulary, for provenance.

    Hashes the JSON encoding of the ``(token, id)`` pairs sorted by token, added tokens
    included; two tokenizers with the same mapping have the same hash.
    """
    vocab = _backend(tokenizer).get_vocab(with_added_tokens=True)
    pairs = sorted(vocab.items())
    blob = json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def tokenize_documents(
    texts: Iterable[str], tokenizer: Any, *, add_eos: bool = False
) -> list[list[int]]:
    """Encode documents to token ids in one batch, without BOS or other added tokens.

    Args:
        texts: the documents.
        tokenizer: a ``PreTrainedTokenizerFast`` (or a bare ``tokenizers.Tokenizer``).
        add_eos: append the tokenizer's ``eos_token_id`` (``"[EOS]"``) to every document.

    Returns:
        One list of ids per document.
    """
    ids = [list(d) for d in document_ids(_check_texts(texts, "tokenize_documents"), tokenizer)]
    if add_eos:
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            eos = _backend(tokenizer).token_to_id(EOS)
        if eos is None:
            raise LeadTermsError(
                f"add_eos=True but the tokenizer has no eos token (nor {EOS!r}); "
                "set tokenizer.eos_token or pass add_eos=False."
            )
        for row in ids:
            row.append(eos)
    return ids
