"""A griffe extension for the API reference: docstrings written for ``help()`` and doctest,
read as the site's Markdown.

* ``Example:`` heads the package's doctests; griffe's Google parser knows only ``Examples:``
  as a code section (``Example:`` would render as an admonition of plain text).
* An entry that documents several parameters at once (``lr, steps, s_lr: the training run``)
  becomes one entry per name with the shared text: mkdocstrings matches an entry with the
  signature by its name, and a combined one matched nothing, so that every name in it showed
  "required" and no type or default.
* Sphinx roles (``:func:`~tl_leadterms.decompose```) become links to the object's page, and so
  does inline code that names a public class, function or module of the package
  (``corpus_stats``, ``CorpusStats.top``, ``tl_leadterms.theory``), resolved in the scope of
  the documented object as Python would. A role shows its name as Sphinx does (``~`` keeps
  the last part only); a name that resolves to nothing rendered on the site stays inline code.
* "the module docstring" links to the module's docstring (rendered on the object's page by
  ``gen_pages.py``).
* A citation ``docs/math.md#<section>`` becomes a link to that section of the site's maths page
  (API pages live in ``reference/``, one level below it).
"""

import html
import re

import griffe

PACKAGE = "tl_leadterms"

_HEADING = re.compile(r"(?m)^(\s*)Example:\s*$")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")
_MATH = re.compile(r"(?<!\]\()(?<![\w/\[])docs/math\.md#([\w-]+)")
#: inline code (one or two backticks, as RST writes it) not already a link's text
_CODE = re.compile(r"(?<![`\[])(``?)([A-Za-z_][\w.]*)\1(?!`)")
_MODULE_DOC = re.compile(r"\b(?:the )?module docstring\b")
_FENCE = re.compile(r"^\s*(```|~~~)")
#: the Google sections whose entries are names (``name (type): text``)
_NAMED_SECTIONS = re.compile(
    r"(?i)^(?:args|arguments|params|parameters|keyword args|keyword arguments|other args|"
    r"other arguments|other params|other parameters|attributes):$"
)
_COMBINED = re.compile(r"^(\s+)(\w+(?:\s*,\s*\w+)+)(\s*\([^)]*\))?:(\s.*|)$")


def split_combined(text: str) -> str:
    """``text`` with each combined entry of a parameter section split into one per name.

    >>> print(split_combined("Args:\\n    a, b: shared,\\n        two lines.\\n    c: own.\\n"))
    Args:
        a: shared,
            two lines.
        b: shared,
            two lines.
        c: own.
    <BLANKLINE>
    """
    lines = text.split("\n")
    out: list[str] = []
    section: int | None = None  # the indentation of the current named section's heading
    i = 0
    while i < len(lines):
        line = lines[i]
        indent = len(line) - len(line.lstrip())
        if line.strip() and section is not None and indent <= section:
            section = None
        if _NAMED_SECTIONS.match(line.strip()):
            section = indent
        elif section is not None and (match := _COMBINED.match(line)):
            lead, names, kind, rest = match.groups()
            body = []  # the entry's continuation lines: deeper than its first line (or blank)
            while i + 1 < len(lines) and (
                not lines[i + 1].strip()
                or len(lines[i + 1]) - len(lines[i + 1].lstrip()) > len(lead)
            ):
                body.append(lines[i + 1])
                i += 1
            while body and not body[-1].strip():  # trailing blank lines stay after the entries
                i -= 1
                body.pop()
            for name in re.split(r"\s*,\s*", names):
                out += [f"{lead}{name}{kind or ''}:{rest}", *body]
            i += 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _link(identifier: str, title: str, code: bool = True) -> str:
    """An optional autorefs link: a link where ``identifier`` is rendered, else its title."""
    title = f"<code>{title}</code>" if code else title
    return f'<autoref identifier="{html.escape(identifier)}" optional>{title}</autoref>'


def _lookup(obj: griffe.Object | griffe.Alias, path: str) -> griffe.Object | griffe.Alias | None:
    try:
        return obj.modules_collection[path]
    except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def resolve(obj: griffe.Object | griffe.Alias, name: str) -> griffe.Object | griffe.Alias | None:
    """The object of the package that ``name`` means in the docstring of ``obj``, or None.

    ``name`` is a full path (``tl_leadterms.theory.WEIGHTS``), a path relative to the module
    (``.definitions``, as Sphinx reads it), or a name in the scope of ``obj`` with an optional
    attribute path after it (``CorpusStats.top``, ``model_weights``).
    """
    if name.startswith(PACKAGE + ".") or name == PACKAGE:
        return _lookup(obj, name)
    if name.startswith("."):
        rest = name.lstrip(".")
        scope = obj.module if not obj.is_module else obj
        while scope is not None:
            if (found := _lookup(obj, f"{scope.path}.{rest}")) is not None:
                return found
            scope = scope.parent
        return None
    first, _, rest = name.partition(".")
    try:
        path = obj.resolve(first)
    except (griffe.NameResolutionError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    if not path.startswith(PACKAGE + ".") and path != PACKAGE:
        return None
    return _lookup(obj, f"{path}.{rest}" if rest else path)


def _canonical(found: griffe.Object | griffe.Alias) -> str | None:
    try:
        return found.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def link_names(text: str, obj: griffe.Object | griffe.Alias | None) -> str:
    """``text`` with its Sphinx roles and the inline code that names the package's objects
    turned into links (see the module docstring); outside fenced code blocks."""
    own = _canonical(obj) if obj is not None else None

    def role(match: re.Match) -> str:
        tilde, target = match.groups()
        title = target.rsplit(".", 1)[-1] if tilde else target
        found = resolve(obj, target) if obj is not None else None
        canonical = _canonical(found) if found is not None else None
        if canonical is None or canonical == own:
            return f"`{title}`"
        return _link(canonical, title)

    def code(match: re.Match) -> str:
        name = match.group(2)
        if obj is None or name.startswith("_") or "._" in name:
            return match.group(0)
        found = resolve(obj, name)
        if found is None or (
            "." not in name and not (found.is_class or found.is_function or found.is_module)
        ):
            return match.group(0)  # a bare name that is an attribute (``k``, ``P``) stays code
        canonical = _canonical(found)
        if canonical is None or canonical == own:
            return match.group(0)
        return _link(canonical, name)

    out, fenced = [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and not line.lstrip().startswith(">>>"):
            line = _CODE.sub(code, _ROLE.sub(role, line))
        out.append(line)
    return "\n".join(out)


def markdown(text: str, obj: griffe.Object | griffe.Alias | None = None) -> str:
    """The docstring ``text`` (of ``obj``, which resolves names) as the site renders it.

    >>> markdown(":func:`~tl_leadterms.decompose` (docs/math.md#model)")
    '`decompose` ([docs/math.md#model](../math.md#model))'
    """
    text = split_combined(_HEADING.sub(r"\1Examples:", text))
    text = link_names(text, obj)
    if obj is not None and obj.module is not obj:
        module = obj.module.path
        text = _MODULE_DOC.sub(lambda m: _link(module, m.group(0), code=False), text)
    return _MATH.sub(lambda m: f"[docs/math.md#{m.group(1)}](../math.md#{m.group(1)})", text)


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _walk(member)
    return found


class ExampleSections(griffe.Extension):
    """Rewrite every docstring of the package with :func:`markdown`, once it is loaded (names
    resolve only in the complete tree)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: object) -> None:
        if pkg.path != PACKAGE:
            return
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj.docstring.value, obj)
