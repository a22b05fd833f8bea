"""Issue 18 end to end, on real file systems, real limits, real signals and a real local Ray:
nothing lost, nothing replaced, no traceback."""

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tl_leadterms.cli import main
from tl_leadterms.distributed import reaper

ROOT = Path(__file__).resolve().parents[2]
D_VOCAB = 100


def _env() -> dict:
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
        "PYTHONIOENCODING": "utf-8",
    }


def _cli(*args: str, preexec=None, **kwargs) -> subprocess.Popen:
    command = [sys.executable, "-m", "tl_leadterms.cli", *args]
    return subprocess.Popen(command, cwd=ROOT, env=_env(), text=True, preexec_fn=preexec, **kwargs)


def _one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def ids(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ids") / "ids.npy"
    np.save(out, np.random.default_rng(0).integers(0, D_VOCAB, (40, 9)))
    return out


# -- hostile metadata through the command line ---------------------------------------------------
def test_deep_json_in_files_is_one_line_for_every_reader(ids, tmp_path):
    from safetensors import safe_open
    from safetensors.torch import save_file

    stats = tmp_path / "s.safetensors"
    assert main(["stats", str(ids), "-o", str(stats), "--d-vocab", "100", "--quiet"]) == 0
    with safe_open(stats, framework="pt") as f:
        tensors = {n: f.get_tensor(n) for n in f.keys()}  # noqa: SIM118
    save_file(tensors, str(stats), metadata={"tl_leadterms": "[" * 50_000 + "]" * 50_000})
    results = tmp_path / "r.jsonl"
    results.write_text("[" * 50_000 + "]" * 50_000 + "\n")
    good = tmp_path / "good.safetensors"
    assert main(["stats", str(ids), "-o", str(good), "--d-vocab", "100", "--quiet"]) == 0
    for argv in (
        ["top", str(stats), "1"],
        ["report", str(good), "--sweep-results", str(results), "-o", str(tmp_path / "r.html")],
    ):
        proc = _cli(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2, err
        assert "nested deeper than" in _one_line_error(err)


def test_undecodable_checkpoint_labels_are_printed_escaped(ids, tmp_path):
    from tl_leadterms.loading.tiny import save_tiny_model

    stats = tmp_path / "s.safetensors"
    assert main(["stats", str(ids), "-o", str(stats), "--d-vocab", "100", "--quiet"]) == 0
    plain = save_tiny_model("gpt_neox", tmp_path / "step3", d_vocab=D_VOCAB, n_layers=1,
                            d_model=16, n_heads=2, n_ctx=16)  # fmt: skip
    # a folder whose name is not UTF-8 ('step\udcff7'): safetensors cannot open it; one line
    odd = Path(os.fsdecode(os.fsencode(str(tmp_path)) + b"/step\xff7"))
    shutil.copytree(plain, odd)
    proc = _cli("sweep", str(odd), str(stats), "--quiet", stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 2 and "step\\udcff7" in _one_line_error(err)
    # a results file whose label holds a lone surrogate: the report is written, escaped
    results = tmp_path / "r.jsonl"
    assert main(["sweep", str(plain), str(stats), "--results", str(results), "--quiet"]) == 0
    record = json.loads(results.read_text())
    record["checkpoint"] = "step\ud800"
    results.write_text(json.dumps(record) + "\n")
    page = tmp_path / "r.html"
    proc = _cli("report", str(stats), "--sweep-results", str(results), "-o", str(page),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert "step\\ud800" in page.read_text()


# -- a full disk: nothing replaced, one line naming the space -----------------------------------
@pytest.fixture()
def small_disk(tmp_path):
    """A 2 MiB tmpfs (root only; elsewhere the file-size limit test below covers the path)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_keeps_the_old_pair_and_says_how_much_is_needed(small_disk, tmp_path):
    texts = tmp_path / "a.txt"
    texts.write_text("the cat sat on the mat . " * 40)
    out, tok = small_disk / "s.safetensors", small_disk / "tok"
    argv = ["stats", str(texts), "-o", str(out), "--save-tokenizer", str(tok), "--n-ctx", "8",
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    before = {p.name: _digest(p) for p in [out, *tok.iterdir()]}
    (small_disk / "filler").write_bytes(b"\0" * (shutil.disk_usage(small_disk).free - 4096))
    more = tmp_path / "b.txt"
    more.write_text(" ".join(f"word{i}" for i in range(3000)))
    proc = _cli("stats", str(more), "-o", str(out), "--save-tokenizer", str(tok), "--n-ctx", "8",
                "--quiet", stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    line = _one_line_error(err)
    assert str(small_disk) in line and ("no space left" in line or "not enough space" in line)
    assert {p.name: _digest(p) for p in [out, *tok.iterdir()]} == before
    assert not [p for p in small_disk.rglob(".*")]  # no temporaries left


def test_a_file_size_limit_is_one_line_and_keeps_the_old_file(ids, tmp_path):
    out = tmp_path / "s.safetensors"
    out.write_bytes(b"old")

    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    proc = _cli("stats", str(ids), "-o", str(out), "--d-vocab", "100", "--quiet", preexec=limit,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "file-size limit" in _one_line_error(err)
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.safetensors"]


# -- memory limits: the plan sees the address-space limit --------------------------------------
def test_the_memory_plan_respects_an_address_space_limit(tmp_path):
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 20_000, (50, 9)))

    def limit():  # 6 GiB: torch's own mappings fit, a 20,000-token float64 plan does not
        resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))

    proc = _cli("stats", str(tmp_path / "ids.npy"), "-o", str(tmp_path / "s.safetensors"),
                "--d-vocab", "20000", "--quiet", preexec=limit, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE)  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "address-space limit (ulimit -v)" in _one_line_error(err)


# -- SIGTERM behaves like Ctrl-C; a killed driver's Ray agents are reaped ----------------------
def _start_long_stats(tmp_path: Path, *extra: str) -> subprocess.Popen:
    np.save(tmp_path / "ids.npy", np.random.default_rng(1).integers(0, 3000, (60_000, 65)))
    proc = _cli("stats", str(tmp_path / "ids.npy"), "-o", str(tmp_path / "s.safetensors"),
                "--d-vocab", "3000", *extra, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                start_new_session=True)  # fmt: skip
    return proc


def _wait_for(proc: subprocess.Popen, text: str) -> None:
    for line in proc.stderr:
        if text in line:
            return
    raise AssertionError(f"the run ended before printing {text!r}")


def test_sigterm_cleans_up_and_exits_143_in_one_line(tmp_path):
    proc = _start_long_stats(tmp_path)
    _wait_for(proc, "memory plan")
    assert proc.poll() is None, "the run ended before it could be terminated"
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 143
    assert err.strip().splitlines()[-1] == "tl-leadterms stats: terminated (SIGTERM)"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy"]


def _wait_for_ray_record(proc: subprocess.Popen) -> Path:
    """The driver's record of its local Ray (written once the cluster is up)."""
    record = reaper.RECORDS / f"{proc.pid}.json"
    deadline = time.time() + 240
    while not record.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.5)
    assert record.exists(), "the local Ray never came up"
    return record


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait for an init that does not reap)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] != "Z"


def _descendants(pid: int) -> list[int]:
    return reaper._descendants(pid)


def test_ray_stops_on_sigterm_and_a_killed_drivers_agents_are_reaped(tmp_path):
    pytest.importorskip("ray")
    # SIGTERM: the driver shuts its local Ray down and exits 143, no crash dump
    proc = _start_long_stats(tmp_path, "--ray", "local:1")
    record = _wait_for_ray_record(proc)
    started = _descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    err = proc.stderr.read()
    assert proc.wait(timeout=180) == 143, err
    assert "Traceback" not in err and "terminated (SIGTERM)" in err.strip().splitlines()[-1]
    time.sleep(2)
    assert not [p for p in started if _running(p)], "Ray processes left"
    assert not record.exists()
    # SIGKILL: nothing runs in the driver; the next run reaps what Ray left behind
    proc = _start_long_stats(tmp_path, "--ray", "local:1")
    record = _wait_for_ray_record(proc)
    proc.kill()
    proc.wait(timeout=60)
    time.sleep(3)
    left = [p for p, *_ in json.loads(record.read_text())["processes"] if _running(p)]
    stopped = reaper.reap()
    assert left and set(left) <= set(stopped)
    time.sleep(1)
    assert not [p for p in left if _running(p)]
    assert not record.exists()
