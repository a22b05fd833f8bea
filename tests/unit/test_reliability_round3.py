"""Issue 44 (reliability, round 3): Ray records trusted only when ours, bounded connections to
Ray, token strings escaped on a terminal, bounded memory, results locked by file identity,
hostile model files, clean exits on signals. Each test plants the case of the issue."""

import json
import os
import pwd
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tl_leadterms import LeadTermsError
from tl_leadterms.cli import main
from tl_leadterms.distributed import reaper
from tl_leadterms.distributed.cluster import probe_address
from tl_leadterms.stats.fileformat import read_header

ROOT = Path(__file__).resolve().parents[2]
NOBODY = pwd.getpwnam("nobody").pw_uid
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if "error:" in line]
    return line


# -- 1. Ray records: trusted only when ours, each process identified before a signal ----------
def _identity(pid: int) -> list:
    text = Path(f"/proc/{pid}/stat").read_text()
    return [pid, int(text[text.rindex(")") + 2 :].split()[19]), os.readlink(f"/proc/{pid}/exe")]


@pytest.fixture()
def records(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "records"
    monkeypatch.setattr(reaper, "RECORDS", folder)
    return folder


@pytest.fixture()
def sleeper():
    """An unrelated process of this user's that no clean-up may touch."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def _plant(records: Path, *processes: list, owner: int | None = None) -> Path:
    records.mkdir(mode=0o700, exist_ok=True)
    file = records / "99999999.json"  # a driver that is gone
    file.write_text(json.dumps({"driver": [99999999, 1, "/bin/x"], "processes": processes}))
    if owner is not None:
        os.chown(file, owner, -1)
    return file


def test_a_record_of_our_own_driver_stops_its_processes(records, sleeper):
    file = _plant(records, _identity(sleeper.pid))
    assert reaper.reap() == [sleeper.pid]
    assert sleeper.wait(timeout=30) == -9 and not file.exists()


@as_root
def test_a_record_planted_by_another_user_is_ignored(records, sleeper):
    _plant(records, _identity(sleeper.pid), owner=NOBODY)
    assert reaper.reap() == []
    assert sleeper.poll() is None


def test_a_record_naming_a_process_of_another_program_leaves_it_running(records, sleeper):
    pid, start, _ = _identity(sleeper.pid)
    _plant(records, [pid, start, "/usr/bin/raylet"], [pid, start])  # another program; no command
    assert reaper.reap() == []
    assert sleeper.poll() is None


@as_root
def test_a_process_of_another_user_is_never_signalled(records):
    other = subprocess.Popen(["sleep", "300"], user=NOBODY)
    try:
        _plant(records, _identity(other.pid))
        assert reaper.reap() == []
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@as_root
def test_a_records_folder_that_is_not_private_is_refused(records, sleeper):
    _plant(records, _identity(sleeper.pid))
    records.chmod(0o777)
    os.chown(records, NOBODY, -1)
    with pytest.raises(LeadTermsError) as err:
        reaper.reap()
    assert str(err.value) == (
        f"{records} (owner uid {NOBODY}, mode 777) is not a folder of yours with mode 700, so "
        "its records of local Ray processes cannot be trusted; remove it, or set TMPDIR to a "
        "folder of your own"
    )
    assert sleeper.poll() is None


def test_the_records_folder_is_created_private(records):
    reaper.record_started()
    info = records.stat()
    assert info.st_mode & 0o777 == 0o700 and info.st_uid == os.getuid()
    record = json.loads((records / f"{os.getpid()}.json").read_text())
    assert record["driver"] == _identity(os.getpid())
    reaper.forget()


# -- 3. a Ray address where no Ray answers: one line, within a bounded time --------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FIX = ("start one with `ray start --head` and pass the address it prints, or use a local Ray "
       "(--ray local)")  # fmt: skip


def test_ray_at_a_closed_port_is_one_line(tmp_path, capsys):
    pytest.importorskip("ray")
    (tmp_path / "a.txt").write_text("the cat sat on the mat . " * 20)
    address = f"127.0.0.1:{_closed_port()}"
    argv = ["stats", str(tmp_path / "a.txt"), "-o", str(tmp_path / "s.safetensors"), "--quiet"]
    assert main([*argv, "--ray", address]) == 2
    assert _error_line(capsys) == (
        f"tl-leadterms stats: error: cannot connect to a Ray cluster at address='{address}' "
        f"(ConnectionRefusedError: [Errno 111] Connection refused); {FIX}"
    )


def test_a_silent_port_and_an_unknown_host_are_refused():
    with socket.socket() as silent:  # accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        with pytest.raises(LeadTermsError, match=r"TimeoutError: timed out\); start one"):
            probe_address(address, timeout=1.0)
    with pytest.raises(LeadTermsError, match=r"address='no-such-host\.invalid:6379' \(gaierror"):
        probe_address("no-such-host.invalid:6379", timeout=5.0)


# -- 9. Ctrl-C once the command is done (Python shutting down): one line, status 130 ----------
def test_ctrl_c_while_the_command_exits_is_one_line_and_130(tmp_path):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(0, 20, (10, 6)))
    stats = tmp_path / "s.safetensors"
    assert main(["stats", str(ids), "-o", str(stats), "--d-vocab", "20", "--quiet"]) == 0
    code = (
        "import atexit, os, signal, sys, time\n"
        "from tl_leadterms.cli import main\n"  # Ctrl-C in an exit function, as after 'Done in'
        "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), time.sleep(5)))\n"
        f"sys.argv = ['tl-leadterms', 'top', {str(stats)!r}, '3', '-n', '2']\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)  # fmt: skip
    assert done.stdout.startswith("3: ")  # the command's own output, complete
    assert (done.returncode, done.stderr) == (130, "tl-leadterms top: interrupted\n")


def test_the_probe_lets_a_real_ray_head_through():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()  # the integration tests' session cluster may be up
    if started:
        ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        probe_address(ray.get_runtime_context().gcs_address)  # answers as an HTTP/2 server
    finally:
        if started:
            ray.shutdown()


# -- 10. a uint64 token id above 2**63 - 1 is named as given, never as its int64 wrap-around --
BIG = 2**63 + 5


def test_a_uint64_id_in_a_token_file_is_named_as_given(tmp_path, capsys):
    np.save(tmp_path / "ids.npy", np.array([[1, 2, 3, BIG]] * 3, dtype=np.uint64))
    argv = ["stats", str(tmp_path / "ids.npy"), "-o", str(tmp_path / "s.safetensors")]
    assert main([*argv, "--d-vocab", "12", "--quiet"]) == 2
    assert _error_line(capsys) == (
        f"tl-leadterms stats: error: batch 0: token id {BIG} at [0, 3] is outside [0, "
        "d_vocab=12). Pass the tokenizer's full vocabulary size as d_vocab, or remap the ids."
    )


def test_a_uint64_id_is_named_as_given_by_every_check():
    from tl_leadterms import make_windows
    from tl_leadterms.checks import check_tokens

    ids = np.array([[1, 2, BIG]], dtype=np.uint64)
    for tokens in (ids, torch.from_numpy(ids)):
        with pytest.raises(
            LeadTermsError, match=f"must lie in \\[0, 12\\) \\(d_vocab\\); found {BIG}"
        ):
            check_tokens(tokens, 12)
    with pytest.raises(LeadTermsError, match=f"document 0 holds token id {BIG}, above any"):
        make_windows([ids[0]], n_ctx=2)


# -- 11. top, when the saved tokenizer folder was overwritten by another run --------------------
def test_top_says_the_tokenizer_folder_holds_another_tokenizer(tmp_path, capsys):
    def stats(name: str, text: str) -> Path:
        (tmp_path / f"{name}.txt").write_text(text)
        out = tmp_path / f"{name}.safetensors"
        argv = ["stats", str(tmp_path / f"{name}.txt"), "-o", str(out), "--n-ctx", "4"]
        assert main([*argv, "--save-tokenizer", str(tmp_path / "tok"), "--quiet"]) == 0
        return out

    first = stats("a", "the cat sat on the mat . the dog ran .")
    second = stats("b", "a bird flew over a tree . a fish swam .")  # the same tokenizer folder
    was, now = (read_header(p)["tokenizer_vocab_hash"][:12] for p in (first, second))
    capsys.readouterr()
    assert main(["top", str(first), "cat"]) == 2
    assert _error_line(capsys) == (
        f"tl-leadterms top: error: token 'cat' is a string but {first} was counted with a "
        f"tokenizer of hash {was} and {tmp_path / 'tok'} now holds another (hash {now}): "
        "overwritten since, by another run perhaps; pass --tokenizer FOLDER (the tokenizer the "
        "statistics were counted with, or compute them again with --save-tokenizer) to look it "
        "up, or give its token id"
    )


# -- 2. token strings on a terminal: control characters escaped, long tokens cut ----------------
HOSTILE = ["a", "\x1b]0;TITLE\x07", "\x1b[2J\x1b[H", "\x1b]52;c;aGk=\x07", "x" * 200_000]


def test_top_prints_hostile_tokens_escaped_and_cut(tmp_path, capsys):
    from tests.factories import word_tokenizer_folder

    tok = word_tokenizer_folder(tmp_path / "tok", HOSTILE)
    rows = [[0, 1]] * 4 + [[0, 2]] * 3 + [[0, 3]] * 2 + [[0, 4]]  # 'a' before each, 4..1 times
    np.save(tmp_path / "ids.npy", np.array(rows))
    stats = tmp_path / "s.safetensors"
    assert main(["stats", str(tmp_path / "ids.npy"), "-o", str(stats), "--d-vocab", "5"]) == 0
    capsys.readouterr()
    argv = ["top", str(stats), "a", "--tokenizer", str(tok), "--scoring", "raw", "-n", "4"]
    assert main([*argv, "--exclude", "none"]) == 0
    assert capsys.readouterr().out == (
        r"a: \x1b]0;TITLE\x07 (0.2), \x1b[2J\x1b[H (0.1), \x1b]52;c;aGk=\x07 (0), "
        + "x" * 100
        + "…(200,000 chars) (-0.1)\n"
    )


def test_association_lists_show_tokens_escaped_and_cut():
    from tl_leadterms.stats.corpus import Neighbour

    shown = repr([Neighbour(HOSTILE[1], 1, 0.5), Neighbour(HOSTILE[4], 4, 0.25)])
    assert shown == (
        r"[Neighbour(token='\x1b]0;TITLE\x07', token_id=1, score=0.5), Neighbour(token='"
        + "x" * 100
        + "'…(200,000 chars), token_id=4, score=0.25)]"
    )


# -- 6. the results file: locked by identity, special files and huge or binary lines refused ----
def test_a_hard_link_to_a_results_file_shares_its_lock(tmp_path):
    from tl_leadterms.sweeps.results import ResultsFile

    real, hard = tmp_path / "real.jsonl", tmp_path / "hard.jsonl"
    real.touch()
    os.link(real, hard)
    with ResultsFile(real, {"analyses": "a"}), pytest.raises(LeadTermsError) as err:
        ResultsFile(hard, {"analyses": "b"}).__enter__()
    assert str(err.value) == (
        f"another sweep (pid {os.getpid()}) is writing {str(hard)!r}; wait for it to finish, or "
        "pass another results path to run side by side"
    )


@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "character device", "socket", "folder"])
def test_a_special_file_as_results_is_refused_naming_it(tmp_path, kind):
    from tl_leadterms.sweeps.inputs import results_path

    path = tmp_path / "r.jsonl"
    if kind == "FIFO (named pipe)":
        os.mkfifo(path)
    elif kind == "character device":
        path = Path("/dev/zero")  # read for ever: a MemoryError before
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(path))
    else:
        path.mkdir()
    with pytest.raises(LeadTermsError) as err:
        results_path(path)
    assert err.value.cli_message == (
        f"--results {str(path)!r} is a {kind}, not a results file; pass the path of a regular "
        "file, e.g. 'sweep.jsonl' (a new one is created)"
    )


def test_a_huge_line_or_a_binary_file_as_results_is_refused_and_kept(tmp_path):
    from tl_leadterms.sweeps.results import MAX_LINE, ResultsFile

    huge, binary = tmp_path / "huge.jsonl", tmp_path / "binary.jsonl"
    huge.write_bytes(b"x" * (MAX_LINE + 10))  # one line, no newline: a 'torn' line before
    binary.write_bytes(bytes(range(256)) * 4)
    for path, why in ((huge, "line 1 is longer than 64 MiB"),
                      (binary, "line 1 is not text: a binary file")):  # fmt: skip
        before = path.read_bytes()
        with pytest.raises(LeadTermsError) as err, ResultsFile(path, {}):
            pass
        assert str(err.value) == (
            f"{str(path)!r} is not a results file of tl_leadterms.sweep ({why}); pass a new "
            "path for --results, the file is left as it is"
        )
        assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["binary.jsonl", "huge.jsonl"]


def test_sweep_refuses_a_fifo_as_results_before_any_work(tmp_path, capsys):
    fifo = tmp_path / "r.jsonl"
    os.mkfifo(fifo)
    assert main(["sweep", str(tmp_path / "series"), str(tmp_path / "s.safetensors"),
                 "--results", str(fifo)]) == 2  # fmt: skip
    assert _error_line(capsys) == (
        f"tl-leadterms sweep: error: --results {str(fifo)!r} is a FIFO (named pipe), not a "
        "results file; pass the path of a regular file, e.g. 'sweep.jsonl' (a new one is created)"
    )


# -- 7. load_model on hostile config and tokenizer files, FIFOs, and the load report --------------
@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    from tl_leadterms.loading.tiny import save_tiny_model

    return save_tiny_model("gpt_neox", tmp_path_factory.mktemp("tiny") / "m", d_vocab=20,
                           d_model=16, n_heads=2, n_layers=1, n_ctx=16)  # fmt: skip


DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError
RESAVE = "save the model again with save_pretrained"


@pytest.mark.parametrize(
    ("name", "text", "why"),
    [
        ("config.json", DEEP, ": JSON nested deeper than 32 levels; no writer of this library "
         "produces that, the file is corrupt or hostile"),
        ("config.json", "[1]", " holds a JSON list, not an object"),
        ("tokenizer.json", "{nope", ": not valid JSON (Expecting property name enclosed in "
         "double quotes: line 1 column 2 (char 1))"),
        ("tokenizer_config.json", "[1, 2]", " holds a JSON list, not an object"),
    ],
)  # fmt: skip
def test_hostile_model_files_are_one_error_naming_the_file(tiny_folder, tmp_path, name, text, why):
    from tl_leadterms.loading import load_model

    folder = tmp_path / "m"
    shutil.copytree(tiny_folder, folder)
    (folder / name).write_text(text)
    with pytest.raises(LeadTermsError) as err:
        load_model(folder, device="cpu")
    assert str(err.value) == f"{str(folder / name)!r}{why}; {RESAVE}"


def test_a_fifo_shard_is_refused_instead_of_blocking(tiny_folder, tmp_path):
    from transformers import AutoModelForCausalLM

    from tl_leadterms.loading import load_model

    folder = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(tiny_folder).save_pretrained(folder, max_shard_size="5KB")
    shard = sorted(folder.glob("model-00001-of-*.safetensors"))[0]
    shard.unlink()
    os.mkfifo(shard)  # transformers opened it and waited for a writer for ever
    with pytest.raises(LeadTermsError) as err:
        load_model(folder, device="cpu")
    assert str(err.value) == (
        f"{str(shard)!r} is a FIFO (named pipe), not a file: reading it would block; {RESAVE} (a "
        "checkpoint holds regular files)"
    )


def test_the_cli_prints_its_refusal_without_transformers_load_report(tiny_folder, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 2}))
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 20, (10, 6)))
    stats = tmp_path / "s.safetensors"
    assert main(["stats", str(tmp_path / "ids.npy"), "-o", str(stats), "--d-vocab", "20"]) == 0
    done = subprocess.run([sys.executable, "-m", "tl_leadterms.cli", "decompose", str(folder),
                           str(stats)], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()  # before: transformers' 17-line LOAD REPORT first
    assert line.startswith(
        f"tl-leadterms decompose: error: the weights in {str(folder)!r} do not match its "
        "config.json: missing or mis-sized ['gpt_neox.layers.1."
    ) and line.endswith(f"; {RESAVE}")


# -- 8. SIGTERM while the monitor copies a Hugging Face model: no copy left in TMPDIR ----------
MONITOR_COPY = """
import os, signal, sys
from transformers import AutoModelForCausalLM
from tl_leadterms.sweeps.monitor import _as_lens
model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
save = model.save_pretrained
def save_then_terminated(folder, **kwargs):  # SIGTERM once the copy is on disk
    save(folder, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
model.save_pretrained = save_then_terminated
_as_lens(model)
print("survived")
"""


def test_sigterm_while_the_monitor_copies_a_model_leaves_no_copy(tiny_folder, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, "-c", MONITOR_COPY, str(tiny_folder)],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == -signal.SIGTERM and "survived" not in done.stdout, done.stderr
    assert sorted(p.name for p in scratch.iterdir()) == []  # before: tmpXXXXXXXX/ with the model


# -- 5. text read and tokenized in bounded pieces, whatever its line structure -----------------
def _words(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = ["".join(rng.choice(list("abcdefghij"), size=rng.integers(2, 9))) for _ in range(2000)]
    return [vocab[i] for i in rng.zipf(1.3, n) % len(vocab)]


def test_a_one_line_file_gives_the_statistics_of_the_same_text_with_line_breaks(tmp_path):
    from tl_leadterms import CorpusStats

    words = _words(400_000)  # about 2 MiB: eight pieces of 256 Ki characters
    (tmp_path / "one.txt").write_text(" ".join(words))
    (tmp_path / "lines.txt").write_text("\n".join(" ".join(words[i : i + 12])
                                                  for i in range(0, len(words), 12)))  # fmt: skip
    got = {}
    for name in ("one", "lines"):
        out = tmp_path / f"{name}.safetensors"
        argv = ["stats", str(tmp_path / f"{name}.txt"), "-o", str(out), "--n-ctx", "16"]
        assert main([*argv, "--only", "B_bar", "Phi_bar", "--quiet"]) == 0
        got[name] = CorpusStats.load(out)
    assert got["one"].n_sequences == got["lines"].n_sequences > 10_000
    for name in ("pair_codes", "pair_counts", "unigram_counts", "Phi_bar"):
        assert torch.equal(getattr(got["one"], name), getattr(got["lines"], name)), name


PEAK = """
import resource, sys
from tl_leadterms import make_windows
from tl_leadterms.data import train_word_tokenizer
text = open(sys.argv[1]).read()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
windows = make_windows([text], n_ctx=32, tokenizer=train_word_tokenizer([text], 2000))
print(windows.shape[0], (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10)
"""


def test_a_one_line_text_costs_memory_of_a_piece_not_of_the_file(tmp_path):
    (tmp_path / "one.txt").write_text(" ".join(_words(1_600_000)))  # 8 MiB, no line break
    done = subprocess.run([sys.executable, "-c", PEAK, str(tmp_path / "one.txt")],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    windows, grown_mib = map(int, done.stdout.split())
    assert windows == 1_600_000 // 33
    assert grown_mib < 300, grown_mib  # before: about 3 GiB (the tokenizer's per-character state)


# -- 4. memory plans: block tables counted, a local Ray under a low `ulimit -v` refused ----------
def _limited_stats(tmp_path: Path, *extra: str, gib: float) -> str:
    """``tl-leadterms stats`` under an address-space limit (ulimit -v): its one error line."""
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 3000, (2000, 17)))

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (int(gib * 2**30), int(gib * 2**30)))

    done = subprocess.run(
        [sys.executable, "-m", "tl_leadterms.cli", "stats", str(tmp_path / "ids.npy"), "-o",
         str(tmp_path / "s.safetensors"), "--d-vocab", "3000", "--quiet", *extra],
        capture_output=True, text=True, timeout=300, preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    (line,) = done.stderr.splitlines()
    return line


def test_block_tables_are_in_the_plan_under_an_address_space_limit(tmp_path):
    line = _limited_stats(tmp_path, "--keep", "3000", "--blocks", "50", gib=3)
    assert re.fullmatch(
        r"tl-leadterms stats: error: the statistics need about 7\.0 GiB at peak \(results, "
        r"k=3000, 50 blocks, float64\) but only \d\.\d GiB is allowed by the address-space limit "
        r"\(ulimit -v\); fewer blocks \(--blocks / blocks=, e\.g\. 12\); or keep fewer tokens "
        r"\(--keep / vocab=, e\.g\. 1000\); or --dtype float32 \(dtype=torch\.float32\); or a "
        r"machine with more memory",
        line,
    ), line  # before: the plan passed, then an allocator traceback


def test_a_local_ray_under_a_low_address_space_limit_is_refused_before_it_starts(tmp_path):
    pytest.importorskip("ray")
    line = _limited_stats(tmp_path, "--ray", "local:2", gib=2)  # below any local Ray's needs
    assert re.fullmatch(
        r"tl-leadterms stats: error: a local Ray cannot start under the address-space limit of "
        r"2\.0 GiB \(ulimit -v\), which its processes inherit: they map about \d+\.\d GiB \(an "
        r"object store of 30% of the free memory, and the processes\); raise the limit \(ulimit "
        r"-v unlimited\), or compute in this process \(no --ray\)",
        line,
    ), line  # before: Ray's start-up traceback after its node timed out
