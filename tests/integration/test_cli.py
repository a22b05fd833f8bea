"""The `tl-leadterms` command: every subcommand end to end on tiny local data, and exit codes."""

import json
import re

import numpy as np
import pytest
import torch

from tl_leadterms.cli import build_parser, main
from tl_leadterms.data import write_corpus

SUBCOMMANDS = ("demo", "stats", "top", "decompose", "sweep", "report")


@pytest.mark.parametrize("preset", ["quick", "full"])
def test_demo_presets_fill_the_sizes_left_unset(preset):
    from tl_leadterms.cli.demo import PRESET_CPU, PRESETS, _apply_preset, _plan

    args = build_parser().parse_args(["demo", "--preset", preset, "--out", "x"])
    assert _apply_preset(args) == preset
    assert {name: getattr(args, name) for name in PRESETS[preset]} == PRESETS[preset]
    assert PRESET_CPU[preset] in _plan(args, preset)
    args = build_parser().parse_args(["demo", "--preset", preset, "--train-steps", "3"])
    assert _apply_preset(args) == "custom" and args.train_steps == 3
    assert args.stories == PRESETS[preset]["stories"]


def test_demo_prints_association_lists_and_saves(tmp_path, capsys):
    code = main(
        [
            "demo",
            "--stories",
            "400",
            "--vocab",
            "300",
            "--n-ctx",
            "48",
            "--quiet",
            "--out",
            str(tmp_path),
            "--train-steps",
            "4",
            "--attention-steps",
            "96",
            "--train-windows",
            "32",
            "--train-n-ctx",
            "16",
            "--train-lr",
            "1",
            "--held-out-windows",
            "256",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    # the plan and its cost come first, the time taken last
    assert out.startswith("tl-leadterms demo (custom preset): generate 400 stories")
    assert "train the paper's 3-layer model for 96 full-batch GD steps (η = 1;" in out
    assert re.search(r"\nDone in \d+ s \(\d+ s of CPU after the imports; custom preset\)", out)
    # the short training run ends with two decompose tables: against the training windows
    # (exact: no interval, one line says why), then against held-out windows (with intervals)
    first = out.index("Decomposition of")
    second = out.index("Decomposition of", first + 1)
    table, held = out[first:second].splitlines(), out[second:].splitlines()
    assert sum(line.startswith(("W_O", "V ", "W ", "P ")) for line in table) == 1 + 3 * 3
    assert "no corpus-sampling interval" in table[1] and "CI]" not in "".join(table)
    w_o = next(line for line in table if line.startswith("W_O"))
    assert float(w_o.split()[3]) > 0.999  # cosine of W_O with B̄ after 4 GD steps
    assert "Against 256 held-out windows" in out and "distrib. est. [95% CI]" in held[2]
    assert "distribution-level" in held[1]
    assert "Bigram B̄" in out and "Interchangeability Σ_B̄" in out and "Context Φ̄" in out
    assert "Association lists, cosine scoring" in out
    red = next(line for line in out.splitlines() if line.strip().startswith("red ->"))
    assert {"ball", "car", "dress", "truck"} <= set(red.split("->")[1].replace(",", " ").split())
    he = next(line for line in out.splitlines() if line.strip().startswith("he ->"))
    assert he.split("->")[1].split(",")[0].strip() == "she"
    assert (tmp_path / "demo_stats.safetensors").is_file()
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file()
    # each head's agreement with the predicted attention on the sample sentence, at step 96
    assert "Attention at step 96 on" in out
    for head in ("L0H0", "L1H0", "L2H0"):
        assert re.search(rf"{head}: rank correlation -?\d\.\d{{3}}, JS divergence .*"
                         r"from uniform \(total variation\): head", out)  # fmt: skip
    # report.html: decompose rows, the planted words, attention views, the history figure
    assert f"Wrote {tmp_path / 'report.html'}" in out
    page = (tmp_path / "report.html").read_text()
    labels = re.findall(r'class="decompose-row"[^>]*data-label="([^"]+)"', page)
    assert labels[:10] == ["W_O"] + ["L0H0", "L1H0", "L2H0"] * 3  # the training windows
    assert len(labels) == 20 and labels[10] == "W_O"  # then the held-out ones, per layer
    assert "Against held-out windows of the same corpus" in page
    assert "no corpus-sampling interval" in page and "distribution-level" in page
    words = re.findall(r'class="view association" data-word="([^"]+)"', page)
    assert {"red", "fish", "he"} <= set(words)
    assert "L2H0" in page and "predicted" in page and 'class="sample-text"' in page
    # the history; each decomposition's scores with their null band (training) or CI (held out)
    assert page.count("data:image/png;base64,") == 3
    assert '<section id="findings">' in page and '<table class="heatmap"' in page
    assert not re.search(r"(?:src|href)=[\"']?https?://", page)
    # the decomposition at step 4, the attention views at step 96: visibly non-uniform
    assert "The weights at step 4 (s·η = 4)" in page and 'data-step="96"' in page
    shown = re.findall(r'class="attention-row" data-head="(L\dH0)" data-tv-actual="([^"]+)" '
                       r'data-tv-predicted="([^"]+)"', page)  # fmt: skip
    assert [h for h, _, _ in shown] == ["L0H0", "L1H0", "L2H0"]
    assert max(float(a) for _, a, _ in shown) > 0.1
    assert max(float(p) for _, _, p in shown) > 0.1
    assert page.count('class="agreement"') == 3  # the agreement beside each layer's view
    assert 'class="association-scoring" data-scoring="cosine"' in page


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


def test_stats_creates_the_missing_folders_of_its_output(tmp_path, capsys):
    from tl_leadterms import CorpusStats, corpus_stats

    ids = np.random.default_rng(0).integers(0, 30, (24, 11))
    np.save(tmp_path / "ids.npy", ids)
    out = tmp_path / "new" / "deeper" / "s.safetensors"  # neither folder exists
    code = main(["stats", str(tmp_path / "ids.npy"), "-o", str(out), "--d-vocab", "30",
                 "--quiet"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "new").rglob("*")) == ["deeper", "s.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy", "new"]  # no temporaries
    expected = corpus_stats(torch.from_numpy(ids), d_vocab=30, progress=False)
    loaded = CorpusStats.load(out)
    for name in ("B_bar", "Phi_bar", "Q_bar", "Delta"):
        assert torch.equal(getattr(loaded, name), getattr(expected, name)), name


def test_every_subcommand_has_help(capsys):
    for command in SUBCOMMANDS:
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        assert f"usage: tl-leadterms {command}" in capsys.readouterr().out
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(subparsers.choices) == set(SUBCOMMANDS)


# -- tiny local checkpoints ------------------------------------------------------------------
@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """A tiny trained GPT-NeoX series (step0, step1, step2), its windows and statistics."""
    from tl_leadterms.loading.series import load_windows, train_neox_series

    out = tmp_path_factory.mktemp("series")
    train_neox_series(out, n_stories=40, vocab_size=100, n_ctx=16, d_model=16, n_layers=2,
                      n_heads=2, steps=2, batch_size=8, lr=3e-3, progress=False)  # fmt: skip
    d_vocab = json.loads((out / "series.json").read_text())["d_vocab"]
    windows = out / "ids.npy"
    np.save(windows, load_windows(out).numpy())
    stats = out / "stats.safetensors"
    assert (
        main(["stats", str(windows), "-o", str(stats), "--d-vocab", str(d_vocab), "--quiet"]) == 0
    )
    return {"dir": out, "stats": stats, "d_vocab": d_vocab, "windows": windows}


def test_stats_from_token_arrays_and_a_dataset_folder(series, tmp_path, capsys):
    from datasets import Dataset

    from tl_leadterms import CorpusStats

    capsys.readouterr()
    ids = np.load(series["windows"])
    torch.save(torch.from_numpy(ids[:10]), tmp_path / "a.pt")
    np.save(tmp_path / "b.npy", ids[10:20].astype(np.int32))
    out = tmp_path / "s.safetensors"
    args = ["stats", str(tmp_path / "a.pt"), str(tmp_path / "b.npy"), "-o", str(out)]
    assert main([*args, "--d-vocab", str(series["d_vocab"]), "--quiet"]) == 0
    stats = CorpusStats.load(out)
    assert (stats.n_sequences, stats.n_ctx) == (20, ids.shape[1] - 1)
    # a dataset saved with save_to_disk: a text column, the series' own tokenizer folder
    folder = tmp_path / "ds"
    Dataset.from_dict({"story": ["the red ball rolled away . " * 20] * 6}).save_to_disk(folder)
    tok = series["dir"] / "step0"
    args = ["stats", str(folder), "-o", str(out), "--tokenizer", str(tok), "--text-column", "story"]
    assert main([*args, "--n-ctx", "8", "--quiet"]) == 0
    assert "wrote" in capsys.readouterr().out and CorpusStats.load(out).n_ctx == 8
    # token ids need a vocabulary size; widths must agree
    assert main(["stats", str(tmp_path / "a.pt"), "-o", str(out)]) == 2
    assert "--d-vocab" in capsys.readouterr().err
    assert main([*args[:2], "-o", str(out), "--tokenizer", str(tok), "--quiet"]) == 2
    assert "no text column 'text'" in capsys.readouterr().err


def test_decompose_text_json_csv(series, tmp_path, capsys):
    ckpt, stats = str(series["dir"] / "step2"), str(series["stats"])
    capsys.readouterr()
    assert main(["decompose", ckpt, stats, "--quiet"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Decomposition of")
    assert (
        sum(line.startswith(("W_O", "V·W_O", "W ")) for line in text.splitlines()) == 1 + 2 * 2 * 2
    )
    assert main(["decompose", ckpt, stats, "--json", "-o", str(tmp_path / "d.json")]) == 0
    rows = json.loads((tmp_path / "d.json").read_text())["rows"]
    assert [r["label"] for r in rows][:3] == ["W_O", "L0H0", "L0H1"]
    assert f"wrote {tmp_path / 'd.json'}" in capsys.readouterr().out
    assert main(["decompose", ckpt, stats, "--format", "csv", "--per-layer", "--layers", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # header, then V, W and P (rotary mean-field) of layer 1
    assert lines[0].startswith("weight,layer,head,label") and len(lines) == 1 + 1 + 3


def test_sweep_resumes_and_writes_a_table(series, tmp_path, capsys):
    from tl_leadterms.loading.series import load_series

    results, table = tmp_path / "r.jsonl", tmp_path / "t.csv"
    args = ["sweep", str(series["dir"]), str(series["stats"]), "--results", str(results)]
    assert main([*args, "--out", str(table), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "SweepTable: 3 checkpoints, " in out and "from the results file" not in out
    assert table.read_text().startswith("checkpoint,step,layer,head,analysis,score,value")
    assert len(results.read_text().splitlines()) == 3
    assert main([*args, "--steps", "0", "2", "--out", str(tmp_path / "t.json"), "--quiet"]) == 0
    assert "SweepTable: 2 checkpoints (2 from the results file)" in capsys.readouterr().out
    assert json.loads((tmp_path / "t.json").read_text())["checkpoints"] == ["step0", "step2"]
    folders = [str(f) for _, _, f in load_series(series["dir"])[:2]]
    assert main(["sweep", *folders, str(series["stats"]), "--quiet"]) == 0
    assert "step1" in capsys.readouterr().out


@pytest.mark.hooked
def test_sweep_null_columns_printed_and_written(series, tmp_path, capsys):
    import pandas as pd

    from tl_leadterms import CorpusStats, covariance_similarity
    from tl_leadterms.loading.checkpoint import load_model
    from tl_leadterms.results.null import NullSpec

    table = tmp_path / "t.csv"
    args = ["sweep", str(series["dir"]), str(series["stats"]), "--steps", "0", "2", "--analyses",
            "covariance", "--null", "3", "--seed", "1", "--out", str(table), "--quiet"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    grid = out[out.index("covariance: value_post") :].splitlines()
    # the effect first (the distance from the baseline checkpoint, the excess), then the
    # evidence and the verdict
    assert [line.split()[0] for line in grid[2:12]] == ["L0", "vs", "excess", "null", "common",
                                                        "z", "p", "q", "verdict", "L1"]  # fmt: skip
    df = pd.read_csv(table)
    assert list(df.columns) == ["checkpoint", "step", "layer", "head", "analysis", "score",
                                "value", "vs_baseline", "excess", "excess_share", "common_share",
                                "null_mean", "null_sd", "z", "p", "q", "verdict"]  # fmt: skip
    stats = CorpusStats.load(series["stats"])
    model = load_model(series["dir"] / "step2")
    direct = covariance_similarity(model, stats, null=NullSpec(3, seed=1), progress=False)
    written = df[df["checkpoint"] == "step2"]
    assert list(written["score"]) == [r["score"] for r in direct.rows]
    np.testing.assert_allclose(written["p"], [r["p"] for r in direct.rows], atol=0)
    np.testing.assert_allclose(written["null_mean"], [r["null_mean"] for r in direct.rows],
                               atol=1e-12)  # fmt: skip
    assert main(["sweep", str(series["dir"]), str(series["stats"]), "--ci", "0.9"]) == 2
    assert "needs statistics kept per block" in capsys.readouterr().err


def test_report_from_the_command_line(series, tmp_path, capsys):
    out = tmp_path / "report.html"
    args = ["report", str(series["stats"]), "--model", str(series["dir"] / "step2"), "-o", str(out)]
    args += ["--text", "the girl saw a red ball", "--words", "the", "red", "--title", "<b>tiny</b>"]
    capsys.readouterr()
    assert main([*args, "--quiet"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text()
    # W_O; V, W and (rotary mean-field) P per head
    assert len(re.findall(r'class="decompose-row"', page)) == 1 + 2 * 3 * 2
    assert 'data-word="the"' in page and "L1H1" in page and "&lt;b&gt;tiny&lt;/b&gt;" in page
    # a word outside this small tokenizer gets a note, not the [UNK] token's neighbours
    assert "&#x27;red&#x27; is not in the tokenizer&#x27;s vocabulary" in page
    out.unlink()  # statistics alone: nothing to show, one line, no page
    assert main(["report", str(series["stats"]), "-o", str(out), "--quiet"]) == 2
    assert "nothing to report: pass --model" in capsys.readouterr().err and not out.exists()


def test_errors_exit_2_with_a_message(tmp_path, capsys):
    def fails(argv, message):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err

    st = str(tmp_path / "s.safetensors")
    fails(["stats", str(tmp_path / "missing.txt"), "-o", st], "no such text file")
    fails(["stats", str(tmp_path / "missing.npy"), "-o", st], "no such token file")
    fails(["stats", "no-such-dataset-anywhere", "-o", st], "offline, save the dataset")
    fails(["top", str(tmp_path / "missing.safetensors"), "red"], "no statistics file")
    fails(["decompose", str(tmp_path), str(tmp_path / "missing.st")], "no statistics file")
    np.save(tmp_path / "ids.npy", np.random.default_rng(0).integers(0, 20, (8, 9)))
    assert main(["stats", str(tmp_path / "ids.npy"), "-o", st, "--d-vocab", "20", "--quiet"]) == 0
    capsys.readouterr()
    fails(["decompose", str(tmp_path / "nope"), st], "no checkpoint folder")
    fails(["decompose", str(tmp_path), st], "has no config.json")
    fails(["decompose", "surely-not-a-model-name", st], "cannot load model")
    fails(["sweep", "surely-not-a-model-name", st], "with --checkpoint-steps")
    fails(
        ["sweep", "surely-not-a-model-name", st, "--steps", "1", "--quiet"], "could not be loaded"
    )
    fails(["sweep", str(tmp_path / "a"), str(tmp_path / "b"), st], "no checkpoint folder")
    fails(["sweep", str(tmp_path), st, "--out", "t.txt"], "must end in .csv or .json")
    fails(["report", str(tmp_path / "missing.st")], "no statistics file")
    fails(["report", st, "--text-file", str(tmp_path / "missing.txt")], "no such text file")
    for argv in (["frobnicate"], ["decompose", "only-one-arg"], ["sweep", "--steps", "x"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2


def test_unwritable_output_and_unknown_word_exit_2(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus.txt", 60, seed=2)
    code = main(["stats", str(corpus), "-o", "/proc/no/such/s.safetensors", "--tokenizer",
                 "word:300", "--n-ctx", "16", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "error" in err
    stats_path, tok_dir = tmp_path / "s.safetensors", tmp_path / "tok"
    assert main(["stats", str(corpus), "-o", str(stats_path), "--tokenizer", "word:300",
                 "--n-ctx", "16", "--save-tokenizer", str(tok_dir), "--quiet"]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["top", str(stats_path), "zzzqqq", "--tokenizer", str(tok_dir)]) == 2
    assert "not in the tokenizer's vocabulary" in capsys.readouterr().err


def test_block_statistics_give_sweep_intervals(series, tmp_path, capsys):
    import pandas as pd

    from tl_leadterms.stats.blocks import BlockStats
    from tl_leadterms.sweeps.run import sweep

    path, table = tmp_path / "b.safetensors", tmp_path / "t.csv"
    args = ["stats", str(series["windows"]), "-o", str(path), "--d-vocab", str(series["d_vocab"])]
    assert main([*args, "--blocks", "4", "--quiet"]) == 0
    assert "BlockStats(4 blocks" in capsys.readouterr().out
    assert main([*args, "--blocks", "4", "--only", "B_bar"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--blocks 4 cannot be combined with --only" in err and "\n" not in err
    cut = tmp_path / "cut.safetensors"
    assert main([*args[:3], str(cut), *args[4:], "--blocks", "4", "--eos-id", "0", "--quiet"]) == 0
    assert BlockStats.load(cut).metadata["block_cuts"] == "documents (eos_id 0)"
    assert main([*args, "--eos-id", "0"]) == 2  # no blocks to cut
    assert "--eos-id 0 cuts blocks of windows" in capsys.readouterr().err
    assert main([*args, "--blocks", "4", "--eos-id", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--eos-id -1 is not a token id" in err and "no --eos-id" in err and "eos_id=" not in err
    sweep_args = ["sweep", str(series["dir"]), str(path), "--steps", "0", "2", "--ci", "0.9",
                  "--null", "5", "--out", str(table), "--quiet"]  # fmt: skip
    assert main(sweep_args) == 0
    assert "CI distrib. est." in capsys.readouterr().out
    written = pd.read_csv(table)
    direct = sweep(
        series["dir"],
        BlockStats.load(path),
        analyses="decompose",
        checkpoint_steps=[0, 2],
        ci=0.9,
        null=5,
        progress=False,
    ).to_pandas()
    assert list(written.columns) == list(direct.columns) and {"lo", "hi"} <= set(written.columns)
    assert written["lo"].notna().any() and len(written) == len(direct)
    for column in ("value", "lo", "hi", "corrected", "p"):
        np.testing.assert_allclose(written[column], direct[column], rtol=0, atol=1e-12)
    # --ci with plain statistics: one line naming the fix
    assert main(["sweep", str(series["dir"]), str(series["stats"]), "--ci", "0.9"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs statistics kept per block" in err and "--blocks B" in err and "\n" not in err
    assert main(["sweep", str(series["dir"]), str(path), "--bootstrap", "3"]) == 2
    assert "add --ci" in capsys.readouterr().err


def test_block_files_read_as_the_whole_corpus(series, tmp_path, capsys):
    import pandas as pd

    path = tmp_path / "b.safetensors"
    args = ["stats", str(series["windows"]), "-o", str(path), "--d-vocab", str(series["d_vocab"])]
    assert main([*args, "--blocks", "3", "--quiet"]) == 0
    capsys.readouterr()
    ckpt = str(series["dir"] / "step2")
    tables, lists = [], []
    for name, stats in (("plain", series["stats"]), ("blocks", path)):
        csv = tmp_path / f"{name}.csv"
        assert main(["decompose", ckpt, str(stats), "-o", str(csv), "--quiet"]) == 0
        tables.append(pd.read_csv(csv))
        capsys.readouterr()
        assert main(["top", str(stats), "3", "5", "--matrix", "context", "-k", "4"]) == 0
        assert main(["top", str(stats), "3", "-k", "4"]) == 0
        lists.append(capsys.readouterr().out)
    assert lists[0] == lists[1] and lists[0].count("(") == 3 * 4
    plain, blocks = tables
    assert list(plain["label"]) == list(blocks["label"])
    np.testing.assert_allclose(blocks["cosine"], plain["cosine"], rtol=0, atol=1e-9)
    out = tmp_path / "r.html"
    assert main(["report", str(path), "--model", ckpt, "-o", str(out), "--quiet"]) == 0
    assert out.is_file()
