"""The package's own default corpus and tokenizers.

* :func:`generate_stories` / :func:`write_corpus` / :func:`read_corpus`: seeded simple
  children's stories with planted associations (:data:`PLANTED`), written for this package.
* :func:`train_word_tokenizer` (the paper's word-level tokenizer) and
  :func:`train_bpe_tokenizer` (byte-level BPE), both as ``PreTrainedTokenizerFast`` ready for
  TransformerLens; :func:`word_tokenize` is a pure-Python reference of the word split.
"""

from tl_leadterms.data.stories import PLANTED, SETTINGS, generate_stories, read_corpus, write_corpus
from tl_leadterms.data.tokenizers import (
    tokenize_documents,
    train_bpe_tokenizer,
    train_word_tokenizer,
    vocab_hash,
    word_tokenize,
)

__all__ = [
    "PLANTED",
    "SETTINGS",
    "generate_stories",
    "read_corpus",
    "tokenize_documents",
    "train_bpe_tokenizer",
    "train_word_tokenizer",
    "vocab_hash",
    "word_tokenize",
    "write_corpus",
]
