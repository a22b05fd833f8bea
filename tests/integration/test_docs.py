"""Every snippet of the README and the guides runs: in each file, the ```python blocks in order
in one namespace and the ```bash blocks in one shell each, all in a fresh folder. A block whose
first line is ``# covered by <path>`` is run elsewhere (a long command such as ``make demo``):
the test checks that the named test or script exists."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md",
         *sorted((ROOT / "docs" / "guides").glob("*.md"))]  # fmt: skip
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
COVERED = re.compile(r"^# covered by (\S+)")
# `tl-leadterms` in a block is this checkout's command, whatever is installed
BASH_PRELUDE = 'tl-leadterms() { "$TL_PYTHON" -m tl_leadterms.cli "$@"; }\n'


def blocks(path: Path) -> list[tuple[str, str]]:
    """The fenced ``(language, code)`` blocks of a markdown file, in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text(encoding="utf-8"))]


def _covered(code: str) -> bool:
    match = COVERED.match(code)
    if match is None:
        return False
    target = match.group(1).split("::")[0]
    assert (ROOT / target).exists(), f"'# covered by {target}': no such file"
    return True


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_snippets_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TL_PYTHON": sys.executable}  # fmt: skip
    namespace: dict = {"__name__": "__docs__"}
    for number, (language, code) in enumerate(blocks(path), 1):
        if language not in ("python", "bash") or _covered(code):
            continue
        where = f"{path.relative_to(ROOT)}, block {number}"
        if language == "python":
            exec(compile(code, where, "exec"), namespace)
        else:
            command = ["bash", "-euo", "pipefail", "-c", BASH_PRELUDE + code]
            done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"


def test_the_runner_finds_blocks_and_refuses_a_missing_cover(tmp_path):
    page = (tmp_path / "page").with_suffix(".md")
    page.write_text("text\n\n```python\nx = 1\n```\n\n```bash\n# covered by no/such_test.py\n```\n")
    found = blocks(page)
    assert found == [("python", "x = 1\n"), ("bash", "# covered by no/such_test.py\n")]
    with pytest.raises(AssertionError, match="no such file"):
        _covered(found[1][1])


def test_api_pages_read_docstrings_as_site_markdown():
    """The griffe extension of the API reference: ``Example:`` becomes a code section, Sphinx
    roles inline code, and a ``docs/math.md`` citation a link to that section."""
    pytest.importorskip("griffe")
    import importlib.util

    path = ROOT / "docs" / "scripts" / "griffe_examples.py"
    spec = importlib.util.spec_from_file_location("griffe_examples", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Scores (docs/math.md#agreement).\n\nExample:\n    >>> 1 + 1\n    2\n"
    out = module.markdown(text + "See :class:`~tl_leadterms.stats.CorpusStats`.")
    assert "[docs/math.md#agreement](../math.md#agreement)" in out
    assert "\nExamples:\n" in out and "\nExample:\n" not in out
    assert "`tl_leadterms.stats.CorpusStats`" in out and ":class:" not in out
