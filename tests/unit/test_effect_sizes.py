"""Effect sizes beside every null, token-specific (double-centred) scores, q-values.

Every expected value here is written plainly from the definitions: covariances built densely,
double-centred with ``H = I − 11ᵀ/n``, q-values by the Benjamini–Hochberg step-up rule.
"""

import math

import pytest
import torch

from tests.factories import markov_tokens
from tl_leadterms import corpus_stats, decompose, paper_model, train
from tl_leadterms.adapters import factored, to_paper
from tl_leadterms.analyses.attention.compute import attention_agreement
from tl_leadterms.analyses.covariance.compute import covariance_similarity
from tl_leadterms.loading.checkpoint import load_model
from tl_leadterms.loading.tiny import save_tiny_model
from tl_leadterms.results.null import permutations, qvalues, summarize

V, T = 24, 8


@pytest.fixture(scope="module")
def tokens():
    return markov_tokens(120, T + 1, V, seed=11)


@pytest.fixture(scope="module")
def stats(tokens):
    return corpus_stats(tokens, d_vocab=V, progress=False)


@pytest.fixture(scope="module")
def kept_stats(tokens):
    kept = torch.randperm(V, generator=torch.Generator().manual_seed(2))[:17].tolist()
    return corpus_stats(tokens, d_vocab=V, vocab=kept, progress=False)


@pytest.fixture(scope="module")
def trained(tokens):
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=2)
    train(model, tokens, lr=2.0, steps=6, progress=False)
    return model


@pytest.fixture(scope="module")
def neox(tmp_path_factory):
    folder = save_tiny_model("gpt_neox", tmp_path_factory.mktemp("neox"), d_vocab=V,
                             n_layers=2, d_model=16, n_heads=2, n_ctx=T)  # fmt: skip
    return load_model(folder, device="cpu")


# ---- the dense reference, from the definitions -------------------------------------------


def _cov(M: torch.Tensor, scale_rows: bool) -> torch.Tensor:
    """M̃M̃ᵀ with M̃ = M (rows scaled to unit norm if asked) minus its row means."""
    M = M.detach().double()
    if scale_rows:
        norms = M.norm(dim=1, keepdim=True)
        M = torch.where(norms > 0, M / norms, torch.zeros_like(M))
    Mc = M - M.mean(dim=1, keepdim=True)
    return Mc @ Mc.T


def _double_centre(C: torch.Tensor) -> torch.Tensor:
    n = C.shape[0]
    H = torch.eye(n, dtype=C.dtype) - torch.full((n, n), 1.0 / n, dtype=C.dtype)
    return H @ C @ H


def _cos(A: torch.Tensor, B: torch.Tensor) -> float:
    A, B = A.detach(), B.detach()
    return float((A * B).sum() / (A.norm() * B.norm()))


def _share(specific_part: float, whole: float) -> float:
    """The common part's share of the two parts' sizes: |c| / (|s| + |c|), c = whole − s."""
    common = whole - specific_part
    return abs(common) / (abs(specific_part) + abs(common))


def _reference_scores(C_model: torch.Tensor, C_theory: torch.Tensor) -> dict[str, float]:
    Mc, Tc = _double_centre(C_model), _double_centre(C_theory)
    return {
        "raw": _cos(C_model, C_theory),
        "specific": _cos(Mc, Tc),
        "common_share": _share(float((Mc * Tc).sum()), float((C_model * C_theory).sum())),
    }


def _model_maps(model, stats, value_map: str):
    """Per layer: (E_pre W E_preᵀ, per-head maps, E_post, E_attn) from run_with_cache."""
    ids = stats.kept if stats.kept is not None else torch.arange(stats.d_vocab)
    with torch.no_grad():
        _, cache = model.run_with_cache(ids[:, None])
    out = []
    for layer in range(model.cfg.n_layers):
        pre = cache[f"blocks.{layer}.hook_resid_pre"][:, 0].double()
        post = cache[f"blocks.{layer}.hook_resid_post"][:, 0].double()
        attn = pre + cache[f"blocks.{layer}.hook_attn_out"][:, 0].double()
        if value_map == "write":
            post, attn = post - pre, attn - pre
        W_Q, W_K = model.W_Q[layer].detach().double(), model.W_K[layer].detach().double()
        heads = [pre @ W_Q[h] @ W_K[h].T @ pre.T for h in range(W_Q.shape[0])]
        out.append((sum(heads) / len(heads), heads, post, attn))
    return out


