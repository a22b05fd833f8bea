"""Checkpoint sweeps over a real (tiny) trained GPT-NeoX series, offline, with resume."""

import json
import math

import pytest
import torch

from tests.conftest import unchecked
from tests.factories import HookedTransformer
from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.analyses.decompose.compute import decompose
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.series import load_series, load_windows, train_neox_series
from tl_leadterms.results.bootstrap import BootstrapSpec
from tl_leadterms.results.null import NullSpec
from tl_leadterms.stats import corpus_stats
from tl_leadterms.stats.blocks import block_stats
from tl_leadterms.sweeps.run import SweepTable, sweep
from tl_leadterms.theory import score_name

STEPS = [0, 1, 2, 4, 8, 16]
N_LAYERS = 2


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    out = tmp_path_factory.mktemp("series")
    train_neox_series(
        out,
        n_stories=60,
        vocab_size=120,
        n_ctx=16,
        d_model=16,
        n_layers=N_LAYERS,
        n_heads=2,
        steps=16,
        batch_size=8,
        lr=3e-3,
        progress=False,
    )
    return out


@pytest.fixture(scope="module")
def stats(series):
    d_vocab = json.loads((series / "series.json").read_text())["d_vocab"]
    return corpus_stats(load_windows(series), d_vocab=d_vocab, progress=False)


@pytest.fixture(scope="module")
def table(series, stats):
    return sweep(series, stats, analyses="decompose", progress=False)


def test_series_folders_load_offline(series):
    found = load_series(series)
    assert [(label, step) for label, step, _ in found] == [(f"step{s}", s) for s in STEPS]
    info = json.loads((series / "series.json").read_text())
    assert info["checkpoints"] == [f"step{s}" for s in STEPS]
    assert len(info["losses"]) == 16 and info["losses"][-1] < info["losses"][0]
    windows = load_windows(series)
    assert windows.dtype == torch.int64 and windows.shape[1] == 17
    assert int(windows.max()) < info["d_vocab"]
    first, last = (load_model(found[i][2]) for i in (0, -1))
    assert first.cfg.d_vocab == info["d_vocab"] and first.cfg.n_layers == N_LAYERS
    assert first.cfg.positional_embedding_type == "rotary"
    assert not torch.equal(first.W_E, last.W_E)  # the weights did train
    assert json.loads((found[3][2] / "checkpoint.json").read_text())["step"] == 4
    assert first.tokenizer is not None  # the tokenizer is saved with every checkpoint


def test_one_row_per_checkpoint_layer_score(table, series, stats):
    assert isinstance(table, SweepTable)
    assert table.checkpoints == [f"step{s}" for s in STEPS]
    keys = [(r["checkpoint"], r["layer"], r["head"], r["score"]) for r in table.rows]
    assert len(keys) == len(set(keys))
    # W_O (no layer) + V, W and (rotary mean-field) P per layer, each with a cosine and an
    # explained share
    assert len(table) == len(STEPS) * (2 + 2 * 3 * N_LAYERS)
    assert {r["step"] for r in table.rows} == set(STEPS)
    # the sweep's values are decompose's own
    direct = decompose(load_model(series / "step8"), stats, per_head=False)
    assert table.values("cos_V", layer=1)[STEPS.index(8)] == pytest.approx(
        direct.row("V", 1)["cosine"], abs=1e-12
    )
    assert table.values("cos_W_O")[STEPS.index(8)] == pytest.approx(
        direct.row("W_O")["cosine"], abs=1e-12
    )


def test_table_views(table):
    df = table.to_pandas()
    assert list(df.columns)[:8] == ["checkpoint", "step", "layer", "head", "analysis", "score",
                                    "value", "vs_baseline"]  # fmt: skip
    assert list(df.columns)[8:] == ["specific", "common_share"]  # decompose's token-token rows
    first = {(r["score"], r["layer"], r["head"]): r["value"] for r in table.rows
             if r["checkpoint"] == table.metadata["baseline"]}  # fmt: skip
    assert all(r["vs_baseline"] == r["value"] - first[(r["score"], r["layer"], r["head"])]
               for r in table.rows if r["value"] == r["value"])  # fmt: skip
    assert len(df) == len(table)
    grid = table.pivot("cos_W")
    assert list(grid.columns) == table.checkpoints and list(grid.index) == [0, 1]
    assert list(table.pivot("cos_W_O").index) == ["-"]
    text = repr(table)
    assert "decompose: cos_V" in text and "step16" in text and "L1" in text
    assert "V·W_O" not in text and "from the results file" not in text.splitlines()[0]
    data = table.to_dict()
    assert json.loads(json.dumps(data))["checkpoints"] == table.checkpoints
    with pytest.raises(LeadTermsError, match="no rows"):
        table.values("attention", layer=0)


