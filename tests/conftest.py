"""Test-wide settings: offline hub, repository root importable (for tests.reference)."""

import functools
import os
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def unchecked(fn):
    """``fn`` called without the test-only jaxtyping/beartype checks.

    The test run type-checks every tl_leadterms function; users run without it. Tests of the
    library's own error messages for wrongly typed input call the function as users do: with
    every check of the call switched off (the library's own wrappers, such as the shorthand
    keywords', still run).
    """

    @functools.wraps(fn)
    def call(*args, **kwargs):
        from jaxtyping import config

        before = config.jaxtyping_disable
        config.update("jaxtyping_disable", True)
        try:
            return fn(*args, **kwargs)
        finally:
            config.update("jaxtyping_disable", before)

    return call


def _has_hooked_transformer() -> bool:
    try:
        from transformer_lens import HookedTransformer  # noqa: F401
    except ImportError:  # TransformerLens 4 removed it
        return False
    return True


HAS_HOOKED_TRANSFORMER = _has_hooked_transformer()


def pytest_collection_modifyitems(config, items):
    """Skip ``hooked`` tests (they build or load a HookedTransformer) under TransformerLens 4."""
    if HAS_HOOKED_TRANSFORMER:
        return
    from importlib.metadata import version

    skip = pytest.mark.skip(
        reason=f"needs HookedTransformer (TransformerLens 3.x); this is TransformerLens "
        f"{version('transformer-lens')}: "
        "run it in the TL 3.9 environment (make test-tl39)"
    )
    for item in items:
        if "hooked" in item.keywords:
            item.add_marker(skip)
