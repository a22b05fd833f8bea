"""Nothing outside the model view touches TransformerLens internals.

The view (tl_leadterms/adapters/view/) is the one place that knows where a HookedTransformer
and a TransformerBridge keep grouped keys, the score divisor, rotary tables and hook names; every
other package module reads them through it. This walks the AST of every other module.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "tl_leadterms"
VIEW = PACKAGE / "adapters" / "view"
# attributes that only the view may read
INTERNALS = {
    "_W_K", "_W_V", "_b_K", "_b_V", "attn_scale", "calculate_sin_cos_rotary",
    "original_component", "rotary_emb", "tl_named_parameters",
}  # fmt: skip


def internal_reads(source: str) -> list[str]:
    """``name (line)`` for every forbidden attribute read, and every ``hook.name``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in INTERNALS:
            found.append(f"{node.attr} (line {node.lineno})")
        elif node.attr == "name" and isinstance(node.value, ast.Name) and node.value.id == "hook":
            found.append(f"hook.name (line {node.lineno})")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if VIEW not in p.parents)


def test_the_walk_finds_each_kind_of_read():
    snippet = (
        "a = attn._W_K\nb = cfg.attn_scale\nc = attn.calculate_sin_cos_rotary(1, 2)\n"
        "d = block.attn.original_component.scaling\ne = hook.name\nf = getattr(x, 'attn_scale')\n"
    )
    assert sorted(r.split()[0] for r in internal_reads(snippet)) == [
        "_W_K", "attn_scale", "calculate_sin_cos_rotary", "hook.name", "original_component",
    ]  # fmt: skip


def test_the_walk_covers_the_package():
    names = {p.relative_to(PACKAGE).as_posix() for p in _modules()}
    assert {
        "adapters/convert.py",
        "analyses/covariance/token_maps.py",
        "analyses/attention/views.py",
    } <= names
    assert not any(name.startswith("adapters/view/") for name in names)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_outside_the_view_reads_internals(path):
    assert internal_reads(path.read_text(encoding="utf-8")) == []
