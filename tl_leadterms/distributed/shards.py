"""Shards: the pieces of a corpus that one worker reads, each a pure description (no data).

A shard is a small picklable object naming where its windows live; a worker turns it into
windows with :meth:`Shard.windows`. The driver never reads the corpus: it only lists files (and,
for a 1-D token stream or a large window file, reads the ``.npy`` header to cut row ranges).

Windows are made as in the single-process path (:func:`tl_leadterms.make_windows`), shard by
shard, from ``.npy``/``.pt`` arrays, parquet/arrow files, ``datasets.Dataset`` shards or text files
(docs/guides/distributed.md#shards).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats.windows import make_windows

__all__ = [
    "ArrayShard",
    "DatasetShard",
    "Shard",
    "TableShard",
    "TextShard",
    "WindowSpec",
    "plan_shards",
]

ARRAY_SUFFIXES = (".npy", ".pt")
TABLE_SUFFIXES = (".parquet", ".arrow")


@dataclass(frozen=True)
class WindowSpec:
    """How a shard's documents become windows (see :func:`tl_leadterms.make_windows`)."""

    n_ctx: int | None = None
    mode: str = "chunk"
    eos_id: int | None = None
    text_column: str = "text"


class Shard:
    """One worker's piece of the corpus. Subclasses implement :meth:`windows`."""

    name: str = "shard"

    def windows(self, spec: WindowSpec, dataset: Any = None, tokenizer: Any = None) -> Any:
        """The shard's windows: a 2-D integer array/tensor ``[n, T + 1]`` (may be empty)."""
        raise NotImplementedError


def _cut_stream(ids: Any, n_ctx: int | None, name: str) -> Any:
    """Consecutive windows of ``n_ctx + 1`` tokens of a 1-D stream (a view, nothing read)."""
    if n_ctx is None:
        raise LeadTermsError(
            f"shard {name}: a 1-D token stream needs n_ctx= (the window length T) to be cut "
            "into windows; pass n_ctx, or save windows as a 2-D array [n, T + 1]."
        )
    width = n_ctx + 1
    n = ids.shape[0] // width
    return ids[: n * width].reshape(n, width)


def _load_array(path: Path) -> Any:
    if path.suffix == ".npy":
        return np.load(path, mmap_mode="r", allow_pickle=False)
    return torch.load(path, weights_only=True, mmap=True)


@dataclass(frozen=True)
class ArrayShard(Shard):
    """Windows from a ``.npy`` (memory-mapped) or ``.pt`` file, optionally rows ``[lo, hi)``."""

    path: str
    rows: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        where = "" if self.rows is None else f"[{self.rows[0]}:{self.rows[1]}]"
        return f"{self.path}{where}"

    def windows(self, spec: WindowSpec, dataset: Any = None, tokenizer: Any = None) -> Any:
        data = _load_array(Path(self.path))
        if getattr(data, "ndim", None) == 1:
            data = _cut_stream(data, spec.n_ctx, self.name)
        elif getattr(data, "ndim", None) != 2:
            raise LeadTermsError(
                f"shard {self.name}: the file holds shape {tuple(data.shape)}; token files hold "
                "windows [n, T + 1] or a 1-D token stream."
            )
        elif spec.n_ctx is not None and data.shape[1] != spec.n_ctx + 1:
            raise LeadTermsError(
                f"shard {self.name}: windows have T + 1 = {data.shape[1]} tokens but n_ctx="
                f"{spec.n_ctx}; pass n_ctx=None to use the file's width."
            )
        return data if self.rows is None else data[self.rows[0] : self.rows[1]]


def _rows_from_columns(columns: dict[str, Any], spec: WindowSpec, tokenizer: Any, name: str) -> Any:
    """Windows from a table's columns: texts (with a tokenizer) or ``input_ids``."""
    if tokenizer is not None and spec.text_column in columns:
        return _text_windows([str(t) for t in columns[spec.text_column]], spec, tokenizer, name)
    if "input_ids" not in columns:
        raise LeadTermsError(
            f"shard {name}: columns {sorted(columns)} hold no 'input_ids' and no text column "
            f"{spec.text_column!r} (texts also need tokenizer=)."
        )
    rows = columns["input_ids"]
    if len(rows) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if spec.n_ctx is None:
        return [list(r) for r in rows]  # windows: TokenSource checks their lengths
    return make_windows(
        [np.asarray(r) for r in rows], n_ctx=spec.n_ctx, mode=spec.mode, eos_id=spec.eos_id
    )


def _text_windows(texts: list[str], spec: WindowSpec, tokenizer: Any, name: str) -> Any:
    """The windows of a shard's texts (none for no texts), tokenised by ``tokenizer``."""
    if not texts:
        return np.zeros((0, 2), dtype=np.int64)
    if spec.n_ctx is None:
        raise LeadTermsError(f"shard {name}: texts need n_ctx= (the window length T).")
    return make_windows(
        texts, n_ctx=spec.n_ctx, mode=spec.mode, tokenizer=tokenizer, eos_id=spec.eos_id
    )


