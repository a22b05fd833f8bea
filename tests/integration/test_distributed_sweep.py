"""Checkpoint sweeps on a real local Ray cluster equal the local sweep and resume like it.

The cluster is the session's (``conftest.cluster``); nothing of Ray is mocked.
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from tl_leadterms import LeadTermsError, corpus_stats

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    from tl_leadterms.loading.series import load_windows, train_neox_series

    out = tmp_path_factory.mktemp("series")
    train_neox_series(out, n_stories=60, vocab_size=120, n_ctx=16, d_model=16, n_layers=2,
                      n_heads=2, steps=16, batch_size=8, lr=3e-3, progress=False)  # fmt: skip
    d_vocab = json.loads((out / "series.json").read_text())["d_vocab"]
    return out, corpus_stats(load_windows(out), d_vocab=d_vocab, progress=False)


SERIES_STEPS = [0, 1, 2, 4, 8, 16]


def assert_same_rows(got, want):
    keys = ("checkpoint", "step", "layer", "head", "analysis", "score")
    assert [[r[k] for k in keys] for r in got.rows] == [[r[k] for k in keys] for r in want.rows]
    for a, b in zip(got.rows, want.rows, strict=True):
        assert a["value"] == pytest.approx(b["value"], abs=1e-12), a


def test_a_ray_sweep_equals_the_local_sweep(cluster, series, tmp_path):
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    local = sweep(folder, stats, analyses="decompose", progress=False)
    path = tmp_path / "sweep.jsonl"
    got = sweep(folder, stats, analyses="decompose", executor="ray", results=path, progress=False)
    assert got.checkpoints == [f"step{s}" for s in SERIES_STEPS]
    assert_same_rows(got, local)
    # every checkpoint was appended as one record, in whatever order the tasks finished
    written = [json.loads(line)["checkpoint"] for line in path.read_text().splitlines()]
    assert sorted(written) == sorted(got.checkpoints)


def test_a_ray_sweep_with_null_and_intervals_equals_the_local_sweep(cluster, series):
    from tl_leadterms import block_stats
    from tl_leadterms.loading.series import load_windows
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    blocks = block_stats(load_windows(folder), d_vocab=stats.d_vocab, blocks=3, progress=False)
    options = {
        "checkpoint_steps": [0, 16],
        "analyses": ("decompose", "covariance"),
        "null": 3,
        "ci": 0.9,
        "bootstrap": 2,
        "seed": 4,
        "progress": False,
    }
    local = sweep(folder, blocks, **options)
    got = sweep(folder, blocks, executor="ray", **options)
    assert_same_rows(got, local)
    columns = ("null_mean", "null_sd", "z", "p", "lo", "hi", "corrected")
    assert got.columns() == local.columns() and set(columns) <= set(got.columns())
    for a, b in zip(got.rows, local.rows, strict=True):
        for c in columns:  # the same seeded draws in the workers; NaN (P's null) stays NaN
            assert (a[c] is None and b[c] is None) or a[c] == pytest.approx(
                b[c], abs=1e-12, nan_ok=True
            ), (a, c)
    assert any(r["p"] is not None and not math.isnan(r["p"]) for r in got.rows)


class CallLog:
    """A cheap analysis: per-layer norms of W_Q; each call (in whichever worker) appends a line
    to ``log`` so the test can count the checkpoints computed."""

    def __init__(self, log: Path) -> None:
        self.log = str(log)

    def __call__(self, model, stats):
        with open(self.log, "a") as f:
            f.write("call\n")
        return [
            {"layer": i, "head": None, "score": "W_Q_norm", "value": float(b.attn.W_Q.norm())}
            for i, b in enumerate(model.blocks)
        ]


def test_an_interrupted_ray_sweep_resumes(cluster, series, tmp_path, monkeypatch):
    import importlib

    sweep_module = importlib.import_module("tl_leadterms.sweeps.run")  # not the function

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    folder, stats = series
    path = tmp_path / "sweep.jsonl"
    appended = []

    results_module = importlib.import_module("tl_leadterms.sweeps.results")

    def append_then_interrupt(self, record):  # Ctrl-C on the driver after the 2nd record
        real_append(self, record)
        appended.append(record["checkpoint"])
        if len(appended) == 2:
            raise KeyboardInterrupt

    real_append = results_module.ResultsFile.append
    monkeypatch.setattr(results_module.ResultsFile, "append", append_then_interrupt)
    probe = [("probe", CallLog(tmp_path / "first.log"), {})]
    with pytest.raises(KeyboardInterrupt):
        sweep_module.sweep(folder, stats, analyses=probe, executor="ray", results=path,
                           progress=False)  # fmt: skip
    monkeypatch.undo()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["checkpoint"] for line in lines] == appended

    probe = [("probe", CallLog(tmp_path / "second.log"), {})]
    resumed = sweep_module.sweep(folder, stats, analyses=probe, executor="ray", results=path,
                                 progress=False)  # fmt: skip
    assert len((tmp_path / "second.log").read_text().splitlines()) == len(SERIES_STEPS) - 2
    assert {c for c, s in resumed.metadata["status"].items() if s == "loaded"} == set(appended)
    local = sweep_module.sweep(folder, stats, analyses=[("probe", CallLog(tmp_path / "l"), {})],
                               progress=False)  # fmt: skip
    assert_same_rows(resumed, local)
    assert len(path.read_text().splitlines()) == len(SERIES_STEPS)


def test_ray_sweep_refuses_what_it_cannot_run(cluster, series):
    from tl_leadterms.loading.checkpoint import load_model
    from tl_leadterms.sweeps import RayExecutor
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    held = [("step0", load_model(folder / "step0"))]
    with pytest.raises(LeadTermsError, match=r"\['step0'\] are models held by this process"):
        sweep(held, stats, analyses="decompose", executor="ray", progress=False)
    gpu = RayExecutor(resources={"num_gpus": 1})
    with pytest.raises(LeadTermsError, match="asks for 1 GPU but the Ray cluster has 0"):
        sweep(folder, stats, analyses="decompose", executor=gpu, progress=False)
    with pytest.raises(LeadTermsError, match=r"pass executor=RayExecutor\(address='auto'\)"):
        sweep(folder, stats, analyses="decompose", address="auto", progress=False)
    with pytest.raises(LeadTermsError, match="executor must be 'local', 'ray' or a RayExecutor"):
        sweep(folder, stats, analyses="decompose", executor="dask", progress=False)
    with pytest.raises(LeadTermsError, match="resources must map names"):
        RayExecutor(resources={"num_gpus": -1})


def test_cli_sweep_on_ray(cluster, series, tmp_path):
    import pandas as pd

    from tl_leadterms.cli import main
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    stats.save(tmp_path / "s.safetensors")
    out = tmp_path / "table.csv"
    args = ["sweep", str(folder), str(tmp_path / "s.safetensors"), "--steps", "2", "16"]
    assert main([*args, "--out", str(out), "--quiet", "--ray", "local:2"]) == 0
    local = sweep(folder, stats, analyses="decompose", checkpoint_steps=[2, 16], progress=False)
    table = pd.read_csv(out)
    assert list(table["checkpoint"]) == [r["checkpoint"] for r in local.rows]
    assert list(table["score"]) == [r["score"] for r in local.rows]
    np.testing.assert_allclose(table["value"], [r["value"] for r in local.rows], atol=1e-12)


def test_cli_sweep_on_ray_with_intervals_from_a_block_file(cluster, series, tmp_path):
    import pandas as pd

    from tl_leadterms import block_stats
    from tl_leadterms.cli import main
    from tl_leadterms.loading.series import load_windows
    from tl_leadterms.stats.blocks import BlockStats
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    blocks = block_stats(load_windows(folder), d_vocab=stats.d_vocab, blocks=4, progress=False)
    blocks.save(tmp_path / "b.safetensors")
    out = tmp_path / "table.csv"
    args = ["sweep", str(folder), str(tmp_path / "b.safetensors"), "--steps", "2", "16",
            "--ci", "0.9", "--bootstrap", "5", "--out", str(out), "--quiet"]  # fmt: skip
    assert main([*args, "--ray", "local:2"]) == 0
    local = sweep(
        folder,
        BlockStats.load(tmp_path / "b.safetensors"),
        analyses="decompose",
        checkpoint_steps=[2, 16],
        ci=0.9,
        bootstrap=5,
        progress=False,
    ).to_pandas()
    table = pd.read_csv(out)
    assert list(table["score"]) == list(local["score"]) and table["lo"].notna().any()
    for column in ("value", "lo", "hi", "corrected"):
        np.testing.assert_allclose(table[column], local[column], rtol=0, atol=1e-12)


def test_a_ray_sweep_reads_the_theory_file_written_once_on_the_driver(cluster, series, tmp_path):
    from tl_leadterms.analyses.covariance.theory_file import load_theory
    from tl_leadterms.loading.series import load_windows
    from tl_leadterms.sweeps.run import sweep

    folder, stats = series
    local = sweep(folder, stats, analyses="covariance", progress=False)
    path = tmp_path / "stats.theory.safetensors"
    got = sweep(folder, stats, analyses="covariance", executor="ray", theory=path,
                progress=False)  # fmt: skip
    assert_same_rows(got, local)
    assert path.is_file()  # written here before the tasks started, read by each of them
    load_theory(path, stats)  # for these statistics and the default settings
    windows = load_windows(folder)
    other = corpus_stats(windows[: len(windows) // 2], d_vocab=stats.d_vocab, progress=False)
    with pytest.raises(LeadTermsError, match="other statistics"):
        sweep(folder, other, analyses="covariance", executor="ray", theory=path, progress=False)
