"""Tests of the one atomic writer, tl_leadterms.atomic."""

import doctest
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import unchecked
from tl_leadterms import atomic
from tl_leadterms.atomic import atomic_folder, atomic_path, write_bytes, write_text
from tl_leadterms.errors import LeadTermsError

ROOT = Path(__file__).resolve().parents[2]


def names(folder):
    return sorted(p.name for p in Path(folder).iterdir())


def dead_pid():
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_docstring_example():
    assert doctest.testmod(atomic).failed == 0


def test_content_is_written_and_replaced(tmp_path):
    path = tmp_path / "a.txt"
    write_text(path, "first ünïcode\r\nline\n")
    assert path.read_bytes() == "first ünïcode\r\nline\n".encode()
    write_bytes(path, b"\x00second")
    assert path.read_bytes() == b"\x00second"
    with atomic_path(tmp_path / "b.bin") as tmp:
        tmp.write_bytes(b"third")
    assert (tmp_path / "b.bin").read_bytes() == b"third"
    assert names(tmp_path) == ["a.txt", "b.bin"]


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_modes_equal_those_of_plain_open(tmp_path, umask):
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as f:
            f.write("x")
        os.mkdir(tmp_path / "plain_dir")
        write_text(tmp_path / "text.txt", "x")
        write_bytes(tmp_path / "bytes.bin", b"x")
        with atomic_path(tmp_path / "ctx.bin") as tmp, open(tmp, "wb") as f:
            f.write(b"x")
        with atomic_folder(tmp_path / "folder") as tmp, open(tmp / "inside.txt", "w") as f:
            f.write("x")
    finally:
        os.umask(old)

    def mode(name):
        return (tmp_path / name).stat().st_mode & 0o777

    assert mode("plain.txt") == 0o666 & ~umask
    for name in ("text.txt", "bytes.bin", "ctx.bin", "folder/inside.txt"):
        assert mode(name) == mode("plain.txt"), name
    assert mode("folder") == mode("plain_dir") == 0o777 & ~umask


def test_private_files_of_writers_get_the_ordinary_mode(tmp_path):
    import torch
    from safetensors.torch import save_file

    with open(tmp_path / "plain.txt", "w") as f:
        f.write("x")
    ordinary = (tmp_path / "plain.txt").stat().st_mode & 0o777
    with atomic_path(tmp_path / "stats.safetensors") as tmp:
        save_file({"a": torch.zeros(2)}, str(tmp))  # it writes 0o600 files
    with atomic_folder(tmp_path / "ckpt") as tmp:
        save_file({"a": torch.zeros(2)}, str(tmp / "model.safetensors"))
        (tmp / "run.sh").write_text("true")
        (tmp / "run.sh").chmod(0o700)
    assert (tmp_path / "stats.safetensors").stat().st_mode & 0o777 == ordinary
    assert (tmp_path / "ckpt" / "model.safetensors").stat().st_mode & 0o777 == ordinary
    assert (tmp_path / "ckpt" / "run.sh").stat().st_mode & 0o777 == ordinary | 0o100  # its u+x


def test_temporary_names_are_unique_and_next_to_the_target(tmp_path):
    path = tmp_path / "stats.safetensors"
    seen = []
    for _ in range(2):
        with atomic_path(path) as tmp:
            seen.append(tmp)
            tmp.write_bytes(b"x")
    assert seen[0] != seen[1]
    for tmp in seen:
        assert tmp.parent == tmp_path
        # the writer's pid, 12 random hex digits, and the target's suffix for extension sniffers
        pattern = rf"\.stats\.safetensors\.{os.getpid()}\.[0-9a-f]{{12}}\.tmp\.safetensors"
        assert re.fullmatch(pattern, tmp.name), tmp.name
    assert names(tmp_path) == ["stats.safetensors"]


