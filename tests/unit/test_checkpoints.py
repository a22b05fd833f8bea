"""The checkpoint-series helpers: steps, folder discovery, argument checks, docstring example."""

import doctest
import json

import pytest

from tests.conftest import unchecked
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.loading import series as checkpoints
from tl_leadterms.loading.series import (
    checkpoint_step,
    load_series,
    load_windows,
    pythia_steps,
    train_neox_series,
)


def test_pythia_steps():
    assert pythia_steps(1) == [0, 1]
    assert pythia_steps(16) == [0, 1, 2, 4, 8, 16]
    assert pythia_steps(20) == [0, 1, 2, 4, 8, 16, 20]
    with pytest.raises(LeadTermsError, match="steps must be a positive int"):
        unchecked(pythia_steps)(0)


def test_checkpoint_step_and_load_series(tmp_path):
    for name, info in (("step4", None), ("late", {"step": 9}), ("step12", {"step": 12})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        if info:
            (tmp_path / name / "checkpoint.json").write_text(json.dumps(info))
    (tmp_path / "notes").mkdir()  # no config.json: not a checkpoint
    (tmp_path / ".step0.tmp").mkdir()  # a half-written folder is skipped
    (tmp_path / ".step0.tmp" / "config.json").write_text("{}")
    assert checkpoint_step(tmp_path / "late") == 9
    assert [(label, step) for label, step, _ in load_series(tmp_path)] == [
        ("step4", 4),
        ("late", 9),
        ("step12", 12),
    ]
    with pytest.raises(LeadTermsError, match="no checkpoint folder"):
        load_series(tmp_path / "notes")
    with pytest.raises(LeadTermsError, match="not a folder"):
        load_series(tmp_path / "missing")
    with pytest.raises(LeadTermsError, match=r"windows\.pt"):
        load_windows(tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"steps": 0}, "steps must be a positive int"),
        ({"checkpoints": [0, 5, 99], "steps": 8}, r"checkpoints must be ints in \[0, steps=8\]"),
        ({"lr": -1.0}, "lr must be a positive number"),
        ({"init_scale": 0}, "init_scale must be a positive number"),
        ({"optimizer": "lion"}, "optimizer must be one of"),
        ({"warmup": -2}, "warmup must be an int >= 0"),
        ({"stories": "one story"}, "stories must be a list of texts"),
        ({"d_model": 2.5}, "d_model must be a positive int"),
        ({"family": "t5"}, "unknown family 't5'"),
        ({"n_heads": (4, 3)}, r"n_heads must be an int or a \(query heads, key/value heads\)"),
        ({"n_heads": (4, 2, 1)}, "n_heads must be an int or a"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(LeadTermsError, match=match):
        unchecked(train_neox_series)(tmp_path, progress=False, **kwargs)
    assert not any(tmp_path.iterdir())  # nothing is written before the arguments are checked


def test_docstring_examples():
    assert doctest.testmod(checkpoints, optionflags=doctest.ELLIPSIS).failed == 0
