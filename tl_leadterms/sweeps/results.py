"""The results file of :func:`~tl_leadterms.sweeps.run.sweep`: JSON lines, one per finished
checkpoint, appended, flushed and fsynced; read back on a resume (a torn last line is set aside).

:class:`ResultsFile` is what a sweep driver (this process or a distributed one) uses: an
``fcntl.flock`` on the file itself (its device and inode, not its name: a link to a file being
written is refused at once with the holder's pid; the kernel drops it when its holder dies);
anything that is not a results file (a FIFO, device, socket or folder, a binary file, a line
over :data:`MAX_LINE` bytes) refused before any work and left as it is; and fingerprints of what
was analysed (:mod:`.fingerprint`): ``done(label, fingerprint)`` is False, with a warning and
``changed``, for a checkpoint whose files changed since its record was written.

Example:

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "r.jsonl"
>>> with ResultsFile(path, {"format": 1}) as results:
...     results.done("step0", "fp0")
...     results.append({"checkpoint": "step0", "fingerprint": "fp0", "rows": []})
False
>>> with ResultsFile(path, {"format": 1}) as results:
...     results.done("step0", "fp0"), results.record("step0")["rows"]
(True, [])
"""

import contextlib
import json
import os
import stat
import warnings
from pathlib import Path
from typing import Any

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.filesystem import file_kind
from tl_leadterms.jsontext import TORN, jsonable, parse_json

__all__ = ["MAX_LINE", "ResultsFile", "append_record", "check_results_path", "differences",
           "jsonable", "read_results"]  # fmt: skip

MAX_LINE = 64 << 20
"""The longest line (bytes) of a results file: a checkpoint's record is a few MB at most."""


class _Unset:
    def __repr__(self) -> str:
        return "no such setting"


_UNSET = _Unset()


def differences(stored: Any, wanted: Any, where: str = "") -> list[str]:
    """Where two settings differ, as ``"key.path: stored -> wanted"`` lines.

    Example:
        >>> differences({"a": {"k": 1}}, {"a": {"null": {"seed": 0}, "k": 1}})
        ["a.null: the file has no such setting, this sweep {'seed': 0}"]
    """
    if isinstance(stored, dict) and isinstance(wanted, dict):
        found = []
        for key in dict.fromkeys([*stored, *wanted]):
            name = f"{where}.{key}" if where else str(key)
            found += differences(stored.get(key, _UNSET), wanted.get(key, _UNSET), name)
        return found
    if stored == wanted:
        return []
    return [f"{where or 'settings'}: the file has {stored!r}, this sweep {wanted!r}"]


