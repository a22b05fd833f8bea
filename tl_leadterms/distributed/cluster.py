"""Which Ray to use: one already running in this process, an existing cluster, or a local one.

Ray is imported here, lazily: importing :mod:`tl_leadterms` (or this package) never imports it.
"""

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tl_leadterms.distributed.memory import check_local_ray
from tl_leadterms.distributed.reaper import forget, reap, record_started
from tl_leadterms.errors import LeadTermsError, positive_int
from tl_leadterms.signals import restore_handler

__all__ = ["CONNECT_TIMEOUT", "import_ray", "parse_target", "probe_address", "ray_session"]

CONNECT_TIMEOUT = 10.0
"""Seconds a connection to a Ray address, and its first answer, may take."""
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9)  # HTTP/2's, + empty SETTINGS


def import_ray() -> Any:
    """The ``ray`` module, or a LeadTermsError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise LeadTermsError(
            f"distributed statistics need Ray ({err}); install it with "
            "pip install 'tl_leadterms[ray]' (Ray >= 2.40)."
        ) from None
    return ray


def parse_target(text: str | None) -> tuple[str | None, int | None]:
    """``--ray`` text -> ``(address, num_cpus)``: ``local``, ``local:N``, ``auto`` or an address.

    Example:
        >>> parse_target("local:2"), parse_target("auto"), parse_target("10.0.0.1:6379")
        ((None, 2), ('auto', None), ('10.0.0.1:6379', None))
    """
    if text is None or text == "local":
        return None, None
    if text.startswith("local:"):
        count = text.removeprefix("local:")
        if not count.isdigit() or int(count) < 1:
            raise LeadTermsError(
                f"--ray {text}: local:N needs a positive number of CPUs N, e.g. local:4."
            )
        return None, int(count)
    return text, None


def _unreachable(address: str, why: object) -> LeadTermsError:
    return LeadTermsError(
        f"cannot connect to a Ray cluster at address={address!r} ({why}); start one with `ray "
        "start --head` and pass the address it prints, or use a local Ray "
        "(⟦address=None|--ray local⟧)"
    )


def probe_address(address: str, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse, within about ``timeout`` seconds a step (the host's look-up is the resolver's),
    a ``host:port`` where no Ray answers: a host that does not resolve, a closed port, or one
    that accepts but never answers as the gRPC (HTTP/2) server Ray's head is; ``ray.init``
    would retry them for ever.

    >>> probe_address("no-such-host.invalid:6379")
    Traceback (most recent call last):
    ...
    tl_leadterms.errors.LeadTermsError: cannot connect to a Ray cluster at address='no-such-...
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not port.isdigit():
        raise _unreachable(address, "not HOST:PORT, e.g. 10.0.0.1:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as conn:
            conn.sendall(_PREFACE)
            answer = conn.recv(9)  # an HTTP/2 server's first frame is its SETTINGS (type 4)
    except OSError as err:
        raise _unreachable(address, f"{type(err).__name__}: {err}") from None
    if answer[3:4] != b"\x04":
        raise _unreachable(address, "the port answers, but not as a Ray head")


@contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[Any]:
    """Yield the ``ray`` module connected to a cluster; stop only a Ray started here.

    * Ray already initialised in this process: use it as it is (``address`` is not connected
      to, but a ``host:port`` where no Ray answers is still refused).
    * ``address=None``: start a local Ray with ``num_cpus`` CPUs (default: all), no dashboard.
    * ``"auto"`` or ``"host:port"``: connect to a running cluster (``ray start --head``).
    """
    ray = import_ray()
    if address not in (None, "auto"):
        probe_address(address)
    if ray.is_initialized():
        yield ray
        return
    if num_cpus is not None:
        positive_int("num_cpus", num_cpus)
    quiet = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        check_local_ray()  # under a low `ulimit -v`, before Ray's node times out starting
        reap()  # agents left by a local cluster whose driver was killed
    try:
        # ray.init replaces the driver's SIGTERM handler (with a sys.exit from native code,
        # which aborts the process): keep ours, which shuts Ray down like Ctrl-C does
        with restore_handler():
            if address is None:
                # "local": a new Ray even where `ray start` runs one on this machine
                ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **quiet)
                record_started()
            else:
                ray.init(address=address, **quiet)
    except ConnectionError as err:
        raise _unreachable(address, err) from None
    try:
        yield ray
    finally:
        ray.shutdown()
        forget()
