"""`SweepTable`: the tidy result of :func:`tl_leadterms.sweeps.run.sweep`."""

import math
from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.findings import common_note
from tl_leadterms.results.null import VERDICTS
from tl_leadterms.results.style import number
from tl_leadterms.results.table import EXTRA_COLUMNS, ResultTable
from tl_leadterms.theory import score_name

__all__ = ["COLUMNS", "EXTRA_COLUMNS", "SweepTable"]

COLUMNS = ("checkpoint", "step", "layer", "head", "analysis", "score", "value", "vs_baseline")
# what repr shows beneath each value, the effect first
_SHOWN = {"vs_baseline": "vs baseline", "excess": "excess", "null_mean": "null mean",
          "raw": "raw", "specific": "specific", "common_share": "common share",
          "reference": "reference", "corrected": "CI distrib. est.", "lo": "CI lo", "hi": "CI hi",
          "z": "z", "p": "p", "q": "q"}  # fmt: skip


#: a verdict shortened to fit a checkpoint's column
_SHORT = dict(zip(VERDICTS, ("stands", "neglig.", "not dist.", "unreach."), strict=True))


def _key(r: dict) -> tuple:
    return r.get("analysis"), r["score"], r["layer"], r["head"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class SweepTable(ResultTable):
    """The rows of :func:`sweep`: one per (checkpoint, layer, head, analysis, score).

    Row fields: ``checkpoint`` (label), ``step`` (None when unknown), ``layer`` (None for
    ``W_O``), ``head`` (None for layer-level scores), ``analysis``, ``score`` (the score's
    name), ``value`` and ``vs_baseline`` (``value`` less the same score's at the baseline
    checkpoint: the one at step 0, else the first; ``metadata["baseline"]`` names it; an
    untrained model can score high, so a score is read against its own start). A sweep with
    ``null=`` adds the effect ``excess`` (``value − null_mean``), ``excess_share``,
    ``null_mean``, ``null_sd``, ``z``, ``p``, ``q`` (Benjamini–Hochberg over one checkpoint's
    rows of one analysis) and ``verdict`` (:func:`~tl_leadterms.results.null.verdict`) (and
    ``reference`` with a reference model), one with ``ci=`` adds ``lo``, ``hi``, ``corrected``
    (none for statistics of a model's own training windows); decompose rows carry
    ``specific``, decompose and raw covariance rows ``common_share``: the columns
    :func:`~tl_leadterms.decompose` and :func:`~tl_leadterms.covariance_similarity` give the
    same score (for ``decompose``, the ``cos_*`` rows; ``explained_*`` rows hold None there).
    Score names are the same on every model: the value path is ``cos_V``/``explained_V``
    (:func:`~tl_leadterms.theory.score_name`), also in the rows of a results file written
    before that name, and every method that takes a score also reads ``cos_V·W_O``.
    ``checkpoints`` lists the labels in sweep order; ``metadata["status"]`` says which were
    computed and which were loaded from the results file.
    """

    KEYS = ("score", "layer", "head", "checkpoint")
    SCORE = "value"
    GRID = ("layer", "checkpoint")
    GRID_WHERE: ClassVar[dict[str, Any]] = {"head": None}
    GROUP = ("analysis", "score")

    def __init__(self, rows: list[dict[str, Any]], checkpoints: list[str], metadata: dict) -> None:
        super().__init__(rows, metadata)
        self.checkpoints = checkpoints
        steps = {r["checkpoint"]: r.get("step") for r in rows}
        base = next((c for c in checkpoints if steps.get(c) == 0), checkpoints[0] if rows else None)
        self.metadata["baseline"] = base
        start = {_key(r): r["value"] for r in rows if r["checkpoint"] == base}
        for r in rows:
            first = start.get(_key(r))
            r["vs_baseline"] = None if first is None or not _number(r["value"]) or not _number(
                first) else r["value"] - first  # fmt: skip

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], metadata: dict) -> "SweepTable":
        rows = [
            {"checkpoint": rec["checkpoint"], "step": rec["step"], **r,
             "score": score_name(r["score"])}  # a file's rows may predate the stable names
            for rec in records
            for r in rec["rows"]
        ]  # fmt: skip
        extra = [c for c in EXTRA_COLUMNS if any(c in r for r in rows)]
        rows = [{c: r.get(c) for c in (*COLUMNS, *extra)} for r in rows]
        return cls(rows, [rec["checkpoint"] for rec in records], metadata)

    COLUMNS = COLUMNS

    def columns(self) -> list[str]:
        """The row fields: :data:`COLUMNS` and the null/interval columns present."""
        return [*COLUMNS, *(c for c in EXTRA_COLUMNS if any(c in r for r in self.rows))]

    def _where(self, key: tuple, where: dict[str, Any]) -> dict[str, Any]:
        """:meth:`select` and :meth:`row` read a score by any of its names."""
        out = super()._where(key, where)
        names = out.get("score")
        if isinstance(names, (list, tuple, set, frozenset)):
            out["score"] = [score_name(n) for n in names]
        elif names is not None:
            out["score"] = score_name(names)
        return out

    def notes(self) -> list[str]:
        """The baseline, the null's note and the raw scores that are mostly a direction every
        token shares."""
        base = self.metadata.get("baseline")
        note = common_note([r for r in self.rows if r["head"] is None])
        said = f"baseline: {base} (vs baseline: each value less the same score's there)"
        return ([said] if base is not None else []) + super().notes() + ([note] if note else [])

    def __len__(self) -> int:
        return len(self.rows)

    def scores(self) -> list[tuple[str, str]]:
        """The ``(analysis, score)`` pairs present, in first-seen order."""
        return list(dict.fromkeys((r["analysis"], r["score"]) for r in self.rows))

    def values(
        self,
        score: str,
        layer: int | None = None,
        head: int | None = None,
        analysis: str | None = None,
    ) -> list[float]:
        """One score across the checkpoints, in sweep order (NaN where a checkpoint lacks it)."""
        score = score_name(score)
        found = {
            r["checkpoint"]: r["value"]
            for r in self.rows
            if r["score"] == score
            and r["layer"] == layer
            and r["head"] == head
            and (analysis is None or r["analysis"] == analysis)
        }
        if not found:
            raise LeadTermsError(
                f"no rows for score={score!r}, layer={layer!r}, head={head!r}, "
                f"analysis={analysis!r}; scores: {self.scores()}"
            )
        return [found.get(c, float("nan")) for c in self.checkpoints]

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"rows", "checkpoints", "metadata"}`` (JSON-serialisable)."""
        return {
            "rows": [dict(r) for r in self.rows],
            "checkpoints": list(self.checkpoints),
            "metadata": self.metadata,
        }

    def to_pandas(self):
        """A long DataFrame with the columns ``checkpoint, step, layer, head, analysis, score,
        value`` (and the :data:`EXTRA_COLUMNS` present)."""
        import pandas as pd

        df = pd.DataFrame(self.rows, columns=self.columns())
        return df.astype({"step": "Int64", "layer": "Int64", "head": "Int64"})

    def pivot(self, score: str, analysis: str | None = None, heads: bool = False):
        """Layers (or ``(layer, head)`` with ``heads=True``) × checkpoints of one score."""
        import pandas as pd

        df = self.to_pandas()
        df = df[df["score"] == score_name(score)]
        if analysis is not None:
            df = df[df["analysis"] == analysis]
        if df["analysis"].nunique() > 1:
            raise LeadTermsError(
                f"score {score!r} comes from analyses {sorted(df['analysis'].unique())}; pass "
                "analysis= to pick one"
            )
        if df.empty:
            raise LeadTermsError(f"no rows for score={score!r}; scores: {self.scores()}")
        df = df[df["head"].notna()] if heads else df[df["head"].isna()]
        df = df.assign(layer=[("-" if pd.isna(v) else int(v)) for v in df["layer"]])
        index = ["layer", "head"] if heads else "layer"
        table = df.pivot(index=index, columns="checkpoint", values="value")
        return table[[c for c in self.checkpoints if c in table.columns]]

    def __repr__(self) -> str:
        status = self.metadata.get("status", {})
        loaded = sum(s == "loaded" for s in status.values())
        reused = f" ({loaded} from the results file)" if loaded else ""
        lines = [f"SweepTable: {len(self.checkpoints)} checkpoints{reused}, {len(self.rows)} rows"]
        width = max([9 if any(r.get("verdict") for r in self.rows) else 6,
                     *(len(c) for c in self.checkpoints)])  # fmt: skip
        head = f"{'':<30}" + " ".join(f"{c:>{width}}" for c in self.checkpoints)
        for analysis, score in self.scores():
            lines.append(f"{analysis}: {score}")
            lines.append(head)
            grid: dict[Any, dict[str, dict]] = {}
            for r in self.rows:
                if r["analysis"] == analysis and r["score"] == score and r["head"] is None:
                    grid.setdefault(r["layer"], {})[r["checkpoint"]] = r
            for layer, found in grid.items():
                name = "  -" if layer is None else f"  L{layer}"
                lines.append(f"{name:<30}" + self._cells(found, "value", width))
                for column, shown in _SHOWN.items():  # the null and interval beneath the value
                    if any(r.get(column) is not None for r in found.values()):
                        lines.append(f"{'      ' + shown:<30}" + self._cells(found, column, width))
                if any(r.get("verdict") for r in found.values()):
                    lines.append(f"{'      verdict':<30}" + " ".join(
                        f"{_SHORT.get(found.get(c, {}).get('verdict'), '-'):>{width}}"
                        for c in self.checkpoints))  # fmt: skip
        return "\n".join(lines + self.notes())

    def _cells(self, found: dict[str, dict], column: str, width: int) -> str:
        """One line of a grid: ``column`` of each checkpoint's row (``-`` where it has none)."""
        values = (found.get(c, {}).get(column) for c in self.checkpoints)
        return " ".join(f"{number(v) if _number(v) else '-':>{width}}" for v in values)

    def plot(self, score: str | None = None, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.sweeps.figure.plot_sweep` of this table, its first
        ``(analysis, score)`` unless ``score=`` (and ``analysis=``) are given."""
        from tl_leadterms.sweeps.figure import plot_sweep

        if score is None:
            kwargs.setdefault("analysis", self.scores()[0][0])
            score = self.scores()[0][1]
        return plot_sweep(self, score, **kwargs)
