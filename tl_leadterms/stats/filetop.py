"""Association lists read straight from a statistics file, in numpy alone: ``tl-leadterms top``
answers from the tensors its query needs (the sparse counts for B̄ and Σ_B̄, one packed table
for Φ̄ or Q̄), each verified against its checksum, without importing torch.

The lists are :meth:`CorpusStats.top`'s (same scorings, exclusions and order); what this module
does not cover (Ḡ, PPMI of Σ_B̄, a statistic recorded as degenerate, a token the statistics do
not keep) it leaves to that method, by returning None.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.stats import fileformat as ff
from tl_leadterms.stats.scoring import SCORINGS, score

__all__ = ["FileTokenizer", "StatsFile", "tokenizer_hash"]


def tokenizer_hash(backend: Any) -> str:
    """The vocabulary hash of a ``tokenizers.Tokenizer`` (``data.tokenizers.vocab_hash``, which
    needs transformers, computes the same)."""
    pairs = sorted(backend.get_vocab(with_added_tokens=True).items())
    blob = json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


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

    @classmethod
    def found_in(cls, folder: Path) -> "FileTokenizer | None":
        return cls(folder) if (folder / "tokenizer.json").is_file() else None

    def __len__(self) -> int:
        return self.backend_tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int]) -> str:
        return self.backend_tokenizer.decode(ids, skip_special_tokens=False)

    def vocab_hash(self) -> str:
        return tokenizer_hash(self.backend_tokenizer)


class StatsFile:
    """One statistics file, read tensor by tensor (each verified as it is read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.meta = ff.read_header(path)
        ff.check_header(path, self.meta)
        self.sums = ff.stored_sums(path, self.meta)
        self.k = self.meta["n_kept"]
        self._arrays: dict[str, np.ndarray] = {}
        self._matrices: dict[str, tuple[np.ndarray, dict[str, np.ndarray]]] = {}
        counts = self.arrays(*ff.COUNTS, *(["kept"] if self._has("kept") else []))
        ff.check_counts(path, counts, self.meta)
        if any(a.dtype != np.int64 or a.ndim != 1 for a in counts.values()):
            raise ff.corrupt_file(path, "the counts are not 1-D int64 tensors")
        self.kept = counts.get("kept")

    def _has(self, name: str) -> bool:
        from safetensors import safe_open

        with safe_open(self.path, framework="numpy") as f:
            return name in f.keys()  # noqa: SIM118 (a handle)

    def arrays(self, *names: str) -> dict[str, np.ndarray]:
        """The tensors ``names``, verified against their checksums."""
        from safetensors import SafetensorError, safe_open

        wanted = [n for n in names if n not in self._arrays]
        try:
            with safe_open(self.path, framework="numpy") as f:
                present = set(f.keys())
                missing = [n for n in wanted if n not in present]
                if missing:
                    raise ff.corrupt_file(self.path, f"missing tensors {missing}")
                for name in wanted:
                    array = f.get_tensor(name)
                    ff.compare_checksum(self.path, self.sums, name, ff.array_checksum(array))
                    self._arrays[name] = array
        except (SafetensorError, OSError, ValueError) as err:
            if isinstance(err, LeadTermsError):
                raise
            raise ff.unreadable(self.path, err) from err
        return {n: self._arrays[n] for n in names}

    # -- the matrices ------------------------------------------------------------------------
    def position(self, token_id: int) -> int | None:
        """The matrix index of ``token_id`` (None: out of range or not kept)."""
        if not 0 <= token_id < self.meta["d_vocab"]:
            return None
        if self.kept is None:
            return token_id
        where = np.flatnonzero(self.kept == token_id)
        return int(where[0]) if where.size else None

    def token_id(self, index: int) -> int:
        return index if self.kept is None else int(self.kept[index])

    def bigram(self) -> np.ndarray:
        """Dense B̄ ``[k, k]`` in float64, as ``CentredBigram.dense`` builds it."""
        a = self.arrays(*ff.COUNTS)
        n_positions = self.meta["n_sequences"] * self.meta["n_ctx"]
        alpha = a["unigram_counts"].astype(np.float64) / n_positions
        out = np.empty((self.k, self.k))
        out[:] = (-(1.0 / self.meta["centre_vocab"]) * alpha)[:, None]
        codes = a["pair_codes"]
        out[codes // self.k, codes % self.k] += a["pair_counts"].astype(np.float64) / n_positions
        return out

    def table(self, name: str) -> np.ndarray:
        """The dense table ``name`` (Φ̄ or Q̄), unpacked, checked, in float64."""
        if name not in ff.stored_statistics(self.meta):
            raise LeadTermsError(
                f"{self.path} holds no {name} (it has "
                f"{['B_bar', *ff.stored_statistics(self.meta)]}); recompute the statistics "
                "with it (⟦corpus_stats(want=None)|tl-leadterms stats without --only⟧)"
            )
        if ff.is_packed(self.meta):
            parts = self.arrays(*ff.packed_names(name))
            parts = {p: parts[f"{name}/{p}"] for p in ff.PACKED}
            ff.check_packed(self.path, name, parts, self.k)
            table = ff.unpack(parts, self.k)
        else:
            table = self.arrays(name)[name]
            if table.shape != (self.k, self.k) or table.dtype not in (np.float32, np.float64):
                what = f"{name} has shape {table.shape}, dtype {table.dtype}"
                raise ff.corrupt_file(self.path, what)
        if not np.isfinite(table).all():
            raise ff.corrupt_file(self.path, f"{name} has NaN or infinite entries")
        return table.astype(np.float64, copy=False)

    def _matrix(self, key: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The matrix whose rows ``key``'s lists read (B̄ for Σ_B̄) and the column totals its
        scorings need, made once per file."""
        if key not in self._matrices:
            matrix = self.bigram() if key in ("B_bar", "Sigma_B") else self.table(key)
            squares = np.einsum("ij,ij->j", matrix, matrix)
            if key == "Sigma_B":
                totals = {"diagonal": squares}
            else:
                totals = {"column_sq": squares, "column_pos": np.clip(matrix, 0, None).sum(0)}
            self._matrices[key] = (matrix, totals)
        return self._matrices[key]

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
        if i is None or scoring not in SCORINGS or unsupported:
            return None
        if key in ("Phi_bar", "Q_bar") and (not recorded or degenerate[key]):
            return None
        matrix, totals = self._matrix(key)
        if key == "Sigma_B":  # row i of B̄ᵀB̄, from B̄ alone
            raw, totals = matrix[:, i] @ matrix, {**totals, "index": i}
        else:
            raw = matrix[i]
        if int(self.arrays("unigram_counts")["unigram_counts"][i]) == 0:
            return f"token {label!r} never occurs in the corpus: it has no associations"
        if not (np.abs(raw) > 0).any():
            return f"token {label!r} has an all-zero row in this statistic: no associations"
        scores = score(raw, scoring, **totals)
        if key == "Sigma_B":
            scores[i] = -np.inf
        for tid in excluded:
            j = self.position(int(tid))
            if j is not None:
                scores[j] = -np.inf
        finite = np.flatnonzero(np.isfinite(scores))
        order = finite[np.argsort(-scores[finite], kind="stable")][:n]
        return [(self.token_id(int(j)), float(scores[j])) for j in order]
