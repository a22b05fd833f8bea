"""Corpus statistics: streaming accumulators, the two-pass driver, windows, save/load.

Names are imported from their modules on first use, so that the numpy-only modules of this
package (:mod:`.fileformat`, :mod:`.filetop`, :mod:`.scoring`) load without torch.
"""

import importlib
from typing import Any

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

__all__ = sorted(_HOMES)


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
