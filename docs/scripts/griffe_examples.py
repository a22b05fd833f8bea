"""A griffe extension for the API reference: docstrings written for ``help()`` and doctest,
read as the site's Markdown.

* ``Example:`` heads the package's doctests; griffe's Google parser knows only ``Examples:``
  as a code section (``Example:`` would render as an admonition of plain text).
* Sphinx roles (``:func:`~tl_leadterms.decompose```) become inline code.
* A citation ``docs/math.md#<section>`` becomes a link to that section of the site's maths page
  (API pages live in ``reference/``, one level below it).
"""

import re

import griffe

_HEADING = re.compile(r"(?m)^(\s*)Example:\s*$")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj|const):`~?([^`]+)`")
_MATH = re.compile(r"(?<!\]\()(?<![\w/\[])docs/math\.md#([\w-]+)")


def markdown(text: str) -> str:
    """The docstring ``text`` as the site renders it.

    >>> markdown(":func:`~tl_leadterms.decompose` (docs/math.md#model)")
    '`tl_leadterms.decompose` ([docs/math.md#model](../math.md#model))'
    """
    text = _HEADING.sub(r"\1Examples:", text)
    text = _ROLE.sub(lambda m: f"`{m.group(1)}`", text)
    return _MATH.sub(lambda m: f"[docs/math.md#{m.group(1)}](../math.md#{m.group(1)})", text)


class ExampleSections(griffe.Extension):
    """Rewrite every docstring griffe loads with :func:`markdown`."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