def _reference(model, stats, normalize: str, value_map: str) -> dict:
    both = normalize == "both"
    C_Q, C_V = _cov(stats.Q_bar, True), _cov(stats.B_bar_Phi_bar.T, True)
    out = {}
    for layer, (A, heads, post, attn) in enumerate(_model_maps(model, stats, value_map)):
        out[("attention", layer, None)] = _reference_scores(_cov(A, both), C_Q)
        out[("value_post", layer, None)] = _reference_scores(_cov(post, both), C_V)
        out[("value_attn", layer, None)] = _reference_scores(_cov(attn, both), C_V)
        for h, A_h in enumerate(heads):
            out[("attention", layer, h)] = _reference_scores(_cov(A_h, both), C_Q)
    return out


# ---- covariance protocol: raw and token-specific rows ----------------------------------------


def _check(model, stats, normalize, value_map):
    ref = _reference(model, stats, normalize, value_map)
    sim = covariance_similarity(model, stats, normalize=normalize, value_map=value_map,
                                per_head=True, progress=False)  # fmt: skip
    got = {(r["score"], r["layer"], r["head"]): r for r in sim.rows}
    specific = {(f"{s}_specific", layer, head) for s, layer, head in ref}
    assert got.keys() == ref.keys() | specific
    for (score, layer, head), want in ref.items():
        raw, tok = got[(score, layer, head)], got[(f"{score}_specific", layer, head)]
        assert raw["value"] == pytest.approx(want["raw"], abs=1e-7), (score, layer, head)
        assert tok["value"] == pytest.approx(want["specific"], abs=1e-7), (score, layer, head)
        assert raw["common_share"] == pytest.approx(want["common_share"], abs=1e-6)
        assert 0 <= raw["common_share"] <= 1 and "common_share" not in tok
    # the former centre= changes nothing: both scores are rows either way
    again = covariance_similarity(model, stats, normalize=normalize, value_map=value_map,
                                  per_head=True, centre="tokens", progress=False)  # fmt: skip
    assert again.rows == sim.rows


@pytest.mark.parametrize(("normalize", "value_map"), [("theory", "post"), ("both", "write")])
def test_token_centred_scores_match_dense_reference_paper_model(trained, stats, normalize,
                                                                value_map):  # fmt: skip
    _check(trained, stats, normalize, value_map)


@pytest.mark.parametrize("normalize", ["theory", "both"])
def test_token_centred_scores_match_dense_reference_neox(neox, kept_stats, normalize):
    # 2 heads of 8 = d_model 16: the concatenated route ("theory": per-head blocks of one pass)
    _check(neox, kept_stats, normalize, "write" if normalize == "both" else "post")


@pytest.mark.parametrize("kind", ["raw", "specific"])
def test_each_row_has_the_null_of_its_own_score(trained, stats, kind):
    R, seed = 5, 0  # null=R draws from seed 0
    sim = covariance_similarity(trained, stats, layers=[1], null=R, normalize="both",
                                value_map="write", progress=False)  # fmt: skip
    name = "value_post" + ("_specific" if kind == "specific" else "")
    row = next(r for r in sim.rows if r["score"] == name)
    # the null relabels the theory's tokens: the model's covariance re-indexed by each draw
    _, _, post, _ = _model_maps(trained, stats, "write")[1]
    C_M, C_T = _cov(post, True), _cov(stats.B_bar_Phi_bar.T, True)
    draws = [_reference_scores(C_M[p][:, p], C_T)[kind]
             for p in permutations(stats.k, R, seed)]  # fmt: skip
    assert row["null_mean"] == pytest.approx(sum(draws) / R, abs=1e-9)
    assert row["excess"] == pytest.approx(row["value"] - row["null_mean"], abs=1e-12)
    room = max(row["value"] - row["null_mean"], 0) / (1 - row["null_mean"])
    assert row["excess_share"] == pytest.approx(room, abs=1e-12)
    assert 0 < row["q"] <= 1 and row["q"] >= row["p"]
    for r in sim.rows:  # every row of a call with null= has the effect size, q and a verdict
        assert {"excess", "excess_share", "q", "verdict"} <= set(r)


