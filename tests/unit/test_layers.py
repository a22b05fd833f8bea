"""The package's imports point down its layers, form no cycle and share no private names.

Layers, bottom to top: errors/version/atomic/threads < data < stats < checks < theory < models <
adapters < results < analyses < training < distributed < loading < sweeps < explorer < report <
cli. A module may import its own layer and the layers below. Every import counts, those inside
functions (lazy ones) included, for the layers and for cycles alike.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tl_leadterms"

LAYERS = [
    (
        "errors",
        "version",
        "jsontext",
        "signals",
        "filesystem",
        "atomic",
        "progress",
        "threads",
        "keywords",
        "protocols",
    ),
    ("data",),
    ("stats",),
    ("checks",),
    ("theory",),
    ("models",),
    ("adapters",),
    ("results",),
    ("analyses", "registry"),
    ("training",),
    ("distributed",),
    ("loading",),
    ("sweeps",),
    ("explorer",),
    ("reports",),
    ("cli",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, module: str):
    """``(imported module, imported names, line)`` for every tl_leadterms import in a file,
    at any depth (inside functions and methods too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree)
    is_package = path.name == "__init__.py"
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == module.split(".")[0]:
                yield target, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == module.split(".")[0]:
                    yield alias.name, [], node.lineno


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # the package root is above every layer


def test_every_subpackage_has_a_layer():
    unknown = {_layer(m) for m in _modules()} - set(RANK) - {None}
    assert not unknown, f"add these to LAYERS in {__file__}: {sorted(unknown)}"


def test_imports_point_down():
    wrong = []
    for module, path in _modules().items():
        mine = _layer(module)
        if mine is None:
            continue
        for target, names, line in _imports(path, module):
            theirs = _layer(target)
            if theirs is None:  # `from tl_leadterms import x`
                submodules = [n for n in names if n in RANK]
                for name in submodules:
                    if RANK[name] > RANK[mine]:
                        wrong.append(f"{module}:{line} imports tl_leadterms.{name}")
                # the package root re-exports everything up to report: only the CLI may use it
                if len(submodules) < len(names) and RANK["reports"] > RANK[mine]:
                    wrong.append(f"{module}:{line} imports the package root ({names})")
            elif RANK[theirs] > RANK[mine]:
                wrong.append(f"{module}:{line} ({mine}) imports {target} ({theirs})")
    assert not wrong, "imports pointing up the layers:\n" + "\n".join(wrong)


def test_no_private_name_crosses_a_module():
    wrong = []
    for module, path in _modules().items():
        for target, names, line in _imports(path, module):
            if target == module:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{module}:{line} imports {private} from {target}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


def _cycle(package: Path = PACKAGE) -> list[str] | None:
    """The first import cycle among the modules of ``package`` (every import counts), or None."""
    modules = _modules(package)
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        for target, names, _ in _imports(path, module):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in modules and candidate != module:
                    graph[module].add(candidate)
                    break
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack, node, nxt]
            if nxt not in state:
                found = visit(nxt, [*stack, node])
                if found:
                    return found
        state[node] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module, [])
            if found:
                return found
    return None


def test_no_import_cycle():
    found = _cycle()
    assert found is None, "import cycle: " + " -> ".join(found or [])


def test_a_planted_lazy_cycle_is_found(tmp_path):
    """Two modules that import each other only inside functions form a cycle the test sees."""
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from planted.b import g\n    return g()\n")
    (package / "b.py").write_text("def g():\n    from planted import a\n    return a\n")
    (package / "c.py").write_text("from planted.a import f\n")
    found = _cycle(package)
    assert found is not None and {"planted.a", "planted.b"} <= set(found), found
    (package / "b.py").write_text("def g():\n    return 1\n")
    assert _cycle(package) is None


def test_one_definition_of_the_theorem_vocabulary():
    """Weight names, families and coefficients are defined in theory/ only."""
    owned = {"WEIGHTS", "FAMILIES", "KINDS", "COMPONENTS", "TERMS"}
    wrong = []
    for module, path in _modules().items():
        if module.startswith("tl_leadterms.theory"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Assign):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets = [node.target.id]
            wrong += [f"{module}:{node.lineno} defines {t}" for t in targets if t in owned]
            if isinstance(node, ast.Attribute) and node.attr == "comb":
                wrong.append(f"{module}:{node.lineno} computes a binomial coefficient")
    assert not wrong, "\n".join(wrong)


def _reaches_into_an_analysis(package: Path = PACKAGE) -> list[str]:
    """Imports of ``<pkg>.analyses.<name>.<module>`` from outside that analysis's package."""
    wrong = []
    for module, path in _modules(package).items():
        for target, _, line in _imports(path, module):
            parts = target.split(".")
            if (
                len(parts) > 3
                and parts[1] == "analyses"
                and not module.startswith(".".join(parts[:3]))
            ):
                wrong.append(f"{module}:{line} imports {target}")
    return wrong


def test_analyses_are_used_through_their_package_names():
    """Every analysis package is used from outside only through its public names
    (``from tl_leadterms.analyses.decompose import decompose``), never its modules."""
    wrong = _reaches_into_an_analysis()
    assert not wrong, "imports reaching into an analysis's modules:\n" + "\n".join(wrong)


def test_a_planted_reach_into_an_analysis_is_found(tmp_path):
    package = tmp_path / "planted"
    for folder in ("", "analyses", "analyses/decompose", "report"):
        (package / folder).mkdir(exist_ok=True)
        (package / folder / "__init__.py").write_text("")
    (package / "analyses/decompose/fit.py").write_text("X = 1\n")
    (package / "report/tables.py").write_text("from planted.analyses.decompose.fit import X\n")
    assert _reaches_into_an_analysis(package) == [
        "planted.report.tables:1 imports planted.analyses.decompose.fit"
    ]
    (package / "report/tables.py").write_text("from planted.analyses.decompose import X\n")
    assert _reaches_into_an_analysis(package) == []


def test_a_planted_cycle_through_a_package_init_is_found(tmp_path):
    """A module that imports its own package's ``__init__``, which imports the module back, is
    a cycle: package ``__init__`` edges count like any other."""
    package = tmp_path / "planted"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from planted.sub.figure import plot\n")
    (package / "sub" / "figure.py").write_text("def plot():\n    from planted.sub import X\n")
    found = _cycle(package)
    assert found is not None and {"planted.sub", "planted.sub.figure"} <= set(found), found
    (package / "sub" / "figure.py").write_text("def plot():\n    return 1\n")
    assert _cycle(package) is None
