"""What a file system can refuse a writer: special files, full disks and file-size limits.

:mod:`tl_leadterms.atomic` asks here whether a target is a special file (streamed to, never
replaced), whether there is room for a write of known size, and how to say in one line that a
write failed for want of space; :func:`looks_like_path` tells a local path from a model name.
"""

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tl_leadterms.errors import LeadTermsError

try:
    import resource
except ImportError:  # not on Windows
    resource = None

__all__ = [
    "check_space",
    "file_kind",
    "file_size",
    "is_special",
    "looks_like_path",
    "no_space_error",
    "out_of_space",
    "streamed",
    "tree_size",
]


def file_kind(target: Path) -> str:
    mode = target.stat().st_mode
    for test, name in (
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO (named pipe)"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def looks_like_path(name: str) -> bool:
    """A name meant as a local path (model names like pythia-1.4b have dots, so no suffix test).

    >>> looks_like_path("./ckpt"), looks_like_path("pythia-70m")
    (True, False)
    """
    return name.startswith(("/", ".", "~")) or name.endswith(os.sep)


def is_special(target: Path) -> bool:
    """Whether ``target`` (symlinks resolved) is a special file to stream to; refuses the kinds
    that are never an output (block devices, sockets)."""
    try:
        mode = target.stat().st_mode
    except OSError:
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    raise LeadTermsError(
        f"{str(target)!r} is a {file_kind(target)}, not a file: refusing to write to it; pass the "
        "path of a regular file"
    )


@contextlib.contextmanager
def streamed(target: Path) -> Iterator[Path]:
    """A private temporary for a special-file target; its bytes go to the target at the end."""
    fd, name = tempfile.mkstemp(prefix=".tl_leadterms.", suffix=target.suffix)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as source, open(target, "wb") as sink:
            shutil.copyfileobj(source, sink, 1 << 20)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tree_size(folder: Path) -> int:
    return sum(file_size(Path(root, f)) for root, _, files in os.walk(folder) for f in files)


def free_space(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def human_bytes(n: int) -> str:
    """``n`` bytes for a message (stats.memory.format_bytes sits a layer above this one)."""
    if n < 1024:
        return f"{n} bytes"
    size = n / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def check_space(target: Path, size: int | None) -> None:
    free = free_space(target.parent)
    if size is not None and free is not None and size > free:
        raise LeadTermsError(
            f"not enough space to write {str(target)!r}: it needs {human_bytes(size)}, the file "
            f"system of {str(target.parent)!r} has {human_bytes(free)} free; free "
            f"{human_bytes(size - free)} or write elsewhere"
        )


NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "StorageFull", "File too large")


def out_of_space(err: BaseException) -> bool:
    """A full disk, a quota or a file-size limit, from Python's OSError or a native writer's
    message (safetensors reports ``IoError(Os { code: 28, kind: StorageFull, .. })``)."""
    if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
        return True
    return not isinstance(err, LeadTermsError | KeyboardInterrupt) and any(
        text in str(err) for text in NO_SPACE_TEXT
    )


def no_space_error(
    target: Path, size: int | None, written: int, err: BaseException
) -> LeadTermsError:
    free = free_space(target.parent)
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource is not None else -1
    if (isinstance(err, OSError) and err.errno == errno.EFBIG) or "File too large" in str(err):
        return LeadTermsError(
            f"cannot write {str(target)!r}: it exceeds this process's file-size limit "
            f"(ulimit -f: {human_bytes(limit) if limit >= 0 else 'unlimited'})"
            + (f" after {human_bytes(written)}" if written else "")
            + "; raise the limit or write a smaller file"
        )
    needed = (
        f"it needs {human_bytes(size)}"
        if size is not None
        else f"{human_bytes(written)} were written"
    )
    have = f"{human_bytes(free)} free" if free is not None else "no free space"
    return LeadTermsError(
        f"no space left writing {str(target)!r} ({needed} before the file system of "
        f"{str(target.parent)!r} filled up; it has {have}); free space or write elsewhere. The "
        "previous file, if any, is unchanged"
    )