def test_planted_token_specific_signal_has_large_specific_score_and_excess(stats):
    # a model whose value write equals the theory's Φ̄ᵀB̄ᵀ row for row: the signal is token
    # specific; a model whose rows all write one shared vector carries only the common part
    planted = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    common = paper_model(d_vocab=V, n_ctx=T, n_layers=1)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        planted.blocks[0].attn.W_V.copy_(stats.B_bar_Phi_bar.T[None])
        shared = torch.randn(1, V, generator=g) + 0.01 * torch.randn(V, V, generator=g)
        common.blocks[0].attn.W_V.copy_(shared[None].expand(1, V, V))
    kw = dict(normalize="both", value_map="write", null=19, progress=False)
    p_tok = covariance_similarity(planted, stats, **kw).row("value_post_specific", 0)
    c_sim = covariance_similarity(common, stats, **kw)
    c_raw, c_tok = c_sim.row("value_post", 0), c_sim.row("value_post_specific", 0)
    # (the null keeps ~0.36 here: permuting tokens keeps a covariance's equal diagonal)
    assert p_tok["value"] == pytest.approx(1.0, abs=1e-6) and p_tok["excess"] > 0.5
    assert p_tok["p"] == pytest.approx(1 / 20)
    # the shared vector scores the raw protocol as high as the theory's own common part allows
    # and the null explains all of it; what is left once it is removed is noise, at its null
    assert c_raw["common_share"] > 0.99 and c_raw["value"] > 0.4 and abs(c_raw["excess"]) < 0.01
    assert abs(c_tok["excess"]) < 0.1 < 0.5 < p_tok["excess"]
    # the table says the raw score is mostly what every token shares, and the rule calls it so
    assert c_raw["verdict"] == "negligible" and p_tok["verdict"] != "negligible"
    assert "value_post L0" in c_sim.notes()[-1] and "common_share ≥ 0.9" in repr(c_sim)


# ---- decompose: the common direction of a map -------------------------------------------------


def _map_reference(M: torch.Tensor, Tm: torch.Tensor) -> tuple[float, float]:
    M, Tm = M.detach().double(), Tm.detach().double()
    Mc, Tc = _double_centre_rect(M), _double_centre_rect(Tm)
    return _cos(Mc, Tc), _share(float((Mc * Tc).sum()), float((M * Tm).sum()))


def _double_centre_rect(M: torch.Tensor) -> torch.Tensor:
    return M - M.mean(1, keepdim=True) - M.mean(0, keepdim=True) + M.mean()


def _dense_rows(model, stats):
    """(weight, layer, head) -> dense restricted map and its leading term."""
    pw = to_paper(model)
    kept = stats.kept if stats.kept is not None else torch.arange(stats.d_vocab)
    targets = {"W_O": stats.B_bar, "W": stats.Q_bar, "V": stats.B_bar_Phi_bar.T}
    targets["V·W_O"] = stats.Phi_bar.T @ stats.Sigma_B  # Φ̄ᵀΣ_B̄
    out = {("W_O", None, None): (factored.materialise(pw.W_O), targets["W_O"])}
    for layer in range(pw.n_layers):
        maps = {"W": pw.W[layer], pw.value_weight: pw.V[layer]}
        for weight, M in maps.items():
            dense = factored.materialise(M)
            for h in range(dense.shape[0]):
                out[(weight, layer, h)] = (dense[h], targets[weight])
    return {key: (M[kept][:, kept], Tm) for key, (M, Tm) in out.items()}


