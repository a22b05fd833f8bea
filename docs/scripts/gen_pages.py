"""Generated pages of the documentation site (run by mkdocs-gen-files at build time).

* ``reference/<name>.md``: one page per name of ``tl_leadterms.__all__``, rendered from its
  docstring by mkdocstrings with its call signature;
* ``reference/<package>.md``: one page per subpackage of :data:`PACKAGES` with every name of
  its ``__all__`` (the result classes and specs that the top level does not re-export:
  ``Decomposition``, ``NullSpec``, ``SweepTable``, ``TrainHistory`` ...), except the names
  that have a page of their own, which it links to: every object is rendered once (twice
  would give one identifier two URLs, and ``--strict`` fails on that); and
  ``reference/index.md`` linking all of them;
  A name whose docstring says "see the module docstring" gets that docstring below it.
* ``notebook.md``: ``examples/quickstart.ipynb`` with its outputs (text, images, HTML results),
  read from an executed copy: ``$TL_LEADTERMS_EXECUTED_NOTEBOOK``, else
  :data:`EXECUTED` (``build/notebooks/quickstart.ipynb``, which the notebook test writes) when
  its code is the notebook's current code. With ``TL_LEADTERMS_DOCS_EXECUTE=1`` the notebook
  is executed here with nbclient first (slow: minutes) and the copy written. Without a copy
  the page shows the code alone, so that ``make docs-strict`` stays fast and offline.

Names are located without importing the package: ``tl_leadterms._HOMES`` (read with ``ast``)
says which subpackage re-exports each name, and the defining module is found by following
``from ... import`` statements in the source.
"""

import ast
import base64
import html
import json
import os
import re
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tl_leadterms"
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
#: the executed copy the notebook test writes (build/ is not in git)
EXECUTED = ROOT / "build" / "notebooks" / "quickstart.ipynb"
#: the subpackages with a page of their public names (their ``__all__``), in this order
PACKAGES = [
    "tl_leadterms.analyses.decompose",
    "tl_leadterms.analyses.attention",
    "tl_leadterms.analyses.covariance",
    "tl_leadterms.analyses.output",
    "tl_leadterms.analyses.atlas",
    "tl_leadterms.analyses.ablation",
    "tl_leadterms.results",
    "tl_leadterms.stats",
    "tl_leadterms.stats.blocks",
    "tl_leadterms.theory",
    "tl_leadterms.training",
    "tl_leadterms.sweeps",
    "tl_leadterms.loading",
    "tl_leadterms.explorer",
    "tl_leadterms.models",
    "tl_leadterms.adapters",
]

#: the guides that show each top-level name at work (path from docs/, optional anchor), linked
#: from the top of its page; every analysis has one (tests/integration/test_docs.py checks)
GUIDES = {
    "decompose": ["guides/decompose.md", "guides/meaningful-scores.md"],
    "attention_agreement": [
        "guides/pythia-protocol.md#the-scores-on-one-model",
        "guides/real-models.md",
    ],
    "predict_attention": ["guides/pythia-protocol.md#the-scores-on-one-model"],
    "covariance_similarity": [
        "guides/pythia-protocol.md#the-scores-on-one-model",
        "guides/effect-sizes.md",
    ],
    "output_agreement": ["guides/next-token.md"],
    "head_atlas": ["guides/meaningful-scores.md#the-head-atlas", "guides/explorer.md"],
    "ablate": [
        "guides/decompose.md#the-causal-test",
        "guides/reproduce-paper.md#table-3-the-causal-test",
    ],
    "explore": ["guides/explorer.md#the-explorer"],
    "corpus_stats": ["guides/corpus-statistics.md", "guides/performance.md"],
    "CorpusStats": ["guides/corpus-statistics.md"],
    "make_windows": ["guides/corpus-statistics.md"],
    "block_stats": ["guides/intervals.md"],
    "to_paper": ["guides/real-models.md", "guides/transformerlens.md"],
    "load_model": ["guides/real-models.md"],
    "paper_model": ["guides/decompose.md#train-the-papers-model-and-read-its-weights"],
    "train": [
        "guides/decompose.md#train-the-papers-model-and-read-its-weights",
        "guides/reproduce-paper.md",
    ],
    "sweep": ["guides/pythia-protocol.md#sweeps-over-checkpoints"],
    "LeadingTermMonitor": ["guides/next-token.md#a-monitor-for-any-training-run"],
    "report": ["guides/report.md"],
    "leading_terms": ["guides/decompose.md#one-table-for-the-theorem-one-rule-per-argument"],
    "coefficients": ["guides/decompose.md#one-table-for-the-theorem-one-rule-per-argument"],
    "step_bound": ["guides/decompose.md#one-table-for-the-theorem-one-rule-per-argument"],
    "LeadTermsError": ["guides/reliability.md", "guides/conventions.md"],
}


