"""`ResultTable`: the one base of every result table (rows of plain numbers and metadata).

A result is a list of row dictionaries and a metadata dictionary. The base gives every result
the same surface: ``len``, iteration over rows, :meth:`~ResultTable.select` and
:meth:`~ResultTable.row` (one look-up, one signature: the class's key columns positionally, any
column by keyword), :meth:`~ResultTable.to_dict`, :meth:`~ResultTable.to_pandas`, a text
``repr``, ``_repr_html_`` (a compact, sortable HTML table, see
:mod:`tl_leadterms.results.table_html`) and :meth:`~ResultTable.plot`.

A subclass declares what its columns mean, never how to draw them:

* ``KEYS``: the columns :meth:`row` takes positionally (e.g. ``("weight", "layer", "head")``);
* ``COLUMNS``: columns every row has, in display order (any other column follows them);
* ``SCORE``: the column drawn as a bar (``SCORE_RANGE`` its fixed domain, or None for the data);
* ``INTERVAL`` (``lo``, ``hi``), ``NULL`` (``null_mean``, ``null_sd``) and ``SIGNIFICANCE``
  (``q`` before ``p``: the first present is a key column); ``DETAIL``: shown after the rest;
  rows are dimmed by their ``verdict`` (:func:`~tl_leadterms.results.null.verdict`), and
  :meth:`notes` are the one-line notes of every view (a null too small to decide);
* ``GRID`` (row, column) and ``GROUP``: rows with both grid columns (and the values of
  ``GRID_WHERE``) also draw as heatmaps, one per group (e.g. layer × head per ``weight``);
* ``NESTED``: dictionary-valued columns flattened to ``prefix:key`` columns; ``HIDDEN``: left out
  of the HTML table (still in :meth:`to_pandas`).

Every view leads with the same :meth:`~ResultTable.key_columns` and dims a row by its
``verdict`` only. Columns another analysis adds later render with no more work: as a plain
column, or in the role its name declares.

Example:
    >>> t = ResultTable([{"layer": 0, "head": 1, "score": 0.5}], {"note": "x"})
    >>> t.row(0, 1)["score"], len(t.select(layer=0)), t.to_dict()["metadata"]
    (0.5, 1, {'note': 'x'})
    >>> t.key_columns()
    ['layer', 'head', 'score']
    >>> "<table" in t._repr_html_()
    True
"""

import math
from collections.abc import Iterator
from typing import Any, ClassVar

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.marks import WIDE_MARK, is_wide, wide_note
from tl_leadterms.results.style import column_format, number

__all__ = ["EVIDENCE", "EXTRA_COLUMNS", "ResultTable"]

#: what ``null=`` and ``ci=`` add to a score's row (as :func:`~tl_leadterms.decompose` names them);
#: sweeps and the monitor carry these columns along with the score
EXTRA_COLUMNS = ("excess", "excess_share", "specific", "common_share", "raw", "null_mean",
                 "reference", "lo", "hi", "corrected", "noise_share", "null_sd", "z", "p", "q",
                 "verdict")  # fmt: skip
#: the evidence columns of a null, which every table shows after the effect (the score, its
#: excess over the null, ``specific``)
EVIDENCE = ("null_sd", "z", "p", "q", "verdict")


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _matches(have: object, want: object) -> bool:
    if isinstance(want, (list, tuple, set, frozenset)):
        return any(_matches(have, w) for w in want)
    if _is_nan(want):
        return _is_nan(have)
    return have == want