def test_model_pairs_and_step_filter(series, stats, table):
    pairs = [(label, load_model(folder)) for label, _, folder in load_series(series)]
    got = sweep(pairs[:3], stats, analyses="decompose", progress=False)
    assert got.rows == [r for r in table.rows if r["checkpoint"] in ("step0", "step1", "step2")]
    kept = sweep(
        load_series(series), stats, analyses="decompose", checkpoint_steps=[2, 16], progress=False
    )
    assert kept.checkpoints == ["step2", "step16"]


def test_steps_is_the_leading_terms_step_count_never_a_checkpoint_list(series, stats):
    # steps= reaches the analyses (decompose's own rule answers: steps needs lr) ...
    with pytest.raises(LeadTermsError, match="steps=3 needs lr"):
        sweep(series, stats, analyses="decompose", checkpoint_steps=[2], steps=3, progress=False)
    # ... and the former checkpoint list is refused, naming the keyword that replaced it
    with pytest.raises(LeadTermsError, match=r"checkpoint_steps=\[0, 2\]"):
        sweep(series, stats, analyses="decompose", steps=[0, 2], progress=False)


def test_callable_and_covariance(series, stats):
    pytest.importorskip("tl_leadterms.analyses.covariance.compute")
    from tl_leadterms.analyses.covariance.compute import covariance_similarity

    def embed_norm(model, stats):
        return [{"layer": None, "head": None, "score": "W_E_norm", "value": model.W_E.norm()}]

    got = sweep(
        [series / "step0", series / "step16"],
        stats,
        analyses=(embed_norm, "covariance"),
        normalize="both",
        value_map="write",
        progress=False,
    )
    want = covariance_similarity(
        load_model(series / "step16"), stats, normalize="both", value_map="write", progress=False
    )
    for r in want.rows:
        value = got.values(r["score"], r["layer"], r["head"], analysis="covariance")[1]
        assert value == pytest.approx(r["value"], abs=1e-12)
    assert got.values("W_E_norm")[1] == pytest.approx(
        float(load_model(series / "step16").W_E.detach().norm())
    )


class _Probe:
    """A cheap analysis that counts its calls and can fail at one checkpoint."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.seen: list[int] = []
        self.fail_at = fail_at

    def __call__(self, model, stats):
        self.seen.append(len(self.seen))
        if self.fail_at is not None and len(self.seen) == self.fail_at:
            raise RuntimeError("interrupted")
        return [
            {
                "layer": layer,
                "head": None,
                "score": "W_Q_norm",
                "value": float(block.attn.W_Q.norm()),
            }
            for layer, block in enumerate(model.blocks)
        ]


def test_a_gpt2_names_its_value_path_cos_V_as_every_model_does(tmp_path):
    """On a real model (a tiny GPT-2, whose value path is ``V·W_O``) the sweep's score is
    ``cos_V`` as on the paper model; the earlier spelling still selects and plots it, a results
    file written with it resumes, and the monitor's history uses the same name."""
    from tl_leadterms.loading.tiny import save_tiny_model
    from tl_leadterms.sweeps.monitor import LeadingTermMonitor

    tokens = torch.randint(0, 40, (24, 9), generator=torch.Generator().manual_seed(0))
    stats = corpus_stats(tokens, d_vocab=40, progress=False)
    folder = save_tiny_model("gpt2", tmp_path / "gpt2", d_vocab=40, n_layers=2, n_ctx=16)
    model = load_model(folder, device="cpu")
    assert {r["weight"] for r in decompose(model, stats, progress=False).rows} >= {"V·W_O"}
    path, pairs = tmp_path / "r.jsonl", [("a", model), ("b", model)]
    table = sweep(pairs, stats, analyses="decompose", results=path, progress=False)
    names = [s for _, s in table.scores()]
    assert {"cos_W_O", "cos_V", "explained_V", "cos_W"} <= set(names), names
    assert not [n for n in names if not n.isascii()], names
    assert table.plot("cos_V").axes[0].get_title() == "cos_V"
    old = table.select(score="cos_V·W_O", layer=1)  # the earlier spelling, wherever passed
    assert old == table.select(score="cos_V", layer=1) and len(old) == 2
    assert table.values("cos_V·W_O", layer=0) == table.values("cos_V", layer=0)
    plot = table.plot("cos_V·W_O", analysis="decompose")
    assert plot.axes[0].get_title() == "decompose: cos_V"
    # a results file of an earlier sweep (its rows named cos_V·W_O) resumes to the same table
    earlier = {"cos_V": "cos_V·W_O", "explained_V": "explained_V·W_O"}
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for record in records:
        for r in record["rows"]:
            r["score"] = earlier.get(r["score"], r["score"])
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    stored = [r["score"] for line in path.read_text().splitlines()
              for r in json.loads(line)["rows"]]  # fmt: skip
    assert "cos_V·W_O" in stored and "cos_V" not in stored
    resumed = sweep(pairs, stats, analyses="decompose", results=path, progress=False)
    assert set(resumed.metadata["status"].values()) == {"loaded"}
    assert resumed.rows == table.rows
    # the monitor: the same name in its scores and its history
    monitor = LeadingTermMonitor(stats, every=1)
    scores = monitor(model, 1, 0.0)
    assert {"cos_V.0", "cos_V.1"} <= set(scores) and "V.0" in monitor.history.cosines
    assert monitor.history.min_cosine("V·W_O") == monitor.history.min_cosine("V")


