"""Models the adapters cannot read exactly are refused in one clear error, never misread.

TransformerLens 3.9 ships its own ``TransformerBridge``; its ``cfg.attn_scale`` is a -1.0
placeholder, so reading it as a HookedTransformer would flip the sign of every ``W`` and ``P``
map. The model view reads a bridge in compatibility mode where it keeps the real scale; these
tests build real bridges with TransformerLens' own ``boot_transformers`` on a tiny random GPT-2
saved locally, and check what is still refused.
"""

import warnings
from types import SimpleNamespace

import pytest
import torch

from tl_leadterms import (
    LeadTermsError,
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    head_atlas,
    to_paper,
)
from tl_leadterms.adapters.view.bridge import hf_score_divisor
from tl_leadterms.analyses.ablation import evaluate_loss
from tl_leadterms.analyses.attention import plot_attention
from tl_leadterms.analyses.covariance import token_maps
from tl_leadterms.loading.bridge import placeholder_tokenizer
from tl_leadterms.loading.tiny import save_tiny_model

bridge_module = pytest.importorskip("transformer_lens.model_bridge")

D_VOCAB, N_CTX = 40, 16


def _boot(folder, compatible: bool):
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = AutoModelForCausalLM.from_pretrained(folder)
        model = bridge_module.TransformerBridge.boot_transformers(
            str(folder), hf_model=hf, device="cpu", tokenizer=placeholder_tokenizer(D_VOCAB)
        )
        if compatible:
            model.enable_compatibility_mode(disable_warnings=True)
    return model


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_tiny_model(
        "gpt2", tmp_path_factory.mktemp("gpt2"), d_vocab=D_VOCAB, n_layers=1, n_ctx=N_CTX
    )


@pytest.fixture(scope="module")
def bridge(folder):
    return _boot(folder, compatible=True)


@pytest.fixture(scope="module")
def raw_bridge(folder):
    return _boot(folder, compatible=False)


@pytest.fixture(scope="module")
def stats():
    g = torch.Generator().manual_seed(0)
    return corpus_stats(torch.randint(0, D_VOCAB, (6, 9), generator=g), d_vocab=D_VOCAB)


def test_the_bridge_has_the_placeholder_scale_and_the_maps_use_the_real_one(bridge):
    # the reason a bridge must not be read as a HookedTransformer, as TransformerLens stores it
    assert bridge.cfg.attn_scale <= 0
    d_head = bridge.cfg.d_model // bridge.cfg.n_heads
    assert to_paper(bridge).metadata["attn_scale"] == pytest.approx([d_head**0.5])


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda m, s, t: to_paper(m), id="to_paper"),
        pytest.param(lambda m, s, t: decompose(m, s, per_head=True), id="decompose"),
        pytest.param(lambda m, s, t: head_atlas(m, s), id="head_atlas"),
        pytest.param(lambda m, s, t: covariance_similarity(m, s, progress=False), id="covariance"),
        pytest.param(lambda m, s, t: token_maps(m, [1, 2], progress=False), id="token_maps"),
        pytest.param(lambda m, s, t: attention_agreement(m, s, t), id="attention_agreement"),
        pytest.param(lambda m, s, t: plot_attention(m, s, tokens=t), id="plot_attention"),
        pytest.param(lambda m, s, t: evaluate_loss(m, t), id="evaluate_loss"),
    ],
)
def test_every_entry_point_refuses_a_bridge_outside_compatibility_mode(raw_bridge, stats, call):
    tokens = torch.randint(0, D_VOCAB, (2, 8))
    with pytest.raises(LeadTermsError, match="enable_compatibility_mode"):
        call(raw_bridge, stats, tokens)


def test_an_attention_without_a_readable_scale_is_refused_by_architecture():
    with pytest.raises(LeadTermsError, match="FooForCausalLM bridge: its attention"):
        hf_score_divisor(SimpleNamespace(scaling=None), "FooForCausalLM")
    assert hf_score_divisor(SimpleNamespace(scaling=0.25), "FooForCausalLM") == 4.0


@pytest.mark.hooked
def test_a_non_positive_attn_scale_is_refused():
    from tests.factories import random_attn_only

    model = random_attn_only(D_VOCAB, N_CTX, seed=0)
    to_paper(model)  # readable as built
    model.cfg.attn_scale = -1.0
    with pytest.raises(LeadTermsError, match=r"attn_scale=-1\.0"):
        to_paper(model)
    model.cfg.attn_scale = 0.0
    with pytest.raises(LeadTermsError, match=r"attn_scale=0\.0"):
        to_paper(model)


def test_an_unknown_class_is_refused(bridge):
    class Lookalike(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.cfg, self.blocks = model.cfg, model.blocks

    with pytest.raises(LeadTermsError, match="got Lookalike"):
        to_paper(Lookalike(bridge))
