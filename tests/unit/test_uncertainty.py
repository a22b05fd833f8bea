"""One option object for how sure a number is (``Uncertainty``), one for the training run
(``Schedule``), the plain keywords of earlier calls as shorthands for both, and one tokenizer
rule."""

import inspect

import pytest
import torch

from tests.conftest import unchecked
from tl_leadterms import (
    BootstrapSpec,
    LeadTermsError,
    NullSpec,
    Schedule,
    Uncertainty,
    attention_agreement,
    block_stats,
    corpus_stats,
    covariance_similarity,
    decompose,
    explore,
    head_atlas,
    output_agreement,
    paper_model,
    predict_attention,
    report,
    sweep,
    train,
)
from tl_leadterms.adapters.view import PLACEHOLDER_TOKENIZER, tokenizer_for
from tl_leadterms.registry import ANALYSES

V, T = 12, 8


@pytest.fixture(scope="module")
def run():
    tokens = torch.randint(0, V, (64, T + 1), generator=torch.Generator().manual_seed(0))
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=1, dtype=torch.float64)
    history = train(model, tokens, lr=1.0, steps=4, progress=False)
    return tokens, stats, model, history


def test_fields_are_checked_and_counts_become_specs():
    u = Uncertainty(null=20, ci=0.9, bootstrap=30, seed=4)
    assert u.null == NullSpec(permutations=20, seed=4)
    assert u.bootstrap == BootstrapSpec(resamples=30, seed=4)
    assert Uncertainty(seed=4).bootstrap.seed == 4  # the default spec is seeded like a count
    for bad, match in [
        ({"null": 1}, "null permutations must be an integer >= 2"),
        ({"null": "many"}, "null must be a number of permutations"),
        ({"ci": 1.5}, "ci must be None or a confidence level"),
        ({"bootstrap": True}, "bootstrap must be a number of resamples"),
        ({"population": "train"}, "population must be None"),
        ({"null": NullSpec(10, seed=1), "seed": 2}, "own seed and seed=2"),
    ]:
        with pytest.raises(LeadTermsError, match=match):
            unchecked(Uncertainty)(**bad)  # as users call it, without the test run's checks


def test_shorthands_fill_the_spec_and_a_field_given_twice_differently_is_refused():
    base = Uncertainty(null=20)
    assert Uncertainty.of(base, ci=0.95) == Uncertainty(null=20, ci=0.95)
    assert Uncertainty.of(base, null=20) == base  # the same value twice is fine
    assert Uncertainty.of(None) == Uncertainty()
    with pytest.raises(LeadTermsError, match=r"null is given twice: null=30 and uncertainty\.null"):
        Uncertainty.of(base, null=30)
    with pytest.raises(LeadTermsError, match="uncertainty must be None or an Uncertainty"):
        Uncertainty.of(99)


def test_schedule_is_checked_when_built_and_read_from_a_history(run):
    *_, history = run
    assert Schedule(lr=0.5, steps=4).s_lr == 2.0
    assert Schedule.of((0.5, 4)) == Schedule(0.5, 4)
    assert Schedule.of(history) == Schedule(lr=1.0, steps=4) == history.schedule
    for bad, match in [
        ({"steps": 3}, "steps=3 needs lr"),
        ({"lr": -1.0}, "lr must be a finite number > 0"),
        ({"lr": 0.5, "steps": 4, "s_lr": 3.0}, "s_lr=3.0 disagrees"),
    ]:
        with pytest.raises(LeadTermsError, match=match):
            Schedule(**bad)
    with pytest.raises(LeadTermsError, match=r"schedule must be None, a Schedule"):
        Schedule.of([0.5, 4])


