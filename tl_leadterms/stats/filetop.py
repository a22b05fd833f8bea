"""Association lists read straight from a statistics file with the standard library alone:
``tl-leadterms top`` answers from one row of the statistic asked for and the ``k``-vectors of column
totals the file records (:func:`.fileformat.totals_names`), each tensor verified against its
SHA-256, without numpy, safetensors' tensor readers or torch.

The file is read as safetensors lays it out (an 8-byte little-endian header length, the JSON header,
then the tensors' bytes at its offsets) through a memory map, touching only the tensors a query
needs: a row of B̄ is its slice of the sorted pair codes, a row of a packed Φ̄ or Q̄ its mask row
and values, a row of Σ_B̄ is summed from the sparse counts as the Gram kernel sums it. The scores
are :func:`.scoring.score_row`'s, :class:`~tl_leadterms.stats.neighbours.RowScorer`'s operations in
the same order, so the lists are :meth:`CorpusStats.top`'s.

A file without the recorded totals has them computed here with numpy. What this module does not
cover (Ḡ, PPMI of Σ_B̄, a degenerate statistic, a token the statistics do not keep, a big-endian
machine) it leaves to :meth:`CorpusStats.top` by returning None."""

import bisect
import hashlib
import itertools
import json
import math
import mmap
import operator
import struct
import sys
from pathlib import Path
from typing import Any

from tl_leadterms.stats import fileformat as ff
from tl_leadterms.stats.scoring import SCORINGS, best, score_row

__all__ = ["FileTokenizer", "StatsFile"]

# safetensors dtype -> (memoryview format, item size, the name its checksum prints)
_TYPES = {"F64": ("d", 8, "float64"), "F32": ("f", 4, "float32"), "I64": ("q", 8, "int64"),
          "U8": ("B", 1, "uint8")}  # fmt: skip


