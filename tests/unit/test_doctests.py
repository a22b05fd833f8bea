"""The examples in the docstrings run and print what they claim."""

import doctest
import importlib
import pkgutil

import pytest

import tl_leadterms

# every module of the package: an example anywhere in a docstring is checked
SUBMODULES = pkgutil.walk_packages(tl_leadterms.__path__, "tl_leadterms.")
MODULES = ["tl_leadterms", *sorted(m.name for m in SUBMODULES)]
# modules whose examples build or load a HookedTransformer (TL 3.x only): hooked, so they run in
# the TL 3.9 environment and skip under TL 4
HOOKED = {
    "tl_leadterms.adapters.extended",
    "tl_leadterms.loading.checkpoint",
    "tl_leadterms.loading.tiny",
}
PARAMS = [pytest.param(m, marks=pytest.mark.hooked) if m in HOOKED else m for m in MODULES]


@pytest.mark.parametrize("name", PARAMS)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
