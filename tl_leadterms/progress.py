"""Progress that suits where it is written: one factory for every long loop of the package.

* In a notebook, tqdm's widget (``tqdm.auto``).
* On a terminal, tqdm's usual bar, redrawn in place.
* Anywhere else (a log file, a pipe, CI), no carriage returns: one line each time a loop passes
  a tenth of its length (at most ten lines a loop), or one line when a loop of unknown length
  ends. ``enabled=False`` (the package's ``progress=False``) silences all three.

>>> import io
>>> log = io.StringIO()
>>> for _ in progress_bar(range(50), desc="demo", file=log, mininterval=0, disable=False):
...     pass
>>> lines = log.getvalue().splitlines()
>>> len(lines), "\\r" in log.getvalue(), lines[-1].startswith("demo: 100%")
(10, False, True)
"""

import sys
from collections.abc import Iterable
from typing import Any

import tqdm.std
from tqdm.autonotebook import tqdm as notebook_or_std

__all__ = ["LogLines", "progress_bar", "write_line"]


class LogLines(tqdm.std.tqdm):
    """A tqdm that writes whole lines: one per tenth of ``total`` passed, or one at the end
    when ``total`` is unknown; never a carriage return or a cursor movement."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tenths_shown = 0  # read by display(), which tqdm calls from __init__
        self._closing = False
        kwargs.setdefault("ncols", 0)  # the counts and rates, no bar drawn in characters
        super().__init__(*args, **kwargs)

    def _write_line(self) -> None:
        self.fp.write(self.__str__() + "\n")
        self.fp.flush()

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is not None or self._closing:  # tqdm clearing or moving a bar: nothing to do
            return False
        if not self.total:
            return False  # unknown length: one line at the end
        tenths = min(10, int(10 * self.n / self.total))
        if tenths <= self._tenths_shown:
            return False
        self._tenths_shown = tenths
        self._write_line()
        return True

    def close(self) -> None:
        if not self.disable and not self._closing:
            if self._tenths_shown < 10:
                self._write_line()  # the final count (or how far it got), once
            self._closing = True
            self.leave = False  # tqdm's own close must not write its final newline
        super().close()


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **kwargs: Any) -> Any:
    """A progress bar over ``iterable`` (or a manual one with ``total=``) that suits its output.

    Args:
        iterable: what to iterate over, as for ``tqdm``.
        enabled: ``False`` shows nothing (the same as tqdm's ``disable=True``).
        **kwargs: tqdm's own options (``total``, ``desc``, ``unit``, ``file``, ``disable``...).

    Returns:
        A ``tqdm`` (a notebook widget, a terminal bar) or a :class:`LogLines`.
    """
    if not enabled:
        kwargs["disable"] = True
    stream = kwargs.get("file") or sys.stderr
    if notebook_or_std is not tqdm.std.tqdm:  # running in a notebook kernel
        return notebook_or_std(iterable, **kwargs)
    if _is_terminal(stream):
        return tqdm.std.tqdm(iterable, **kwargs)
    return LogLines(iterable, **kwargs)


def write_line(text: str) -> None:
    """Print ``text`` on stderr as its own line, without breaking a bar being drawn."""
    tqdm.std.tqdm.write(text, file=sys.stderr)