def test_resume_after_interruption(series, stats, tmp_path):
    path = tmp_path / "sweep.jsonl"
    full = sweep(series, stats, analyses=[("probe", _Probe(), {})], progress=False)
    with pytest.raises(RuntimeError, match="interrupted"):
        sweep(series, stats, analyses=[("probe", _Probe(fail_at=3), {})], results=path)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["checkpoint"] for line in lines] == ["step0", "step1"]
    probe = _Probe()
    resumed = sweep(series, stats, analyses=[("probe", probe, {})], results=path, progress=False)
    assert len(probe.seen) == len(STEPS) - 2  # the first two were not recomputed
    assert resumed.rows == full.rows
    assert resumed.metadata["status"]["step0"] == "loaded"
    assert resumed.metadata["status"]["step16"] == "computed"
    again = _Probe()
    sweep(series, stats, analyses=[("probe", again, {})], results=path, progress=False)
    assert again.seen == []  # everything is in the file now


def test_torn_last_line_is_ignored_and_reported(series, stats, tmp_path):
    path = tmp_path / "sweep.jsonl"
    sweep(series, stats, analyses=[("probe", _Probe(), {})], results=path, checkpoint_steps=[0, 1])
    with open(path, "a") as f:
        f.write('{"checkpoint": "step2", "rows": [{"lay')  # a write cut short
    probe = _Probe()
    with pytest.warns(UserWarning, match="incomplete last line"):
        got = sweep(series, stats, analyses=[("probe", probe, {})], results=path, progress=False)
    assert len(probe.seen) == len(STEPS) - 2
    assert got.checkpoints == [f"step{s}" for s in STEPS]
    assert len(path.read_text().splitlines()) == len(STEPS)
    assert "step2" in (tmp_path / "sweep.jsonl.torn").read_text()


@pytest.mark.hooked  # TL 4's hub path (boot_transformers) is tested in test_bridge_loading.py
def test_pythia_name_uses_checkpoint_value(series, stats, monkeypatch):
    calls = []

    def fake_from_pretrained(name, *, checkpoint_value=None, device=None, **kwargs):
        calls.append((name, checkpoint_value, device))
        return load_model(series / f"step{checkpoint_value}")

    monkeypatch.setattr(HookedTransformer, "from_pretrained", fake_from_pretrained)
    got = sweep(
        "pythia-14m", stats, checkpoint_steps=[0, 4, 16], analyses="decompose", progress=False
    )
    assert calls == [("pythia-14m", 0, "cpu"), ("pythia-14m", 4, "cpu"), ("pythia-14m", 16, "cpu")]
    assert got.checkpoints == ["step0", "step4", "step16"]
    assert [r["step"] for r in got.rows if r["score"] == "cos_W_O"] == [0, 4, 16]


def test_bad_checkpoint_keeps_finished_results(series, stats, tmp_path):
    broken = tmp_path / "step99"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    path = tmp_path / "sweep.jsonl"
    folders = [series / "step0", series / "step1", broken]
    with pytest.raises(LeadTermsError, match="step99") as err:
        sweep(folders, stats, analyses=[("probe", _Probe(), {})], results=path, progress=False)
    assert "2 finished checkpoint(s) are kept" in str(err.value)
    assert len(path.read_text().splitlines()) == 2


