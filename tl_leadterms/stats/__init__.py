"""Corpus statistics: streaming accumulators, the two-pass driver, windows, save/load."""

from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator
from tl_leadterms.stats.compute import corpus_stats
from tl_leadterms.stats.corpus import CorpusStats, Neighbour
from tl_leadterms.stats.degenerate import degenerate_reason, negligible
from tl_leadterms.stats.driver import composed_from_counts
from tl_leadterms.stats.memory import MemoryPlan, available_memory, check_memory, plan_memory
from tl_leadterms.stats.vocab import KeptVocab, resolve_vocab
from tl_leadterms.stats.windows import make_windows

__all__ = [
    "AttentionAccumulator",
    "ContextAccumulator",
    "CorpusStats",
    "KeptVocab",
    "MemoryPlan",
    "Neighbour",
    "available_memory",
    "check_memory",
    "composed_from_counts",
    "corpus_stats",
    "degenerate_reason",
    "make_windows",
    "negligible",
    "plan_memory",
    "resolve_vocab",
]
