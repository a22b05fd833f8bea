"""Progress suits its output: a bar on a terminal, whole lines (at most one per tenth of a loop)
on a file or a pipe, never carriage-return updates there. (The test run sets TQDM_DISABLE; these
tests turn progress on explicitly.)"""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tqdm.std

from tl_leadterms import LeadTermsError, progress
from tl_leadterms.progress import DELAY, LogLines, progress_bar

ROOT = Path(__file__).resolve().parents[2]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_line_per_tenth_and_no_carriage_return():
    log = io.StringIO()
    for _ in progress_bar(
        range(1000), desc="pass", file=log, mininterval=0, delay=0, disable=False
    ):
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
        (i for i in range(37)), desc="windows", file=log, mininterval=0, delay=0, disable=False
    ):
        pass
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and "37" in lines[0] and lines[0].startswith("windows")


def test_a_manual_bar_stopped_early_says_how_far_it_got():
    log = io.StringIO()
    with progress_bar(
        total=8, desc="sweep", file=log, mininterval=0, delay=0, disable=False
    ) as bar:
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
    bar = progress_bar(range(5), file=screen, mininterval=0, delay=0, disable=False)
    assert type(bar) is tqdm.std.tqdm and not isinstance(bar, LogLines)
    for _ in bar:
        pass
    assert "\r" in screen.getvalue()  # redrawn in place, as a terminal expects


def test_the_command_line_writes_lines_to_a_log(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join(f"the cat saw a red ball number {i} today" for i in range(60)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    env.pop("TQDM_DISABLE", None)  # the tests' own setting: this run shows its progress
    env["TQDM_DELAY"] = "0"  # and from its start (it is done before the default delay)
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


class Clock:
    """tqdm's clock, moved by hand: each call returns the current time; ``step`` advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(tqdm.std, "time", fake)  # tqdm reads it as self._time
    return fake


def test_a_quick_loop_draws_nothing_by_default(clock):
    log = io.StringIO()
    for _ in progress_bar(range(100), desc="quick", file=log, mininterval=0, disable=False):
        clock.now += 0.01  # 1 s in all, under DELAY
    with progress_bar(total=3, desc="manual", file=log, mininterval=0, disable=False) as bar:
        bar.update(3)
    assert DELAY >= 1.0 and log.getvalue() == ""


def test_a_slow_loop_shows_itself_after_the_delay(clock):
    log = io.StringIO()
    for _ in progress_bar(range(10), desc="slow", file=log, mininterval=0, disable=False):
        clock.now += 1.0  # one second an item: the bar appears once DELAY has passed
    lines = log.getvalue().splitlines()
    assert lines and lines[-1].startswith("slow: 100%") and "10/10" in lines[-1]
    assert "\r" not in log.getvalue() and 2 <= len(lines) <= 10 - int(DELAY) + 1
    one = io.StringIO()
    for _ in progress_bar(range(1), desc="one", file=one, mininterval=0, disable=False):
        clock.now += 3 * DELAY  # a single slow step is still reported once, at its end
    assert one.getvalue().splitlines() == [one.getvalue().splitlines()[0]]
    assert one.getvalue().startswith("one: 100%")


def test_a_notebook_without_ipywidgets_gets_lines_on_stdout_and_no_warning(
    monkeypatch, capsys, clock
):
    monkeypatch.setattr(progress, "_in_notebook_kernel", lambda: True)
    monkeypatch.setattr(progress, "_have_widgets", lambda: False)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a TqdmWarning would fail here
        bar = progress_bar(range(4), desc="cell", mininterval=0, disable=False)
        assert isinstance(bar, LogLines)
        for _ in bar:
            clock.now += DELAY
    out = capsys.readouterr()
    assert out.err == "" and out.out.splitlines()[-1].startswith("cell: 100%")


def test_a_notebook_with_ipywidgets_gets_tqdms_widget(monkeypatch):
    """(That the widget is gone once its loop ends: tests/integration/test_notebook.py.)"""
    monkeypatch.setattr(progress, "_in_notebook_kernel", lambda: True)
    monkeypatch.setattr(progress, "_have_widgets", lambda: True)
    import tqdm.notebook

    bar = progress_bar(range(3), disable=True)
    assert isinstance(bar, tqdm.notebook.tqdm) and not isinstance(bar, LogLines)


def test_a_delay_that_is_not_a_number_is_refused(monkeypatch):
    monkeypatch.setenv("TQDM_DELAY", "soon")
    with pytest.raises(LeadTermsError, match="TQDM_DELAY must be a number of seconds, got 'soon'"):
        progress_bar(range(3), disable=True)


def test_loading_the_package_imports_no_notebook_progress():
    code = (
        "import sys, warnings; warnings.simplefilter('error');"
        "import tl_leadterms, tl_leadterms.progress;"
        "bad = [m for m in ('tqdm.auto', 'tqdm.autonotebook', 'tqdm.notebook', 'IPython',"
        " 'ipywidgets') if m in sys.modules]; print(bad)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]" and done.stderr == ""
