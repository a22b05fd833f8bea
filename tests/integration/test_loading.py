"""load_model on a tiny Pythia-architecture checkpoint (saved and loaded offline, converted by
TransformerLens), on series steps, hub names offline, and on broken folders."""

import doctest
import json

import pytest
import torch
from transformers import GPTNeoXForCausalLM

from tests.conftest import unchecked
from tl_leadterms.adapters import factored, to_paper
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.loading import checkpoint as loading
from tl_leadterms.loading import configs, tiny
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.tiny import save_tiny_model

pytestmark = pytest.mark.hooked

D_VOCAB, D_MODEL, N_HEADS, N_CTX = 40, 32, 4, 16


def _close(got, want, rtol=1e-4):
    """Frobenius-relative agreement (the tiny model's maps are ~1e-5 in absolute size)."""
    return bool((got - want).norm() <= rtol * want.norm())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_model(
        "gpt_neox",
        tmp_path_factory.mktemp("tiny-neox"),
        d_vocab=D_VOCAB,
        n_layers=2,
        d_model=D_MODEL,
        n_heads=N_HEADS,
        n_ctx=N_CTX,
        seed=1,
    )


@pytest.fixture(scope="module")
def hf_logits(folder):
    hf = GPTNeoXForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    tokens = torch.randint(0, D_VOCAB, (2, N_CTX), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return tokens, hf(tokens).logits


def test_saved_config_is_pythia_like(folder):
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["GPTNeoXForCausalLM"]
    assert config["use_parallel_residual"] is True
    assert config["rope_parameters"]["partial_rotary_factor"] == 0.25


@pytest.mark.parametrize("processing", [True, False])
def test_logits_match_hugging_face(folder, hf_logits, processing):
    tokens, want = hf_logits
    model = load_model(
        folder,
        fold_ln=processing,
        center_writing_weights=processing,
        center_unembed=processing,
    )
    assert model.cfg.normalization_type == ("LNPre" if processing else "LN")
    assert model.cfg.positional_embedding_type == "rotary"
    assert model.cfg.rotary_dim == D_MODEL // N_HEADS // 4
    assert model.cfg.parallel_attn_mlp
    with torch.no_grad():
        got = model(tokens)
    assert (got.log_softmax(-1) - want.log_softmax(-1)).abs().max() < 1e-4
    if not processing:  # center_unembed shifts logits by a constant per position
        assert (got - want).abs().max() < 1e-4


def test_to_paper_on_pythia_architecture(folder):
    model = load_model(folder)
    pw = to_paper(model)
    assert (pw.architecture, pw.exact, pw.V_kind) == ("full", False, "value_output")
    assert (pw.n_layers, pw.n_heads, pw.d_vocab) == (2, N_HEADS, D_VOCAB)
    meta = pw.metadata
    assert meta["normalization_type"] == "LNPre"
    assert meta["ln_handling"] == "already folded by TransformerLens"
    assert meta["positional_embedding_type"] == "rotary"
    assert meta["original_architecture"] == "GPTNeoXForCausalLM"
    E, U = model.W_E, model.W_U
    assert _close(pw.W_O.AB, E @ U)
    a = model.blocks[1].attn
    for h in range(N_HEADS):
        want_W = E @ a.W_Q[h] @ a.W_K[h].T @ E.T / a.attn_scale
        assert _close(pw.W[1].AB[h], want_W)
        assert _close(pw.V[1].AB[h], E @ a.W_V[h] @ a.W_O[h] @ U)
    # rotary: P is the mean-field offset profile (tests/unit/test_adapter_gqa_rotary.py)
    assert pw.has_P and meta["P_kind"] == "rotary_mean_field"
    assert pw.P[0].shape == (N_HEADS, model.cfg.n_ctx)
    # the raw (unfolded) model gives the same maps once the adapter folds LN itself
    raw = to_paper(
        load_model(folder, fold_ln=False, center_writing_weights=False, center_unembed=False)
    )
    assert raw.metadata["ln_handling"] == "folded by the adapter"
    assert meta["unembed_centred"] is True and raw.metadata["unembed_centred"] is False
    assert _close(raw.W[0].AB, pw.W[0].AB)
    # center_unembed removes each row's mean over the vocabulary (softmax-invariant); otherwise
    # the maps agree
    for name in ("V", "W_O"):
        raw_map = raw.V[0].AB if name == "V" else raw.W_O.AB
        processed = pw.V[0].AB if name == "V" else pw.W_O.AB
        assert processed.mean(-1).norm() < 1e-4 * processed.norm()
        assert _close(raw_map - raw_map.mean(-1, keepdim=True), processed)
        assert not _close(raw_map, processed, rtol=1e-2)
    assert torch.allclose(factored.cosine(raw.W[1], pw.W[1]), torch.ones(N_HEADS).double())


def test_bad_folders(tmp_path, folder):
    with pytest.raises(LeadTermsError, match="no checkpoint folder at"):
        load_model(tmp_path / "missing")
    with pytest.raises(LeadTermsError, match="no checkpoint folder at"):
        load_model("./missing-model")
    with pytest.raises(LeadTermsError, match=r"has no config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "t5", "architectures": ["T5ForConditionalGeneration"]})
    )
    with pytest.raises(LeadTermsError, match=r"model_type='t5'.*cannot convert.*GPT2LMHeadModel"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(LeadTermsError, match="not valid JSON"):
        load_model(tmp_path)
    with pytest.raises(LeadTermsError, match="fold_ln must be True or False"):
        unchecked(load_model)(folder, fold_ln=1)
    with pytest.raises(LeadTermsError, match="dtype must be a floating"):
        unchecked(load_model)(folder, dtype=torch.int64)
    with pytest.raises(LeadTermsError, match="d_model=30 must be a multiple of n_heads=4"):
        save_tiny_model("gpt_neox", tmp_path / "x", d_vocab=10, d_model=30, n_heads=4)
    with pytest.raises(LeadTermsError, match="unknown family 'bert'"):
        save_tiny_model("bert", tmp_path / "x")


def _copy(folder, dest):
    dest.mkdir()
    for f in folder.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def test_broken_weights_and_config(tmp_path, folder):
    no_weights = _copy(folder, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(LeadTermsError, match=r"cannot read the weights.*missing or truncated"):
        load_model(no_weights)
    truncated = _copy(folder, tmp_path / "truncated")
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(LeadTermsError, match=r"cannot read the weights.*missing or truncated"):
        load_model(truncated)
    resized = _copy(folder, tmp_path / "resized")
    config = json.loads((resized / "config.json").read_text())
    config["hidden_size"] = 2 * D_MODEL  # the saved matrices are D_MODEL wide
    (resized / "config.json").write_text(json.dumps(config))
    with pytest.raises(LeadTermsError, match=r"weights in .*resized"):
        load_model(resized)


def test_series_checkpoint(tmp_path, folder):
    series = tmp_path / "series"
    _copy(folder, series.mkdir() or series / "step0")
    _copy(folder, series / "step4")
    (series / "step4" / "checkpoint.json").write_text(json.dumps({"step": 4}))
    model = load_model(series, checkpoint=4)
    assert model.cfg.model_name == "step4"
    with pytest.raises(LeadTermsError, match=r"no checkpoint at step 3 .* its steps: \[0, 4\]"):
        load_model(series, checkpoint=3)
    with pytest.raises(LeadTermsError, match="is one checkpoint; pass its series folder"):
        load_model(series / "step4", checkpoint=4)
    with pytest.raises(LeadTermsError, match="checkpoint must be an int step"):
        unchecked(load_model)(series, checkpoint="4")
    with pytest.raises(LeadTermsError, match=r"is a series folder; .* one of \[0, 4\]"):
        load_model(series)


def test_hub_name_fails_cleanly_offline():
    with pytest.raises(LeadTermsError, match=r"cannot load model 'pythia-14m-not-cached'.*offline"):
        load_model("pythia-14m-not-cached", device="cpu")


def test_path_named_after_a_name_routed_family(tmp_path, folder):
    """TransformerLens picks Llama/Gemma by a name containing 'llama'/'gemma': a GPT-NeoX folder
    under such a path still loads as GPT-NeoX."""
    model = load_model(_copy(folder, tmp_path / "llama-gemma-runs"))
    assert model.cfg.original_architecture == "GPTNeoXForCausalLM"


@pytest.mark.parametrize("module", [loading, tiny, configs])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_decompose_on_pythia_architecture(folder):
    """decompose runs on the Pythia-style model: per-head rows (rotary mean-field P), cosines."""
    from tests.factories import markov_tokens
    from tests.reference import dense_corpus_stats
    from tl_leadterms import corpus_stats, decompose

    tokens = markov_tokens(40, N_CTX + 1, D_VOCAB, seed=2)
    stats = corpus_stats(tokens, d_vocab=D_VOCAB, progress=False)
    ref = dense_corpus_stats(tokens, D_VOCAB)
    model = load_model(folder)
    d = decompose(model, stats, per_head=True)
    assert {r["weight"] for r in d.rows} == {"W_O", "V·W_O", "W", "P"}  # rotary: mean-field P
    assert len(d.rows) == 1 + 2 * 3 * N_HEADS
    assert d.metadata["model"]["ln_handling"] == "already folded by TransformerLens"
    W_E, W_U = model.W_E.detach().double(), model.W_U.detach().double()
    OV = (W_E @ model.W_V[1, 2].double() @ model.W_O[1, 2].double() @ W_U).detach()
    got = d.row("V", 1, 2)["cosine"]
    want = float((OV * ref["G_bar"].T).sum() / (OV.norm() * ref["G_bar"].norm()))
    assert got == pytest.approx(want, rel=1e-5, abs=1e-9)
    assert all(0.0 <= r["remainder"] <= 1.0 for r in d.rows)
    assert "L1H2" in repr(d)
