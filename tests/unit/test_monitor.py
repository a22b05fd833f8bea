"""LeadingTermMonitor in a plain loop, in tl_leadterms.train and in a transformers.Trainer."""

import math

import pytest
import torch

from tests.factories import train_with_trainer
from tl_leadterms import corpus_stats, paper_model, step_bound, train
from tl_leadterms.analyses.decompose import leading_cosines
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.sweeps.monitor import LeadingTermMonitor

D, T = 12, 8


def _tokens(n=32, seed=0):
    return torch.randint(0, D, (n, T + 1), generator=torch.Generator().manual_seed(seed))


def test_train_callback_records_and_flags_with_the_step_bound():
    tokens = _tokens()
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    monitor = LeadingTermMonitor(stats, every=2, lr=0.5, analyses=["cosines", "output"],
                                 tokens=tokens[:6, :-1], min_cosine=0.99999999)  # fmt: skip
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=2)
    train(model, tokens, lr=0.5, steps=6, progress=False, callback=monitor.train_callback)
    h = monitor.history
    assert h.steps == [2, 4, 6] and monitor.calls == 3 and monitor.seconds > 0
    assert h.cosines["W_O"][-1] == pytest.approx(leading_cosines(model, stats)["W_O"])
    assert len(h.scores["output_explained"]) == 3 and h.scores["output_kl"][0] >= 0
    assert "output_explained" in h.to_pandas().columns
    flag = monitor.first_flag("cosine")
    assert flag is not None and flag["value"] < 0.99999999
    assert flag["step_bound"] == pytest.approx(step_bound(lr=0.5, n_layers=2, n_ctx=T))
    assert monitor.first_flag("output_explained") is None  # exact coefficients: still ~1


def test_plain_loop_scores_only_every_steps():
    tokens = _tokens()
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    monitor = LeadingTermMonitor(stats, every=3)
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    for step in range(1, 7):
        optimiser.zero_grad()
        logits = model(tokens[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimiser.step()
        result = monitor(model, step, loss.item())
        assert (result is None) == (step % 3 != 0)
    assert monitor.history.steps == [3, 6] and math.isnan(monitor.step_bound)
    with pytest.raises(LeadTermsError, match="tokens="):
        LeadingTermMonitor(stats, analyses="output")
    with pytest.raises(LeadTermsError, match="analysis"):
        LeadingTermMonitor(stats, analyses=["loss"])


def test_trainer_callback_with_a_real_trainer(tmp_path):
    pytest.importorskip("transformers")
    from tl_leadterms.loading.tiny import tiny_model

    tokens = _tokens(16)
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    hf = tiny_model("gpt_neox", d_vocab=D, n_layers=1, d_model=16, n_heads=2, n_ctx=16,
                    attn_implementation="eager")  # fmt: skip
    monitor = LeadingTermMonitor(stats, every=2)
    trainer = train_with_trainer(hf, tokens, tmp_path, [monitor.trainer_callback()])
    assert monitor.history.steps == [2] and set(monitor.history.cosines) >= {"V.0", "W.0"}
    logged = [e for e in trainer.state.log_history if "cos_W_O" in e]
    assert len(logged) == 1 and logged[0]["step"] == 2
    assert math.isfinite(monitor.history.loss[0])


def _gpt2_with_dropout():
    from tl_leadterms.loading.tiny import tiny_model

    hf = tiny_model("gpt2", d_vocab=D, n_layers=1, d_model=16, n_heads=2, n_ctx=16,
                    attn_implementation="eager")  # fmt: skip
    assert hf.config.resid_pdrop == hf.config.attn_pdrop == 0.1  # GPT-2's dropout
    return hf


def test_each_score_carries_the_loss_the_trainer_logged_at_its_step(tmp_path):
    pytest.importorskip("transformers")
    tokens = _tokens(16)
    monitor = LeadingTermMonitor(corpus_stats(tokens, d_vocab=D, progress=False), every=2)
    trainer = train_with_trainer(_gpt2_with_dropout(), tokens, tmp_path,
                                 [monitor.trainer_callback()], max_steps=4)  # fmt: skip
    logged = {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}
    assert monitor.history.steps == [2, 4]
    assert monitor.history.loss == [logged[2], logged[4]]


def test_the_monitor_leaves_a_trainer_run_bit_for_bit_unchanged(tmp_path):
    pytest.importorskip("transformers")
    tokens = _tokens(16)
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    monitor = LeadingTermMonitor(stats, every=1, analyses=["cosines", "output"],
                                 tokens=tokens[:4, :-1])  # fmt: skip
    plain, watched = _gpt2_with_dropout(), _gpt2_with_dropout()
    train_with_trainer(plain, tokens, tmp_path, max_steps=3)
    train_with_trainer(watched, tokens, tmp_path, [monitor.trainer_callback()], max_steps=3)
    assert monitor.history.steps == [1, 2, 3]
    after, changed = plain.state_dict(), watched.state_dict()
    assert all(torch.equal(after[name], changed[name]) for name in after)
    assert not torch.equal(
        after["transformer.wte.weight"], _gpt2_with_dropout().transformer.wte.weight
    )


def test_a_monitor_watches_one_run():
    tokens = _tokens()
    monitor = LeadingTermMonitor(corpus_stats(tokens, d_vocab=D, progress=False), every=2)
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    train(model, tokens, lr=0.5, steps=6, progress=False, callback=monitor.train_callback)
    with pytest.raises(LeadTermsError) as err:
        train(model, tokens, lr=0.5, steps=6, progress=False, callback=monitor.train_callback)
    assert str(err.value) == (
        "this LeadingTermMonitor has recorded step 6, so step 1 is another run: give each run "
        "a new LeadingTermMonitor"
    )
    assert monitor.history.steps == [2, 4, 6]


@pytest.mark.parametrize("analysis", ["cosines", "output", "covariance"])
def test_every_monitor_stops_the_run_at_a_nan_weight_naming_it_and_the_step(analysis):
    tokens = _tokens()
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    monitor = LeadingTermMonitor(stats, every=2, lr=0.5, analyses=analysis, tokens=tokens[:4, :-1])
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    monitor(model, 2, 1.0)
    with torch.no_grad():
        model.blocks[0].attn.W_V[0, int(tokens[0, 0]), 3] = math.nan
    with pytest.raises(LeadTermsError) as err:
        monitor(model, 4, 1.0)
    assert str(err.value) == (
        "LeadingTermMonitor at step 4: the weight blocks.0.attn.W_V holds NaN or inf values: no "
        "analysis reads such a model (load a healthy checkpoint or fix training)"
    )
    assert monitor.history.steps == [2]
