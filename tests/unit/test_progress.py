"""Progress suits its output: a bar on a terminal, whole lines (at most one per tenth of a loop)
on a file or a pipe, never carriage-return updates there. (The test run sets TQDM_DISABLE; these
tests turn progress on explicitly.)"""

import io
import os
import subprocess
import sys
from pathlib import Path

import tqdm.std

from tl_leadterms.progress import LogLines, progress_bar

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_line_per_tenth_and_no_carriage_return():
    log = io.StringIO()
    for _ in progress_bar(range(1000), desc="pass", file=log, mininterval=0, disable=False):
        pass
    text = log.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and "\x1b" not in text
    assert len(lines) == 10  # 10%, 20%, ... 100%
    assert [line.split(":")[1].split("%")[0].strip() for line in lines] == [
        str(10 * k) for k in range(1, 11)
    ]
    assert lines[-1].startswith("pass: 100%") and "1000/1000" in lines[-1]


def test_a_loop_of_unknown_length_writes_one_line_at_its_end():
    log = io.StringIO()
    for _ in progress_bar(
        (i for i in range(37)), desc="windows", file=log, mininterval=0, disable=False
    ):
        pass
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and "37" in lines[0] and lines[0].startswith("windows")


def test_a_manual_bar_stopped_early_says_how_far_it_got():
    log = io.StringIO()
    with progress_bar(total=8, desc="sweep", file=log, mininterval=0, disable=False) as bar:
        bar.update(3)
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith("sweep:") and "3/8" in lines[-1]
    assert len(lines) == 2  # 30% when it was passed, then the count at the end


def test_disabled_progress_writes_nothing():
    log = io.StringIO()
    for _ in progress_bar(range(100), file=log, enabled=False):
        pass
    assert log.getvalue() == ""


def test_a_terminal_gets_tqdms_own_bar():
    screen = Terminal()
    bar = progress_bar(range(5), file=screen, mininterval=0, disable=False)
    assert type(bar) is tqdm.std.tqdm and not isinstance(bar, LogLines)
    for _ in bar:
        pass
    assert "\r" in screen.getvalue()  # redrawn in place, as a terminal expects


def test_the_command_line_writes_lines_to_a_log(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"the cat saw a red ball number {i} today" for i in range(60)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop("TQDM_DISABLE", None)  # the tests' own setting: this run shows its progress
    log = tmp_path / "log.txt"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "tl_leadterms.cli", "stats", str(corpus), "-o",
             str(tmp_path / "s.safetensors"), "--tokenizer", "word:40", "--n-ctx", "8"],
            stdout=out, stderr=subprocess.STDOUT, env=env, timeout=600,
        )  # fmt: skip
    text = log.read_text()
    assert done.returncode == 0, text
    assert "\r" not in text
    stages = [line for line in text.splitlines() if line.startswith("pass ")]
    assert stages and all(len(line) < 200 for line in stages)
    assert any("pass 1/2" in line for line in stages) and any("pass 2/2" in line for line in stages)
