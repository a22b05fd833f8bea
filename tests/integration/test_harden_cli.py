"""Issue 10 end to end: bad inputs exit 2 in one line, Ctrl-C exits 130, outputs are checked
before any work, a closed stdout loses no file, sweep results are locked and fingerprinted."""

import argparse
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.reference import dense_corpus_stats
from tl_leadterms import CorpusStats
from tl_leadterms.cli import main
from tl_leadterms.cli.stats import read_inputs
from tl_leadterms.stats import memory

ROOT = Path(__file__).resolve().parents[2]
D_VOCAB = 100


def fails(argv, capsys, message):
    """main(argv) exits 2 (returned or raised by argparse) with one line naming ``message``."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if "error:" in line]
    assert code == 2 and message in err and len(lines) == 1, err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tl_leadterms.loading.tiny import save_tiny_model

    out = tmp_path_factory.mktemp("harden")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, D_VOCAB, (40, 9))
    np.save(out / "ids.npy", ids)
    stats = out / "s.safetensors"
    assert (
        main(["stats", str(out / "ids.npy"), "-o", str(stats), "--d-vocab", "100", "--quiet"]) == 0
    )
    sizes = {"d_vocab": D_VOCAB, "n_layers": 1, "d_model": 16, "n_heads": 2, "n_ctx": 16}
    folders = [save_tiny_model("gpt_neox", out / f"step{i}", seed=i, **sizes) for i in (0, 1)]
    return {"dir": out, "ids": ids, "stats": stats, "folders": folders, "sizes": sizes}


# -- 2. token arrays are streamed; counts must be positive --------------------------------------
def test_token_arrays_are_mapped_and_cut_to_max_windows(corpus, tmp_path, capsys):
    args = argparse.Namespace(inputs=[str(corpus["dir"] / "ids.npy")], max_windows=7)
    kind, windows = read_inputs(args)
    assert kind == "windows" and isinstance(windows.arrays[0], np.memmap)
    out = tmp_path / "s.safetensors"
    argv = ["stats", str(corpus["dir"] / "ids.npy"), "-o", str(out), "--d-vocab", "100"]
    assert main([*argv, "--max-windows", "7", "--dtype", "float32", "--quiet"]) == 0
    stats = CorpusStats.load(out)
    ref = dense_corpus_stats(torch.from_numpy(corpus["ids"][:7]), D_VOCAB)
    assert stats.n_sequences == 7 and stats.dtype == torch.float32
    assert stats.metadata["dtype"] == "float32"
    torch.testing.assert_close(stats.Phi_bar, ref["Phi_bar"].float())
    for flag, value in (("--max-windows", "-5"), ("--max-windows", "0"), ("--keep", "-1")):
        fails([*argv, flag, value], capsys, "must be a positive int")


# -- 1. the memory plan refuses before allocating ------------------------------------------------
def test_readme_example_at_pythia_size_is_refused_in_one_line(corpus, monkeypatch, capsys):
    monkeypatch.setattr(memory, "available_memory", lambda: 24 * 2**30)
    argv = ["stats", str(corpus["dir"] / "ids.npy"), "--d-vocab", "50304", "-o", "x.safetensors"]
    # the CLI parks Φ̄ during pass two, so its peak is the three results together
    fails([*argv, "--quiet"], capsys, "need about 56.8 GiB at peak (results")
    assert not Path("x.safetensors").exists()


# -- 4. statistics with the wrong tokenizer ------------------------------------------------------
def test_top_refuses_a_tokenizer_larger_than_the_statistics(corpus, tmp_path, capsys):
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    tokenizer = train_word_tokenizer(generate_stories(200, seed=0), 200)
    assert len(tokenizer) == 200
    tokenizer.save_pretrained(tmp_path / "tok")
    argv = ["top", str(corpus["stats"]), "the", "--tokenizer", str(tmp_path / "tok")]
    fails(argv, capsys, "the tokenizer has 200 tokens")


# -- 5. bad inputs: one line, exit 2 -------------------------------------------------------------
def test_bad_inputs_end_in_one_line_and_exit_2(corpus, tmp_path, capsys):
    stats = str(corpus["stats"])
    torch.save({"ids": torch.zeros(2, 3, dtype=torch.long)}, tmp_path / "dict.pt")
    fails(["stats", str(tmp_path / "dict.pt"), "-o", str(tmp_path / "o.st"), "--d-vocab", "9"],
          capsys, "holds a dict, not an array")  # fmt: skip
    truncated = tmp_path / "truncated"
    shutil.copytree(corpus["folders"][0], truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-200])
    fails(["decompose", str(truncated), stats], capsys, "cannot read the weights")
    resized = tmp_path / "resized"
    shutil.copytree(corpus["folders"][0], resized)
    config = json.loads((resized / "config.json").read_text())
    config["hidden_size"] = 24
    (resized / "config.json").write_text(json.dumps(config))
    fails(["decompose", str(resized), stats], capsys, "config.json's sizes do not match")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{ broken")
    fails(["top", stats, "red", "--tokenizer", str(tmp_path / "tok")], capsys, "cannot load")
    fails(["decompose", str(corpus["folders"][0]), stats, "--device", "bogus"], capsys,
          "'bogus' is not a torch device")  # fmt: skip
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(stats, framework="pt") as f:
        header = json.loads(f.metadata()["tl_leadterms"])
    header["n_sequences"] = 10**30
    edited = tmp_path / "edited.safetensors"
    save_file(load_file(stats), edited, metadata={"tl_leadterms": json.dumps(header)})
    fails(["top", str(edited), "3"], capsys, "not positive integers below 2**53")


# -- 3. outputs checked before any work; closed stdout -------------------------------------------
def test_unusable_outputs_are_found_before_computing(corpus, tmp_path, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("computed before checking the outputs")

    monkeypatch.setattr("tl_leadterms.corpus_stats", never)
    monkeypatch.setattr(importlib.import_module("tl_leadterms.sweeps.run"), "sweep", never)
    (tmp_path / "file").write_text("x")
    ids = str(corpus["dir"] / "ids.npy")
    fails(["stats", ids, "-o", str(tmp_path / "o.st"), "--d-vocab", "100", "--tokenizer",
           "word:50", "--save-tokenizer", str(tmp_path / "file")], capsys, "is a file")  # fmt: skip
    fails(["stats", ids, "-o", str(tmp_path / "file" / "o.st"), "--d-vocab", "100"], capsys,
          "is a file, not a folder")  # fmt: skip
    folders = [str(f) for f in corpus["folders"]]
    fails(["sweep", *folders, str(corpus["stats"]), "--out", "/proc/nope/t.csv"], capsys,
          "not writable")  # fmt: skip


def _cli(*args: str, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "tl_leadterms.cli", *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, text=True, **kwargs)


def test_closed_stdout_pipe_keeps_the_table_on_disk(corpus, tmp_path):
    table = tmp_path / "t.csv"
    folders = [str(f) for f in corpus["folders"]]
    proc = _cli("sweep", *folders, str(corpus["stats"]), "--out", str(table), "--quiet",
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # `| head -1` gone before the table is printed
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0, err
    assert "Traceback" not in err
    assert table.read_text().startswith("checkpoint,step,layer,head,analysis,score,value")


def test_ctrl_c_exits_130_in_one_line_without_temporaries(tmp_path):
    rng = np.random.default_rng(1)
    np.save(tmp_path / "ids.npy", rng.integers(0, 3000, (60_000, 65)))
    # as in a terminal: a job started in the background (`make test &`, some CI runners) has
    # SIGINT ignored, and Python then never turns Ctrl-C into KeyboardInterrupt
    proc = _cli("stats", str(tmp_path / "ids.npy"), "-o", str(tmp_path / "s.safetensors"),
                "--d-vocab", "3000", stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    for line in proc.stderr:  # the plan is printed before pass one starts
        if "memory plan" in line:  # (a progress bar's carriage return may precede it)
            break
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 130
    assert err.strip().splitlines()[-1] == "tl-leadterms stats: interrupted"
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy"]


def test_ctrl_c_before_main_handles_it_is_one_line_and_130(monkeypatch, capsys):
    import tl_leadterms.cli
    from tl_leadterms.cli import __main__ as entry

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(tl_leadterms.cli, "main", interrupted)
    monkeypatch.setattr("sys.argv", ["tl-leadterms", "stats", "ids.npy"])
    assert entry.run() == 130
    assert capsys.readouterr().err == "tl-leadterms stats: interrupted\n"


# -- 3. sweeps: fingerprints, the lock with two processes and SIGKILL ---------------------------
def test_a_replaced_checkpoint_is_recomputed_and_the_user_told(corpus, tmp_path):
    from tl_leadterms.loading.tiny import save_tiny_model
    from tl_leadterms.sweeps.run import sweep

    folders = [tmp_path / "step0", tmp_path / "step1"]
    for i, folder in enumerate(folders):
        save_tiny_model("gpt_neox", folder, seed=i, **corpus["sizes"])
    stats, results = CorpusStats.load(corpus["stats"]), tmp_path / "r.jsonl"
    first = sweep(folders, stats, analyses="decompose", results=results, progress=False)
    save_tiny_model("gpt_neox", folders[1], seed=7, **corpus["sizes"])  # retrained
    with pytest.warns(UserWarning, match="'step1' changed since its results were written"):
        again = sweep(folders, stats, analyses="decompose", results=results, progress=False)
    assert again.metadata["status"] == {"step0": "loaded", "step1": "recomputed"}
    fresh = sweep(folders, stats, analyses="decompose", progress=False)

    def step1(table):
        return [r["value"] for r in table.rows if r["checkpoint"] == "step1"]

    assert step1(again) == step1(fresh) != step1(first)


def test_a_second_writer_is_refused_and_a_killed_one_leaves_no_lock(corpus, tmp_path, capsys):
    results = tmp_path / "r.jsonl"
    holder = textwrap.dedent(f"""
        import sys
        from tl_leadterms.sweeps.results import ResultsFile
        with ResultsFile({str(results)!r}, {{}}):
            print("locked", flush=True)
            sys.stdin.readline()
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)  # fmt: skip
    assert proc.stdout.readline().strip() == "locked"
    argv = ["sweep", *map(str, corpus["folders"]), str(corpus["stats"]), "--results", str(results)]
    fails([*argv, "--quiet"], capsys, f"another sweep (pid {proc.pid}) is writing")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert main([*argv, "--quiet"]) == 0  # the kernel released the dead holder's lock
    assert len(results.read_text().splitlines()) == 2