def test_a_write_while_another_temporary_exists(tmp_path):
    path = tmp_path / "t.txt"
    fixed = tmp_path / ".t.txt.tmp"  # the fixed name the old writers used: not ours, kept
    fixed.write_text("someone else's")
    with atomic_path(path) as outer:
        outer.write_text("outer")
        write_text(path, "inner")  # same target, same process: the outer temporary survives
        assert path.read_text() == "inner"
        assert outer.read_text() == "outer"
    assert path.read_text() == "outer"
    assert fixed.read_text() == "someone else's"
    assert names(tmp_path) == [".t.txt.tmp", "t.txt"]


@pytest.mark.parametrize("error", [ValueError, KeyboardInterrupt])
@pytest.mark.parametrize("existing", [True, False])
def test_failure_cleans_up_and_leaves_the_target(tmp_path, error, existing):
    file, folder = tmp_path / "f.json", tmp_path / "ckpt"
    if existing:
        file.write_text("old")
        folder.mkdir()
        (folder / "config.json").write_text("old")
    before = names(tmp_path)
    with pytest.raises(error), atomic_path(file) as tmp:
        tmp.write_text("half of the new")
        raise error("payload failed")
    with pytest.raises(error), atomic_folder(folder) as tmp:
        (tmp / "config.json").write_text("half of the new")
        raise error("payload failed")
    assert names(tmp_path) == before
    if existing:
        assert file.read_text() == "old"
        assert names(folder) == ["config.json"]
        assert (folder / "config.json").read_text() == "old"


def test_folder_is_replaced_whole(tmp_path):
    folder = tmp_path / "step10"
    folder.mkdir()
    (folder / "stale.bin").write_text("from the old checkpoint")
    with atomic_folder(folder) as tmp:
        (tmp / "model.safetensors").write_bytes(b"new")
        (tmp / "tokenizer").mkdir()
        (tmp / "tokenizer" / "vocab.json").write_text("{}")
    assert names(folder) == ["model.safetensors", "tokenizer"]
    assert (folder / "tokenizer" / "vocab.json").read_text() == "{}"
    assert names(tmp_path) == ["step10"]


# The child imports tl_leadterms.atomic alone (a stand-in package skips the heavy __init__): it
# needs nothing above the standard library and tl_leadterms.errors.
CHILD = """
import sys, types
package = types.ModuleType("tl_leadterms")
package.__path__ = [sys.argv[2]]
sys.modules["tl_leadterms"] = package
from tl_leadterms.atomic import atomic_path
with atomic_path(sys.argv[1]) as tmp, open(tmp, "wb") as f:
    f.write(b"n" * 8_000_000)
    f.flush()
    print(tmp, flush=True)
    sys.stdin.read()  # blocks mid-write until the parent kills it
    f.write(b"n" * 8_000_000)
"""


def start_writer(path):
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(ROOT / "tl_leadterms")],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    tmp = Path(child.stdout.readline().strip())
    assert tmp.is_file() and tmp.stat().st_size == 8_000_000  # it really is mid-write
    return child, tmp


