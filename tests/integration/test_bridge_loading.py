"""load_model under either TransformerLens major: the bridge path, its hub arguments (plumbing
checked offline with a stand-in for TransformerLens' loader), and sweep fingerprints that do
not depend on which model class read a folder."""

import warnings

import pytest
import torch

from tests.conftest import unchecked
from tl_leadterms import LeadTermsError, corpus_stats, load_model, sweep
from tl_leadterms.loading.bridge import has_hooked_transformer
from tl_leadterms.loading.tiny import save_tiny_model

bridge_module = pytest.importorskip("transformer_lens.model_bridge")
pytestmark = pytest.mark.models


class _Asked(Exception):
    """Raised by the stand-in loaders once they have recorded their arguments."""


def _recording(calls):
    def boot(*args, **kwargs):
        calls.append((args, kwargs))
        raise _Asked

    return boot


def test_a_hub_name_boots_a_bridge_with_the_checkpoint(monkeypatch):
    calls = []
    monkeypatch.setattr(bridge_module.TransformerBridge, "boot_transformers", _recording(calls))
    with pytest.raises(LeadTermsError, match=r"TransformerBridge\.boot_transformers"):
        load_model("pythia-70m", checkpoint=512, device="cpu", bridge=True)
    with pytest.raises(LeadTermsError, match=r"TransformerBridge\.boot_transformers"):
        load_model("pythia-70m", checkpoint_index=3, device="cpu", bridge=True)
    (args, first), (_, second) = calls
    assert args == ("pythia-70m",)
    assert first["checkpoint_value"] == 512 and "checkpoint_index" not in first
    assert second["checkpoint_index"] == 3 and "checkpoint_value" not in second
    assert first["hf_model"] is None and first["device"] == "cpu"
    assert first["dtype"] == torch.float32


@pytest.mark.hooked
@pytest.mark.skipif(not has_hooked_transformer(), reason="needs TL 3.x's HookedTransformer")
def test_a_hub_name_loads_a_hooked_transformer_with_the_checkpoint(monkeypatch):
    from transformer_lens import HookedTransformer

    calls = []
    monkeypatch.setattr(HookedTransformer, "from_pretrained", _recording(calls))
    with pytest.raises(LeadTermsError, match="from_pretrained"):
        load_model("pythia-70m", checkpoint_index=7, device="cpu", bridge=False)
    ((args, kwargs),) = calls
    assert args == ("pythia-70m",) and kwargs["checkpoint_index"] == 7
    assert kwargs["fold_ln"] is True and kwargs["center_unembed"] is True


def test_hub_checkpoint_arguments_are_checked():
    with pytest.raises(LeadTermsError, match="not both"):
        load_model("pythia-70m", checkpoint=1, checkpoint_index=1, bridge=True)
    with pytest.raises(LeadTermsError, match="checkpoint_index must be an int"):
        unchecked(load_model)("pythia-70m", checkpoint_index="3", bridge=True)
    with pytest.raises(LeadTermsError, match="bridge must be True or False"):
        unchecked(load_model)("pythia-70m", bridge="yes")


@pytest.mark.skipif(has_hooked_transformer(), reason="TL 3.x has HookedTransformer")
def test_tl4_refuses_a_hooked_transformer_by_name():
    with pytest.raises(LeadTermsError, match="TransformerLens 4 removed"):
        load_model("pythia-70m", bridge=False)


def test_a_folder_loads_as_a_bridge_in_compatibility_mode(tmp_path):
    folder = save_tiny_model("llama", tmp_path / "m", d_vocab=30, n_kv_heads=2, n_ctx=8)
    model = load_model(folder, device="cpu", bridge=True, center_unembed=False)
    assert type(model).__name__ == "TransformerBridge" and model.compatibility_mode
    record = model.tl_leadterms_loading
    assert record["model_class"] == "TransformerBridge" and record["compatibility_mode"]
    assert record["fold_ln"] is True and record["center_unembed"] is False
    assert model.cfg.model_name == "m"
    assert model(torch.tensor([[1, 2, 3]])).shape == (1, 3, 30)


@pytest.mark.hooked
@pytest.mark.skipif(not has_hooked_transformer(), reason="needs TL 3.x's HookedTransformer")
def test_a_sweep_resumes_across_model_classes(tmp_path):
    """The same folder read as a HookedTransformer, then as a bridge: same fingerprint, so the
    stored rows are reused (and they equal the bridge's own to 1e-5)."""
    folder = save_tiny_model("gpt2", tmp_path / "step8", d_vocab=30, n_layers=1, n_ctx=8)
    tokens = torch.randint(0, 30, (12, 8), generator=torch.Generator().manual_seed(0))
    stats = corpus_stats(tokens, d_vocab=30, progress=False)
    results = tmp_path / "results.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = sweep([folder], stats, results=results, progress=False,
                      loader_kwargs={"bridge": False})  # fmt: skip
        again = sweep([folder], stats, results=results, progress=False,
                      loader_kwargs={"bridge": True})  # fmt: skip
        fresh = sweep([folder], stats, progress=False, loader_kwargs={"bridge": True})
    assert set(first.metadata["status"].values()) == {"computed"}
    assert set(again.metadata["status"].values()) == {"loaded"}
    want = torch.tensor([r["value"] for r in first.rows])
    torch.testing.assert_close(torch.tensor([r["value"] for r in fresh.rows]), want,
                               rtol=1e-5, atol=1e-5 * float(want.abs().max()))  # fmt: skip
