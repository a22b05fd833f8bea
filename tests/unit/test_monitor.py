"""LeadingTermMonitor in a plain loop, in tl_leadterms.train and in a transformers.Trainer."""

import math

import pytest
import torch

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
    transformers = pytest.importorskip("transformers")
    from tl_leadterms.loading.tiny import tiny_model

    tokens = _tokens(16)
    stats = corpus_stats(tokens, d_vocab=D, progress=False)
    hf = tiny_model("gpt_neox", d_vocab=D, n_layers=1, d_model=16, n_heads=2, n_ctx=16,
                    attn_implementation="eager")  # fmt: skip

    class Windows(torch.utils.data.Dataset):
        def __len__(self):
            return len(tokens)

        def __getitem__(self, i):
            return {"input_ids": tokens[i], "labels": tokens[i]}

    monitor = LeadingTermMonitor(stats, every=2)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=2, per_device_train_batch_size=8, report_to=[],
        use_cpu=True, save_strategy="no", logging_steps=1, learning_rate=1e-2,
        disable_tqdm=True,
    )  # fmt: skip
    trainer = transformers.Trainer(model=hf, args=args, train_dataset=Windows(),
                                   callbacks=[monitor.trainer_callback()])  # fmt: skip
    trainer.train()
    assert monitor.history.steps == [2] and "V·W_O.0" in monitor.history.cosines
    logged = [e for e in trainer.state.log_history if "cos_W_O" in e]
    assert len(logged) == 1 and logged[0]["step"] == 2
    assert math.isfinite(monitor.history.loss[0])
