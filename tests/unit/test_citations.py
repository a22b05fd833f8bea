"""Every document the repository cites is in the repository, and every reference to a section
of docs/math.md names a section that exists (an explicit ``{#anchor}`` on one of its headings)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MATH = ROOT / "docs" / "math.md"
SKIP = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "site", "build", "dist",
        "out", "node_modules", "results"}  # fmt: skip
SUFFIXES = {".py", ".md", ".toml", ".txt", ".ipynb", ".yml", ".yaml", ".cfg", ".ini", ".html"}
# a file name ending in .md, with an optional #anchor; URLs are left out (http... before it)
CITATION = re.compile(r"(?<![\w/.:-])((?:[\w.-]+/)*[\w.-]+\.md)(?:#([\w-]+))?\b")
ANCHOR = re.compile(r"^#{1,6} .*\{#([\w-]+)\}\s*$", re.M)


def _files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        # virtual environments of any name (.venv, .venv-tl39 that make test builds) are not ours
        if parts & SKIP or any(p.endswith(".egg-info") or p.startswith(".venv") for p in parts):
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name == "Makefile"):
            out.append(path)
    return out


def _citations() -> list[tuple[Path, int, str, str | None]]:
    found = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            for match in CITATION.finditer(line):
                found.append((path, number, match.group(1), match.group(2)))
    return found


# pages docs/scripts/gen_pages.py writes when the site is built
GENERATED = {ROOT / "docs" / "notebook.md", ROOT / "docs" / "reference" / "index.md"}


def _resolves(path: Path, name: str) -> Path | None:
    # the API pages (docs/reference/) link to the maths as ../math.md
    for base in (ROOT, path.parent, ROOT / "docs", ROOT / "docs" / "reference"):
        candidate = (base / name).resolve()
        if candidate.is_file() or candidate in GENERATED:
            return candidate
    return None


def test_math_page_has_the_sections_the_package_cites():
    anchors = set(ANCHOR.findall(MATH.read_text(encoding="utf-8")))
    wanted = {
        "model",
        "statistics",
        "leading-terms",
        "agreement",
        "pythia-protocol",
        "fast-algebra",
    }
    assert wanted <= anchors, f"docs/math.md lacks sections {sorted(wanted - anchors)}"


def test_every_cited_document_is_in_the_repository():
    missing = [f"{p.relative_to(ROOT)}:{n} cites {name}" for p, n, name, _ in _citations()
               if _resolves(p, name) is None]  # fmt: skip
    assert not missing, "citations of documents the repository does not have:\n" + "\n".join(
        missing
    )


def test_every_math_section_reference_resolves():
    anchors = set(ANCHOR.findall(MATH.read_text(encoding="utf-8")))
    cited = [(p, n, a) for p, n, name, a in _citations() if a and _resolves(p, name) == MATH]
    assert len(cited) >= 20  # the package's docstrings, tests and guides do cite it
    broken = [f"{p.relative_to(ROOT)}:{n} cites docs/math.md#{a}" for p, n, a in cited
              if a not in anchors]  # fmt: skip
    assert not broken, "references to sections docs/math.md does not have:\n" + "\n".join(broken)


def test_the_checks_catch_a_missing_document_and_a_broken_anchor(tmp_path):
    missing_doc = "MATH" + ".md"  # spelled apart, so this file does not cite it
    line = f"see {missing_doc} §2 and docs/math.md" + "#no-such-section"
    names = [(m.group(1), m.group(2)) for m in CITATION.finditer(line)]
    assert names == [(missing_doc, None), ("docs/math.md", "no-such-section")]
    assert _resolves(tmp_path / "x.py", missing_doc) is None
    assert "no-such-section" not in set(ANCHOR.findall(MATH.read_text(encoding="utf-8")))