def _guide_title(target: str) -> str:
    """The title of a guide (its first heading), and of the section a fragment names."""
    page, _, anchor = target.partition("#")
    lines = (ROOT / "docs" / page).read_text(encoding="utf-8").splitlines()
    title = next(line[2:].strip() for line in lines if line.startswith("# "))
    if not anchor:
        return title
    # the heading whose slug (Markdown's toc: lower case, word characters, hyphens) is anchor
    headings = [line.lstrip("#").strip() for line in lines if line.startswith("##")]
    slug = {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h.lower()).strip()): h for h in headings}
    return f"{title} › {slug[anchor].replace('`', '')}"  # KeyError: no such section


def _source(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _defined_in(module: str, name: str, depth: int = 0) -> str:
    """The module whose source defines ``name`` (following re-exports)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    # the module's own statements and those of its ``if TYPE_CHECKING:`` blocks (a package
    # that imports its names lazily states where they come from there)
    body = [n for node in tree.body for n in (node.body if isinstance(node, ast.If) else [node])]
    for node in body:
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


def _module_all(module: str) -> list[str]:
    """The module's ``__all__``, read from its source (empty when it has none)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value is not None:
            return list(ast.literal_eval(node.value))
    return []


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


def _summary(module: str, name: str | None = None) -> str:
    """The first line of the docstring of ``name`` in ``module`` (of the module: ``None``)."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    if name is None:
        doc = ast.get_docstring(tree) or ""
        return doc.strip().splitlines()[0] if doc.strip() else ""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            doc = ast.get_docstring(node) or ""
            return doc.strip().splitlines()[0] if doc.strip() else ""
    return ""


def _cites_module(module: str, name: str) -> bool:
    """Whether the docstring of ``name`` sends its reader to its module's docstring."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return "module docstring" in (ast.get_docstring(node) or "")
    return False


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _shadowed(package: str, members: list[str]) -> dict[str, str]:
    """The members of ``package`` that share a submodule's name, each with what to render.

    To mkdocstrings such a name is the submodule (``covariance.token_maps`` the module, not the
    function it defines; ``adapters.factored`` is a module), and a package page shows no
    submodule: each gets a block of its own.
    """
    out = {}
    for m in members:
        if _source(f"{package}.{m}").exists():
            defined = _defined_in(package, m)
            out[m] = f"{defined}.{m}" if defined != package else f"{package}.{m}"
    return out


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
            module = _defined_in(homes.get(name, "tl_leadterms"), name)
            # the root heading is the page's title and carries the call signature
            page.write(f"`from tl_leadterms import {name}`\n\n")
            if name in GUIDES:
                links = "; ".join(f"[{_guide_title(g)}](../{g})" for g in GUIDES[name])
                page.write(f"**Guide:** {links}.\n\n")
            page.write(f"::: {module}.{name}\n    options:\n      show_root_heading: true\n"
                       "      show_root_full_path: false\n")  # fmt: skip
            # "see the module docstring": on the page, unless the module has a page of its own
            if _cites_module(module, name) and module not in PACKAGES:
                page.write(f"\n::: {module}\n    options:\n      show_root_heading: true\n"
                           "      show_root_full_path: true\n      members: false\n"
                           "      heading_level: 2\n")  # fmt: skip
            rows.append((name, _summary(module, name)))
        mkdocs_gen_files.set_edit_path(f"reference/{name}.md", "scripts/gen_pages.py")
    # where each top-level name's object is defined: it is rendered there, on its own page, and
    # nowhere else (one object rendered on two pages gets two URLs for one identifier)
    own_page = {(_defined_in(homes.get(n, "tl_leadterms"), n), n) for n in names if n in homes}
    packages = []
    targets: dict[str, dict[str, str]] = {}  # package -> member -> its identifier on the page
    for package in PACKAGES:
        members = _module_all(package)
        if not _source(package).exists() or not members:
            continue
        elsewhere = {m for m in members if (_defined_in(package, m), m) in own_page}
        shadowed = _shadowed(package, [m for m in members if m not in elsewhere])
        here = [m for m in members if m not in elsewhere and m not in shadowed]
        targets[package] = {m: shadowed.get(m, f"{package}.{m}") for m in [*here, *shadowed]}
        with mkdocs_gen_files.open(f"reference/{package}.md", "w") as page:
            page.write(f"::: {package}\n    options:\n      show_root_heading: true\n"
                       "      show_root_full_path: true\n      show_submodules: false\n"
                       f"      members: {json.dumps(here)}\n")  # fmt: skip
            for target in shadowed.values():
                page.write(f"\n::: {target}\n    options:\n      show_root_heading: true\n"
                           "      show_root_full_path: true\n      heading_level: 2\n")  # fmt: skip
            if elsewhere:
                links = ", ".join(f"[`{m}`]({m}.md)" for m in members if m in elsewhere)
                page.write(f"\nAlso exported by `{package}`, each on a page of its own: {links}.\n")
        mkdocs_gen_files.set_edit_path(f"reference/{package}.md", "scripts/gen_pages.py")
        packages.append((package, members, elsewhere, _summary(package)))
    with mkdocs_gen_files.open("reference/index.md", "w") as index:
        index.write("# API reference\n\nGenerated from the docstrings: every name of "
                    "`tl_leadterms` on a page of its own, then each subpackage with all its "
                    "public names (result classes and specs included).\n\n"
                    "## `from tl_leadterms import ...`\n\n")  # fmt: skip
        index.write("| name | what it is |\n| --- | --- |\n")
        for name, summary in rows:
            index.write(f"| [`{name}`]({name}.md) | {_cell(summary)} |\n")
        index.write("\n## Subpackages\n\n| package | its names | what it is |\n"
                    "| --- | --- | --- |\n")  # fmt: skip
        for package, members, elsewhere, summary in packages:
            listed = ", ".join(f"[`{m}`]({m}.md)" if m in elsewhere else
                               f"[`{m}`][{targets[package][m]}]" for m in members)  # fmt: skip
            index.write(f"| [`{package}`]({package}.md) | {listed} | {_cell(summary)} |\n")


def _same_code(a: dict, b: dict) -> bool:
    def code(nb: dict) -> list[str]:
        return ["".join(c.get("source", [])) for c in nb["cells"] if c["cell_type"] == "code"]

    return code(a) == code(b)


def _execute(notebook: dict) -> dict:
    """``notebook`` run top to bottom with nbclient (in ``build/notebooks``), saved there."""
    import nbformat
    from nbclient import NotebookClient

    EXECUTED.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.from_dict(notebook)
    NotebookClient(nb, timeout=900, kernel_name="python3",
                   resources={"metadata": {"path": str(EXECUTED.parent)}}).execute()  # fmt: skip
    part = EXECUTED.with_suffix(".ipynb.part")
    nbformat.write(nb, part)
    part.replace(EXECUTED)
    return json.loads(EXECUTED.read_text(encoding="utf-8"))


def executed_notebook(notebook: dict) -> dict | None:
    """The executed copy of ``notebook`` to render, or None (see the module docstring)."""
    given = os.environ.get("TL_LEADTERMS_EXECUTED_NOTEBOOK")
    if given:
        return json.loads(Path(given).read_text(encoding="utf-8"))
    if os.environ.get("TL_LEADTERMS_DOCS_EXECUTE") == "1":
        return _execute(notebook)
    if EXECUTED.exists():
        copy = json.loads(EXECUTED.read_text(encoding="utf-8"))
        if _same_code(copy, notebook):
            return copy
    return None


def _text(value: object) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


#: an HTML output in a frame of its own (its styles and ids cannot meet the theme's), as tall
#: as its content
_FRAME = (
    '<iframe class="nb-output" srcdoc="{}" style="width:100%;border:0;height:{}px" '
    'onload="var f=this;try{{var d=f.contentDocument.documentElement,fit=function(){{'
    "f.style.height=(d.scrollHeight+8)+'px'}};fit();new ResizeObserver(fit).observe(d)"
    '}}catch(e){{}}"></iframe>'
)


def output_markdown(output: dict) -> str:
    """One cell output as the page shows it: text as a block, a PNG as an image, HTML framed."""
    kind = output.get("output_type")
    if kind == "stream":
        text = _text(output.get("text")).rstrip()
        return f"```text\n{text}\n```" if text else ""
    if kind == "error":
        return f"```text\n{output.get('ename')}: {output.get('evalue')}\n```"
    data = output.get("data", {})
    if "image/png" in data:
        png = _text(data["image/png"]).replace("\n", "")
        base64.b64decode(png, validate=True)  # a broken image fails the build, not the reader
        return f'<p class="nb-image"><img alt="figure" src="data:image/png;base64,{png}"></p>'
    if "image/svg+xml" in data:
        svg = base64.b64encode(_text(data["image/svg+xml"]).encode()).decode()
        return f'<p class="nb-image"><img alt="figure" src="data:image/svg+xml;base64,{svg}"></p>'
    if "text/html" in data:
        page = (
            '<!DOCTYPE html><meta charset="utf-8"><body style="margin:0;font-family:'
            f'system-ui,sans-serif">{_text(data["text/html"])}</body>'
        )
        return _FRAME.format(html.escape(page, quote=True), 200)
    text = _text(data.get("text/plain")).rstrip()
    return f"```text\n{text}\n```" if text else ""


def notebook_page() -> None:
    notebook = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    executed = executed_notebook(notebook)
    source = executed or notebook
    note = ("its outputs from an executed copy" if executed is not None else
            "without outputs: run the notebook test, or build with TL_LEADTERMS_DOCS_EXECUTE=1, "
            "for the page with outputs")  # fmt: skip
    parts = [f"<!-- generated from examples/quickstart.ipynb by docs/scripts/gen_pages.py, "
             f"{note} -->\n"]  # fmt: skip
    for cell in source["cells"]:
        text = _text(cell.get("source", []))
        if cell["cell_type"] == "markdown":
            parts.append(text)
        elif cell["cell_type"] == "code":
            parts.append(f"```python\n{text}\n```")
            parts += [shown for o in cell.get("outputs", []) if (shown := output_markdown(o))]
    with mkdocs_gen_files.open("notebook.md", "w") as page:
        page.write("\n\n".join(parts) + "\n")
    mkdocs_gen_files.set_edit_path("notebook.md", "../examples/quickstart.ipynb")


reference_pages()
notebook_page()