def check_results_path(path: str | os.PathLike) -> None:
    """Refuse a results path that is not a regular file (a FIFO blocks its writer, a device
    never ends); a path with nothing there yet is fine."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        kind = "folder" if stat.S_ISDIR(mode) else file_kind(Path(path))
        raise LeadTermsError(
            f"⟦results=|--results ⟧{str(path)!r} is a {kind}, not a results file; pass the path "
            "of a regular file, e.g. 'sweep.jsonl' (a new one is created)"
        )


def _not_results(path: Path, why: str) -> LeadTermsError:
    return LeadTermsError(
        f"{str(path)!r} is not a results file of tl_leadterms.sweep ({why}); pass a new path "
        "for --results, the file is left as it is"
    )


def read_results(path: Path, settings: dict[str, Any]) -> tuple[dict[str, dict], list[str]]:
    """Complete checkpoint records of a results file, read a line at a time; a torn last line
    is cut off the file (in place: the file keeps its identity) and kept in ``<name>.torn``."""
    if not path.exists():
        return {}, []
    done: dict[str, dict] = {}
    torn: tuple[int, int, str] | None = None  # (line number, offset, line)
    raw = b"\n"
    with open(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE + 1), b""), 1):
            if len(raw) > MAX_LINE:
                raise _not_results(path, f"line {number} is longer than {MAX_LINE >> 20} MiB")
            line = raw.decode("utf-8", "replace")  # records are ASCII (json.dumps)
            if "\0" in line or "\ufffd" in line:
                raise _not_results(path, f"line {number} is not text: a binary file")
            if not line.strip():
                continue
            if torn:
                raise LeadTermsError(
                    f"line {torn[0]} of {str(path)!r} is not a sweep record; fix or delete that "
                    "line (the other lines hold finished checkpoints) or pass a new results path"
                )
            record = parse_json(line, where=f"line {number} of {str(path)!r}", torn_ok=True)
            if record is TORN:
                torn = (number, f.tell() - len(raw), line.rstrip("\n"))
            elif not (
                isinstance(record, dict) and {"checkpoint", "rows", "settings"} <= set(record)
            ):
                raise _not_results(
                    path, f"line {number} is complete JSON but not a checkpoint record"
                )
            elif record["settings"] != settings:
                raise LeadTermsError(
                    f"{str(path)!r} was written by a sweep with other settings ("
                    f"{'; '.join(differences(record['settings'], settings))}); rerun with the "
                    "file's settings to resume it, or pass a new results path to keep both"
                )
            else:
                done[record["checkpoint"]] = record
    if torn:
        aside = path.with_name(path.name + ".torn")
        with open(aside, "a") as f:
            f.write(torn[2] + "\n")
        os.truncate(path, torn[1])
        warnings.warn(
            f"ignored an incomplete last line of {str(path)!r} (an interrupted write; kept "
            f"in {str(aside)!r}); its checkpoint is computed again",
            stacklevel=3,
        )
    elif not raw.endswith(b"\n"):
        with open(path, "a") as f:
            f.write("\n")
    return done, [torn[2]] if torn else []


def append_record(path: Path, record: dict[str, Any]) -> None:
    """Append one complete JSON line and make it durable before returning."""
    line = json.dumps(record) + "\n"
    with open(path, "a") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def _holder(fd: int) -> str:
    """The pid holding the flock of the file open as ``fd`` (from ``/proc/locks``)."""
    info = os.fstat(fd)
    key = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    with contextlib.suppress(OSError):
        for fields in map(str.split, Path("/proc/locks").read_text().splitlines()):
            if "FLOCK" in fields and key in fields:
                return fields[fields.index(key) - 1]
    return "unknown"


class ResultsFile:
    """A locked results file with fingerprinted records (see the module docstring).

    ``ResultsFile(None, settings)`` is a stand-in that stores nothing (a sweep without
    ``results=``). ``settings`` must equal those of every record already in the file.
    """

    def __init__(self, path: str | os.PathLike | None, settings: dict[str, Any]) -> None:
        self.path = None if path is None else Path(os.path.realpath(path))
        self.settings = settings
        self.records: dict[str, dict] = {}
        self.torn: list[str] = []
        self.changed: list[str] = []
        self._lock_fd: int | None = None

    def __enter__(self) -> "ResultsFile":
        if self.path is None:
            return self
        self._lock()
        try:
            self.records, self.torn = read_results(self.path, self.settings)
        except BaseException:
            self._unlock()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._unlock()

    def _lock(self) -> None:
        import fcntl

        check_results_path(self.path)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK, 0o666)
        except OSError as err:
            raise LeadTermsError(
                f"cannot open the results file {str(self.path)!r} ({err.strerror}); choose a "
                "writable folder for --results"
            ) from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise LeadTermsError(
                f"another sweep (pid {holder}) is writing {str(self.path)!r}; wait for it to "
                "finish, or pass another results path to run side by side"
            ) from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            import fcntl

            fd, self._lock_fd = self._lock_fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)  # a forked child may hold the descriptor too
            os.close(fd)

    def done(self, label: str, fingerprint: str | None) -> bool:
        """Whether ``label`` has a record of the same ``fingerprint`` (then reuse it)."""
        record = self.records.get(label)
        if record is None:
            return False
        if fingerprint is None or record.get("fingerprint") == fingerprint:
            return True
        self.changed.append(label)
        before = record.get("fingerprint") or "none (written before fingerprints)"
        warnings.warn(
            f"checkpoint {label!r} changed since its results were written to "
            f"{str(self.path)!r} (fingerprint {before} -> {fingerprint}); computing it again",
            stacklevel=2,
        )
        return False

    def record(self, label: str) -> dict:
        """The stored record of ``label``."""
        return self.records[label]

    def append(self, record: dict[str, Any]) -> None:
        """Store a finished checkpoint's record (a complete, fsynced line; a later line of the
        same checkpoint replaces an earlier one on reading); ``settings`` is filled in."""
        record = {**record, "settings": record.get("settings", self.settings)}
        if self.path is not None:
            if self._lock_fd is None:
                raise LeadTermsError("ResultsFile.append outside its with-block; open it first")
            append_record(self.path, record)
        self.records[record["checkpoint"]] = record