class FileTokenizer:
    """A tokenizer saved in a folder (``tokenizer.json``), read with ``tokenizers`` alone; it
    offers what :meth:`CorpusStats.top` asks of a tokenizer (encode, decode, special ids)."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self.folder = folder
        self.backend_tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        config_path = folder / "tokenizer_config.json"
        config = json.loads(config_path.read_text("utf-8")) if config_path.is_file() else {}
        added = json.loads((folder / "tokenizer.json").read_text("utf-8")).get("added_tokens", [])
        self.all_special_ids = sorted({int(t["id"]) for t in added if t.get("special")})
        unk = config.get("unk_token")
        self.unk_token = unk.get("content") if isinstance(unk, dict) else unk
        self.unk_token_id = self.backend_tokenizer.token_to_id(self.unk_token) if unk else None
        self.name_or_path = str(folder)

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend_tokenizer.decode(ids, skip_special_tokens=False)

    def vocab_hash(self) -> str:
        from tl_leadterms.data.tokenizers import vocab_hash

        return vocab_hash(self)


class _Tensors:
    """The tensors of a safetensors file as memory views (read on first touch), each verified
    against the checksum the statistics' metadata records for it."""

    def __init__(self, path: Path, sums: dict[str, Any] | None) -> None:
        self.path, self.sums = path, sums
        header, self.start = ff.read_safetensors_header(path)
        try:
            with open(path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as err:
            raise ff.unreadable(path, err) from err
        self.entries = {name: e for name, e in header.items() if name != "__metadata__"}
        self._views: dict[str, tuple[memoryview, tuple[int, ...]]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def get(self, name: str, dtypes: tuple[str, ...], ndim: int | None = None):
        """``(values, shape)`` of tensor ``name``: a flat memory view in its dtype (one of
        ``dtypes``), verified against its checksum."""
        if name in self._views:
            return self._views[name]
        entry = self.entries.get(name)
        if entry is None:
            raise ff.corrupt_file(self.path, f"missing tensors {[name]}")
        # read_safetensors_header checked the entry's layout and that it lies inside the file
        dtype, shape = entry["dtype"], tuple(entry["shape"])
        lo, hi = (int(x) for x in entry["data_offsets"])
        ok = all(isinstance(d, int) and d >= 0 for d in shape) and dtype in _TYPES
        ok = ok and hi - lo == math.prod(shape) * _TYPES[dtype][1]
        if not ok or self.start + hi > len(self._map):
            raise ff.unreadable(self.path, f"the header entry of tensor {name} is invalid")
        if dtype not in dtypes or (ndim is not None and len(shape) != ndim):
            raise ff.corrupt_file(self.path, f"{name} has shape {list(shape)}, dtype {dtype}")
        code, _, label = _TYPES[dtype]
        raw = memoryview(self._map)[self.start + lo : self.start + hi]
        digest = hashlib.sha256(f"torch.{label}{shape}".encode())
        digest.update(raw)
        ff.compare_checksum(self.path, self.sums, name, digest.hexdigest())
        self._views[name] = (raw.cast(code), shape)
        return self._views[name]


def _f32(values: list) -> list[float]:
    """Python floats rounded to float32 and back (the table of a float32 file)."""
    return list(struct.unpack(f"<{len(values)}f", struct.pack(f"<{len(values)}f", *values)))


class StatsFile:
    """One statistics file, read tensor by tensor (each verified as it is read)."""

    def __init__(self, path: Path, meta: dict[str, Any] | None = None) -> None:
        self.path = path
        self.meta = ff.read_header(path) if meta is None else meta
        ff.check_header(path, self.meta)
        self.sums = ff.stored_sums(path, self.meta)
        self.k = self.meta["n_kept"]
        self.n_positions = self.meta["n_sequences"] * self.meta["n_ctx"]
        self.tensors = _Tensors(path, self.sums)
        self._rows: dict[tuple[str, int], list[float]] = {}
        self._totals: dict[str, dict[str, list[float]]] = {}
        self._pair_lists: tuple[list[int], list[int]] | None = None
        self._packed_parts: dict[str, tuple] = {}
        k = self.k
        # the counts are verified for every query (a flipped bit anywhere in them is refused)
        codes, _ = self._ints("pair_codes")
        counts, _ = self._ints("pair_counts")
        unigram, _ = self._ints("unigram_counts")
        if len(codes) != len(counts):
            raise ff.corrupt_file(path, "pair_codes and pair_counts differ in length")
        if len(unigram) != k:
            raise ff.corrupt_file(path, f"unigram_counts has shape {[len(unigram)]}, not [{k}]")
        if min(unigram, default=0) < 0 or sum(unigram) > self.n_positions:
            raise ff.corrupt_file(path, "unigram_counts are not counts of at most N·T positions")
        self.unigram = unigram
        self.kept: list[int] | None = None
        if "kept" in self.tensors:
            kept = self._ints("kept")[0].tolist()
            d_vocab = self.meta["d_vocab"]
            if len(kept) != k:
                raise ff.corrupt_file(path, f"kept has shape {[len(kept)]}, not [{k}]")
            if kept and (min(kept) < 0 or max(kept) >= d_vocab):
                raise ff.corrupt_file(path, f"invalid kept ids (not all in [0, {d_vocab}))")
            if len(set(kept)) != len(kept):
                raise ff.corrupt_file(path, "invalid kept ids (repeated ids)")
            self.kept = kept
            self._where = {t: i for i, t in enumerate(kept)}
        elif k != self.meta["d_vocab"]:
            raise ff.corrupt_file(
                path, f"n_kept={k} differs from d_vocab={self.meta['d_vocab']} but no kept ids"
            )
        self.float32 = self.meta.get("dtype") == "float32"

    def _ints(self, name: str):
        return self.tensors.get(name, ("I64",), ndim=1)

    # -- the matrices ------------------------------------------------------------------------
    def position(self, token_id: int) -> int | None:
        """The matrix index of ``token_id`` (None: out of range or not kept)."""
        if not 0 <= token_id < self.meta["d_vocab"]:
            return None
        return token_id if self.kept is None else self._where.get(token_id)

    def token_id(self, index: int) -> int:
        return index if self.kept is None else self.kept[index]

    def _pairs(self) -> tuple[list[int], list[int]]:
        """The sparse counts as lists, checked as ``fileformat.check_counts`` checks them."""
        if self._pair_lists is None:
            codes = self._ints("pair_codes")[0].tolist()
            counts = self._ints("pair_counts")[0].tolist()
            k2 = self.k * self.k
            rising = all(map(operator.lt, codes, itertools.islice(codes, 1, None)))
            if codes and (codes[0] < 0 or codes[-1] >= k2 or not rising):
                raise ff.corrupt_file(
                    self.path, f"pair_codes are not strictly increasing codes in [0, {k2})"
                )
            if min(counts, default=1) <= 0 or sum(counts) > self.n_positions:
                raise ff.corrupt_file(
                    self.path, "pair_counts are not positive counts of at most N·T pairs"
                )
            self._pair_lists = codes, counts
        return self._pair_lists

    def _bigram_row(self, i: int, single: bool = False) -> list[float]:
        """Row ``i`` of B̄ as ``CentredBigram.dense`` builds it (``single``: as its ``row``,
        which :meth:`CorpusStats.top` reads for raw scores): ``−u·α_i`` then ``+ #(i, j)/NT``.
        In float32 the two differ in the last bit where ``u`` is not a float32: ``dense``
        multiplies by ``u`` in float32, ``row`` in float64 before rounding."""
        codes, counts = self._pairs()
        k, n = self.k, self.n_positions
        u = 1.0 / self.meta["centre_vocab"]
        lo, hi = bisect.bisect_left(codes, i * k), bisect.bisect_left(codes, (i + 1) * k)
        if self.float32:  # float32 tensors: each operation rounded to float32 as torch does
            (alpha,) = _f32([self.unigram[i] / _f32([n])[0]])
            (fill,) = _f32([-u * alpha if single else -_f32([u])[0] * alpha])
            values = _f32([counts[q] / _f32([n])[0] for q in range(lo, hi)])
            row = [fill] * k
            for q, v in zip(range(lo, hi), _f32([fill + v for v in values]), strict=True):
                row[codes[q] - i * k] = v
            return row
        fill = -u * (self.unigram[i] / n)
        row = [fill] * k
        for q in range(lo, hi):
            row[codes[q] - i * k] = fill + counts[q] / n
        return row

    def _gram_row(self, r: int) -> list[float]:
        """Row ``r`` of Σ_B̄ = B̄ᵀB̄ as the Gram kernel (``kernels.centred_gram``) sums it:
        ``c − (s_r + s_j)``, then ``+ S_ir·S_ij`` for every ``i`` with ``S_ir ≠ 0`` ascending,
        with ``s = u·Bᵀα`` and ``c = u²‖α‖²`` as the file records them."""
        codes, counts = self._pairs()
        totals = self.totals("Sigma_B")
        shift, (c,) = totals["shift"], totals["constant"]
        k, n = self.k, self.n_positions
        s_r = shift[r]
        acc = [c - (s_r + s_j) for s_j in shift]
        for i in range(k):  # the rows i with a pair (i, r): one search in each row's codes
            q = bisect.bisect_left(codes, i * k + r)
            if q < len(codes) and codes[q] == i * k + r:
                v = counts[q] / n
                lo, hi = bisect.bisect_left(codes, i * k), bisect.bisect_left(codes, (i + 1) * k)
                for p in range(lo, hi):
                    acc[codes[p] - i * k] += v * (counts[p] / n)
        return _f32(acc) if self.float32 else acc

    def _packed(self, name: str) -> tuple:
        """``(base, mask, values, rows, width, pad)`` of the packed table ``name``, checked once
        (the shapes, and every row's count against its mask bits)."""
        if name not in self._packed_parts:
            k, floats = self.k, ("F32", "F64")
            base, (nb,) = self.tensors.get(f"{name}/base", floats, ndim=1)
            mask, mshape = self.tensors.get(f"{name}/mask", ("U8",))
            same = "F64" if base.format == "d" else "F32"  # values have the dtype of base
            values, _ = self.tensors.get(f"{name}/values", (same,), ndim=1)
            rows, (nr,) = self._ints(f"{name}/rows")
            width = -(-k // 8)
            if nb != k or mshape != (k, width) or nr != k + 1:
                raise ff.corrupt_file(
                    self.path, f"{name}/mask or {name}/rows does not have the shape of a {k}×{k} "
                    "table",
                )  # fmt: skip
            pad = 8 * width - k
            if rows[0] != 0 or rows[k] != len(values):
                raise ff.corrupt_file(self.path, f"{name}/rows does not count {name}/values")
            for r in range(k):  # every row's count against its mask bits
                bits = int.from_bytes(mask[r * width : (r + 1) * width], "big") >> pad
                if rows[r + 1] - rows[r] != bits.bit_count():
                    raise ff.corrupt_file(
                        self.path, f"{name}/rows does not count the entries of {name}/mask"
                    )
            self._packed_parts[name] = (base, mask, values, rows, width, pad)
        return self._packed_parts[name]

    def _table_row(self, name: str, i: int) -> list[float]:
        """Row ``i`` of the dense table ``name`` (Φ̄ or Q̄), unpacked, checked."""
        k = self.k
        floats = ("F32", "F64")
        if ff.is_packed(self.meta):
            base, mask, values, rows, width, pad = self._packed(name)
            bits = int.from_bytes(mask[i * width : (i + 1) * width], "big") >> pad
            row = base.tolist()
            where = [j for j in range(k) if bits >> (k - 1 - j) & 1]
            for j, v in zip(where, values[rows[i] : rows[i + 1]], strict=True):
                row[j] = v
        else:
            table, shape = self.tensors.get(name, floats)
            if shape != (k, k):
                raise ff.corrupt_file(self.path, f"{name} has shape {shape}, not ({k}, {k})")
            row = table[i * k : (i + 1) * k].tolist()
        if not all(math.isfinite(x) for x in row):
            raise ff.corrupt_file(self.path, f"{name} has NaN or infinite entries")
        return row

    def row(self, key: str, i: int) -> list[float]:
        """Row ``i`` of statistic ``key`` (``B_bar``, ``Sigma_B``, ``Phi_bar``, ``Q_bar``)."""
        if (key, i) not in self._rows:
            if key == "B_bar":
                self._rows[key, i] = self._bigram_row(i)
            elif key == "Sigma_B":
                self._rows[key, i] = self._gram_row(i)
            else:
                self._rows[key, i] = self._table_row(key, i)
        return self._rows[key, i]

    def totals(self, key: str) -> dict[str, list[float]]:
        """The scoring totals of ``key`` the file records (computed, when it has none)."""
        if key not in self._totals:
            names = ff.totals_names(key)
            if all(name in self.tensors for name in names):
                got = {}
                for part, name in zip(ff.TOTALS[key], names, strict=True):
                    values, _ = self.tensors.get(name, ("F64",), ndim=1)
                    size = 1 if part == "constant" else self.k
                    if len(values) != size or not all(math.isfinite(x) for x in values):
                        raise ff.corrupt_file(self.path, f"{name} is not {size} finite floats")
                    got[part] = values.tolist()
                self._totals[key] = got
            else:
                self._totals[key] = self._computed_totals(key)
        return self._totals[key]

    def _computed_totals(self, key: str) -> dict[str, list[float]]:
        """The totals of a file that does not record them, with numpy over the whole table."""
        import numpy as np

        codes, counts = (np.asarray(a) for a in self._pairs())
        unigram = np.asarray(self._ints("unigram_counts")[0])
        k, u = self.k, 1.0 / self.meta["centre_vocab"]
        if key == "Sigma_B":  # as io.save_stats computes them, in numpy
            rows, cols = codes // k, codes % k
            values, alpha = counts / self.n_positions, unigram / self.n_positions
            beta = np.zeros(k)
            np.add.at(beta, cols, values * alpha[rows])
            shift, constant = u * beta, u * u * float(alpha @ alpha)
            diagonal = constant - (shift + shift)
            np.add.at(diagonal, cols, values * values)
            if self.float32:
                diagonal = diagonal.astype(np.float32).astype(np.float64)
            return {"diagonal": diagonal.tolist(), "shift": shift.tolist(),
                    "constant": [constant]}  # fmt: skip
        if key == "B_bar":
            dt = np.float32 if self.float32 else np.float64  # as CentredBigram.dense
            n = dt(self.n_positions)
            fill = -dt(u) * (unigram.astype(dt) / n)
            matrix = np.repeat(fill[:, None], k, 1)
            matrix[codes // k, codes % k] += counts.astype(dt) / n
            matrix = matrix.astype(np.float64)
        else:
            matrix = np.array([self._table_row(key, i) for i in range(k)], dtype=np.float64)
        return {"column_sq": np.einsum("ij,ij->j", matrix, matrix).tolist(),
                "column_pos": np.clip(matrix, 0, None).sum(0).tolist()}  # fmt: skip

    # -- association lists -------------------------------------------------------------------
    def top(
        self, key: str, token_id: int, n: int, scoring: str, excluded: list[int], label: Any
    ) -> list[tuple[int, float]] | str | None:
        """The ``n`` best ``(token id, score)`` of ``token_id``'s row, a note saying why there
        are none, or None where :meth:`CorpusStats.top` must answer."""
        i = self.position(token_id)
        degenerate = self.meta.get("degenerate")
        recorded = isinstance(degenerate, dict) and key in degenerate
        unsupported = key == "G_bar" or (key == "Sigma_B" and scoring == "ppmi")
        if i is None or scoring not in SCORINGS or unsupported or sys.byteorder != "little":
            return None
        if key in ("Phi_bar", "Q_bar"):
            if not recorded or degenerate[key]:
                return None
            if key not in ff.stored_statistics(self.meta):
                raise ff.not_stored(self.path, [key], self.meta)
        raw = self.row(key, i)
        if self.unigram[i] == 0:
            return f"token {label!r} never occurs in the corpus: it has no associations"
        if not any(x != 0 for x in raw) or not all(math.isfinite(x) for x in raw):
            return f"token {label!r} has an all-zero row in this statistic: no associations"
        if scoring == "raw":  # CorpusStats.top reads B̄'s raw row through CentredBigram.row
            scores = self._bigram_row(i, single=True) if key == "B_bar" else list(raw)
        elif key == "Sigma_B":
            scores = score_row(raw, scoring, self.totals(key)["diagonal"], index=i)
        else:
            part = "column_sq" if scoring == "cosine" else "column_pos"
            scores = score_row(raw, scoring, self.totals(key)[part])
        if key == "Sigma_B":
            scores[i] = -math.inf
        for tid in excluded:
            j = self.position(int(tid))
            if j is not None:
                scores[j] = -math.inf
        return [(self.token_id(j), scores[j]) for j in best(scores, n)]
