"""The paper model, under whichever TransformerLens is installed, against outputs saved from the
HookedTransformer subclass it replaced (tests/data/paper_model_tl39.pt, written under TL 3.9 by
``python -m tests.unit.test_paper_model_legacy``)."""

from pathlib import Path

import pytest
import torch

from tl_leadterms import paper_model, train

SAVED = Path(__file__).resolve().parents[1] / "data" / "paper_model_tl39.pt"
TRAIN_SETTINGS = dict(lr=0.5, steps=5, batch_size=4, seed=3, progress=False)


@pytest.fixture(scope="module")
def saved():
    return torch.load(SAVED, weights_only=True)


def test_forward_loss_and_cache_equal_the_saved_ones(saved):
    model = paper_model(d_vocab=7, n_ctx=6, n_layers=2, dtype=torch.float64)
    model.load_state_dict(saved["state_dict"], strict=True)
    tokens = saved["tokens"]
    torch.testing.assert_close(model(tokens), saved["logits"], rtol=0, atol=1e-12)
    per_token = model(tokens, return_type="loss", loss_per_token=True)
    torch.testing.assert_close(per_token, saved["loss_per_token"], rtol=0, atol=1e-12)
    _, cache = model.run_with_cache(tokens)
    assert sorted(cache.keys()) == sorted(saved["cache"])
    for name, value in saved["cache"].items():
        torch.testing.assert_close(cache[name], value, rtol=0, atol=1e-12)


def test_training_equals_the_saved_history(saved):
    model = paper_model(d_vocab=7, n_ctx=6, n_layers=2, dtype=torch.float64)
    history = train(model, saved["train_tokens"], **TRAIN_SETTINGS)
    loss = torch.tensor(history.loss, dtype=torch.float64)
    torch.testing.assert_close(loss, saved["train_loss"], rtol=0, atol=1e-12)
    for name, value in saved["trained"].items():
        torch.testing.assert_close(model.get_parameter(name), value, rtol=0, atol=1e-12)
