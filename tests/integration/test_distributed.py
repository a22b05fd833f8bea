"""Distributed statistics on a real local Ray cluster equal the single-process statistics.

One Ray (2 CPUs, no dashboard) serves the whole module; nothing of Ray is mocked. The
reference is the single-process ``tl_leadterms.corpus_stats`` on the same windows, and for
sweeps the local ``sweep`` over the same checkpoints.
"""

import math
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from tl_leadterms import LeadTermsError, corpus_stats, make_windows
from tl_leadterms.data import generate_stories, train_word_tokenizer
from tl_leadterms.distributed import ArrayShard, plan_shards
from tl_leadterms.distributed import corpus_stats as ray_stats
from tl_leadterms.distributed.memory import check_task_fits, plan_ray_memory
from tl_leadterms.stats.provenance import windows_fingerprint

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
MATRICES = ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar", "unigram")


def assert_same(got, want):
    assert got.n_sequences == want.n_sequences and got.n_ctx == want.n_ctx
    if want.vocab.kept is None:
        assert got.vocab.kept is None
    else:
        assert torch.equal(got.vocab.kept, want.vocab.kept)
    for name in MATRICES:
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype == torch.float64, name
        torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=f"{name} differs")


@pytest.fixture(scope="module")
def stories_corpus(tmp_path_factory):
    """The embedded corpus: windows in one .npy file, and the reference statistics."""
    stories = generate_stories(240, seed=0)
    tokenizer = train_word_tokenizer(stories, 600)
    windows = make_windows(stories, n_ctx=32, tokenizer=tokenizer)
    path = tmp_path_factory.mktemp("stories") / "windows.npy"
    np.save(path, windows.numpy().astype(np.int32))
    reference = corpus_stats(windows, d_vocab=len(tokenizer), progress=False)
    return stories, tokenizer, windows, path, reference


@pytest.mark.parametrize("n_shards", [1, 2, 7])
def test_shards_of_the_embedded_corpus_equal_one_process(cluster, stories_corpus, n_shards):
    _, tokenizer, windows, path, reference = stories_corpus
    size = math.ceil(windows.shape[0] / n_shards)
    assert len(plan_shards([path], shard_size=size)) == n_shards
    got = ray_stats([path], d_vocab=len(tokenizer), shard_size=size, progress=False)
    assert_same(got, reference)
    assert got.metadata["distributed"] == f"ray, {n_shards} shards"
    # which windows were read: the digest of one process over the same windows, any sharding
    assert got.metadata["windows_fingerprint"] == windows_fingerprint(windows)
    assert ray.is_initialized()  # a Ray it did not start is left running


def test_only_bigram_and_context_stop_after_pass_one(cluster, stories_corpus):
    _, tokenizer, _, path, reference = stories_corpus
    got = ray_stats(
        [path],
        d_vocab=len(tokenizer),
        shard_size=40,
        want=("B_bar", "Phi_bar"),
        dtype=torch.float32,
        progress=False,
    )
    assert got.metadata["statistics"] == ["B_bar", "Phi_bar"]
    assert "pass1" in got.timings and len(got.timings["pass1_shards"]) >= 2
    assert "pass2" not in got.timings and "G_bar" not in got.timings
    torch.testing.assert_close(got.Phi_bar, reference.Phi_bar.float(), rtol=0, atol=1e-7)
    with pytest.raises(LeadTermsError, match="Q_bar"):
        _ = got.Q_bar


def test_the_memory_plan_refuses_a_task_no_node_can_hold(cluster, stories_corpus):
    plan = plan_ray_memory(50_304, k=20_000)
    assert plan.task_stages["pass two"] >= 20_000**2 * 16  # its Q̄ table and its copy of Ḡ
    with pytest.raises(LeadTermsError, match=r"each shard task needs about .* keep fewer"):
        check_task_fits(plan, [2 * 2**30, 4 * 2**30])
    check_task_fits(plan, [2 * 2**30, 8 * 2**30])  # one node large enough: runs there
    _, tokenizer, _, path, reference = stories_corpus  # a small run reserves its plan and runs
    got = ray_stats([path], d_vocab=len(tokenizer), shard_size=50, progress=False)
    assert_same(got, reference)


def test_text_files_are_tokenised_in_the_workers(cluster, stories_corpus, tmp_path):
    stories, tokenizer, *_ = stories_corpus
    files = []
    for i in range(3):
        files.append(tmp_path / f"part{i}.txt")
        files[-1].write_text("\n\n".join(stories[i * 40 : (i + 1) * 40]), encoding="utf-8")
    got = ray_stats(files, d_vocab=len(tokenizer), n_ctx=24, mode="truncate", tokenizer=tokenizer)
    windows = make_windows(stories[:120], n_ctx=24, tokenizer=tokenizer, mode="truncate")
    assert_same(got, corpus_stats(windows, d_vocab=len(tokenizer), progress=False))
    # chunk mode cuts each file on its own: the reference is the per-file windows, stacked
    got = ray_stats(files, d_vocab=len(tokenizer), n_ctx=24, tokenizer=tokenizer, progress=False)
    per_file = [
        make_windows(stories[i * 40 : (i + 1) * 40], n_ctx=24, tokenizer=tokenizer)
        for i in range(3)
    ]
    assert_same(got, corpus_stats(torch.cat(per_file), d_vocab=len(tokenizer), progress=False))
    assert got.metadata["tokenizer_vocab_hash"]


