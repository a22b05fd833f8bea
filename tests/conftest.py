"""Test-wide settings: offline hub, repository root importable (for tests.reference)."""

import inspect
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TQDM_DISABLE", "1")

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def unchecked(fn):
    """``fn`` without the test-only jaxtyping/beartype wrapper.

    The test run type-checks every tl_leadterms function; users run without it. Tests of the
    library's own error messages for wrongly typed input call the function as users do.
    """
    return inspect.unwrap(fn)
