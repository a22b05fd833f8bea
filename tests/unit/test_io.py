"""Save/load round trips exactly; corrupt or mismatched files get clear errors."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.factories import save_format2
from tests.unit.test_stats import STATS, markov_windows
from tl_leadterms import CorpusStats, LeadTermsError, corpus_stats


@pytest.fixture(scope="module", params=[None, [4, 1, 7, 9, 0]], ids=["full", "kept"])
def stats(request):
    return corpus_stats(
        markov_windows(12, 8, 14, seed=6), d_vocab=14, vocab=request.param, progress=False
    )


def test_round_trip_is_exact(stats, tmp_path):
    path = tmp_path / "sub" / "stats.safetensors"
    stats.save(path)
    loaded = CorpusStats.load(path)
    for name in (*STATS, "unigram_counts", "pair_codes", "pair_counts", "unigram"):
        assert torch.equal(getattr(loaded, name), getattr(stats, name)), name
    assert (loaded.kept is None) == (stats.kept is None)
    if stats.kept is not None:
        assert torch.equal(loaded.kept, stats.kept)
    assert (loaded.d_vocab, loaded.n_ctx, loaded.n_sequences) == (14, 8, 12)
    assert loaded.metadata["library_version"] == stats.metadata["library_version"]
    assert [p.name for p in path.parent.iterdir()] == ["stats.safetensors"]  # no temp left


def test_load_checks_expectations(stats, tmp_path):
    path = tmp_path / "stats.safetensors"
    stats.save(path)
    with pytest.raises(LeadTermsError, match=r"counted with d_vocab=14, but d_vocab=50"):
        CorpusStats.load(path, d_vocab=50)


def test_missing_and_corrupt_files(stats, tmp_path):
    with pytest.raises(LeadTermsError, match=r"no statistics file at"):
        CorpusStats.load(tmp_path / "nope.safetensors")
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\x01 not a safetensors file")
    with pytest.raises(LeadTermsError, match=r"not a readable safetensors file"):
        CorpusStats.load(garbage)
    good = tmp_path / "good.safetensors"
    stats.save(good)
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(LeadTermsError, match=r"corrupt"):
        CorpusStats.load(truncated)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"x": torch.zeros(2)}, foreign)
    with pytest.raises(LeadTermsError, match=r"no tl_leadterms metadata"):
        CorpusStats.load(foreign)


def test_edited_shapes_are_refused(stats, tmp_path):
    path = tmp_path / "stats.safetensors"
    save_format2(stats, path)  # dense tables under their names
    tensors = load_file(path)
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
    tensors["Q_bar"] = tensors["Q_bar"][:-1]
    save_file(tensors, path, metadata=meta)
    with pytest.raises(LeadTermsError, match=r"Q_bar has shape"):
        CorpusStats.load(path)
    header = json.loads(meta["tl_leadterms"])
    header["format_version"] = 99
    save_file(load_file(path), path, metadata={"tl_leadterms": json.dumps(header)})
    with pytest.raises(LeadTermsError, match=r"version 99"):
        CorpusStats.load(path)


def test_failed_save_keeps_the_old_file(stats, tmp_path, monkeypatch):
    path = tmp_path / "stats.safetensors"
    stats.save(path)
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("tl_leadterms.stats.io.save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        stats.save(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["stats.safetensors"]


def test_save_to_directory_is_refused(stats, tmp_path):
    with pytest.raises(LeadTermsError, match=r"is a directory"):
        stats.save(tmp_path)


def _rewrite(path, edit_tensors=None, edit_meta=None):
    from safetensors import safe_open

    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        header = json.loads(f.metadata()["tl_leadterms"])
    if edit_tensors:
        edit_tensors(tensors)
    if edit_meta:
        edit_meta(header)
    save_file(tensors, path, metadata={"tl_leadterms": json.dumps(header)})


def _set(name, value):
    def edit(tensors):
        tensors[name] = value(tensors[name])

    return edit


@pytest.mark.parametrize(
    ("edit_tensors", "edit_meta", "match"),
    [
        (_set("Phi_bar", lambda t: t.index_fill(0, torch.tensor([0]), float("nan"))), None, "NaN"),
        (_set("Q_bar", lambda t: t.half()), None, "dtypes"),
        (_set("pair_codes", lambda t: t.float()), None, "pair_codes is not a 1-D int64"),
        (_set("pair_codes", lambda t: t - 10_000), None, "strictly increasing codes"),
        (_set("pair_codes", lambda t: t.flip(0)), None, "strictly increasing codes"),
        (_set("pair_counts", lambda t: -t), None, "pair_counts are not positive"),
        (None, lambda m: m.pop("n_kept"), r"\['n_kept'\] missing"),
        (None, lambda m: m.update(n_sequences=0), r"\['n_sequences'\] missing or not positive"),
    ],
)
def test_corrupt_contents_are_refused(stats, tmp_path, edit_tensors, edit_meta, match):
    path = tmp_path / "stats.safetensors"
    save_format2(stats, path)  # dense tables under their names
    _rewrite(path, edit_tensors, edit_meta)
    with pytest.raises(LeadTermsError, match=match):
        CorpusStats.load(path)


def test_duplicate_kept_ids_are_refused(tmp_path):
    s = corpus_stats(markov_windows(6, 5, 14, seed=2), d_vocab=14, vocab=[4, 1, 7], progress=False)
    path = tmp_path / "stats.safetensors"
    s.save(path)
    _rewrite(path, _set("kept", lambda t: torch.tensor([4, 1, 4])))
    with pytest.raises(LeadTermsError, match="invalid kept ids"):
        CorpusStats.load(path)


def test_saved_file_is_world_readable_like_any_file(stats, tmp_path):
    import os

    path = tmp_path / "stats.safetensors"
    stats.save(path)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


# -- the packed format (version 3) ---------------------------------------------------------------
ALL = ("B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar", "Delta", "B_bar_Phi_bar",
       "pair_codes", "pair_counts", "unigram_counts")  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_packed_file_loads_every_statistic_as_computed(tmp_path, dtype):
    s = corpus_stats(markov_windows(30, 12, 20, seed=3), d_vocab=20, dtype=dtype, progress=False)
    path = tmp_path / "s.safetensors"
    s.save(path)
    stored = load_file(path)
    assert "G_bar" not in stored and "Phi_bar" not in stored and "Phi_bar/values" in stored
    loaded = CorpusStats.load(path)
    assert loaded.has("G_bar") and loaded._tables["G_bar"] is None  # rebuilt on first access
    for name in ALL:
        assert torch.equal(getattr(loaded, name), getattr(s, name)), name
        assert getattr(loaded, name).dtype == getattr(s, name).dtype, name
    old = tmp_path / "old.safetensors"
    save_format2(s, old)  # the previous layout, written explicitly
    totals = sum(t.nbytes for n, t in stored.items() if n.rsplit("/", 1)[-1] in
                 ("column_sq", "column_pos", "diagonal", "shift", "constant"))  # fmt: skip
    assert totals == 8 * (6 * 20 + 2 * 20 + 1)  # 7 k-vectors of scoring totals and c, float64
    packed_bytes = sum(t.nbytes for t in stored.values()) - totals
    assert packed_bytes < sum(t.nbytes for t in load_file(old).values())  # packing saves space
    from_old = CorpusStats.load(old)
    for name in ALL:
        assert torch.equal(getattr(from_old, name), getattr(s, name)), name


def test_packing_keeps_every_bit():
    from tl_leadterms.stats.fileformat import pack, unpack

    table = torch.randn(9, 9, dtype=torch.float64)
    table[::2, 3] = -0.0  # signed zeros are kept as they were
    table[1:, 5] = table[0, 5]
    parts = pack(table.numpy())
    back = unpack(parts, 9)
    assert back.tobytes() == table.numpy().tobytes()
    assert parts["values"].size < 81


def test_packed_parts_are_verified_and_want_reads_what_it_needs(stats, tmp_path):
    path = tmp_path / "stats.safetensors"
    stats.save(path)
    only = CorpusStats.load(path, want=("B_bar",))
    assert not only.has("G_bar") and not only.has("Phi_bar")
    assert torch.equal(CorpusStats.load(path, want=("G_bar",)).G_bar, stats.G_bar)
    _rewrite(path, _set("Q_bar/values", lambda t: t + 1.0))
    with pytest.raises(LeadTermsError, match="tensor Q_bar/values does not match its checksum"):
        CorpusStats.load(path)
    CorpusStats.load(path, want=("Phi_bar",))  # an unneeded table is not read
    _rewrite(path, _set("Phi_bar/rows", lambda t: t.flip(0)))
    with pytest.raises(LeadTermsError, match="Phi_bar/rows does not count"):
        CorpusStats.load(path)
