"""The examples in the docstrings run and print what they claim."""

import doctest
import importlib

import pytest

MODULES = [
    "tl_leadterms",
    "tl_leadterms.stats.compute",
    "tl_leadterms.stats.windows",
    "tl_leadterms.models.paper",
    "tl_leadterms.training",
    "tl_leadterms.analyzers.decompose",
    "tl_leadterms.analyzers.attention",
    "tl_leadterms.checkpoints.sweep_results",
    "tl_leadterms.checkpoints.sweep_analyses",
    "tl_leadterms.checkpoints.sweep_inputs",
    "tl_leadterms.plot.tokens",
    "tl_leadterms.plot.views",
    "tl_leadterms.report.markup",
    "tl_leadterms.report.tables",
    "tl_leadterms.report.findings",
    "tl_leadterms.stats.blocks",
    "tl_leadterms.analyzers.bootstrap",
    "tl_leadterms.checks",
    "tl_leadterms.theory.table",
    "tl_leadterms.theory.leading",
    "tl_leadterms.atomic",
    "tl_leadterms.adapters.sandwich",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
