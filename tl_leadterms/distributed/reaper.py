"""Processes of a local Ray cluster whose driver was killed (SIGKILL): found and stopped.

A driver that ends normally, on an error, on Ctrl-C or on SIGTERM shuts its local Ray down
(:func:`~tl_leadterms.distributed.cluster.ray_session`). SIGKILL cannot be caught: Ray's raylet
and workers then die with the driver, but its dashboard and runtime-env agents are re-parented to
init and keep running (seen with Ray 2.60). So when a local cluster has started, the driver
records the processes it started (pid and start time, read from ``/proc``) in a small file; the
next :func:`reap` (every ``ray_session`` calls it) stops the recorded processes of every driver
that is gone, checking each start time so that a reused pid is never signalled. Linux only
(``/proc``); elsewhere recording and reaping do nothing.
"""

import contextlib
import json
import os
import signal
import tempfile
from pathlib import Path

from tl_leadterms.atomic import write_text

__all__ = ["RECORDS", "forget", "reap", "record_started"]

RECORDS = Path(tempfile.gettempdir()) / "tl_leadterms-ray"
"""Where the records live: one ``{driver pid}.json`` per running driver with a local Ray."""


def _start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of ``/proc/pid/stat``)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[19])


def _children() -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(text[text.rindex(")") + 2 :].split()[1])
        found.setdefault(parent, []).append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    children, out, todo = _children(), [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def record_started() -> Path | None:
    """Record this driver and every process it has started so far (call once the local
    cluster is up); the record file, or None where ``/proc`` is missing."""
    if not Path("/proc/self/stat").exists():
        return None
    me = os.getpid()
    processes = [[pid, t] for pid in _descendants(me) if (t := _start_time(pid)) is not None]
    record = {"driver": [me, _start_time(me)], "processes": processes}
    return write_text(RECORDS / f"{me}.json", json.dumps(record), parents=True)


def forget() -> None:
    """Remove this driver's record (after its cluster was shut down)."""
    with contextlib.suppress(OSError):
        (RECORDS / f"{os.getpid()}.json").unlink()


def _same(pid: int, start: int | None) -> bool:
    """The recorded process still runs (a zombie, dead but not yet reaped, does not count)."""
    if start is None or _start_time(pid) != start:
        return False
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def reap() -> list[int]:
    """Stop the recorded processes of drivers that are gone; the pids signalled."""
    if not RECORDS.is_dir():
        return []
    stopped = []
    for file in RECORDS.glob("*.json"):
        try:
            record = json.loads(file.read_text())
            driver, processes = record["driver"], record["processes"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours: leave it
        if _same(*driver):
            continue  # its driver still runs
        for pid, start in processes:
            if _same(pid, start):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    stopped.append(pid)
        with contextlib.suppress(OSError):
            file.unlink()
    return stopped