def test_every_analysis_takes_one_spec_and_the_plain_keywords_give_the_same_numbers(run):
    tokens, stats, model, history = run
    held = tokens[:8, :T]
    sure = Uncertainty(null=5, seed=2)
    pairs = [
        (decompose(model, stats, schedule=history, uncertainty=sure, per_head=True),
         decompose(model, stats, lr=1.0, steps=4, null=5, seed=2, per_head=True)),
        (covariance_similarity(model, stats, uncertainty=sure, progress=False),
         covariance_similarity(model, stats, null=NullSpec(5, seed=2), progress=False)),
        (output_agreement(model, stats, held, schedule=history, uncertainty=sure),
         output_agreement(model, stats, held, lr=1.0, steps=4, null=5, seed=2)),
        (attention_agreement(model, stats, held, schedule=history, uncertainty=sure,
                             progress=False),
         attention_agreement(model, stats, held, lr=1.0, steps=4, null=5, seed=2,
                             progress=False)),
        (head_atlas(model, stats, schedule=(1.0, 4), uncertainty=sure),
         head_atlas(model, stats, lr=1.0, steps=4, null=NullSpec(5, seed=2))),
    ]  # fmt: skip
    for new, old in pairs:
        assert new.to_dict() == old.to_dict()
        assert new.metadata["null"]["permutations"] == 5


def test_intervals_and_population_travel_in_the_spec(run):
    tokens, _, model, _ = run
    blocks = block_stats(tokens[32:], d_vocab=V, blocks=4, progress=False)
    sure = Uncertainty(ci=0.9, bootstrap=4, population="distribution")
    new = decompose(model, blocks, uncertainty=sure, weights="W_O")
    old = decompose(model, blocks, ci=0.9, bootstrap=4, population="distribution",
                    weights="W_O")  # fmt: skip
    assert new.to_dict() == old.to_dict() and "lo" in new.rows[0]
    assert new.metadata["ci"]["resamples"] == 4
    assert new.metadata["population"]["source"] == "stated"
    with pytest.raises(LeadTermsError, match="ci is given twice"):
        decompose(model, blocks, ci=0.95, uncertainty=sure)
    with pytest.raises(LeadTermsError, match="attention_agreement has no bootstrap interval"):
        attention_agreement(model, blocks.full(), tokens[:2, :T], uncertainty=sure)


def test_a_run_given_both_ways_is_refused(run):
    tokens, stats, model, history = run
    with pytest.raises(LeadTermsError, match="give the training run once"):
        decompose(model, stats, schedule=history, lr=1.0)
    with pytest.raises(LeadTermsError, match="give either scale= or the training run"):
        predict_attention(stats, tokens[:1, :T], schedule=(1.0, 4), scale=1.0)


def test_signatures_show_one_schedule_and_one_uncertainty():
    for fn in (decompose, covariance_similarity, output_agreement, attention_agreement,
               head_atlas, explore, sweep):  # fmt: skip
        names = inspect.signature(fn).parameters
        assert {"lr", "steps", "s_lr", "bootstrap", "population"}.isdisjoint(names), fn
        assert "uncertainty" in names and "null" in names, fn
        assert "bootstrap" in fn.shorthands and "population" in fn.shorthands
    # the report computes nothing: the results it is given carry their run and their null
    assert {"schedule", "uncertainty", "null"}.isdisjoint(inspect.signature(report).parameters)
    for a in ANALYSES:  # the registry tells sweeps which keywords each analysis takes
        if "schedule" in a.accepts():
            assert {"lr", "steps", "s_lr"} <= a.accepts()


def test_one_tokenizer_rule(run):
    *_, model, _ = run

    class Tok:
        def __init__(self, name):
            self.name_or_path = name

    stats_tok, model_tok, given = Tok("stats"), Tok("model"), Tok("given")

    class Stats:
        tokenizer = stats_tok

    assert tokenizer_for(given, model, Stats()) is given
    model.tokenizer = model_tok
    try:
        assert tokenizer_for(None, model, Stats()) is model_tok
        model.tokenizer = Tok(PLACEHOLDER_TOKENIZER)  # load_model's stand-in is no tokenizer
        assert tokenizer_for(None, model, Stats()) is stats_tok
    finally:
        model.tokenizer = None
    assert tokenizer_for(None, model, None) is None