class ResultTable:
    """Rows and metadata of one analysis (see the module docstring).

    Args:
        rows: one dictionary per row, of plain numbers and strings.
        metadata: how the rows were computed (JSON-serialisable).
    """

    KEYS: ClassVar[tuple[str, ...]] = ("layer", "head")
    COLUMNS: ClassVar[tuple[str, ...]] = ()
    SCORE: ClassVar[str | None] = "score"
    SCORE_RANGE: ClassVar[tuple[float, float] | None] = None
    INTERVAL: ClassVar[tuple[str, str]] = ("lo", "hi")
    NULL: ClassVar[tuple[str, str]] = ("null_mean", "null_sd")
    SIGNIFICANCE: ClassVar[tuple[str, ...]] = ("q", "p")
    #: the columns every view shows after the key ones (the HTML table folds them under it):
    #: the null's parts, the interval's ends and estimate, the shares of the effect
    DETAIL: ClassVar[tuple[str, ...]] = ("null_mean", "null_sd", "z", "p", "reference", "lo",
                                         "hi", "corrected", "noise_share", "excess_share",
                                         "common_share", "raw", "ci_level")  # fmt: skip
    GRID: ClassVar[tuple[str, str] | None] = ("layer", "head")
    GRID_WHERE: ClassVar[dict[str, Any]] = {}
    GROUP: ClassVar[tuple[str, ...]] = ()
    NESTED: ClassVar[dict[str, str]] = {}
    HIDDEN: ClassVar[tuple[str, ...]] = ()
    TITLE: ClassVar[str] = ""

    def __init__(self, rows: list[dict[str, Any]], metadata: dict[str, Any] | None = None):
        self.rows = rows
        self.metadata = metadata if metadata is not None else {}

    # -- look-up ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def _where(self, key: tuple, where: dict[str, Any]) -> dict[str, Any]:
        """``key`` (positional, in :attr:`KEYS` order) and ``where`` as one column -> value map."""
        if len(key) > len(self.KEYS):
            raise LeadTermsError(
                f"{type(self).__name__} rows are looked up by {list(self.KEYS)}; got {len(key)} "
                f"positional values {key!r}: name the extra ones (e.g. column=value)"
            )
        out = dict(zip(self.KEYS, key, strict=False))
        clash = set(out) & set(where)
        if clash:
            raise LeadTermsError(f"{sorted(clash)} given both positionally and by name")
        out.update(where)
        return out

    def select(self, *key: Any, **where: Any) -> list[dict[str, Any]]:
        """Every row whose columns equal the values given (a list, tuple or set: any of them).

        Positional values are the :attr:`KEYS` columns in order, so ``select("W", 0)`` of a
        decomposition is ``select(weight="W", layer=0)``; ``None`` matches a missing value.
        """
        where = self._where(key, where)
        return [r for r in self.rows if all(_matches(r.get(c), v) for c, v in where.items())]

    def row(self, *key: Any, **where: Any) -> dict[str, Any]:
        """The one row :meth:`select` finds; an error naming what is there when none or several."""
        found = self.select(*key, **where)
        if len(found) == 1:
            return found[0]
        asked = self._where(key, where)
        have = sorted({tuple(r.get(c) for c in self.KEYS) for r in self.rows}, key=str)
        if not found:
            raise LeadTermsError(
                f"no row with {asked}; {type(self).__name__} has {list(self.KEYS)} = {have[:12]}"
                + (" ..." if len(have) > 12 else "")
            )
        varying = [c for c in self.columns() if len({str(r.get(c)) for r in found}) > 1]
        raise LeadTermsError(
            f"{len(found)} rows match {asked}; add one of {varying[:6]} to pick one"
        )

    # -- plain data ---------------------------------------------------------------------------
    def columns(self) -> list[str]:
        """The row fields: :attr:`COLUMNS`, then every other field present, in first-seen order,
        the :data:`EVIDENCE` of a null last (the effect first)."""
        seen = dict.fromkeys(self.COLUMNS)
        for r in self.rows:
            seen.update(dict.fromkeys(r))
        return [c for c in seen if c not in EVIDENCE] + [c for c in EVIDENCE if c in seen]

    def flat_rows(self) -> list[dict[str, Any]]:
        """The rows with each :attr:`NESTED` dictionary spread into ``prefix:key`` fields."""
        out = []
        for r in self.rows:
            row = {k: v for k, v in r.items() if k not in self.NESTED}
            for key, prefix in self.NESTED.items():
                row.update({f"{prefix}:{k}": v for k, v in (r.get(key) or {}).items()})
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data: ``{"rows": [...], "metadata": {...}}`` (JSON-serialisable)."""
        return {"rows": [dict(r) for r in self.rows], "metadata": dict(self.metadata)}

    def to_pandas(self):
        """A DataFrame, one row per row (``NESTED`` dictionaries as ``prefix:key`` columns).

        A column of integers stays integer where some rows lack it (``layer`` of a whole-model
        row, ``head`` of a layer-level one): pandas' nullable ``Int64``, not floats with NaN.

        Example:
            >>> t = ResultTable([{"layer": 0, "head": None}, {"layer": 1, "head": 2}])
            >>> [str(d) for d in t.to_pandas().dtypes]
            ['int64', 'Int64']
        """
        import pandas as pd

        flat = self.flat_rows()
        names = [c for c in self.columns() if c not in self.NESTED]
        for r in flat:
            names += [c for c in r if c not in names]
        frame = pd.DataFrame(flat, columns=names)
        for c in names:
            values = [r.get(c) for r in flat]
            present = [v for v in values if v is not None]
            if len(present) < len(values) and present and all(_is_int(v) for v in present):
                frame[c] = pd.array(values, dtype="Int64")
        return frame

    # -- display ------------------------------------------------------------------------------
    def title(self) -> str:
        """One line saying what the table is (the first line of the text ``repr``)."""
        if type(self).__repr__ is not ResultTable.__repr__:  # a class's own text table
            return repr(self).split("\n", 1)[0]
        return self.TITLE or f"{type(self).__name__} ({len(self.rows)} rows)"

    def has(self, column: str) -> bool:
        """Whether any row has ``column``."""
        return any(column in r for r in self.rows)

    def notes(self) -> list[str]:
        """One-line notes every view of the table prints under it: here, when rows are
        ``"unreachable"``, how small the null is (:func:`~tl_leadterms.results.null.reach_note`)."""
        from tl_leadterms.results.null import reach_note

        note = reach_note(self.rows, (self.metadata.get("null") or {}).get("permutations"))
        return [note] if note else []

    def key_columns(self) -> list[str]:
        """The columns every view leads with: what the row is (``label``, else :attr:`KEYS`),
        the effect (:attr:`SCORE`, ``"interval"``, ``excess``, ``specific``), the evidence (the
        first of :attr:`SIGNIFICANCE`) and the ``verdict``, those the rows have."""
        have = set(self.shown_columns())
        have |= {"interval"} if set(self.INTERVAL) <= have else set()
        ident = [k for k in self.KEYS if "label" not in have or k not in ("layer", "head")]
        sig = [c for c in self.SIGNIFICANCE if c in have][:1]
        names = [*ident, "label", self.SCORE, "interval", "excess", "specific", *sig, "verdict"]
        return [c for c in dict.fromkeys(names) if c in have]

    def shown_columns(self) -> list[str]:
        """:meth:`columns` that views show: not :attr:`HIDDEN`, and with a value in some row."""
        return [c for c in self.columns() if c not in self.HIDDEN and any(
            r.get(c) is not None and not _is_nan(r.get(c)) for r in self.rows)]  # fmt: skip

    def cell(self, row: dict[str, Any], column: str) -> Any:
        """``row[column]``; ``lo – hi`` for ``"interval"``."""
        if column == "interval" and column not in row:
            low, high = (row.get(c) for c in self.INTERVAL)
            mark = WIDE_MARK if is_wide(row) else ""
            return None if low is None else f"{number(low)} – {number(high)}{mark}"
        return row.get(column)

    def __repr__(self) -> str:
        """The title, what the interval covers, then the key columns and others (up to 10)."""
        from tl_leadterms.results.bootstrap import ci_note

        key, skip = self.key_columns(), {"layer", "head", *self.INTERVAL, *self.NESTED}
        rest = [c for c in self.shown_columns() if c not in key and c not in skip]
        names, shown = (key + rest)[: max(10, len(key))], self.rows[:40]
        formats = [column_format([self.cell(r, c) for r in shown]) for c in names]
        cells = [[f(self.cell(r, c))[:24] for c, f in zip(names, formats, strict=True)]
                 for r in shown]  # fmt: skip
        width = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(names)]
        lines = [self.title(), ci_note(self.metadata)] + [
            "  ".join(f"{v:>{w}}" for v, w in zip(row, width, strict=True))
            for row in [names, *cells]
        ]  # fmt: skip
        more = f"... {len(self.rows) - 40} more rows" if len(self.rows) > 40 else None
        return "\n".join(t for t in [*lines, more, wide_note(self.rows), *self.notes()] if t)

    def _repr_html_(self) -> str:
        from tl_leadterms.results.table_html import table_html

        return table_html(self)

    def report_section(self) -> Any:
        """This result's :class:`~tl_leadterms.results.sections.Section` of a report, rendered
        by its own package's ``report_section`` (an analysis's, as its line in
        :mod:`tl_leadterms.registry` declares; a training history's; a sweep table's)."""
        import importlib

        package = importlib.import_module(type(self).__module__.rpartition(".")[0])
        if not callable(getattr(package, "report_section", None)):
            raise LeadTermsError(f"{type(self).__name__} has no report section")
        return package.report_section(self)

    def plot(self, **kwargs: Any) -> Any:
        """This result's figure: each result class draws its own (this base has none)."""
        raise LeadTermsError(
            f"{type(self).__name__} has no figure; the results with one (Decomposition, "
            "AttentionAgreement, CovarianceSimilarity, ...) draw it with .plot()"
        )


def _is_int(value: object) -> bool:
    import numpy as np

    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
