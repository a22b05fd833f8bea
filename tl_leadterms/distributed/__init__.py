"""Corpus statistics beyond one machine, on Ray (the optional ``ray`` extra).

:func:`corpus_stats` runs both passes of :func:`tl_leadterms.corpus_stats` as one Ray task per
shard, merges the shard accumulators as a tree and broadcasts Ḡ once through the object store.
Importing this package does not import Ray; calling :func:`corpus_stats` does.
"""

from tl_leadterms.distributed.cluster import parse_target, ray_session
from tl_leadterms.distributed.compute import corpus_stats
from tl_leadterms.distributed.shards import (
    ArrayShard,
    DatasetShard,
    Shard,
    TableShard,
    TextShard,
    WindowSpec,
    plan_shards,
)

__all__ = [
    "ArrayShard",
    "DatasetShard",
    "Shard",
    "TableShard",
    "TextShard",
    "WindowSpec",
    "corpus_stats",
    "parse_target",
    "plan_shards",
    "ray_session",
]