@pytest.mark.parametrize("existing", [True, False])
def test_sigkill_mid_write_leaves_old_or_absent_and_next_write_cleans(tmp_path, existing):
    path = tmp_path / "big.bin"
    if existing:
        path.write_bytes(b"old content")
    child, tmp = start_writer(path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stdin.close()
    assert child.returncode == -signal.SIGKILL
    assert tmp.exists()  # the orphan a killed run leaves
    if existing:
        assert path.read_bytes() == b"old content"
    else:
        assert not path.exists()
    write_bytes(path, b"new")
    assert path.read_bytes() == b"new"
    assert names(tmp_path) == ["big.bin"]


def test_a_live_writers_temporary_is_never_removed(tmp_path):
    path = tmp_path / "shared.bin"
    child, tmp = start_writer(path)
    try:
        write_bytes(path, b"mine")
        assert tmp.exists() and tmp.stat().st_size == 8_000_000
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stdin.close()
    assert path.read_bytes() == b"mine"


def test_orphans_of_other_targets_are_kept_stale_ones_removed(tmp_path):
    pid = dead_pid()
    other = tmp_path / f".other.txt.{pid}.0123456789ab.tmp.txt"
    prefix = tmp_path / f".a.txt5.{pid}.0123456789ab.tmp.txt5"  # a target named a.txt5
    stale = tmp_path / ".a.txt.1.0123456789ab.tmp.txt"  # pid 1 runs, but a month old
    fresh_live = tmp_path / ".a.txt.1.ba9876543210.tmp.txt"  # pid 1 runs and it is new
    for p in (other, prefix, stale, fresh_live):
        p.write_text("x")
    month_ago = time.time() - 30 * 24 * 3600
    os.utime(stale, (month_ago, month_ago))
    write_text(tmp_path / "a.txt", "new")
    assert names(tmp_path) == sorted(["a.txt", other.name, prefix.name, fresh_live.name])


def test_a_folder_moved_aside_by_a_killed_writer_is_restored(tmp_path):
    folder = tmp_path / "ckpt"
    aside = tmp_path / f".ckpt.{dead_pid()}.0123456789ab.old"  # killed between the two renames
    aside.mkdir()
    (aside / "config.json").write_text("old")
    with pytest.raises(ValueError), atomic_folder(folder) as tmp:
        (tmp / "config.json").write_text("new")
        raise ValueError("this write fails too")
    assert names(tmp_path) == ["ckpt"]
    assert (folder / "config.json").read_text() == "old"


def test_missing_folder_and_file_in_the_way(tmp_path):
    missing = tmp_path / "nope" / "a.txt"
    with pytest.raises(LeadTermsError, match=r"nope' does not exist.*mkdir -p"):
        write_text(missing, "x")
    with pytest.raises(LeadTermsError, match="does not exist"), atomic_folder(missing):
        pass
    assert not missing.parent.exists()
    write_text(missing, "x", parents=True)
    assert missing.read_text() == "x"
    (tmp_path / "file").write_text("x")
    with pytest.raises(LeadTermsError, match="a file is in the way"):
        write_text(tmp_path / "file" / "sub" / "a.txt", "x", parents=True)
    with pytest.raises(LeadTermsError, match="is a folder; pass a file path"):
        write_text(tmp_path, "x")
    with pytest.raises(LeadTermsError, match="is a file; pass a folder path"):
        atomic_folder(tmp_path / "file").__enter__()
    with pytest.raises(LeadTermsError, match="path must be a str"):
        unchecked(write_text)(3, "x")
    with pytest.raises(LeadTermsError, match="path must be a str"):
        unchecked(write_bytes)(None, b"x")
    with pytest.raises(LeadTermsError, match="data must be bytes"):
        unchecked(write_bytes)(tmp_path / "b.txt", "x")
    with pytest.raises(LeadTermsError, match="text must be a str"):
        unchecked(write_text)(tmp_path / "b.txt", b"x")


def test_unwritable_folder(tmp_path):
    """A real permission check: in a forked child that runs as nobody when we are root."""
    base = Path(tempfile.mkdtemp())  # under /tmp, so that nobody can reach it
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o755)
        (locked / "a.txt").write_text("old")
        locked.chmod(0o555)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report the error message through the pipe
            message = "no error"
            try:
                if os.geteuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                write_text(locked / "a.txt", "new")
            except BaseException as err:
                message = f"{type(err).__name__}: {err}"
            os.write(write, message.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            message = pipe.read()
        os.waitpid(pid, 0)
        assert message.startswith("LeadTermsError: cannot write"), message
        assert f"folder {str(locked)!r} is not writable" in message
        assert "choose a writable folder or change its permissions" in message
        assert (locked / "a.txt").read_text() == "old"
        assert names(locked) == ["a.txt"]
    finally:
        (base / "locked").chmod(0o755)
        for p in sorted(base.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        base.rmdir()