def _read_table(path: Path, column_names: list[str]) -> dict[str, Any]:
    import pyarrow as pa

    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        schema = pq.read_schema(path)
        wanted = [c for c in column_names if c in schema.names]
        table = pq.read_table(path, columns=wanted)
    else:
        source = pa.memory_map(str(path))
        try:
            table = pa.ipc.open_stream(source).read_all()  # datasets' save_to_disk format
        except pa.ArrowInvalid:
            table = pa.ipc.open_file(pa.memory_map(str(path))).read_all()
    return {c: table.column(c).to_pylist() for c in column_names if c in table.column_names}


@dataclass(frozen=True)
class TableShard(Shard):
    """Rows of a parquet or arrow file (``input_ids`` or a text column)."""

    path: str

    @property
    def name(self) -> str:
        return self.path

    def windows(self, spec: WindowSpec, dataset: Any = None, tokenizer: Any = None) -> Any:
        columns = _read_table(Path(self.path), [spec.text_column, "input_ids"])
        return _rows_from_columns(columns, spec, tokenizer, self.name)


@dataclass(frozen=True)
class DatasetShard(Shard):
    """``dataset.shard(num_shards, index, contiguous=True)`` of the dataset the task is given."""

    index: int
    num_shards: int

    @property
    def name(self) -> str:
        return f"dataset[{self.index}/{self.num_shards}]"

    def windows(self, spec: WindowSpec, dataset: Any = None, tokenizer: Any = None) -> Any:
        part = dataset.shard(self.num_shards, self.index, contiguous=True)
        wanted = [c for c in (spec.text_column, "input_ids") if c in part.column_names]
        return _rows_from_columns({c: part[c] for c in wanted}, spec, tokenizer, self.name)


@dataclass(frozen=True)
class TextShard(Shard):
    """A UTF-8 text file of documents separated by blank lines, tokenised in the worker."""

    path: str

    @property
    def name(self) -> str:
        return self.path

    def windows(self, spec: WindowSpec, dataset: Any = None, tokenizer: Any = None) -> Any:
        from tl_leadterms.data.stories import read_corpus

        if tokenizer is None:
            raise LeadTermsError(f"shard {self.name}: text files need tokenizer=.")
        return _text_windows(read_corpus(self.path), spec, tokenizer, self.name)


def _array_rows(path: Path, n_ctx: int | None) -> int | None:
    """Number of windows in a ``.npy`` file from its header (None for ``.pt``)."""
    if path.suffix != ".npy":
        return None
    data = np.load(path, mmap_mode="r", allow_pickle=False)
    if data.ndim == 1 and n_ctx is not None:
        return data.shape[0] // (n_ctx + 1)
    return data.shape[0] if data.ndim == 2 else None


def _file_shards(path: Path, n_ctx: int | None, shard_size: int | None) -> list[Shard]:
    if path.suffix in ARRAY_SUFFIXES:
        n = _array_rows(path, n_ctx) if shard_size else None
        if n is None or n <= shard_size:
            return [ArrayShard(str(path))]
        bounds = [(lo, min(lo + shard_size, n)) for lo in range(0, n, shard_size)]
        return [ArrayShard(str(path), rows) for rows in bounds]
    if path.suffix in TABLE_SUFFIXES:
        return [TableShard(str(path))]
    return [TextShard(str(path))]


def plan_shards(
    source: Any,
    *,
    n_ctx: int | None = None,
    shard_size: int | None = None,
    num_shards: int | None = None,
) -> list[Shard]:
    """Cut ``source`` into shards (no data is read, only ``.npy`` headers).

    Args:
        source: a path or list of paths (``.npy``/``.pt`` token arrays, parquet/arrow files,
            text files, or folders of parquet/arrow files), a list of :class:`Shard`, or a
            ``datasets.Dataset``.
        n_ctx: the window length, to count the windows of a 1-D ``.npy`` stream.
        shard_size: windows per shard for ``.npy`` files (rows per shard for a dataset).
        num_shards: shards of a dataset (default from ``shard_size``, else 1).

    Example:
        >>> [s.name for s in plan_shards([TextShard("a.txt"), ArrayShard("b.npy", (0, 10))])]
        ['a.txt', 'b.npy[0:10]']
    """
    if type(source).__name__ == "Dataset" and hasattr(source, "shard"):
        n = len(source)
        if num_shards is None:
            num_shards = math.ceil(n / shard_size) if shard_size else 1
        num_shards = max(1, min(num_shards, max(n, 1)))
        return [DatasetShard(i, num_shards) for i in range(num_shards)]
    items = [source] if isinstance(source, (str, Path, Shard)) else list(source)
    if not items:
        raise LeadTermsError("the source lists no files; pass token, table or text files.")
    shards: list[Shard] = []
    for item in items:
        if isinstance(item, Shard):
            shards.append(item)
            continue
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in TABLE_SUFFIXES)
            if not files:
                raise LeadTermsError(
                    f"folder {str(path)!r} holds no .parquet or .arrow files; pass token, table "
                    "or text files, or a datasets.Dataset."
                )
            shards.extend(TableShard(str(f)) for f in files)
        elif not path.is_file():
            raise LeadTermsError(f"no such file or folder: {str(path)!r}.")
        else:
            shards.extend(_file_shards(path, n_ctx, shard_size))
    return shards