def zipf_windows(n, width, d_vocab, seed):
    rng = np.random.default_rng(seed)
    return torch.from_numpy(np.minimum(rng.zipf(1.3, size=(n, width)) - 1, d_vocab - 1))


def test_kept_vocabulary_and_shuffled_shards(cluster, tmp_path):
    d_vocab = 300
    windows = zipf_windows(400, 21, d_vocab, seed=1)
    files = []
    for i, part in enumerate(windows.split(60)):
        files.append(tmp_path / f"w{i}.npy")
        np.save(files[-1], part.numpy())
    kept = [5, 0, 17, 3, 250, 1, 42, 9, 2, 77]  # not sorted: the order is the matrices' order
    for vocab in (kept, 25):
        reference = corpus_stats(windows, d_vocab=d_vocab, vocab=vocab, progress=False)
        shards = plan_shards(files)
        random.Random(3).shuffle(shards)
        assert [s.path for s in shards] != [str(f) for f in files]
        got = ray_stats(shards, d_vocab=d_vocab, vocab=vocab, progress=False)
        assert_same(got, reference)
        # shuffled shards, the same multiset of windows: the same fingerprint as one process's
        assert got.metadata["windows_fingerprint"] == reference.metadata["windows_fingerprint"]
    # the restricted definitions of Q̄/Δ travel to the workers too
    options = {"q_targets": "one-hot", "last_target": "paper-code"}
    reference = corpus_stats(windows, d_vocab=d_vocab, vocab=kept, progress=False, **options)
    got = ray_stats(plan_shards(files), d_vocab=d_vocab, vocab=kept, progress=False, **options)
    assert_same(got, reference)
    assert got.metadata["q_targets"] == "one-hot" and got.metadata["last_target"] == "paper-code"


def test_datasets_and_parquet_folders(cluster, tmp_path):
    datasets = pytest.importorskip("datasets")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    windows = zipf_windows(150, 17, 80, seed=2)
    reference = corpus_stats(windows, d_vocab=80, progress=False)
    dataset = datasets.Dataset.from_dict({"input_ids": windows.tolist()})
    assert_same(ray_stats(dataset, d_vocab=80, num_shards=7, progress=False), reference)
    folder = tmp_path / "parquet"
    folder.mkdir()
    for i, part in enumerate(windows.split(50)):
        pq.write_table(pa.table({"input_ids": part.tolist()}), folder / f"p{i}.parquet")
    assert_same(ray_stats(folder, d_vocab=80, progress=False), reference)


@dataclass(frozen=True)
class KillableShard(ArrayShard):
    """An ArrayShard whose 1st and 3rd reads (pass one's and pass two's first attempts) write
    the worker's pid and wait to be killed."""

    calls: str = ""

    def windows(self, spec, dataset=None, tokenizer=None):
        counter = Path(self.calls)
        n = int(counter.read_text()) + 1 if counter.exists() else 1
        counter.write_text(str(n))
        if n in (1, 3):
            # written whole, then renamed: the killer never reads a half-written pid
            Path(f"{self.calls}.tmp{n}").write_text(str(os.getpid()))
            os.replace(f"{self.calls}.tmp{n}", f"{self.calls}.pid{n}")
            time.sleep(120)  # killed before it wakes
        return super().windows(spec, dataset, tokenizer)


def kill_when_ready(calls: str, stop: threading.Event, killed: list):
    while not stop.is_set() and len(killed) < 2:
        for n in (1, 3):
            pid_file = Path(f"{calls}.pid{n}")
            text = pid_file.read_text() if pid_file.exists() else ""
            if text and n not in killed:
                os.kill(int(text), signal.SIGKILL)
                killed.append(n)
        time.sleep(0.05)