@pytest.mark.parametrize("which", ["paper", "neox"])
def test_decompose_specific_and_common_share_match_dense_reference(which, trained, neox, stats,
                                                                   kept_stats):  # fmt: skip
    model, s = (trained, stats) if which == "paper" else (neox, kept_stats)
    d = decompose(model, s, per_head=True)
    dense = _dense_rows(model, s)
    checked = 0
    for r in d.rows:
        if r["weight"] == "P":
            assert "specific" not in r and "common_share" not in r
            continue
        M, Tm = dense[(r["weight"], r["layer"], r["head"])]
        specific, share = _map_reference(M, Tm)
        assert r["specific"] == pytest.approx(specific, abs=1e-7), (r["weight"], r["label"])
        assert r["common_share"] == pytest.approx(share, abs=1e-6), (r["weight"], r["label"])
        checked += 1
    assert checked == len([r for r in d.rows if r["weight"] != "P"]) >= 5


# ---- q-values and the effect-size columns -----------------------------------------------------


def _bh_reference(p: list[float]) -> list[float]:
    """q_i = min over j with p_j ≥ p_i of p_j·m/rank_j (capped at 1), NaN left out."""
    finite = [v for v in p if not math.isnan(v)]
    m = len(finite)
    ranked = sorted(finite)
    out = []
    for v in p:
        if math.isnan(v):
            out.append(math.nan)
            continue
        candidates = [ranked[j] * m / (j + 1) for j in range(m) if ranked[j] >= v]
        out.append(min(1.0, min(candidates)))
    return out


def test_qvalues_match_the_step_up_rule():
    g = torch.Generator().manual_seed(4)
    p = [*torch.rand(40, generator=g).pow(3).tolist(), math.nan, 0.05, 0.05, 1.0]
    got, want = qvalues(p), _bh_reference(p)
    assert [math.isnan(v) for v in got] == [math.isnan(v) for v in want]
    assert [v for v in got if not math.isnan(v)] == pytest.approx(
        [v for v in want if not math.isnan(v)], abs=1e-15
    )
    # every row floored at p = 1/(R+1) among many with larger p is no discovery
    floored = [1 / 20] * 3 + [0.5] * 97
    assert min(qvalues(floored)) == pytest.approx(0.5)  # q > 0.05: nothing stands out


def test_summarize_excess_and_share():
    draws = torch.tensor([0.90, 0.91, 0.92], dtype=torch.float64)
    s = summarize(0.96, draws)
    assert s["excess"] == pytest.approx(0.05) and s["excess_share"] == pytest.approx(0.05 / 0.09)
    assert math.isnan(summarize(0.5, torch.ones(3, dtype=torch.float64))["excess_share"])
    assert math.isnan(summarize(0.5, draws, upper=None)["excess_share"])
    # below its null a score takes none of the room above it: 0, not a negative share
    assert summarize(0.5, draws)["excess_share"] == 0.0
    # a null within NEGLIGIBLE (0.01) of the bound leaves no room to share: undefined
    near = torch.tensor([0.9995, 0.9996, 0.9997], dtype=torch.float64)
    assert math.isnan(summarize(0.9999, near)["excess_share"])


def test_attention_agreement_null_has_excess_and_q(trained, stats, tokens):
    agree = attention_agreement(trained, stats, tokens[:4, :T], schedule=(2.0, 6), null=5)
    for r in agree.rows:
        assert r["excess"] == pytest.approx(r["rank_correlation"] - r["null_mean"])
        assert r["q"] >= r["p"]


def test_decompose_null_has_excess_q_and_repr_leads_with_excess(trained, stats):
    d = decompose(trained, stats, null=9, per_head=True)
    for r in d.rows:
        if r["weight"] != "P":
            assert r["excess"] == pytest.approx(r["cosine"] - r["null_mean"])
            assert r["q"] >= r["p"]
    header = repr(d).splitlines()[1]
    assert header.index("excess") < header.index("specific") < header.index("z")
    # the effect, the evidence, then the rest (the common share among the details)
    assert header.index("z") < header.index("q") < header.index("verdict") < header.index("common")
