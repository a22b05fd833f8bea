"""SIGTERM handled as SIGINT is: the same clean-up, one line, a documented exit status.

Batch schedulers, ``timeout`` and ``kill`` send SIGTERM, whose default action ends the process
at once: no ``finally`` runs, so scratch files stay behind and a Ray cluster started by the
process is left running. :func:`terminate_as_interrupt` makes SIGTERM raise :class:`Terminated`,
a ``KeyboardInterrupt``, so every clean-up written for Ctrl-C (the atomic writer's, the scratch
files', Ray's shutdown) runs for it too. The command line exits 130 after SIGINT and 143
(128 + 15) after SIGTERM.

Example:
    >>> import os, signal
    >>> with terminate_as_interrupt():
    ...     try:
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ...     except Terminated:
    ...         print("cleaned up")
    cleaned up
"""

import contextlib
import signal
import threading
from collections.abc import Iterator

__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "Terminated",
    "restore_handler",
    "sigterm_received",
    "terminate_as_interrupt",
]

EXIT_INTERRUPTED = 130
"""Exit status after SIGINT (Ctrl-C): 128 + 2."""
EXIT_TERMINATED = 143
"""Exit status after SIGTERM: 128 + 15."""


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM (see the module)."""


_received: list[int] = []


def _raise_terminated(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Terminated(f"received signal {signum} (SIGTERM)")


def sigterm_received() -> bool:
    """Whether SIGTERM arrived within :func:`terminate_as_interrupt`: a library that catches
    the :class:`Terminated` raised inside its own code (Ray's ``ray.get`` re-raises a plain
    ``KeyboardInterrupt``) cannot make a SIGTERM read as a Ctrl-C."""
    return bool(_received)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises :class:`Terminated` (main thread only; elsewhere a
    no-op); the previous handler is put back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


@contextlib.contextmanager
def restore_handler(signum: int = signal.SIGTERM) -> Iterator[None]:
    """Put back the handler of ``signum`` that was in place when the block began, once the
    block's setup is done: for libraries that install their own (``ray.init`` replaces the
    driver's SIGTERM handler with one that calls ``sys.exit`` from inside native code)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signum)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signum, before)
