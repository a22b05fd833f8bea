"""The results file of :func:`~tl_leadterms.checkpoints.sweep.sweep`: JSON lines, one per finished
checkpoint, appended, flushed and fsynced; read back on a resume (a torn last line is set aside).
"""

import json
import os
import warnings
from pathlib import Path
from typing import Any

from tl_leadterms.atomic import write_text
from tl_leadterms.errors import LeadTermsError

__all__ = ["append_record", "jsonable", "read_results"]


def jsonable(value: Any) -> Any:
    """``value`` with dict keys as strings, tuples as lists and other objects as their repr.

    Example:
        >>> jsonable({1: (2, None), "f": float})
        {'1': [2, None], 'f': "<class 'float'>"}
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def read_results(path: Path, settings: dict[str, Any]) -> tuple[dict[str, dict], list[str]]:
    """Complete checkpoint records of a results file; a torn last line is moved aside."""
    if not path.exists():
        return {}, []
    text = path.read_text()
    lines = text.split("\n")
    done: dict[str, dict] = {}
    torn: list[str] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            ok = isinstance(record, dict) and {"checkpoint", "rows", "settings"} <= set(record)
        except ValueError:
            ok = False
        last = all(not rest.strip() for rest in lines[number:])
        if not ok:
            if not last:
                raise LeadTermsError(
                    f"line {number} of {str(path)!r} is not a sweep record; fix or delete that "
                    "line (the other lines hold finished checkpoints) or pass a new results path"
                )
            torn.append(line)
            continue
        if record["settings"] != settings:
            raise LeadTermsError(
                f"{str(path)!r} was written by a sweep with other settings "
                f"({record['settings']}), not {settings}; pass a new results path to keep both"
            )
        done[record["checkpoint"]] = record
    if torn or (text and not text.endswith("\n")):
        aside = path.with_name(path.name + ".torn")
        with open(aside, "a") as f:
            f.write("\n".join(torn) + "\n")
        good = "".join(json.dumps(r) + "\n" for r in done.values())
        write_text(path, good)
        if torn:
            warnings.warn(
                f"ignored an incomplete last line of {str(path)!r} (an interrupted write; kept "
                f"in {str(aside)!r}); its checkpoint is computed again",
                stacklevel=3,
            )
    return done, torn


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one complete JSON line and make it durable before returning."""
    line = json.dumps(record) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
