"""Issue 44, models, windows and the monitor: NaN weights refused by every analysis in one line,
bfloat16 models read, unsigned windows converted, one tokenizer verdict for a model folder
without tokenizer files (docs/guides/reliability.md, "Models, windows and the monitor")."""

import math

import numpy as np
import pytest
import torch

from tl_leadterms import (
    LeadingTermMonitor,
    LeadTermsError,
    ablate,
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    explore,
    head_atlas,
    load_model,
    output_agreement,
    paper_model,
    predict_attention,
)
from tl_leadterms.analyses.ablation import evaluate_loss
from tl_leadterms.loading.tiny import save_tiny_model, tiny_model

D, T = 20, 8
RUN = (0.5, 4)
NAN_LINE = (
    "the weight {} holds NaN or inf values: no analysis reads such a model (load a healthy "
    "checkpoint or fix training)"
)


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, D, (32, T + 1), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def stats(tokens):
    return corpus_stats(tokens, d_vocab=D, progress=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny GPT-2 whose attention is far from uniform (its q, k, v weights ×30), so that
    bfloat16 rounding does not reorder its patterns."""
    hf = tiny_model("gpt2", d_vocab=D, n_layers=1, d_model=16, n_heads=2, n_ctx=16)
    with torch.no_grad():
        hf.transformer.h[0].attn.c_attn.weight.mul_(30)
    path = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(path)
    return path


def _message(call) -> str:
    with pytest.raises(LeadTermsError) as err:
        call()
    return str(err.value)


# -- NaN weights: one refusal, one line, everywhere ---------------------------------------------
def test_a_nan_embedding_row_is_refused_by_every_analysis_in_one_line(folder, stats, tokens):
    model = load_model(folder)
    with torch.no_grad():
        model.W_E[int(tokens[0, 0])] = math.nan  # a row the inputs use
    x = tokens[:4, :T]
    calls = {
        "decompose": lambda: decompose(model, stats, schedule=RUN, progress=False),
        "covariance_similarity": lambda: covariance_similarity(model, stats, progress=False),
        "output_agreement": lambda: output_agreement(model, stats, x, schedule=RUN),
        "attention_agreement": lambda: attention_agreement(model, stats, x, progress=False),
        "head_atlas": lambda: head_atlas(model, stats, x, null=None),
        "explore": lambda: explore(model, stats, text=[1, 2, 3], null=None, progress=False),
        "evaluate_loss": lambda: evaluate_loss(model, tokens[:4]),
    }
    lines = {name: _message(call) for name, call in calls.items()}
    assert lines == dict.fromkeys(calls, NAN_LINE.format("embed.W_E"))


def test_a_nan_paper_weight_is_refused_by_ablate(stats, tokens):
    model = paper_model(d_vocab=D, n_ctx=T, n_layers=1)
    with torch.no_grad():
        model.unembed.W_U[0, 0] = math.inf
    line = _message(lambda: ablate(model, stats, tokens[:4], progress=False))
    assert line == NAN_LINE.format("unembed.W_U")


# -- bfloat16 models: read as float32 where numpy ranks -----------------------------------------
def test_a_bfloat16_model_scores_close_to_its_float32_self(folder, stats, tokens):
    x = tokens[:4, :T]
    full, half = load_model(folder), load_model(folder, dtype=torch.bfloat16)
    for call, columns in [
        (lambda m: attention_agreement(m, stats, x, progress=False), ["rank_correlation"]),
        (lambda m: head_atlas(m, stats, x, null=None), ["cosine", "rank_correlation"]),
    ]:
        want, got = call(full).to_pandas()[columns], call(half).to_pandas()[columns]
        assert got.to_numpy() == pytest.approx(want.to_numpy(), abs=0.01)
    text = [1, 2, 3, 4, 5, 6, 7]
    pages = [explore(m, stats, text=text, null=None, progress=False) for m in (full, half)]
    keys = ("cosine", "value_cosine", "rank_correlation")
    want, got = ([p.data["heads"][h]["scores"][k] for h in ("L0H0", "L0H1") for k in keys]
                 for p in pages)  # fmt: skip
    assert got == pytest.approx(want, abs=0.01)


# -- unsigned windows: converted after their range is checked ------------------------------------
UNSIGNED = [np.uint16, np.uint32, np.uint64, torch.uint16, torch.uint32, torch.uint64]


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_unsigned_windows_score_as_int64_ones(folder, stats, tokens, dtype):
    model = load_model(folder)
    windows = tokens[:4]

    def as_(t):
        return t.numpy().astype(dtype) if isinstance(dtype, type) else t.to(dtype)

    x, u = windows[:, :T], as_(windows[:, :T])
    assert output_agreement(model, stats, u, schedule=RUN).explained == (
        output_agreement(model, stats, x, schedule=RUN).explained
    )
    assert attention_agreement(model, stats, u, progress=False).rows == (
        attention_agreement(model, stats, x, progress=False).rows
    )
    assert torch.equal(predict_attention(stats, u, schedule=RUN),
                       predict_attention(stats, x, schedule=RUN))  # fmt: skip
    assert evaluate_loss(model, as_(windows)) == evaluate_loss(model, windows)
    scores = [LeadingTermMonitor(stats, analyses="output", tokens=t, lr=0.5)(model, 8)
              for t in (u, x)]  # fmt: skip
    assert scores[0] == scores[1]
    too_big = as_(torch.tensor([[1, 2, D]]))
    assert _message(lambda: predict_attention(stats, too_big, schedule=RUN)) == (
        f"tokens: token ids must lie in [0, {D}) (d_vocab); found {D}"
    )


def test_explore_refuses_ids_beyond_the_vocabulary_in_one_line(folder, stats):
    model = load_model(folder)
    line = _message(lambda: explore(model, stats, text=[1, 2, 200], null=None, progress=False))
    assert line == f"text: token ids must lie in [0, {D}) (d_vocab); found 200"


# -- one model, one tokenizer verdict ------------------------------------------------------------
def test_a_folder_without_tokenizer_files_gets_one_verdict_everywhere(tmp_path):
    from tl_leadterms import make_windows
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(40, seed=0)
    tokenizer = train_word_tokenizer(stories, 60)
    d_vocab = len(tokenizer)
    windows = make_windows(stories, n_ctx=T, tokenizer=tokenizer)
    stats = corpus_stats(windows, d_vocab=d_vocab, tokenizer=tokenizer, progress=False)
    assert stats.metadata["tokenizer_vocab_hash"]
    folder = save_tiny_model("gpt2", tmp_path / "m", d_vocab=d_vocab, n_layers=1, d_model=16,
                             n_heads=2, n_ctx=16)  # fmt: skip
    assert not list(folder.glob("tokenizer*"))
    model = load_model(folder)  # a bridge with load_model's stand-in tokenizer
    x = windows[:4, :T]
    decompose(model, stats, schedule=RUN, progress=False)
    covariance_similarity(model, stats, progress=False)
    assert output_agreement(model, stats, x, schedule=RUN).kl > 0
    hf = tiny_model("gpt2", d_vocab=d_vocab, n_layers=1, d_model=16, n_heads=2, n_ctx=16)
    monitor = LeadingTermMonitor(stats, every=1, analyses="output", tokens=x, lr=0.5)
    assert set(monitor(hf, 1)) == {"output_kl", "output_explained"}  # through _as_lens
