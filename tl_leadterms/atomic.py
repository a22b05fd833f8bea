r"""Crash-safe writing of files and folders: the one atomic writer of tl_leadterms.

Every file the package writes goes through here: the content goes to a temporary in the target's
own folder, is fsynced and ``os.replace``-d onto the target, and the folder is fsynced, so a reader
sees the old file or the new one, never a half-written one, even after a crash. Temporaries' names,
file modes, errors and what a killed writer leaves: docs/guides/reliability.md#the-atomic-writer.

Example:

>>> import pathlib, shutil, tempfile
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> write_text(folder / "notes.txt", "hello\n").read_text()
'hello\n'
>>> with atomic_path(folder / "table.csv") as tmp:  # frame.to_csv(tmp), torch.save(obj, tmp)
...     _ = tmp.write_text("a,b\n1,2\n")
>>> with atomic_folder(folder / "ckpt") as tmp:  # model.save_pretrained(tmp)
...     _ = (tmp / "config.json").write_text("{}")
>>> sorted(p.name for p in folder.iterdir())
['ckpt', 'notes.txt', 'table.csv']
>>> shutil.rmtree(folder)
"""

import contextlib
import errno
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from tl_leadterms.errors import LeadTermsError
from tl_leadterms.filesystem import (
    check_space,
    file_kind,
    file_size,
    is_special,
    no_space_error,
    out_of_space,
    streamed,
    tree_size,
)

__all__ = [
    "STALE_SECONDS",
    "AtomicSet",
    "atomic_folder",
    "atomic_path",
    "atomic_set",
    "write_bytes",
    "write_text",
]

STALE_SECONDS = 7 * 24 * 3600
"""A temporary this old is removed even when a process with its writer's pid runs (pid reuse)."""


def write_bytes(path: str | os.PathLike, data: bytes, *, parents: bool = False) -> Path:
    """Replace the file ``path`` by ``data``, atomically; returns ``Path(path)``.

    With ``parents=True`` missing parent folders are created; otherwise a missing folder is a
    :class:`~tl_leadterms.errors.LeadTermsError`, as is an unwritable one.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise LeadTermsError(f"data must be bytes, got {type(data).__name__}; encode text first")
    with atomic_path(path, parents=parents) as tmp, open(tmp, "wb") as file:
        file.write(data)
    return Path(path)


def write_text(
    path: str | os.PathLike, text: str, *, encoding: str = "utf-8", parents: bool = False
) -> Path:
    """Replace the file ``path`` by ``text`` (encoded, newlines kept as they are), atomically.

    Lone surrogates (from file names with undecodable bytes, or hostile JSON) are written as
    ``\\udXXX`` escapes instead of failing.
    """
    if not isinstance(text, str):
        raise LeadTermsError(f"text must be a str, got {type(text).__name__}")
    return write_bytes(path, text.encode(encoding, "backslashreplace"), parents=parents)


@contextlib.contextmanager
def atomic_path(
    path: str | os.PathLike, *, parents: bool = False, size: int | None = None
) -> Iterator[Path]:
    """Yield a temporary file path to write; on success it replaces the file ``path``.

    For writers that need a file name (``save_file``, ``torch.save``, ``np.save``, ``savefig``,
    ``to_csv``). The temporary exists (empty) when the block starts; if the block raises, it is
    removed and ``path`` is left as it was. ``size`` (bytes, if known) is checked against the free
    space first; a full disk or a file-size limit reads as one :class:`LeadTermsError` naming the
    path and the space needed. A character device or FIFO ``path`` (``/dev/null``, a named pipe) is
    streamed to when the block ends, as ``> path`` would, never replaced."""
    target = _target(path, parents, folder=False)
    if is_special(target):
        with streamed(target) as tmp:
            yield tmp
        return
    check_space(target, size)
    tmp = _create(target, folder=False)
    try:
        mode = tmp.stat().st_mode & 0o7777  # what open() gives under this umask and folder
        yield tmp
        _fsync_file(tmp, mode)
        os.replace(tmp, target)
    except BaseException as err:
        written = file_size(tmp)
        _remove(tmp)
        if out_of_space(err):
            raise no_space_error(target, size, written, err) from err
        raise
    _fsync_folder(target.parent)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, parents: bool = False) -> Iterator[Path]:
    """Yield an empty temporary folder to fill; on success it replaces the folder ``path``.

    For writers of whole folders (``save_pretrained``). Every file in it is fsynced, then an
    existing ``path`` is moved aside, the new folder renamed into place and the old one removed.
    If the block raises, the temporary folder is removed and ``path`` is left as it was.
    """
    target = _target(path, parents, folder=True)
    tmp = _create(target, folder=True)
    try:
        mode = tmp.stat().st_mode & 0o7777
        yield tmp
        if not tmp.is_dir():
            raise LeadTermsError(f"the temporary folder {str(tmp)!r} was removed; write into it")
        _fsync_tree(tmp, mode & 0o666)
        _swap_in(tmp, target)
    except BaseException as err:
        written = tree_size(tmp)
        _remove(tmp)
        if out_of_space(err):
            raise no_space_error(target, None, written, err) from err
        raise
    _fsync_folder(target.parent)


class AtomicSet:
    """Files written as one set by :func:`atomic_set`: all are written, then all renamed."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack

    def file(self, path: str | os.PathLike, *, parents: bool = False, size: int | None = None):
        """A temporary that replaces the file ``path`` when the set is committed."""
        return self._stack.enter_context(atomic_path(path, parents=parents, size=size))

    def files_in(self, folder: str | os.PathLike) -> Path:
        """A temporary folder whose files replace same-named files of ``folder`` (created if
        missing) when the set is committed; other files of ``folder`` are left alone."""
        return self._stack.enter_context(_files_in(Path(folder)))