def test_bad_inputs(series, stats, tmp_path):
    other = corpus_stats(torch.randint(0, 50, (8, 17)), d_vocab=50, progress=False)
    with pytest.raises(LeadTermsError, match="d_vocab=50"):
        sweep([series / "step0"], other, analyses="decompose", progress=False)
    with pytest.raises(LeadTermsError, match="unknown analysis 'decomposition'"):
        sweep(series, stats, analyses="decomposition", progress=False)
    with pytest.raises(LeadTermsError, match="not a folder"):
        sweep(str(tmp_path / "missing"), stats, progress=False)
    with pytest.raises(LeadTermsError, match="normalise"):
        sweep(series, stats, analyses="decompose", normalise="both", progress=False)
    with pytest.raises(LeadTermsError, match="CorpusStats"):
        unchecked(sweep)(series, {"B_bar": 0}, progress=False)
    with pytest.raises(LeadTermsError, match="no checkpoint for steps"):
        sweep(series, stats, analyses="decompose", checkpoint_steps=[3], progress=False)
    path = tmp_path / "r.jsonl"
    sweep(series, stats, analyses=[("probe", _Probe(), {})], checkpoint_steps=[0], results=path)
    with pytest.raises(LeadTermsError, match="other settings"):
        sweep(
            series, stats, analyses="decompose", checkpoint_steps=[0], results=path, progress=False
        )


def test_training_writes_the_leading_terms(series, stats):
    """Random init scores near 0; a few steps of training lift the value maps' covariance
    agreement with Φ̄ᵀB̄ᵀ far above that (the paper's early-checkpoint finding)."""
    pytest.importorskip("tl_leadterms.analyses.covariance.compute")
    got = sweep(
        series,
        stats,
        analyses="covariance",
        normalize="both",
        value_map="write",
        progress=False,
    )
    for layer in range(N_LAYERS):
        scores = got.values("value_post", layer=layer)
        assert scores[0] < 0.2
        assert max(scores[1:]) > 0.6


