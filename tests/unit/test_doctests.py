"""The examples in the docstrings run and print what they claim."""

import doctest
import importlib
import pkgutil

import pytest

import tl_leadterms

# every module of the package: an example anywhere in a docstring is checked
SUBMODULES = pkgutil.walk_packages(tl_leadterms.__path__, "tl_leadterms.")
MODULES = ["tl_leadterms", *sorted(m.name for m in SUBMODULES)]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
