"""The per-family facts of a TransformerBridge that the model view reads, one test each.

Tiny random models of each family are saved locally and loaded as bridges in compatibility mode
(TL 3.9's bridge here, 4.x's under TransformerLens 4); expected values come from the Hugging Face
model or are written out plainly, never from the view itself.
"""

import math
import warnings

import pytest
import torch

from tl_leadterms import load_model
from tl_leadterms.adapters.view import model_view
from tl_leadterms.loading.tiny import save_tiny_model

pytest.importorskip("transformer_lens.model_bridge")
pytestmark = pytest.mark.models
D_VOCAB, D_MODEL, N_HEADS, N_CTX = 40, 32, 4, 16
D_HEAD = D_MODEL // N_HEADS
KV = {"llama": 2, "gemma": 1, "gemma2": 2, "qwen3": 2}


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    cache = {}

    def get(family, **processing):
        key = (family, tuple(sorted(processing.items())))
        if key not in cache:
            folder = save_tiny_model(
                family, tmp_path_factory.mktemp(family), d_vocab=D_VOCAB, n_layers=1,
                d_model=D_MODEL, n_heads=N_HEADS, n_kv_heads=KV.get(family), n_ctx=N_CTX,
            )  # fmt: skip
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cache[key] = load_model(folder, device="cpu", bridge=True, **processing)
        return cache[key]

    return get


def test_the_score_divisor_is_read_from_the_hugging_face_attention(bridge):
    gpt2 = bridge("gpt2")
    assert gpt2.cfg.attn_scale == -1.0  # the bridge's placeholder
    assert model_view(gpt2, caller="t").score_divisor(0) == pytest.approx(math.sqrt(D_HEAD))
    assert model_view(bridge("bloom"), caller="t").score_divisor(0) == pytest.approx(
        math.sqrt(D_HEAD)
    )  # Bloom keeps 1/√d_head as inv_norm_factor
    assert model_view(bridge("gpt_neo"), caller="t").score_divisor(0) == 1.0  # no scaling


def test_grouped_keys_and_values_stay_grouped(bridge):
    view = model_view(bridge("llama"), caller="t")
    assert view.weight(0, "W_K").shape == (2, D_MODEL, D_HEAD)
    assert view.weight(0, "W_Q").shape == (N_HEADS, D_MODEL, D_HEAD)
    assert view.kv_group == [0, 0, 1, 1]


def test_absent_biases_read_as_zeros(bridge):
    model = bridge("llama")
    assert model.blocks[0].attn.b_Q is None
    view = model_view(model, caller="t")
    assert torch.equal(view.bias(0, "b_Q"), torch.zeros(N_HEADS, D_HEAD))
    assert torch.equal(view.bias(0, "b_K"), torch.zeros(2, D_HEAD))


def _neox_tables(rotary_dim: int, base: float, n: int):
    inv = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(n, dtype=torch.float64)[:, None] * inv
    return angles.sin(), angles.cos()


def test_rotary_tables_come_from_the_rotary_module(bridge):
    sin, cos, adjacent = model_view(bridge("gpt_neox"), caller="t").rotary_tables(0, N_CTX)
    rd = D_HEAD // 4  # Pythia: rotary on a quarter of each head
    want_sin, want_cos = _neox_tables(rd, 10000.0, N_CTX)
    assert not adjacent
    torch.testing.assert_close(sin, torch.cat([want_sin, want_sin], -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(cos, torch.cat([want_cos, want_cos], -1), atol=1e-6, rtol=0)


def test_gpt_j_rotates_adjacent_pairs_from_its_own_table(bridge):
    model = bridge("gptj")
    assert getattr(model, "rotary_emb", None) is None  # the bridge wraps no rotary module
    sin, cos, adjacent = model_view(model, caller="t").rotary_tables(0, N_CTX)
    want_sin, want_cos = _neox_tables(D_HEAD // 2, 10000.0, N_CTX)
    assert adjacent
    torch.testing.assert_close(sin, want_sin.repeat_interleave(2, -1), atol=1e-6, rtol=0)
    torch.testing.assert_close(cos, want_cos.repeat_interleave(2, -1), atol=1e-6, rtol=0)


def test_folded_norms_keep_their_type_name_and_read_as_folded(bridge):
    gpt2, gemma = bridge("gpt2"), bridge("gemma")
    assert (gpt2.cfg.normalization_type, gemma.cfg.normalization_type) == ("LN", "RMS")
    assert model_view(gpt2, caller="t").normalization == "LNPre"
    assert model_view(gemma, caller="t").normalization == "RMSPre"  # gains 1 + w with w = 0


def test_unfolded_norms_give_their_gains(bridge):
    model = bridge("gpt2", fold_ln=False)
    view = model_view(model, caller="t")
    hf_ln = model.original_model.transformer.h[0].ln_1
    assert view.normalization == "LN"
    torch.testing.assert_close(view.norm_gain(0), hf_ln.weight.detach())
    torch.testing.assert_close(view.norm_bias(0), hf_ln.bias.detach())


def test_opt_positions_drop_the_two_offset_rows(bridge):
    model = bridge("opt")
    hf_table = model.original_model.model.decoder.embed_positions.weight.detach()
    assert hf_table.shape[0] == N_CTX + 2
    torch.testing.assert_close(model_view(model, caller="t").W_pos(), hf_table[2:])


def test_gemma_embedding_scale_is_applied(bridge):
    model = bridge("gemma")
    raw = model.original_model.model.embed_tokens.weight.detach()
    torch.testing.assert_close(model_view(model, caller="t").W_E(), raw * math.sqrt(D_MODEL))


def test_parameters_are_named_as_transformer_lens_names_them(bridge):
    model = bridge("gpt2")
    names = [name for name, _ in model_view(model, caller="t").named_weights()]
    assert "blocks.0.attn.W_Q" in names and "unembed.W_U" in names
    assert not any(name.startswith("blocks.") for name, _ in model.named_parameters())


def test_hooks_are_called_under_the_name_they_were_registered_with(bridge):
    model = bridge("gpt2")
    seen = []
    model.run_with_hooks(
        torch.tensor([[1, 2]]), return_type=None,
        fwd_hooks=[("blocks.0.hook_resid_pre", lambda act, hook: seen.append(hook.name))],
    )  # fmt: skip
    assert seen == ["blocks.0.hook_in"]  # the canonical name, not the alias registered
    view = model_view(model, caller="t")
    hits = []
    view.run_with_hooks(torch.tensor([[1, 2]]), {"blocks.0.hook_resid_pre": hits.append})
    assert len(hits) == 1 and hits[0].shape == (1, 2, D_MODEL)


def test_unmodelled_computations_are_read_from_the_hugging_face_modules(bridge):
    assert "use_qk_norm" in " ".join(model_view(bridge("qwen3"), caller="t").unmodelled())
    gemma2 = " ".join(model_view(bridge("gemma2"), caller="t").unmodelled())
    assert "attn_scores_soft_cap=50.0" in gemma2 and "use_normalization_before_and_after" in gemma2
    assert "post_embedding_ln" in " ".join(model_view(bridge("bloom"), caller="t").unmodelled())
    assert model_view(bridge("gpt2"), caller="t").unmodelled() == []


def test_gemma2_centring_is_recorded_as_skipped(bridge):
    loading = bridge("gemma2").tl_leadterms_loading
    assert (
        loading["center_unembed"] is False and "soft-capping" in loading["center_unembed_skipped"]
    )
    assert bridge("gpt2").tl_leadterms_loading["center_unembed"] is True