@contextlib.contextmanager
def atomic_set() -> Iterator[AtomicSet]:
    """Write several files that refer to each other as a set: every temporary is written
    first, and only when the block succeeds are they renamed into place, one after the other;
    if the block raises, none is (each target keeps its old content).

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> with atomic_set() as out:
        ...     _ = out.file(folder / "stats.txt").write_text("hash 1")
        ...     _ = (out.files_in(folder / "tok") / "vocab.txt").write_text("a b")
        >>> sorted(p.name for p in folder.rglob("*") if p.is_file())
        ['stats.txt', 'vocab.txt']
    """
    with contextlib.ExitStack() as stack:
        yield AtomicSet(stack)


@contextlib.contextmanager
def _files_in(folder: Path) -> Iterator[Path]:
    target = _target(folder, True, folder=True)
    target.mkdir(parents=True, exist_ok=True)
    tmp = _create(target / "incoming", folder=True)  # swept like any temporary if we are killed
    try:
        yield tmp
        files = sorted(tmp.iterdir())
        if any(f.is_dir() for f in files):
            raise LeadTermsError(f"files_in({str(target)!r}) takes files only, not subfolders")
        for file in files:
            _fsync_file(file, file.stat().st_mode & 0o7777)
        for file in files:
            os.replace(file, target / file.name)
        _fsync_folder(target)
    finally:
        _remove(tmp)


@contextlib.contextmanager
def scratch_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary file named like ``path``'s temporaries, removed when the block ends.

    For data parked on disk during a computation (never the result): it is always removed,
    and one left by a killed run is swept by the next write or scratch of the same ``path``.
    """
    target = _target(path, False, folder=False)
    tmp = _create(target, folder=False)
    try:
        yield tmp
    except BaseException as err:
        written = file_size(tmp)
        if out_of_space(err):
            raise no_space_error(tmp, None, written, err) from err
        raise
    finally:
        _remove(tmp)


def _target(path: object, parents: bool, folder: bool) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise LeadTermsError(f"path must be a str or os.PathLike, got {path!r}")
    target = Path(path)
    if target.is_symlink():  # write where the link points, as open() would; keep the link
        target = Path(os.path.realpath(target))
    if target.name in ("", ".", ".."):
        raise LeadTermsError(f"{str(path)!r} names no file; pass a path such as out/result.json")
    if folder and target.exists() and not target.is_dir():
        kind = "a file" if target.is_file() else f"a {file_kind(target)}"
        raise LeadTermsError(f"{str(target)!r} is {kind}; pass a folder path or remove it")
    if not folder and target.is_dir():
        raise LeadTermsError(f"{str(target)!r} is a folder; pass a file path inside it")
    parent = target.parent
    if parents and not parent.is_dir():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as err:
            raise LeadTermsError(
                f"cannot create folder {str(parent)!r} for {str(target)!r}: a file is in the "
                "way; remove it or pass another path"
            ) from err
        except OSError as err:
            raise _unwritable(target, Path(err.filename or parent), err) from err
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise LeadTermsError(
            f"folder {str(parent)!r} {what}, so {str(target)!r} cannot be written; create the "
            f"folder first (mkdir -p {parent}) or pass a path in an existing folder"
        )
    return target


def _unwritable(target: Path, folder: Path, err: OSError) -> LeadTermsError:
    return LeadTermsError(
        f"cannot write {str(target)!r}: folder {str(folder)!r} is not writable "
        f"({err.strerror}); choose a writable folder or change its permissions"
    )


def _name(target: Path, kind: str) -> Path:
    token = secrets.token_hex(6)
    return target.with_name(f".{target.name}.{os.getpid()}.{token}.{kind}{target.suffix}")


def _create(target: Path, folder: bool) -> Path:
    """Sweep the target's orphans, then create a fresh temporary file or folder for it."""
    _sweep(target)
    for _ in range(100):
        tmp = _name(target, "tmp")
        try:
            if folder:
                os.mkdir(tmp)  # 0o777 & ~umask, as any new folder
            else:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue  # 48 random bits collided: draw again
        except OSError as err:
            if isinstance(err, PermissionError) or err.errno == errno.EROFS:
                raise _unwritable(target, target.parent, err) from err
            raise
    raise LeadTermsError(f"no free temporary name next to {str(target)!r}; clean up its folder")


