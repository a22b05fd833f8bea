"""What the ``tl-leadterms`` subcommands write: a result printed or saved atomically, strict
JSON, and the output format chosen from a flag or the file's suffix."""

import json
from pathlib import Path
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.jsontext import jsonable

__all__ = ["emit_text", "human_size", "output_format", "to_json"]


def human_size(n_bytes: int) -> str:
    """A file size in the unit that reads (decimal: 1 KB = 1,000 bytes).

    >>> human_size(512), human_size(8_800), human_size(217_600_000), human_size(3_200_000_000)
    ('512 bytes', '8.8 KB', '217.6 MB', '3.2 GB')
    """
    if n_bytes < 1000:
        return f"{n_bytes} bytes"
    for unit in ("KB", "MB", "GB"):
        n_bytes /= 1000
        if n_bytes < 999.95:
            return f"{n_bytes:.1f} {unit}"
    return f"{n_bytes / 1000:.1f} TB"


def emit_text(content: str, path: str | None, *, announce: bool = True) -> None:
    """Print ``content``, or write it to ``path`` atomically (and say so if ``announce``)."""
    from tl_leadterms import atomic

    if path is None or path == "-":
        print(content)
        return
    target = Path(path)
    if target.is_dir():
        raise LeadTermsError(f"-o {path!r} is a folder; pass a file path")
    text = content if content.endswith("\n") else content + "\n"
    atomic.write_text(target, text, parents=True)
    if announce:
        print(f"wrote {target}")


def to_json(data: Any) -> str:
    """Strict JSON (NaN and infinities become null).

    >>> to_json({"cos": float("nan"), "layer": 0}).split()
    ['{', '"cos":', 'null,', '"layer":', '0', '}']
    """
    return json.dumps(jsonable(data, strict=True), indent=1, allow_nan=False)


def output_format(chosen: str | None, output: str | None) -> str:
    """``chosen`` if given, else from the output's suffix (.json, .csv), else ``text``.

    >>> output_format(None, "table.csv"), output_format("json", None), output_format(None, None)
    ('csv', 'json', 'text')
    """
    if chosen:
        return chosen
    suffix = Path(output).suffix.lower() if output else ""
    return {".json": "json", ".csv": "csv"}.get(suffix, "text")
