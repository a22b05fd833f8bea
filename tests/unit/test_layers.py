"""The package's imports point down its layers, form no cycle and share no private names.

Layers, bottom to top: errors/version/atomic < data < stats < checks < theory <
models < adapters < analyzers < training < distributed < checkpoints < plot < report < cli.
A module may import its own layer and the layers below; function-level (lazy) imports count.
"""

import ast
from pathlib import Path

import pytest

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
        "keywords",
        "protocols",
    ),
    ("data",),
    ("stats",),
    ("checks",),
    ("theory",),
    ("models",),
    ("adapters",),
    ("analyzers",),
    ("training",),
    ("distributed",),
    ("checkpoints",),
    ("plot",),
    ("report",),
    ("cli",),
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
#: (module, imported module) -> why this one import may point up; nothing else may
UPWARD = {
    ("tl_leadterms.analyzers.table", "tl_leadterms.plot"): (
        "a result's .plot() loads the plot layer once (inside the method), which registers its "
        "figure functions by result class; analyzers never call plot code by name"
    ),
}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(path: Path, module: str, *, top_level_only: bool = False):
    """``(imported module, imported names, line)`` for every tl_leadterms import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else ast.walk(tree)
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
            if target.split(".")[0] == "tl_leadterms":
                yield target, [a.name for a in node.names], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tl_leadterms":
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
                if len(submodules) < len(names) and RANK["report"] > RANK[mine]:
                    wrong.append(f"{module}:{line} imports the package root ({names})")
            elif RANK[theirs] > RANK[mine] and (module, target) not in UPWARD:
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


def test_no_import_cycle():
    modules = _modules()
    graph = {m: set() for m in modules}
    for module, path in modules.items():
        for target, names, _ in _imports(path, module, top_level_only=True):
            for candidate in [f"{target}.{n}" for n in names] + [target]:
                if candidate in modules and candidate != module:
                    graph[module].add(candidate)
                    break
    # a package __init__ importing its own submodules is not a cycle through them
    for module in graph:
        graph[module] = {t for t in graph[module] if not module.startswith(t + ".")}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*stack, node, nxt]))
            if nxt not in state:
                visit(nxt, [*stack, node])
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module, [])


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
