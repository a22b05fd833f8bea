"""Every analysis on a TransformerBridge equals the same analysis on the HookedTransformer of the
same weights, to 1e-5 relative, on tiny random models of the 14 families saved locally.

In one process (TL 3.9: its bridge beside its HookedTransformer): ``to_paper``'s maps on all 14
families, and all analyses on three representative ones (gpt2: learned positions; llama:
grouped-query attention; gpt_neox: partial rotary; the last two marked slow). Across majors:
when another interpreter is named (``TL_LEADTERMS_OTHER_PYTHON``, or the ``.venv-tl39`` that
``make test`` builds), it computes the numbers of the same folder under its TransformerLens
(``tests/bridge_numbers.py``) and they must equal this one's: a TL 4.x bridge against TL 3.9's
HookedTransformer. Gemma 2 is compared after centring over the output vocabulary (TL skips
``center_unembed`` on its bridge, see ``tests/bridge_numbers.py``).
"""

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from tests.bridge_numbers import ALL, D_MODEL, D_VOCAB, N_CTX, N_HEADS, N_LAYERS, inputs, numbers
from tl_leadterms import load_model
from tl_leadterms.loading.bridge import has_hooked_transformer
from tl_leadterms.loading.tiny import MODEL_FAMILIES, save_tiny_model

pytestmark = pytest.mark.models
ROOT = Path(__file__).resolve().parents[2]
KV_HEADS = {"llama": 2, "mistral": 2, "qwen2": 2, "qwen3": 2, "gemma": 1, "gemma2": 2, "phi3": 2}
FULL = ("gpt2", "llama", "gpt_neox")
RTOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    cache = {}

    def get(family):
        if family not in cache:
            cache[family] = save_tiny_model(
                family, tmp_path_factory.mktemp(family), d_vocab=D_VOCAB, n_layers=N_LAYERS,
                d_model=D_MODEL, n_heads=N_HEADS, n_kv_heads=KV_HEADS.get(family), n_ctx=N_CTX,
                seed=5,
            )  # fmt: skip
        return cache[family]

    return get


@pytest.fixture(scope="module")
def shared():
    return inputs()


def assert_equal_numbers(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name, values in want.items():
        a, b = torch.tensor(got[name]), torch.tensor(values)
        assert a.shape == b.shape, name
        scale = float(b.abs().max()) if b.numel() else 0.0
        torch.testing.assert_close(
            a, b, rtol=RTOL, atol=RTOL * scale, msg=lambda m, name=name: f"{name}: {m}"
        )


def _both(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model(folder, device="cpu", bridge=True), load_model(folder, device="cpu")


def _cases():
    """Every family's maps (fast); all analyses on gpt2 (fast), llama and gpt_neox (slow)."""
    cases = [pytest.param(f, ("to_paper",), id=f"{f}-to_paper") for f in sorted(MODEL_FAMILIES)]
    for family in FULL:
        marks = () if family == "gpt2" else (pytest.mark.slow,)
        cases.append(pytest.param(family, ALL, id=f"{family}-all", marks=marks))
    return cases


@pytest.mark.hooked
@pytest.mark.skipif(not has_hooked_transformer(), reason="needs TL 3.x's HookedTransformer")
@pytest.mark.parametrize(("family", "analyses"), _cases())
def test_a_tl39_bridge_equals_the_hooked_transformer(family, analyses, folders, shared):
    bridge, hooked = _both(folders(family))
    assert type(bridge).__name__ == "TransformerBridge"
    assert_equal_numbers(numbers(bridge, *shared, analyses), numbers(hooked, *shared, analyses))


def test_the_comparison_fails_on_a_changed_number():
    with pytest.raises(AssertionError, match="W0"):
        assert_equal_numbers({"W0": [1.0, 2.0]}, {"W0": [1.0, 2.0 + 1e-3]})


def _other_python() -> str | None:
    named = os.environ.get("TL_LEADTERMS_OTHER_PYTHON")
    if named:
        return named
    local = ROOT / ".venv-tl39" / "bin" / "python"
    return (
        str(local)
        if local.is_file() and Path(sys.executable).parent.parent != local.parent.parent
        else None
    )


# compared across majors: one subprocess per group (the slow group only when selected)
OTHER = {"fast": ("gpt2", "gemma2"), "slow": ("llama", "gpt_neox", "gptj", "opt")}


def _analyses(family: str) -> tuple[str, ...]:
    return ALL if family in FULL else ("to_paper",)


@pytest.fixture(scope="module")
def other_numbers(folders, tmp_path_factory):
    """``get(family)``: the other interpreter's numbers, one subprocess per OTHER group."""
    done: dict[str, dict] = {}

    def get(family):
        group = next(g for g, families in OTHER.items() if family in families)
        if group not in done:
            out = tmp_path_factory.mktemp("other") / "numbers.json"
            spec = {f: [str(folders(f)), list(_analyses(f))] for f in OTHER[group]}
            env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
            script = str(ROOT / "tests" / "bridge_numbers.py")
            subprocess.run([_other_python(), script, str(out), json.dumps(spec)], check=True,
                           env=env, cwd=ROOT, capture_output=True, timeout=900)  # fmt: skip
            done[group] = json.loads(out.read_text())
        return done[group][family]

    return get


@pytest.mark.skipif(
    _other_python() is None,
    reason="no other TransformerLens major to compare with: set TL_LEADTERMS_OTHER_PYTHON to "
    "its interpreter (make test builds .venv-tl39)",
)
@pytest.mark.parametrize(
    "family",
    [*OTHER["fast"], *(pytest.param(f, marks=pytest.mark.slow) for f in OTHER["slow"])],
)
def test_the_other_major_gives_the_same_numbers(family, folders, shared, other_numbers):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        here = load_model(folders(family), device="cpu")
    other = other_numbers(family)
    assert {other["class"], type(here).__name__} <= {"HookedTransformer", "TransformerBridge"}
    assert_equal_numbers(numbers(here, *shared, _analyses(family)), other["numbers"])
