"""Progress that suits where it is written: one factory for every long loop of the package.

A tqdm widget in a notebook with ``ipywidgets`` (:func:`_widget_class`), whole lines in a
notebook without it, tqdm's bar on a terminal, and anywhere else (a log, a pipe, CI) at most ten
whole lines a loop (:class:`LogLines`); a bar first shows after :data:`DELAY` seconds, and
``enabled=False`` (the package's ``progress=False``) silences all of them
(docs/guides/conventions.md#progress).

>>> import io
>>> log = io.StringIO()
>>> for _ in progress_bar(range(50), desc="demo", file=log, mininterval=0, delay=0,
...                         disable=False):
...     pass
>>> lines = log.getvalue().splitlines()
>>> len(lines), "\\r" in log.getvalue(), lines[-1].startswith("demo: 100%")
(10, False, True)
>>> quick = io.StringIO()
>>> for _ in progress_bar(range(50), desc="quick", file=quick):  # done before DELAY: no bar
...     pass
>>> quick.getvalue()
''
"""

import functools
import importlib.util
import os
import sys
from collections.abc import Iterable
from typing import Any

import tqdm.std

from tl_leadterms.errors import LeadTermsError

__all__ = ["DELAY", "LogLines", "in_notebook", "progress_bar", "write_line"]

#: seconds a loop runs before its bar first appears (a quicker call draws none); the
#: environment variable ``TQDM_DELAY`` (tqdm's own name) overrides it
DELAY = 2.0


class LogLines(tqdm.std.tqdm):
    """A tqdm that writes whole lines: one per tenth of ``total`` passed, or one at the end
    when ``total`` is unknown; never a carriage return or a cursor movement. A loop that ends
    before ``delay`` seconds writes nothing."""

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
            quick = self._time() - self.start_t < self.delay and not self._tenths_shown
            if self._tenths_shown < 10 and not quick:
                self._write_line()  # the final count (or how far it got), once
            self._closing = True
            self.leave = False  # tqdm's own close must not write its final newline
        super().close()


def _delay() -> float:
    text = os.environ.get("TQDM_DELAY")
    try:
        return DELAY if text is None else float(text)
    except ValueError:
        raise LeadTermsError(
            f"TQDM_DELAY must be a number of seconds, got {text!r}; unset it for {DELAY}"
        ) from None


def in_notebook() -> bool:
    """True inside a Jupyter kernel (where a progress line lands in the cell's output)."""
    return _in_notebook_kernel()


def _in_notebook_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, classic Jupyter, VS Code), not in a terminal
    IPython, and without importing IPython when it is not already loaded."""
    if "ipykernel.zmqshell" not in sys.modules or "IPython" not in sys.modules:
        return False
    shell = sys.modules["IPython"].get_ipython()
    return type(shell).__name__ == "ZMQInteractiveShell"


def _have_widgets() -> bool:
    return importlib.util.find_spec("ipywidgets") is not None


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


@functools.cache
def _widget_class() -> type:
    """tqdm's notebook widget shown under a display id and, when its loop has ended, replaced
    by an empty output: a finished call leaves no widget behind (in the live cell and in the
    saved notebook alike). A loop that stopped short of ``total`` keeps tqdm's red bar."""
    from IPython.display import display
    from tqdm.notebook import tqdm as notebook_tqdm

    class Widget(notebook_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._handle = None
            super().__init__(*args, display=False, **kwargs)  # shown below, with an id
            if not self.disable and self.delay <= 0:
                self._show()

        def _show(self) -> None:
            self._handle, self.displayed = display(self.container, display_id=True), True

        def display(self, *args: Any, check_delay: bool = True, **kwargs: Any) -> Any:
            if check_delay and self.delay > 0 and not self.displayed:
                self._show()  # the first display after the delay, as tqdm's own
            return super().display(*args, check_delay=False, **kwargs)

        def close(self) -> None:
            super().close()
            if self._handle is not None and not (self.total and self.n < self.total):
                self._handle.update({"text/plain": ""}, raw=True)
                self._handle = None
                self.container.close()

    return Widget


def progress_bar(iterable: Iterable | None = None, *, enabled: bool = True, **kwargs: Any) -> Any:
    """A progress bar over ``iterable`` (or a manual one with ``total=``) that suits its output.

    Args:
        iterable: what to iterate over, as for ``tqdm``.
        enabled: ``False`` shows nothing (the same as tqdm's ``disable=True``).
        **kwargs: tqdm's own options (``total``, ``desc``, ``unit``, ``file``, ``disable``,
            ``delay``: :data:`DELAY`, or ``TQDM_DELAY``, unless given).

    Returns:
        A ``tqdm`` (a notebook widget, a terminal bar) or a :class:`LogLines`.
    """
    if not enabled:
        kwargs["disable"] = True
    kwargs.setdefault("delay", _delay())
    if _in_notebook_kernel() and kwargs.get("file") is None:
        if _have_widgets():
            return _widget_class()(iterable, **kwargs)
        kwargs["file"] = sys.stdout  # whole lines in the cell, not the red block of stderr
        return LogLines(iterable, **kwargs)
    if _is_terminal(kwargs.get("file") or sys.stderr):
        return tqdm.std.tqdm(iterable, **kwargs)
    return LogLines(iterable, **kwargs)


def write_line(text: str) -> None:
    """Print ``text`` as its own line, without breaking a bar being drawn (on stderr; in a
    notebook kernel on the cell's standard output)."""
    tqdm.std.tqdm.write(text, file=sys.stdout if _in_notebook_kernel() else sys.stderr)
