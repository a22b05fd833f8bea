"""The `tl-leadterms` command: demo, stats, top, and its exit codes."""

import pytest

from tl_leadterms.cli import main
from tl_leadterms.data import write_corpus


def test_demo_prints_association_lists_and_saves(tmp_path, capsys):
    code = main(
        [
            "demo",
            "--stories",
            "400",
            "--vocab",
            "900",
            "--n-ctx",
            "48",
            "--quiet",
            "--out",
            str(tmp_path),
            "--train-steps",
            "3",
            "--train-windows",
            "32",
            "--train-n-ctx",
            "16",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    # the short training run ends with the decompose table: one row per weight and layer
    table = out[out.index("Decomposition of") :].splitlines()
    assert sum(line.startswith(("W_O", "V ", "W ", "P ")) for line in table) == 1 + 3 * 3
    w_o = next(line for line in table if line.startswith("W_O"))
    assert float(w_o.split()[3]) > 0.999  # cosine of W_O with B̄ after 3 GD steps
    assert "Bigram B̄" in out and "Interchangeability Σ_B̄" in out and "Context Φ̄" in out
    red = next(line for line in out.splitlines() if line.strip().startswith("red ->"))
    assert {"ball", "car", "dress", "balloon", "truck"} <= set(
        red.split("->")[1].replace(",", " ").split()
    )
    assert (tmp_path / "demo_stats.safetensors").is_file()
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file()


def test_stats_then_top(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", 300, seed=1)
    stats_path, tok_dir = tmp_path / "s.safetensors", tmp_path / "tok"
    code = main(
        [
            "stats",
            str(corpus),
            "-o",
            str(stats_path),
            "--tokenizer",
            "word:800",
            "--n-ctx",
            "32",
            "--save-tokenizer",
            str(tok_dir),
            "--quiet",
        ]
    )
    assert code == 0 and stats_path.is_file()
    capsys.readouterr()
    assert main(["top", str(stats_path), "red", "--tokenizer", str(tok_dir), "-k", "5"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("red:") and "ball" in line


def test_errors_exit_2_with_a_message(tmp_path, capsys):
    assert main(["stats", str(tmp_path / "missing.txt"), "-o", str(tmp_path / "s.st")]) == 2
    assert "no such text file" in capsys.readouterr().err
    assert main(["top", str(tmp_path / "missing.safetensors"), "red"]) == 2
    assert "no statistics file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
