"""The documentation.

Every snippet of the README, the home page and the guides runs: in each file, the ```python
blocks in order in one namespace and the ```bash blocks in one shell each, all in a fresh
folder. A block whose first line is ``# covered by <path>`` is run elsewhere (a long command
such as ``make demo``): the test checks that the named test or script exists.

The site builds with every warning an error (``mkdocs build --strict``, once per session, into
a temporary folder), and the built pages are checked: every formula typeset as MathML, optional
parameters shown with their defaults, references as links, a guide and an example on each
analysis page, a readable home page. LICENSE and CITATION.cff say what the metadata says.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", ROOT / "docs" / "index.md", ROOT / "docs" / "getting-started.md",
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


def _extension(name: str):
    """A module of ``docs/scripts`` (the site's build steps), imported from its file."""
    import importlib.util

    path = ROOT / "docs" / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"docs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_pages_read_docstrings_as_site_markdown():
    """The griffe extension of the API reference: ``Example:`` becomes a code section, a Sphinx
    role inline code (a link once the name resolves, below), a ``docs/math.md`` citation a link
    to that section, and an entry for several parameters one entry per name."""
    pytest.importorskip("griffe")
    module = _extension("griffe_examples")
    text = "Scores (docs/math.md#agreement).\n\nExample:\n    >>> 1 + 1\n    2\n"
    out = module.markdown(text + "See :class:`~tl_leadterms.stats.CorpusStats`.")
    assert "[docs/math.md#agreement](../math.md#agreement)" in out
    assert "\nExamples:\n" in out and "\nExample:\n" not in out
    assert "See `CorpusStats`." in out and ":class:" not in out  # "~": the last part, as Sphinx
    args = "Args:\n    x: own.\n    lr, steps (int): the run,\n        in two lines.\n\nReturns:\n"
    assert module.split_combined(args) == (
        "Args:\n    x: own.\n    lr (int): the run,\n        in two lines.\n"
        "    steps (int): the run,\n        in two lines.\n\nReturns:\n"
    )
    returns = "Returns:\n    a, b: not names of parameters.\n"
    assert module.split_combined(returns) == returns


# ----------------------------------------------------------------------------------------------
# the built site

#: the analyses: each page has a guide and an example
ANALYSES = ["decompose", "attention_agreement", "predict_attention", "covariance_similarity",
            "output_agreement", "head_atlas", "ablate", "explore"]  # fmt: skip
#: analyses whose docstring has no example yet (issue 43: their owners add them); the test
#: requires one of every other analysis
EXAMPLE_PENDING = {"ablate", "attention_agreement", "explore", "head_atlas"}
_TAGS = re.compile(r"<[^>]+>")


def _text(fragment: str) -> str:
    import html

    return html.unescape(_TAGS.sub("", fragment)).strip()


def _article(page: Path) -> str:
    """The page's content, without the navigation and the table of contents around it."""
    text = page.read_text(encoding="utf-8")
    return text[text.index("<article") : text.index("</article>")]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built with ``--strict`` and without ``-q``: any warning (a broken link or
    anchor, an unresolved API reference, a formula that does not typeset) fails the build."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("latex2mathml")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1",
           "DISABLE_MKDOCS_2_WARNING": "true"}  # fmt: skip
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"the strict build failed:\n{log}"
    assert "WARNING" not in log, f"the build warned:\n{log}"
    return out


def test_the_site_builds_with_warnings_as_errors(site):
    """...and works offline: no page loads a script, a stylesheet or a font from the network."""
    assert (site / "index.html").exists() and (site / "math.html").exists()
    assert (site / "reference" / "decompose.html").exists()
    remote = re.compile(r'<(?:script|link|img|iframe)\b[^>]*(?:src|href)="(?:https?:)?//', re.I)
    for page in site.rglob("*.html"):
        assert not remote.search(page.read_text(encoding="utf-8")), page


def _formulas(markdown: str) -> tuple[list[str], list[str]]:
    """The display (``$$...$$``) and inline (``$...$``) formulas of a page, outside code."""
    markdown = re.sub(r"(?ms)^\s*```.*?^\s*```", "", markdown)
    markdown = re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", markdown)
    display = re.findall(r"(?ms)^\s*\$\$\s*\n(.*?)\n\s*\$\$\s*$", markdown)
    markdown = re.sub(r"(?ms)^\s*\$\$\s*\n.*?\n\s*\$\$\s*$", "", markdown)
    inline = re.findall(r"(?<![\\$])\$(?![\s$])(.+?)(?<![\s\\])\$(?!\$)", markdown)
    return display, inline


def test_every_formula_on_the_maths_page_is_typeset(site):
    """Each formula of docs/math.md is one <math> element of MathML on the built page, with no
    TeX left over, and each overline is an accent over its letter, not Unicode's combining bar."""
    from xml.etree import ElementTree as ET

    source = (ROOT / "docs" / "math.md").read_text(encoding="utf-8")
    display, inline = _formulas(source)
    assert len(display) >= 10 and len(inline) >= 100  # the page is the maths
    article = _article(site / "math.html")
    elements = re.findall(r"<math\b.*?</math>", article, re.S)
    assert len(elements) == len(display) + len(inline)
    assert len(re.findall(r'<math [^>]*display="block"', article)) == len(display)
    for element in elements:
        root = ET.fromstring(element)  # well-formed
        leftover = [t for t in root.itertext() if "\\" in t]
        assert not leftover, f"TeX left in {element}"
    page = (site / "math.html").read_text(encoding="utf-8")  # the table of contents too
    for raw in ("arithmatex", "\\(", "\\[", "$$", "\\overline", "\\Phi", "\\top"):
        assert raw not in page, f"{raw!r} left on the maths page"
    overlines = sum(formula.count("\\overline") for formula in display + inline)
    assert article.count('<mo accent="true">―</mo>') == overlines > 0
    code = [m.group(0) for m in re.finditer(r"<(pre|code)\b.*?</\1>", article, re.S)]
    assert not [c for c in code if "\u0304" in c]  # no B̄ in code font, its bar displaced