def test_results_of_other_statistics_are_not_reused(series, stats, tmp_path):
    """Same shapes, other corpus: the fingerprint refuses the resume instead of old rows."""
    from tl_leadterms import corpus_stats
    from tl_leadterms.loading.series import load_windows

    path = tmp_path / "nested" / "folder" / "sweep.jsonl"  # created up front
    probe = [("probe", _Probe(), {})]
    sweep(series, stats, analyses=probe, checkpoint_steps=[0], results=path, progress=False)
    windows = load_windows(series)
    other = corpus_stats(windows[: windows.shape[0] // 2], d_vocab=stats.d_vocab, progress=False)
    other.n_sequences = stats.n_sequences  # the same shape as far as a shape check can see
    with pytest.raises(LeadTermsError, match="other settings"):
        sweep(series, other, analyses=probe, checkpoint_steps=[0], results=path, progress=False)


# -- null baselines and bootstrap intervals: each checkpoint's columns are decompose's and
#    covariance_similarity's own, called directly with the same options ----------------------

EXTRA = ("null_mean", "null_sd", "z", "p", "lo", "hi")


def same(a, b) -> bool:
    """Equal floats, NaN equal to NaN (a null of a weight without token labels is NaN)."""
    if a is None or b is None:
        return a is b
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


def by_key(table):
    return {(r["checkpoint"], r["analysis"], r["score"], r["layer"], r["head"]): r
            for r in table.rows}  # fmt: skip


def test_null_columns_equal_decompose_and_covariance_on_each_checkpoint(series, stats):
    got = sweep(
        series,
        stats,
        checkpoint_steps=[0, 16],
        analyses=("decompose", "covariance"),
        null=4,
        seed=3,
        progress=False,
    )
    rows = by_key(got)
    columns = got.columns()  # the effect first, then the evidence
    order = ["excess", "excess_share", "null_mean", "null_sd", "z", "p", "q", "verdict"]
    assert [c for c in columns if c in order] == order
    spec = NullSpec(permutations=4, seed=3)
    for label in ("step0", "step16"):
        model = load_model(series / label)
        direct = decompose(model, stats, per_head=False, null=spec)
        for r in direct.rows:
            weight = score_name(r["weight"])  # the value path is V on every model
            row = rows[(label, "decompose", f"cos_{weight}", r["layer"], r["head"])]
            assert same(row["value"], r["cosine"])
            for column in ("null_mean", "null_sd", "z", "p"):
                assert same(row[column], r[column]), (label, r["weight"], column)
            explained = rows[(label, "decompose", f"explained_{weight}", r["layer"], None)]
            assert explained["p"] is None  # the null is of the cosine
        cov = covariance_similarity(model, stats, null=spec, progress=False)
        for r in cov.rows:
            row = rows[(label, "covariance", r["score"], r["layer"], r["head"])]
            for column in ("value", "null_mean", "null_sd", "z", "p"):
                assert same(row[column], r[column]), (label, r["score"], column)
    # the permutations are drawn once per seed: seed 3 is not seed 0
    other = by_key(sweep(series, stats, checkpoint_steps=[16], analyses="covariance", null=4,
                         progress=False))  # fmt: skip
    key = ("step16", "covariance", "value_post", 0, None)
    assert other[key]["value"] == rows[key]["value"]
    assert other[key]["null_mean"] != rows[key]["null_mean"]
    assert "null mean" in repr(got) and "      p" in repr(got)


def test_intervals_from_block_statistics(series, stats):
    d_vocab = json.loads((series / "series.json").read_text())["d_vocab"]
    blocks = block_stats(load_windows(series), d_vocab=d_vocab, blocks=4, progress=False)
    got = sweep(series, blocks, checkpoint_steps=[16], analyses=("decompose", "covariance"), null=3,
                ci=0.9, bootstrap=3, seed=1, progress=False)  # fmt: skip
    rows = by_key(got)
    assert {*EXTRA, "corrected"} <= set(got.columns())
    model = load_model(series / "step16")
    options = {"null": NullSpec(3, seed=1), "ci": 0.9, "bootstrap": BootstrapSpec(3, seed=1)}
    for r in decompose(model, blocks, per_head=False, **options).rows:
        row = rows[("step16", "decompose", f"cos_{score_name(r['weight'])}", r["layer"], r["head"])]
        assert all(same(row[c], r[c]) for c in (*EXTRA, "corrected")), r["weight"]
    for r in covariance_similarity(model, blocks, progress=False, **options).rows:
        row = rows[("step16", "covariance", r["score"], r["layer"], r["head"])]
        assert all(same(row[c], r[c]) for c in ("value", *EXTRA, "corrected")), r["score"]
    with_ci = [r for r in got.rows if r["lo"] is not None and r["lo"] == r["lo"]]  # not NaN
    assert with_ci and all(r["lo"] <= r["corrected"] <= r["hi"] for r in with_ci)
    df = got.to_pandas()
    assert list(df.columns) == got.columns() and df["lo"].notna().any()
    with pytest.raises(LeadTermsError, match="needs statistics kept per block"):
        sweep(series, stats, checkpoint_steps=[16], ci=0.9, progress=False)


def test_a_resumed_null_sweep_keeps_its_columns_and_refuses_other_options(series, stats,
                                                                          tmp_path):  # fmt: skip
    path = tmp_path / "sweep.jsonl"
    options = {"analyses": "covariance", "null": 3, "seed": 2, "progress": False}
    fresh = sweep(series, stats, checkpoint_steps=[0, 1, 2], **options)
    sweep(series, stats, checkpoint_steps=[0, 1], results=path, **options)
    resumed = sweep(series, stats, checkpoint_steps=[0, 1, 2], results=path, **options)
    assert resumed.metadata["status"] == {"step0": "loaded", "step1": "loaded",
                                          "step2": "computed"}  # fmt: skip
    assert [list(r) for r in resumed.rows] == [list(r) for r in fresh.rows]
    for a, b in zip(resumed.rows, fresh.rows, strict=True):
        assert all(same(a[c], b[c]) for c in ("value", "null_mean", "null_sd", "z", "p")), a
    settings = json.loads(path.read_text().splitlines()[0])["settings"]
    assert settings["analyses"]["covariance"]["null"] == {"permutations": 3, "seed": 2,
                                                          "reference": None}  # fmt: skip
    for other, named in (
        ({"null": 4}, "analyses.covariance.null.permutations: the file has 3, this sweep 4"),
        ({"seed": 5}, "analyses.covariance.null.seed: the file has 2, this sweep 5"),
        ({"null": None}, "analyses.covariance.null: the file has {'permutations': 3, 'seed': 2, "
                         "'reference': None}, this sweep no such setting"),
    ):  # fmt: skip
        with pytest.raises(LeadTermsError, match="other settings") as err:
            sweep(series, stats, checkpoint_steps=[0], results=path, **{**options, **other})
        assert named in str(err.value)


def test_bad_null_options(series, stats):
    with pytest.raises(LeadTermsError, match="null permutations must be an integer >= 2"):
        sweep(series, stats, checkpoint_steps=[0], null=1, progress=False)
    with pytest.raises(LeadTermsError, match="with its own seed"):
        sweep(series, stats, checkpoint_steps=[0], null=NullSpec(4, seed=1), seed=2, progress=False)
    with pytest.raises(LeadTermsError, match="seed must be an integer >= 0"):
        sweep(series, stats, checkpoint_steps=[0], null=4, seed=-1, progress=False)
    with pytest.raises(LeadTermsError, match="confidence level"):
        sweep(series, stats, checkpoint_steps=[0], ci=1.5, progress=False)