def test_a_worker_killed_in_each_pass_is_retried_exactly(cluster, tmp_path, stories_corpus):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    _, tokenizer, windows, path, reference = stories_corpus
    calls = str(tmp_path / "calls")
    n = windows.shape[0]
    shards = [ArrayShard(str(path), (0, n // 2)), KillableShard(str(path), (n // 2, n), calls)]
    stop, killed = threading.Event(), []
    killer = threading.Thread(target=kill_when_ready, args=(calls, stop, killed))
    killer.start()
    try:
        got = ray_stats(shards, d_vocab=len(tokenizer), progress=False)
    finally:
        stop.set()
        killer.join()
    assert killed == [1, 3]
    assert Path(calls).read_text() == "4"  # two killed attempts, two retries, nothing more
    assert_same(got, reference)


def test_a_bad_shard_fails_the_run_in_one_line_naming_it(cluster, tmp_path):
    good = zipf_windows(40, 9, 50, seed=4)
    bad = good.clone()
    bad[3, 2] = 50
    np.save(tmp_path / "good.npy", good.numpy())
    np.save(tmp_path / "bad.npy", bad.numpy())
    (tmp_path / "broken.npy").write_bytes(b"not a numpy file")
    for name, message in (("bad.npy", "token id 50"), ("broken.npy", "broken.npy")):
        files = [tmp_path / "good.npy", tmp_path / name, tmp_path / "good.npy"]
        with pytest.raises(LeadTermsError, match=message) as err:
            ray_stats(files, d_vocab=50, progress=False)
        text = str(err.value)
        assert "\n" not in text and f"shard {tmp_path / name}" in text
        assert not isinstance(err.value, ray.exceptions.RayError)


def test_cli_stats_on_ray(cluster, tmp_path):
    from tl_leadterms import CorpusStats
    from tl_leadterms.cli import main

    windows = zipf_windows(60, 13, 40, seed=5)
    np.save(tmp_path / "w.npy", windows.numpy())
    out = tmp_path / "s.safetensors"
    args = ["stats", str(tmp_path / "w.npy"), "-o", str(out), "--d-vocab", "40", "--quiet"]
    assert main([*args, "--ray", "local:2"]) == 0
    assert_same(CorpusStats.load(out), corpus_stats(windows, d_vocab=40, progress=False))

    small = tmp_path / "small.safetensors"
    options = ["--dtype", "float32", "--only", "B_bar", "Phi_bar", "--keep", "20"]
    assert main([*args[:3], str(small), *args[4:], *options, "--ray", "local:2"]) == 0
    got = CorpusStats.load(small)
    want = corpus_stats(windows, d_vocab=40, vocab=20, want=("B_bar", "Phi_bar"), progress=False)
    assert got.dtype == torch.float32 and got.metadata["statistics"] == ["B_bar", "Phi_bar"]
    torch.testing.assert_close(got.Phi_bar, want.Phi_bar.float(), rtol=0, atol=1e-7)
    assert main([*args, "--ray", "local:2", "--accumulate-dtype", "float32"]) == 2


def test_importing_the_package_does_not_import_ray():
    code = "import sys, tl_leadterms, tl_leadterms.distributed; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


# distributed checkpoint sweeps: the tiny trained series of tests/integration/test_sweep.py


DRIVER = """
import sys, numpy as np, ray, torch
from tl_leadterms import corpus_stats
from tl_leadterms.distributed import corpus_stats as ray_stats
from tl_leadterms.distributed.memory import check_task_fits, plan_ray_memory
path, address = sys.argv[1], sys.argv[2]

ray.init(address=address, log_to_driver=False)
print("nodes:", sum(node["Alive"] for node in ray.nodes()))
ray.shutdown()
windows = torch.from_numpy(np.load(path))
reference = corpus_stats(windows, 30, progress=False)
local = ray_stats([path], 30, shard_size=20, num_cpus=1, progress=False)
print("local stopped:", not ray.is_initialized())
remote = ray_stats([path], 30, shard_size=20, address=address, progress=False)
print("remote stopped:", not ray.is_initialized())
for got in (local, remote):
    for name in ("Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar"):
        torch.testing.assert_close(getattr(got, name), getattr(reference, name), atol=1e-12, rtol=0)
print("equal")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# one machine, no secrets to share: the test's nodes and driver all run without token auth
LOCAL_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


def start_node(args: list[str]) -> subprocess.Popen:
    ray_cli = str(Path(sys.executable).with_name("ray"))
    command = [ray_cli, "start", "--block", "--num-cpus", "1", *args]
    return subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=LOCAL_ENV,
    )


def stop_node(node: subprocess.Popen) -> None:
    """Stop a node started here: its own process group only (never `ray stop`, which would
    stop every Ray on the machine)."""
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(node.pid, sig)
        except ProcessLookupError:
            return
        try:
            node.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.slow
def test_two_nodes_started_with_ray_start(tmp_path):
    windows = zipf_windows(90, 11, 30, seed=6)
    np.save(tmp_path / "w.npy", windows.numpy())
    port = free_port()
    address = f"127.0.0.1:{port}"
    head = start_node(["--head", f"--port={port}", "--include-dashboard=false"])
    nodes = [head]
    try:
        time.sleep(8)
        nodes.append(start_node([f"--address={address}"]))
        time.sleep(8)
        out = subprocess.run(
            [sys.executable, "-c", DRIVER, str(tmp_path / "w.npy"), address],
            capture_output=True, text=True, cwd=ROOT, timeout=300, env=LOCAL_ENV,
        )  # fmt: skip
    finally:
        for node in reversed(nodes):
            stop_node(node)
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"
        if current.exists() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()  # our head's address: a later ray.init() must not look for it
    assert out.returncode == 0, out.stderr[-3000:]
    assert "local stopped: True" in out.stdout and "remote stopped: True" in out.stdout
    assert "nodes: 2" in out.stdout and "equal" in out.stdout