def test_every_formula_of_every_page_is_typeset(site):
    """The guides, the home page and getting started: as many <math> elements as formulas in
    the source; and no page of the site (the API's included) keeps a formula untypeset."""
    pages = [ROOT / "docs" / "index.md", ROOT / "docs" / "getting-started.md",
             *sorted((ROOT / "docs" / "guides").glob("*.md"))]  # fmt: skip
    total = 0
    for source in pages:
        display, inline = _formulas(source.read_text(encoding="utf-8"))
        built = site / source.relative_to(ROOT / "docs").with_suffix(".html")
        assert _article(built).count("<math") == len(display) + len(inline), source.name
        total += len(display) + len(inline)
    assert total >= 100
    for page in site.rglob("*.html"):
        assert 'class="arithmatex"' not in page.read_text(encoding="utf-8"), page


def _parameters(page: Path) -> dict[str, str]:
    """The page's first parameter table: each name with its Default cell."""
    text = page.read_text(encoding="utf-8")
    if 'doc-section-title">Parameters:' not in text:
        return {}
    table = text.split('doc-section-title">Parameters:', 1)[1].split("</table>", 1)[0]
    rows = {}
    for row in re.findall(r'<tr class="doc-section-item">(.*?)</tr>', table, re.S):
        cells = re.findall(r"<td>(.*?)</td>", row, re.S)
        rows[_text(cells[0])] = _text(cells[-1])
    return rows


def test_optional_parameters_show_their_defaults(site):
    """On each top-level function's page, a parameter with a default shows it and one without
    shows "required", whether its docstring entry documents it alone or with others."""
    import inspect

    import tl_leadterms

    rows_of = {}
    for page in sorted((site / "reference").glob("[!_]*.html")):
        obj = getattr(tl_leadterms, page.stem, None)
        if not inspect.isfunction(obj):
            continue
        rows = rows_of[page.stem] = _parameters(page)
        assert not [n for n in rows if "," in n], f"{page.stem}: a combined entry"
        for name, p in inspect.signature(obj).parameters.items():
            if name in rows:
                optional = p.default is not inspect.Parameter.empty
                assert (rows[name] != "required") == optional, (page.stem, name, rows[name])
    assert len(rows_of["decompose"]) >= 8
    assert sum(d != "required" for d in rows_of["decompose"].values()) >= 6


def test_references_are_links(site):
    """Sphinx roles and inline code that name the package's objects link to their pages."""
    decompose = (site / "reference" / "decompose.html").read_text(encoding="utf-8")
    assert 'href="to_paper.html#tl_leadterms.adapters.convert.to_paper"' in decompose
    assert 'href="tl_leadterms.adapters.html#tl_leadterms.adapters.PaperWeights"' in decompose
    assert 'href="block_stats.html#' in decompose
    for page in (site / "reference").glob("*.html"):
        text = _text(_article(page))
        assert not re.search(r":(func|class|mod|meth|attr|data):`", text), page.name
    # the guides' mentions of the API: a name, a call, a class of a subpackage, a member
    guide = _article(site / "guides" / "decompose.html")
    assert '<a class="autorefs autorefs-internal"' in guide
    assert 'href="../reference/decompose.html#' in guide
    conventions = _article(site / "guides" / "conventions.html")
    for target in ("train.html#", "NullSpec.html#tl_leadterms.results.null.NullSpec"):
        assert f'href="../reference/{target}' in conventions, target
    corpus = _article(site / "guides" / "corpus-statistics.html")
    assert 'href="../reference/CorpusStats.html#tl_leadterms.stats.corpus.CorpusStats.' in corpus


def test_every_analysis_page_has_a_guide_and_an_example(site):
    for name in ANALYSES:
        article = _article(site / "reference" / f"{name}.html")
        assert 'href="../guides/' in article, f"{name}: no guide"
        if name not in EXAMPLE_PENDING:
            assert 'doc-section-title">Examples:' in article, f"{name}: no example"


def test_the_home_page_is_readable(site):
    article = _article(site / "index.html")
    code = " ".join(_text(block) for block in re.findall(r"<pre.*?</pre>", article, re.S))
    assert "from tl_leadterms import" in code and "decompose(" in code
    image = re.search(r'<img [^>]*src="(?P<src>[^"]+)"[^>]*>', article)
    assert image is not None and 'class="hero"' in image.group(0)
    assert (site / image.group("src")).exists()
    assert article.count("<math") >= 3  # its formulas typeset too


def test_license_and_citation_match_the_metadata():
    """LICENSE is the MIT license pyproject.toml names; CITATION.cff cites the package at its
    version and the paper it implements."""
    yaml = pytest.importorskip("yaml")
    project = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'(?m)^version = "([^"]+)"', project).group(1)
    assert re.search(r'(?m)^license = \{ text = "MIT" \}', project)
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the tl_leadterms authors" in license_text
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert (citation["title"], citation["version"], citation["license"]) == (
        "tl_leadterms", version, "MIT")  # fmt: skip
    (paper,) = citation["references"]
    assert paper["title"] == (
        "How Do Transformers Learn to Associate Tokens: Gradient Leading Terms Bring "
        "Mechanistic Interpretability"
    )
    assert [a["family-names"] for a in paper["authors"]] == ["Im", "Oh", "Fang", "Li"]
    assert paper["year"] == 2026 and paper["conference"]["name"] == "ICLR 2026"
