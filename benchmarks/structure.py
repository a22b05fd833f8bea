"""The package's structure in numbers: modules, lines, the longest functions, the parameters of
the main entry points, import cycles (package ``__init__`` edges included) and ``# fmt: skip``
lines. Run on two trees to compare a change of structure::

    python benchmarks/structure.py                      # this tree
    python benchmarks/structure.py --root ../old-tree   # another checkout
    python benchmarks/structure.py --json out.json

Lines are physical lines of ``tl_leadterms/**/*.py``; a function's body runs from the line after
its docstring to its last line (its length with the docstring, from ``def``, beside it);
parameters are every named parameter of the signature (``*args`` and ``**kwargs`` not counted).
An import edge is any ``import`` or ``from ... import`` of a package module, at any depth
(inside functions too), a package's ``__init__`` included.
"""

import argparse
import ast
import json
from pathlib import Path

#: the signatures the layout issue tracks: (file under the package, function name)
SIGNATURES = {
    "report": ("reports/compose.py", "report"),
    "distributed corpus_stats": ("distributed/compute.py", "corpus_stats"),
    "sweep": ("sweeps/run.py", "sweep"),
    "covariance_similarity": ("analyses/covariance/compute.py", "covariance_similarity"),
    "train_neox_series": ("loading/series.py", "train_neox_series"),
    "corpus_stats": ("stats/compute.py", "corpus_stats"),
    "explore": ("explorer/build.py", "explore"),
    "output_agreement": ("analyses/output/compute.py", "output_agreement"),
    "decompose": ("analyses/decompose/compute.py", "decompose"),
}
OLD_PATHS = {"reports/compose.py": "report/__init__.py"}  # before the report package moved


def _module(package: Path, path: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def _body(fn: ast.FunctionDef) -> int:
    """Lines after the signature and the docstring, to the function's last line."""
    first = fn.body[0]
    has_doc = isinstance(first, ast.Expr) and isinstance(
        getattr(first, "value", None), ast.Constant
    )
    start = (first.end_lineno + 1) if has_doc and len(fn.body) > 1 else fn.body[0].lineno
    return fn.end_lineno - start + 1


def _params(fn: ast.FunctionDef) -> int:
    a = fn.args
    return len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)


def _edges(package: Path, files: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = module.split(".")
                    parts = parts if is_package else parts[:-1]
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t in files and t != module:
                    graph[module].add(t)
                    break
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def measure(root: Path) -> dict:
    package = root / "tl_leadterms"
    files = {_module(package, p): p for p in sorted(package.rglob("*.py"))}
    lines = skips = 0
    lengths = []
    for module, path in files.items():
        text = path.read_text(encoding="utf-8")
        lines += text.count("\n")
        skips += text.count("# fmt: skip")
        for fn in _functions(ast.parse(text)):
            lengths.append((_body(fn), fn.end_lineno - fn.lineno + 1, f"{module}.{fn.name}"))
    lengths.sort(reverse=True)
    signatures = {}
    for name, (rel, fn_name) in SIGNATURES.items():
        path = package / rel
        if not path.exists():
            path = package / OLD_PATHS.get(rel, rel)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        fns = [f for f in _functions(tree) if f.name == fn_name and f.col_offset == 0]
        signatures[name] = _params(fns[0]) if fns else None
    graph = _edges(package, files)
    return {
        "modules": len(files),
        "lines": lines,
        "fmt_skip": skips,
        "longest_bodies": [{"body": b, "with_docstring": n, "name": w} for b, n, w in lengths[:8]],
        "report_function": next(
            {"body": b, "with_docstring": n}
            for b, n, w in lengths
            if w.endswith(".report") and "cli" not in w
        ),
        "parameters": signatures,
        "import_cycles": _cycles(graph),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args()
    found = measure(args.root)
    print(json.dumps(found, indent=1))
    if args.json:
        args.json.write_text(json.dumps(found, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
