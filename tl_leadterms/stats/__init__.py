"""Corpus statistics: streaming accumulators, the two-pass driver, windows, save/load.

Names are imported from their modules on first use, so that the numpy-only modules of this
package (:mod:`.fileformat`, :mod:`.filetop`, :mod:`.scoring`) load without torch.
"""

import importlib
from typing import TYPE_CHECKING, Any

#: where each public name lives (imported on first use by ``__getattr__``)
_HOMES = {
    "AttentionAccumulator": "accumulate",
    "ContextAccumulator": "accumulate",
    "corpus_stats": "compute",
    "CorpusStats": "corpus",
    "Neighbour": "corpus",
    "degenerate_reason": "degenerate",
    "negligible": "degenerate",
    "composed_from_counts": "driver",
    "MemoryPlan": "memory",
    "available_memory": "memory",
    "check_memory": "memory",
    "plan_memory": "memory",
    "KeptVocab": "vocab",
    "resolve_vocab": "vocab",
    "make_windows": "windows",
}

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


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
        globals()[name] = value
        return value
    try:  # a submodule by attribute (tl_leadterms.stats.io after import tl_leadterms.stats)
        return importlib.import_module(f"{__name__}.{name}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


if TYPE_CHECKING:  # for type checkers and the docs: the same names, imported eagerly
    from tl_leadterms.stats.accumulate import AttentionAccumulator, ContextAccumulator
    from tl_leadterms.stats.compute import corpus_stats
    from tl_leadterms.stats.corpus import CorpusStats, Neighbour
    from tl_leadterms.stats.degenerate import degenerate_reason, negligible
    from tl_leadterms.stats.driver import composed_from_counts
    from tl_leadterms.stats.memory import MemoryPlan, available_memory, check_memory, plan_memory
    from tl_leadterms.stats.vocab import KeptVocab, resolve_vocab
    from tl_leadterms.stats.windows import make_windows