def _sweep(target: Path) -> None:
    """Remove temporaries of ``target`` left by dead writers; restore a folder moved aside."""
    pattern = re.compile(
        re.escape(f".{target.name}.") + r"(\d+)\.[0-9a-f]{12}\.(tmp|old)" + re.escape(target.suffix)
    )
    try:
        entries = list(os.scandir(target.parent))
    except OSError:
        return
    orphans = [
        (entry, match.group(2))
        for entry in entries
        if (match := pattern.fullmatch(entry.name)) and _orphaned(entry, int(match.group(1)))
    ]
    aside = [e for e, kind in orphans if kind == "old"]
    if aside and not os.path.lexists(target):  # died between moving the old folder and renaming
        newest = max(aside, key=lambda e: e.stat(follow_symlinks=False).st_mtime)
        with contextlib.suppress(OSError):
            os.rename(newest.path, target)
    for entry, _ in orphans:
        _remove(Path(entry.path))


def _orphaned(entry: os.DirEntry, pid: int) -> bool:
    if pid == os.getpid():
        return False  # another thread of this process may be writing it
    try:
        age = time.time() - entry.stat(follow_symlinks=False).st_mtime
    except OSError:
        return False
    if age > STALE_SECONDS or pid <= 0:
        return True
    if os.name != "posix":
        return False  # no harmless liveness probe there: only stale temporaries go
    try:
        os.kill(pid, 0)  # is its writer alive?
    except (ProcessLookupError, OverflowError):
        return True
    except OSError:
        return False  # e.g. PermissionError: it runs under another user
    return False


def _swap_in(tmp: Path, target: Path) -> None:
    if not os.path.lexists(target):
        os.rename(tmp, target)
        return
    aside = _name(target, "old")
    try:
        os.rename(target, aside)
        os.rename(tmp, target)
    except BaseException:
        if os.path.lexists(aside) and not os.path.lexists(target):
            os.rename(aside, target)  # put the old folder back
        raise
    _fsync_folder(target.parent)
    shutil.rmtree(aside, ignore_errors=True)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _fsync_file(path: Path, mode: int) -> None:
    """fsync ``path``, first giving it ``mode`` (plus its own execute bits) if a writer such as
    safetensors' ``save_file`` made it private."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError as err:
        raise LeadTermsError(
            f"the temporary file {str(path)!r} was removed or renamed before it could replace "
            "the target; write to exactly the path atomic_path yields"
        ) from err
    try:
        now = os.fstat(fd).st_mode & 0o7777
        wanted = mode | (now & (mode & 0o444) >> 2)  # keep execute bits where reading is allowed
        if now != wanted:
            os.fchmod(fd, wanted)
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(folder: Path, mode: int) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            file = Path(root, name)
            if not file.is_symlink():
                _fsync_file(file, mode)
        _fsync_folder(Path(root))


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable, where the system can fsync a folder."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
