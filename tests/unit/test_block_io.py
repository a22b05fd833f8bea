"""Block statistics files (issue 13): the layout, an exact round trip, checksums, wrong loaders."""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from tests.factories import markov_tokens
from tl_leadterms import CorpusStats, LeadTermsError
from tl_leadterms.stats.blocks import BlockStats, block_stats

V, T = 10, 6
TABLES = ("pair_codes", "pair_counts", "unigram_counts", "Phi_bar", "Q_bar", "Delta")
FILE_TABLES = (*TABLES, "windows")  # format version 2 keeps each block's windows


@pytest.fixture(scope="module", params=[None, 7], ids=["all", "kept7"])
def blocks(request):
    tokens = markov_tokens(60, T + 1, V, seed=3)
    return block_stats(tokens, d_vocab=V, blocks=4, vocab=request.param, progress=False)


def _block_tables(blocks, b):
    c = blocks.counts[b]
    return dict(zip(TABLES, (c.pair_codes, c.pair_counts, c.unigram_counts, c.Phi_bar,
                             blocks.Q_bars[b], blocks.Deltas[b]), strict=True))  # fmt: skip


def test_file_layout_and_exact_round_trip(blocks, tmp_path):
    path = tmp_path / "b.safetensors"
    blocks.save(path)
    stored = load_file(path)  # read with safetensors itself: the documented names
    expected = {f"block{b}/{n}" for b in range(4) for n in FILE_TABLES} | {"G_bar"}
    assert set(stored) == expected | ({"kept"} if blocks.vocab.kept is not None else set())
    assert torch.equal(stored["block3/pair_codes"], blocks.counts[3].pair_codes)
    assert torch.equal(stored["G_bar"], blocks.full().G_bar)
    with safe_open(path, framework="pt") as f:
        header = json.loads(f.metadata()["tl_leadterms"])
    assert header["format"] == "tl_leadterms.BlockStats" and header["blocks"] == 4
    assert header["format_version"] == 2
    assert stored["block1/windows"].dtype == torch.int32
    assert torch.equal(stored["block1/windows"].long(), blocks.windows[1].long())
    assert header["bounds"] == [list(b) for b in blocks.bounds]
    assert header["bounds"] == [[0, 15], [15, 30], [30, 45], [45, 60]]
    assert set(header["checksums"]) == {*stored, "metadata"}
    assert header["vocab_hash"].startswith("ids:")

    got = BlockStats.load(path)
    assert got.bounds == blocks.bounds and got.n_blocks == 4
    for b in range(4):
        for name, want in _block_tables(blocks, b).items():
            have = _block_tables(got, b)[name]
            assert have.dtype == want.dtype and torch.equal(have, want), (b, name)
    full, want = got.full(), blocks.full()
    for name in ("pair_codes", "pair_counts", "unigram_counts", "Phi_bar", "G_bar", "Q_bar",
                 "Delta", "B_bar"):  # fmt: skip
        assert torch.equal(getattr(full, name), getattr(want, name)), name
    assert full.n_sequences == 60 and full.k == blocks.vocab.k
    seed = torch.Generator().manual_seed(5)
    assert torch.equal(
        got.resample(seed).Q_bar, blocks.resample(torch.Generator().manual_seed(5)).Q_bar
    )


def _rewrite(path, name, edit):
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        metadata = f.metadata()
    tensors[name] = edit(tensors[name].clone())
    save_file(tensors, path, metadata=metadata)


def _flip_low_bit(t):
    flat = t.reshape(-1)
    as_int = (
        flat.view(torch.int64)
        if t.dtype in (torch.float64, torch.int64)
        else flat.view(torch.int32)
    )
    as_int[0] ^= 1
    return t


@pytest.mark.parametrize("name", ["block2/Phi_bar", "block1/pair_counts", "G_bar", "block3/Delta"])
def test_a_flipped_bit_is_refused_naming_the_tensor(blocks, tmp_path, name):
    path = tmp_path / "b.safetensors"
    blocks.save(path)
    _rewrite(path, name, _flip_low_bit)
    with pytest.raises(LeadTermsError, match=f"tensor {name} does not match its checksum"):
        BlockStats.load(path)


def test_an_edited_header_is_refused(blocks, tmp_path):
    path = tmp_path / "b.safetensors"
    blocks.save(path)
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        header = json.loads(f.metadata()["tl_leadterms"])
    header["bounds"][0][1] += 1
    save_file(tensors, path, metadata={"tl_leadterms": json.dumps(header)})
    with pytest.raises(LeadTermsError, match="metadata does not match its checksum"):
        BlockStats.load(path)


def test_each_loader_names_the_other_for_the_other_kind(blocks, tmp_path):
    block_file, plain_file = tmp_path / "b.safetensors", tmp_path / "s.safetensors"
    blocks.save(block_file)
    blocks.full().save(plain_file)
    with pytest.raises(LeadTermsError) as err:
        CorpusStats.load(block_file)
    message = str(err.value)
    assert "per block of windows" in message and "BlockStats.load" in message
    assert "\n" not in message
    with pytest.raises(LeadTermsError) as err:
        BlockStats.load(plain_file)
    message = str(err.value)
    assert "plain statistics" in message and "CorpusStats.load" in message
    assert "block_stats" in message and "\n" not in message
    assert "--blocks B" in err.value.cli_message  # the same message in the command line's words
    assert torch.equal(CorpusStats.load(plain_file).Q_bar, BlockStats.load(block_file).full().Q_bar)
