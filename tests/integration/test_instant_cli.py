"""``tl-leadterms --help`` is instant: neither torch nor TransformerLens is imported to print it,
and ``top`` on a statistics file reads it without TransformerLens. Each check runs in a fresh
interpreter, so what the test process already imported cannot hide an import."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUBCOMMANDS = ("demo", "stats", "top", "decompose", "sweep", "report")
HEAVY = ("torch", "transformer_lens", "transformers", "numpy", "datasets", "ray")

# runs the command in-process, then prints which heavy modules it left in sys.modules
_PROBE = """
import json, sys
from tl_leadterms.cli import main
argv = json.loads(sys.argv[1])
try:
    code = main(argv)
except SystemExit as exit_:
    code = exit_.code
sys.stdout.flush()
heavy = json.loads(sys.argv[2])
print("\\nIMPORTED " + json.dumps(sorted(m for m in heavy if m in sys.modules)))
sys.exit(code or 0)
"""


def _run(argv: list[str], cwd: Path) -> tuple[str, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv), json.dumps(HEAVY)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out, _, imported = done.stdout.rpartition("\nIMPORTED ")
    return out, json.loads(imported)


@pytest.mark.parametrize("argv", [["--help"], *[[c, "--help"] for c in SUBCOMMANDS]])
def test_help_imports_no_heavy_library(argv, tmp_path):
    out, imported = _run(argv, tmp_path)
    assert "usage: tl-leadterms" in out
    assert imported == [], f"tl-leadterms {' '.join(argv)} imported {imported}"


def test_import_of_the_package_is_lazy_and_complete():
    code = (
        "import sys, tl_leadterms\n"
        "assert 'torch' not in sys.modules, 'import tl_leadterms imported torch'\n"
        "from tl_leadterms import decompose, corpus_stats\n"
        "import importlib\n"
        "home = importlib.import_module('tl_leadterms.analyses.decompose.compute')\n"
        "assert decompose is home.decompose\n"
        "missing = [n for n in tl_leadterms.__all__ if not hasattr(tl_leadterms, n)]\n"
        "assert not missing, missing\n"
        "assert set(tl_leadterms.__all__) <= set(dir(tl_leadterms))\n"
        "try:\n"
        "    tl_leadterms.no_such_name\n"
        "except AttributeError as err:\n"
        "    assert 'no_such_name' in str(err)\n"
        "else:\n"
        "    raise SystemExit('no AttributeError')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr


def test_models_star_import_is_honest():
    namespace: dict = {}
    exec("from tl_leadterms.models import *", namespace)
    assert {"PaperModel", "paper_model"} <= set(namespace)


def test_top_reads_a_statistics_file_without_transformer_lens(tmp_path):
    import torch

    from tl_leadterms.stats import corpus_stats

    gen = torch.Generator().manual_seed(0)
    windows = torch.randint(0, 12, (16, 9), generator=gen)
    path = tmp_path / "s.safetensors"
    corpus_stats(windows, d_vocab=12, progress=False).save(path)
    for matrix in ("bigram", "context"):
        out, imported = _run(["top", str(path), "3", "5", "--matrix", matrix, "-k", "3"], tmp_path)
        lines = out.strip().splitlines()
        assert [line.split(":")[0] for line in lines] == ["3", "5"], out
        assert "transformer_lens" not in imported, imported


def test_top_finds_the_files_tokenizer_and_gives_the_api_lists_without_numpy(tmp_path):
    from tl_leadterms import CorpusStats
    from tl_leadterms.data import write_corpus

    corpus = write_corpus(tmp_path / "corpus.txt", 60, seed=0)
    path = tmp_path / "out" / "s.safetensors"
    path.parent.mkdir()
    out, _ = _run(["stats", str(corpus), "-o", str(path), "--tokenizer", "word:400", "--n-ctx",
                   "32", "--save-tokenizer", str(tmp_path / "tok"), "--quiet"],
                  tmp_path)  # fmt: skip
    stats = CorpusStats.load(path, tokenizer=_tokenizer(tmp_path / "tok"))
    for matrix, key, words in (("bigram", "B_bar", ["red", "the"]),
                               ("interchangeability", "Sigma_B", ["he", "happy"]),
                               ("context", "Phi_bar", ["fish", "pond"]),
                               ("attention", "Q_bar", ["fish"])):  # fmt: skip
        for extra, options in (([], {}), (["--scoring", "raw", "--exclude", "none"],
                                          {"scoring": "raw", "exclude": ()})):  # fmt: skip
            out, imported = _run(
                ["top", str(path), *words, "--matrix", matrix, "-n", "5", *extra], tmp_path / "out"
            )  # no --tokenizer: the file's
            assert imported == [], (matrix, imported)  # no numpy, torch, transformers
            for word, line in zip(words, out.strip().splitlines(), strict=True):
                expected = stats.top(key, word, n=5, **options)
                listed = [item.rsplit(" (", 1)[0] for item in line.split(": ", 1)[1].split(", ")]
                assert listed == [n.token for n in expected], (matrix, word, extra, line)
    default = stats.top("Sigma_B", "he", n=5)
    assert not {n.token for n in default} & {"[UNK]", "[EOS]"}


def _tokenizer(folder):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(str(folder))
