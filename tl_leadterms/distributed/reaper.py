"""Processes of a local Ray cluster whose driver was killed (SIGKILL): found and stopped.

A driver that ends in any way Python can catch shuts its local Ray down
(:func:`~tl_leadterms.distributed.cluster.ray_session`); after a SIGKILL, Ray's dashboard and
runtime-env agents are re-parented to init and keep running (Ray 2.60). So a driver that started a
local cluster records its processes (pid, start time, executable, from ``/proc``) in a small file,
and the next :func:`reap` (every local ``ray_session`` calls it) stops those of every driver that is
gone. A record is trusted only when it is a regular file of the current user's in :data:`RECORDS`, a
folder of the user's own with mode 0700, and each process is identified again with its owner before
any signal: a reused pid, another program's or another user's process is never signalled
(docs/guides/reliability.md#round-3-hostile-neighbours-silent-ports-huge-lines). Linux only;
elsewhere recording and reaping do nothing."""

import contextlib
import json
import os
import signal
import stat
import tempfile
from pathlib import Path

from tl_leadterms.atomic import write_text
from tl_leadterms.errors import LeadTermsError

__all__ = ["RECORDS", "forget", "reap", "record_started"]

_UID = os.getuid() if hasattr(os, "getuid") else None
RECORDS = Path(tempfile.gettempdir()) / f"tl_leadterms-ray-{_UID}"
"""Where the records live: one ``{driver pid}.json`` per running driver with a local Ray, in a
folder private to the user (``$TMPDIR/tl_leadterms-ray-<uid>``, mode 0700)."""


def _identity(pid: int) -> list | None:
    """``[pid, start time in clock ticks since boot, executable]`` of a live process of this
    user (None: gone, a zombie, another user's or unreadable)."""
    proc = Path(f"/proc/{pid}")
    try:
        text = (proc / "stat").read_text()
        exe = os.readlink(proc / "exe")
        owner = proc.stat().st_uid
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" or owner != _UID else [pid, int(fields[19]), exe]


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            text = (entry / "stat").read_text()
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        found = children.get(todo.pop(), [])
        out += found
        todo += found
    return out


def _folder() -> Path:
    """:data:`RECORDS`, created with mode 0700; a folder there that is not the user's own with
    that mode (planted by another user, say) is refused."""
    with contextlib.suppress(FileExistsError):
        RECORDS.mkdir(mode=0o700)
    info = RECORDS.lstat()
    if stat.S_ISDIR(info.st_mode) and info.st_uid == _UID and info.st_mode & 0o777 == 0o700:
        return RECORDS
    raise LeadTermsError(
        f"{RECORDS} (owner uid {info.st_uid}, mode {info.st_mode & 0o777:o}) is not a folder of "
        f"yours with mode 700, so its records of local Ray processes cannot be trusted; remove "
        "it, or set TMPDIR to a folder of your own"
    )


def record_started() -> Path | None:
    """Record this driver and every process it has started so far (call once the local
    cluster is up); the record file, or None where ``/proc`` is missing."""
    if not Path("/proc/self/stat").exists():
        return None
    me = os.getpid()
    processes = [found for pid in _descendants(me) if (found := _identity(pid))]
    record = {"driver": _identity(me), "processes": processes}
    return write_text(_folder() / f"{me}.json", json.dumps(record))


def forget() -> None:
    """Remove this driver's record (after its cluster was shut down)."""
    with contextlib.suppress(OSError):
        (RECORDS / f"{os.getpid()}.json").unlink()


def reap() -> list[int]:
    """Stop the recorded processes of drivers that are gone; the pids signalled."""
    if not Path("/proc/self/stat").exists():
        return []
    stopped = []
    for file in _folder().glob("*.json"):
        try:
            info = file.lstat()  # a regular file of this user's (the folder is private too)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != _UID:
                continue
            record = json.loads(file.read_text())
            if _identity(record["driver"][0]) == record["driver"]:
                continue  # its driver still runs
            left = [p for p in record["processes"] if _identity(p[0]) == p]  # start, executable
        except (OSError, ValueError, TypeError, KeyError, IndexError):
            continue  # being written, or not a record of this library's: leave it
        for pid, *_ in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                stopped.append(pid)
        with contextlib.suppress(OSError):
            file.unlink()
    return stopped
