"""The one registry of analyses: each line resolves, and no other module keeps a list of them."""

import ast
import importlib
from pathlib import Path

import pytest

from tl_leadterms import registry
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.results.table import ResultTable

PACKAGE = Path(__file__).resolve().parents[2] / "tl_leadterms"


@pytest.mark.parametrize("spec", registry.ANALYSES, ids=lambda a: a.name)
def test_every_line_resolves_to_its_subpackage(spec):
    package = importlib.import_module(f"tl_leadterms.analyses.{spec.name}")
    assert spec.load() is getattr(package, spec.function)
    assert issubclass(spec.result_class(), ResultTable)
    assert spec.result in package.__all__ and spec.function in package.__all__
    assert hasattr(package, "sweep_rows") == spec.sweep, "sweep=True needs sweep_rows"
    assert hasattr(package, "monitor_scores") == (spec.monitor is not None)
    assert callable(spec.result_class().plot)  # each result draws its own figure
    assert {"model", "stats"} & spec.accepts() == set()


def test_every_analysis_subpackage_is_registered():
    found = {p.name for p in (PACKAGE / "analyses").iterdir() if (p / "__init__.py").is_file()}
    assert found == set(registry.NAMES)


def test_unknown_names_are_refused_with_the_known_ones():
    with pytest.raises(LeadTermsError, match=r"unknown analysis 'decomposition'.*'decompose'"):
        registry.analysis("decomposition")
    with pytest.raises(LeadTermsError, match="does not run in a sweep"):
        registry.analysis("atlas").sweep_rows(None, None)


def test_consumers_read_the_registry():
    from tl_leadterms.cli import build_parser
    from tl_leadterms.sweeps.analyses import NAMES
    from tl_leadterms.sweeps.monitor import ANALYSES

    assert registry.sweepable() == NAMES
    assert tuple(registry.monitored()) == ANALYSES
    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]
    choices = next(a.choices for a in sweep._actions if a.dest == "analyses")
    assert tuple(choices) == registry.sweepable(tokens=False)


#: (file, assigned name) -> why this literal of analysis names is not a list of the analyses
ALLOWED = {("sweeps/analyses.py", "DEFAULT"): "what a sweep runs when none are named"}


def _name_lists(path: Path, where: str = "") -> list[int]:
    """Lines of ``path`` holding a literal tuple, list or set of two or more analysis names
    (``__all__``, ``Literal[...]`` and the :data:`ALLOWED` defaults are not such lists)."""
    names = set(registry.NAMES) | set(registry.monitored())
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    for node in ast.walk(tree):
        target = node.targets[0] if isinstance(node, ast.Assign) else None
        if isinstance(target, ast.Name) and (
            target.id == "__all__" or (where, target.id) in ALLOWED
        ):
            skip.add(id(node.value))
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Literal":
            skip.add(id(node.slice))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in skip:
            values = {e.value for e in node.elts if isinstance(e, ast.Constant)}
            if len(values & names) >= 2:
                out.append(node.lineno)
    return out


def test_no_other_module_keeps_a_list_of_analysis_names(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('NAMES = ("decompose", "covariance")\n')
    assert _name_lists(planted) == [1]  # the check sees a planted list
    wrong = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "registry.py" and path.parent == PACKAGE:
            continue
        where = str(path.relative_to(PACKAGE))
        lines = _name_lists(path, where)
        if lines:
            wrong[where] = lines
    assert not wrong, f"lists of analysis names outside tl_leadterms/registry.py: {wrong}"


def test_the_report_holds_no_list_of_sections():
    """``report()`` composes the sections its results render: its module names no section
    (no literal id or title of one), so a new analysis needs no change there."""
    from tl_leadterms import registry

    named = {a.report for a in registry.ANALYSES} | {"history", "sweep", "explorer"}
    for path in (PACKAGE / "reports").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not named & literals, f"{path.name} names sections {sorted(named & literals)}"
    compose = (PACKAGE / "reports" / "compose.py").read_text(encoding="utf-8")
    body = ast.parse(compose)
    report = next(n for n in body.body if isinstance(n, ast.FunctionDef) and n.name == "report")
    assert report.end_lineno - report.lineno + 1 <= 60 + len(ast.get_docstring(report).split("\n"))
