"""Generated pages of the documentation site (run by mkdocs-gen-files at build time).

* ``reference/<name>.md``: one page per name of ``tl_leadterms.__all__``, rendered from its
  docstring by mkdocstrings, and ``reference/index.md`` listing them;
* ``notebook.md``: ``examples/quickstart.ipynb`` converted to markdown (its markdown cells as
  they are, its code cells as Python blocks, text outputs if the file holds any).

Names are located without importing the package: ``tl_leadterms._HOMES`` (read with ``ast``)
says which subpackage re-exports each name, and the defining module is found by following
``from ... import`` statements in the source.
"""

import ast
import json
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tl_leadterms"


def _source(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _defined_in(module: str, name: str, depth: int = 0) -> str:
    """The module whose source defines ``name`` (following re-exports)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return module
        if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
            if node.level:
                base = module.split(".")
                if _source(module).name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if depth < 8:
                return _defined_in(target, name, depth + 1)
    return module


def _public_names() -> tuple[list[str], dict[str, str]]:
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    names: list[str] = []
    homes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id == "__all__":
                names = list(ast.literal_eval(node.value))
            elif node.targets[0].id == "_HOMES":
                homes = ast.literal_eval(node.value)
    return names, homes


def _summary(module: str, name: str) -> str:
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            doc = ast.get_docstring(node) or ""
            return doc.strip().splitlines()[0] if doc.strip() else ""
    return ""


def reference_pages() -> None:
    names, homes = _public_names()
    homes = {"LeadTermsError": "tl_leadterms.errors", **homes}
    rows = []
    for name in names:
        with mkdocs_gen_files.open(f"reference/{name}.md", "w") as page:
            if name == "__version__":
                page.write("# `__version__`\n\nThe installed version of tl_leadterms, a string "
                           "(`tl_leadterms.__version__`).\n")  # fmt: skip
                rows.append((name, "The installed version, a string."))
                continue
            module = _defined_in(homes[name], name)
            page.write(f"# `{name}`\n\n`from tl_leadterms import {name}`\n\n")
            page.write(f"::: {module}.{name}\n    options:\n      show_root_heading: false\n")
            rows.append((name, _summary(module, name)))
        mkdocs_gen_files.set_edit_path(f"reference/{name}.md", "scripts/gen_pages.py")
    with mkdocs_gen_files.open("reference/index.md", "w") as index:
        index.write("# API reference\n\nEvery public name of `tl_leadterms`, one page each, "
                    "generated from the docstrings.\n\n")  # fmt: skip
        index.write("| name | what it is |\n| --- | --- |\n")
        for name, summary in rows:
            cell = summary.replace("|", "\\|")
            index.write(f"| [`{name}`]({name}.md) | {cell} |\n")


def notebook_page() -> None:
    path = ROOT / "examples" / "quickstart.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    parts = ["<!-- generated from examples/quickstart.ipynb by docs/scripts/gen_pages.py -->\n"]
    for cell in notebook["cells"]:
        text = "".join(cell.get("source", []))
        if cell["cell_type"] == "markdown":
            parts.append(text)
        elif cell["cell_type"] == "code":
            parts.append(f"```python\n{text}\n```")
            for output in cell.get("outputs", []):
                shown = "".join(
                    output.get("text", []) or output.get("data", {}).get("text/plain", [])
                )
                if shown:
                    parts.append(f"```text\n{shown.rstrip()}\n```")
    with mkdocs_gen_files.open("notebook.md", "w") as page:
        page.write("\n\n".join(parts) + "\n")
    mkdocs_gen_files.set_edit_path("notebook.md", "../examples/quickstart.ipynb")


reference_pages()
notebook_page()
