"""The architecture matrix: a tiny random model of every family, saved offline with
``save_pretrained`` and loaded by :func:`tl_leadterms.load_model`, agrees with Hugging Face and
runs the analyses and ``tl-leadterms decompose``.

Each family is built once (module scope); sizes are tiny so the whole matrix stays cheap.
"""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from tl_leadterms import (
    attention_agreement,
    corpus_stats,
    covariance_similarity,
    decompose,
    load_model,
    to_paper,
)
from tl_leadterms.adapters import factored
from tl_leadterms.analyses.covariance import token_maps
from tl_leadterms.cli import main
from tl_leadterms.loading.tiny import MODEL_FAMILIES, save_tiny_model

pytestmark = pytest.mark.models

D_VOCAB, N_LAYERS, D_MODEL, N_HEADS, N_CTX = 96, 2, 32, 4, 32
# family -> key/value heads (None: one per query head); what each family stresses
KV_HEADS = {
    "gpt2": None,  # learned positions, Conv1D weights, LayerNorm
    "gpt_neox": None,  # Pythia: rotary on a quarter of each head, parallel attention and MLP
    "llama": 2,  # RMSNorm, gated MLP, grouped-query attention
    "mistral": 2,  # grouped-query attention
    "qwen2": 2,  # attention biases, grouped-query attention
    "qwen3": 2,  # query/key norms
    "gemma": 1,  # embedding scale, RMSNorm offset, multi-query attention
    "gemma2": 2,  # soft caps, sliding window, norms after each block
    "opt": None,  # learned positions with offset, LayerNorm
    "gptj": None,  # partial rotary on adjacent pairs, parallel attention and MLP
    "phi": None,  # partial rotary, parallel attention and MLP
    "phi3": 2,  # fused qkv and gate/up projections
    "bloom": None,  # ALiBi, LayerNorm after the embedding
    "gpt_neo": None,  # alternating global and local attention, no attention scale
}


def test_every_family_is_in_the_matrix():
    assert set(KV_HEADS) == set(MODEL_FAMILIES)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """family -> (folder, converted HookedTransformer), built on first use."""
    cache = {}

    def get(family):
        if family not in cache:
            folder = save_tiny_model(
                family, tmp_path_factory.mktemp(family), d_vocab=D_VOCAB, n_layers=N_LAYERS,
                d_model=D_MODEL, n_heads=N_HEADS, n_kv_heads=KV_HEADS[family], n_ctx=N_CTX,
                seed=3,
            )  # fmt: skip
            cache[family] = folder, load_model(folder, device="cpu")
        return cache[family]

    return get


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(0, D_VOCAB, (40, 17), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def stats(tokens):
    return corpus_stats(tokens, d_vocab=D_VOCAB, progress=False)


@pytest.fixture(scope="module")
def stats_file(stats, tmp_path_factory):
    path = tmp_path_factory.mktemp("stats") / "stats.safetensors"
    stats.save(path)
    return path


@pytest.mark.hooked
@pytest.mark.parametrize("family", list(KV_HEADS))
def test_log_probs_match_hugging_face(built, tokens, family):
    folder, model = built(family)
    hf = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    config = json.loads((folder / "config.json").read_text())
    assert model.cfg.original_architecture == config["architectures"][0]
    want_kv = KV_HEADS[family]
    if want_kv is not None:
        assert model.cfg.n_key_value_heads == want_kv
    batch = tokens[:3, :24]  # longer than gemma2's sliding window (8)
    with torch.no_grad():
        got = model(batch).log_softmax(-1)
        want = hf(batch).logits.log_softmax(-1)
    assert got.dtype == torch.float32
    assert (got - want).abs().max() < 1e-4


@pytest.mark.hooked
@pytest.mark.parametrize("family", list(KV_HEADS))
def test_analyses_run(built, stats, tokens, family):
    _, model = built(family)
    cov = covariance_similarity(model, stats, progress=False)
    assert [r["layer"] for r in cov.rows if r["score"] == "attention"] == list(range(N_LAYERS))
    values = torch.tensor([r["value"] for r in cov.rows])
    assert torch.isfinite(values).all() and (values.abs() <= 1 + 1e-6).all()
    maps = token_maps(model, [1, 5, 7], progress=False)
    assert maps.resid_post.shape == (N_LAYERS, 3, D_MODEL)
    # a length-1 sequence: the first block's input is the token's embedding (plus position 0)
    want = model.W_E[[1, 5, 7]].detach()
    if model.cfg.positional_embedding_type == "standard":
        want = want + model.W_pos[0].detach()
    if not model.cfg.post_embedding_ln:  # BLOOM normalises the embedding first
        assert torch.allclose(maps.resid_pre[0], want, atol=1e-5)
    agree = attention_agreement(model, stats, tokens[:2, :8], schedule=(0.1, 10), progress=False)
    assert len(agree.rows) == N_LAYERS * N_HEADS
    assert all(0.0 <= r["js_divergence"] <= 0.7 for r in agree.rows)


@pytest.mark.hooked
@pytest.mark.parametrize("family", list(KV_HEADS))
def test_to_paper_and_decompose(built, stats, family):
    """Per head and per layer; the factored/shared-factor rows equal materialised maps."""
    _, model = built(family)
    pw = to_paper(model)
    per_head = decompose(model, stats, per_head=True)
    per_layer = decompose(model, stats, per_head=False)
    assert {r["weight"] for r in per_head.rows} >= {"W_O", "V·W_O", "W"}
    assert len([r for r in per_head.rows if r["weight"] == "W"]) == N_LAYERS * N_HEADS
    assert len([r for r in per_layer.rows if r["weight"] == "W"]) == N_LAYERS
    G, Q = stats.G_bar.T.double(), stats.Q_bar.double()
    for layer in range(N_LAYERS):
        V = factored.materialise(pw.V[layer]).double()
        W = factored.materialise(pw.W[layer]).double()
        for head in range(N_HEADS):
            for weight, dense, target in (("V·W_O", V[head], G), ("W", W[head], Q)):
                cosine = float((dense * target).sum() / (dense.norm() * target.norm()))
                row = per_head.row(weight, layer, head)
                assert row["cosine"] == pytest.approx(cosine, rel=1e-5, abs=1e-7)
        summed = float((V.sum(0) * G).sum() / (V.sum(0).norm() * G.norm()))
        assert per_layer.row("V", layer)["cosine"] == pytest.approx(summed, rel=1e-5, abs=1e-7)


@pytest.mark.hooked
@pytest.mark.parametrize("family", list(KV_HEADS))
def test_cli_decompose_report_sweep(built, stats_file, tmp_path, family, capsys):
    folder, _ = built(family)
    out = tmp_path / "decompose.json"
    code = main(["decompose", str(folder), str(stats_file), "-o", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    rows = json.loads(out.read_text())["rows"]
    assert {r["weight"] for r in rows} >= {"W_O", "V·W_O", "W"}
    assert {r["layer"] for r in rows if r["weight"] == "V·W_O"} == set(range(N_LAYERS))
    page = tmp_path / "report.html"
    code = main(["report", str(stats_file), "--model", str(folder), "-o", str(page), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert page.read_text().count('class="decompose-row"') == len(rows)
    table = tmp_path / "sweep.csv"
    code = main(["sweep", str(folder), str(stats_file), "--out", str(table), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert len(table.read_text().strip().splitlines()) > 1
