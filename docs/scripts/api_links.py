"""MkDocs hook: the guides' (and every other hand-written page's) mentions of the public API
link to its pages.

Inline code that names an object of the API reference becomes a cross-reference that
mkdocs-autorefs resolves to the object's heading: a public name of ``tl_leadterms``
(```decompose```, ```tl_leadterms.decompose```), a name of a documented subpackage that no
other subpackage exports for something else (```Decomposition```, ```plot_scores```), a
documented member of one of its classes (```CorpusStats.top```), a full path
(```tl_leadterms.stats.blocks.block_stats```) and a call of any of them
(```decompose(model, stats)```). The names are read with griffe from
the source, as the API pages are, and only objects those pages render are linked, so that every
link resolves (an unresolved one is a warning, and fails the strict build). Headings, fenced
code and text that is already a link are left alone; so are the API pages, which the griffe
extension ``griffe_examples.py`` links.
"""

import ast
import contextlib
import re
from functools import cache
from pathlib import Path

import griffe

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "tl_leadterms"

_FENCE = re.compile(r"^\s*(```|~~~)")
#: inline code, one backtick, not the text of a link (``[`x`]``) nor followed by a link target
_CODE = re.compile(r"(?<![`\[])`([^`\n]+)`(?![`\]])")
_CALL = re.compile(r"([A-Za-z_][\w.]*)\(")


def _packages() -> list[str]:
    """The subpackages whose pages list their names (``PACKAGES`` of gen_pages.py)."""
    tree = ast.parse((ROOT / "docs" / "scripts" / "gen_pages.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "PACKAGES":
            return list(ast.literal_eval(node.value))
    raise LookupError("gen_pages.py has no PACKAGES")


@cache
def api_names() -> dict[str, str]:
    """How a page may write each object of the API reference -> the identifier it has there."""
    package = griffe.load(PACKAGE, search_paths=[str(ROOT)], resolve_aliases=False)
    names: dict[str, str] = {}

    def add(written: str, obj: griffe.Object | griffe.Alias) -> None:
        with contextlib.suppress(griffe.AliasResolutionError, griffe.CyclicAliasError):
            names.setdefault(written, obj.canonical_path)

    for name in package.exports or []:
        if not name.startswith("_") and name in package.members:
            obj = package.members[name]
            if obj.is_module and name in obj.members:  # ``report``: the function, not its module
                obj = obj.members[name]
            add(name, obj)
            add(f"{PACKAGE}.{name}", obj)
    bare: dict[str, set[str]] = {}  # a subpackage's name alone -> what it may mean
    for path in _packages():
        module = package.modules_collection.get_member(path)
        for name in module.exports or []:
            if name not in module.members:
                continue
            obj = module.members[name]
            try:
                if obj.is_module:
                    continue  # a submodule: the package's page does not render it
                add(f"{path}.{name}", obj)
                bare.setdefault(name, set()).add(obj.canonical_path)
                if obj.is_class:  # its documented members (``CorpusStats.top``)
                    for member, value in obj.members.items():
                        if not member.startswith("_") and value.docstring is not None:
                            names.setdefault(f"{name}.{member}", f"{obj.canonical_path}.{member}")
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                pass
    for name, meanings in bare.items():  # unless several packages export different objects
        if len(meanings) == 1:
            names.setdefault(name, meanings.pop())
    return names


def link_code(line: str, names: dict[str, str]) -> str:
    """``line`` with its inline code that names an API object as a cross-reference.

    >>> link_code("`decompose(m, s)`, [`decompose`](math.md), `lr`", {"decompose": "p.decompose"})
    '[`decompose(m, s)`][p.decompose], [`decompose`](math.md), `lr`'
    """

    def replace(match: re.Match) -> str:
        before = line[: match.start()]
        if before.count("[") > before.count("]"):
            return match.group(0)  # inside a link's text
        code = match.group(1).strip()
        call = _CALL.match(code)
        identifier = names.get(code) or (names.get(call.group(1)) if call else None)
        return f"[{match.group(0)}][{identifier}]" if identifier else match.group(0)

    return _CODE.sub(replace, line)


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    if page.file.src_uri.startswith("reference/"):
        return markdown
    names = api_names()
    out, fenced = [], False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced and not line.startswith("#"):
            line = link_code(line, names)
        out.append(line)
    return "\n".join(out)
