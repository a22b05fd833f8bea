"""explore(): the numbers the page embeds, against the model and statistics read directly."""

import json
import math
import re

import pytest
import torch

from tl_leadterms import LeadTermsError, corpus_stats, explore, make_windows, paper_model, train
from tl_leadterms.analyses.attention.compute import predict_attention
from tl_leadterms.data import generate_stories, train_word_tokenizer

TEXT = "the little girl saw a red ball and she was happy"


@pytest.fixture(scope="module")
def built():
    stories = generate_stories(120, seed=5)
    tokenizer = train_word_tokenizer(stories, 200)
    windows = make_windows(stories, n_ctx=12, tokenizer=tokenizer)[:48]
    stats = corpus_stats(windows, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=12, n_layers=2, tokenizer=tokenizer)
    train(model, windows, lr=1.0, steps=4, progress=False)
    explorer = explore(model, stats, text=TEXT, words=["he"], null=None, pair_tokens=40, n=5,
                       title="</script><b>x</b>")  # fmt: skip
    return explorer, model, stats, tokenizer


def test_attention_and_prediction_data(built):
    explorer, model, stats, tokenizer = built
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    assert len(ids) == 11 < stats.n_ctx
    s = explorer.data["summary"]
    assert (s["n_layers"], s["n_heads"], len(s["tokens"])) == (2, 1, len(ids))
    _, cache = model.run_with_cache(torch.tensor([ids]))
    for layer in range(2):
        head = explorer.data["heads"][f"L{layer}H0"]
        pattern = cache["pattern", layer][0, 0].double()
        actual = head["attention"]["actual"]
        for q in range(len(ids)):  # lower triangle, per mille
            assert actual[q] == torch.round(pattern[q, : q + 1] * 1000).long().tolist()
        # what the page computes: softmax over keys 0..q of c · scores, c the head's scale
        c = head["attention"]["scale"]
        want = predict_attention(stats, torch.tensor([ids]), scale=c)[0]
        for q, row in enumerate(s["scores"]):
            got = torch.softmax(c * torch.tensor(row, dtype=torch.float64), 0)
            assert got.tolist() == pytest.approx(want[q, : q + 1].tolist(), abs=1e-4)


def test_text_keeps_its_spaces(built):
    explorer, _, _, tokenizer = built
    s = explorer.data["summary"]
    # the pieces side by side read as the text (a leading space is a no-break space)
    assert "".join(s["text"]).replace("\u00a0", " ") == tokenizer.decode(
        tokenizer.encode(TEXT, add_special_tokens=False)
    )
    assert s["text"][:2] == ["the", "\u00a0little"]
    assert s["first_word"] == "he"


def test_pair_tables(built):
    explorer, model, stats, tokenizer = built
    W = model.paper_parameters()["W.1"][0].detach().double()
    counts = stats.unigram.double()
    candidates = counts.topk(40).indices.sort().values  # full vocabulary: positions are ids
    block = W[candidates][:, candidates]
    top = block.flatten().topk(5)
    got = explorer.data["heads"]["L1H0"]["pairs"]["W"]
    for (row, col, value), v, flat in zip(got, top.values, top.indices, strict=True):
        i, j = divmod(int(flat), 40)
        assert (row, col) == tuple(tokenizer.decode([int(candidates[x])]) for x in (i, j))
        assert value == pytest.approx(float(v))
    q_bar = stats.Q_bar.double()[candidates][:, candidates].flatten().topk(5).values
    assert [p[2] for p in explorer.data["summary"]["theory"]["W"]] == pytest.approx(q_bar.tolist())


KINDS = {"bigram": "B_bar", "interchangeability": "Sigma_B", "context": "Phi_bar"}


def cosine_rows(stats, key, left_out):
    """Every row's cosine scores straight from the formula (docs: stats/neighbours.py), not
    through the package's scorer; the tokens a list leaves out are NaN."""
    M = getattr(stats, key).double()
    if key == "Sigma_B":  # a Gram matrix: the cosine of the two columns of B̄
        d = M.diagonal().clamp_min(0).sqrt()
        S = M / torch.outer(d, d)
    else:
        S = M / torch.outer(M.norm(dim=1), M.norm(dim=0))
    S = torch.nan_to_num(S, nan=0.0, posinf=0.0, neginf=0.0)  # a zero row or column scores 0
    S[:, left_out] = torch.nan
    if key == "Sigma_B":
        S.fill_diagonal_(torch.nan)  # the token itself
    return S


def check_table(words, stats, tokenizer, text_ids, n):
    """The word box's compact table against CorpusStats.top, for every kept token and each
    statistic, and its text values against :func:`cosine_rows`."""
    special = [
        p
        for p in range(stats.k)
        if tokenizer is not None and stats.vocab.token_id(p) in tokenizer.all_special_ids
    ]
    index = {stats.vocab.token_id(p): p for p in range(stats.k)}
    columns = list(dict.fromkeys(index[i] for i in text_ids if i in index))
    assert words["text"] == [columns.index(index[i]) if i in index else -1 for i in text_ids]
    assert words["scoring"] == "cosine" and "Scoring: cosine" in words["legend"]
    listed = 0
    for kind, key in KINDS.items():
        table, S = words["kinds"][kind], cosine_rows(stats, key, special)
        for p in range(stats.k):
            top = stats.top(kind, stats.vocab.token_id(p), n=n, tokenizer=tokenizer)
            if not top:
                assert table["top"][p] == table["text"][p] == table["scale"][p] == 0, (kind, p)
                continue
            listed += 1
            got, scale = table["top"][p], float(S[p].abs().nan_to_num(-1.0).max())
            assert table["scale"][p] == pytest.approx(scale, rel=1e-3)
            assert [stats.vocab.token_id(q) for q in got[::2]] == [t.token_id for t in top]
            assert [v / 100 * scale for v in got[1::2]] == pytest.approx(
                [t.score for t in top], abs=0.0051 * scale
            )
            want = [
                None if math.isnan(x) else round(100 * x / scale) for x in S[p, columns].tolist()
            ]
            assert [None if v is None else pytest.approx(v, abs=1)
                    for v, w in zip(table["text"][p], want, strict=True)] == want  # fmt: skip
    assert listed > stats.k  # most rows of each statistic have lists


def test_the_word_box_answers_every_kept_token_as_corpus_stats_top(built):
    explorer, _, stats, tokenizer = built
    words = explorer.data["words"]
    assert words["tokens"] == [tokenizer.decode([i]) for i in range(stats.k)]
    assert words["counts"] == stats.unigram_counts.tolist()
    assert bool((stats.unigram_counts[tokenizer.all_special_ids] > 0).any())  # left out
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    check_table(words, stats, tokenizer, ids, n=5)


def test_the_word_box_of_restricted_statistics_reads_kept_positions():
    from tests.unit.test_reference import markov_tokens
    from tl_leadterms.explorer.data import neighbour_table

    tokens = markov_tokens(80, 10, 23, seed=7)
    stats = corpus_stats(tokens, d_vocab=23, vocab=15, progress=False)
    text = [*tokens[0, :8].tolist(), *(i for i in range(23) if i not in stats.kept.tolist())]
    words = neighbour_table(stats, text, lambda ids: [f"t{i}" for i in ids], 4, None)
    assert words["tokens"] == [f"t{i}" for i in stats.kept.tolist()] and -1 in words["text"]
    check_table(words, stats, None, text, n=4)


def test_page_is_offline_and_escaped(built, tmp_path):
    explorer = built[0]
    page = explorer.save(tmp_path / "e.html").read_text(encoding="utf-8")
    assert "<b>x</b>" not in page and "&lt;/script&gt;&lt;b&gt;" in page
    assert page.count("CircuitsVis=") <= 1 and not re.search(r"<script[^>]+src=", page)
    blocks = re.findall(r'<script type="application/json" class="tl-head" data-head="(\w+)">'
                        r"(.*?)</script>", page, re.S)  # fmt: skip
    assert [b[0] for b in blocks] == ["L0H0", "L1H0"]
    assert json.loads(blocks[1][1])["W"]["cosine"] == explorer.data["heads"]["L1H0"]["W"]["cosine"]
    inline = explorer._repr_html_()
    assert inline.startswith('<iframe class="tl-explorer" id="tl-explorer-')
    frame_id = re.match(r'<iframe class="tl-explorer" id="([\w-]+)"', inline).group(1)
    # the host follows the page's height, only for messages from this frame's own window
    assert f'getElementById("{frame_id}")' in inline and "e.source!==f.contentWindow" in inline
    fixed = explorer.iframe(height=500)
    # a fixed height: the host tells the frame its theme, and follows no height
    assert "height:500px" in fixed and "tl_theme" in fixed and "if(false&&" in fixed


def test_bad_input(built):
    _, model, stats, _ = built
    with pytest.raises(LeadTermsError, match=r"explore needs a text .*or text=\[token ids\]"):
        explore(model, stats)
    with pytest.raises(LeadTermsError, match=r"text must be a \[pos\] integer .*torch\.float64"):
        explore(model, stats, text=[1.5, 2.0])
    with pytest.raises(LeadTermsError, match="pair_tokens must be"):
        explore(model, stats, text=TEXT, pair_tokens=0)


@pytest.mark.parametrize("progress", [True, False])
def test_progress_is_passed_down(built, monkeypatch, progress):
    import tl_leadterms.explorer.build as build

    _, model, stats, _ = built
    seen = {}

    def spy(name):
        real = getattr(build, name)

        def call(*args, **kwargs):
            seen[name] = kwargs["progress"]
            return real(*args, **kwargs)

        monkeypatch.setattr(build, name, call)

    for name in ("decompose", "attention_data", "pair_tables"):
        spy(name)
    explore(model, stats, text=TEXT, null=None, pair_tokens=20, n=3, progress=progress)
    assert seen == dict.fromkeys(("decompose", "attention_data", "pair_tables"), progress)


def test_report_embeds_the_explorer(built, tmp_path):
    from tl_leadterms import decompose
    from tl_leadterms.reports import report

    explorer, model, stats, _ = built
    d = decompose(model, stats, per_head=True)
    out = report(tmp_path / "r.html", explorer, d, stats=stats,
                 progress=False).read_text(encoding="utf-8")  # fmt: skip
    section = out[out.index('<section id="explorer">') :]
    frame = section.index('<iframe class="tl-explorer" id="tl-explorer-')
    assert frame < section.index('<table class="heatmap"')  # the order given: above the heatmaps
    assert "tl-summary" in section[frame : frame + 2_000_000]
    with pytest.raises(LeadTermsError, match="report takes results that render a section"):
        report(tmp_path / "r2.html", d, "explorer", progress=False)


@pytest.mark.hooked
@pytest.mark.parametrize("gemm_dtype", [torch.float64, torch.float32])
def test_pairs_of_a_model_with_embeddings_read_its_parameters(gemm_dtype):
    """The pair tables of a model with embeddings (read through its shared outer factors,
    restricted to the candidate tokens) against each head's map built from the parameters in
    float64; with ``gemm_dtype=torch.float32`` the values stay within the library's tolerance
    (1e-6 of the block's largest entry)."""
    from tests.factories import markov_tokens, random_attn_only

    V, T = 23, 9
    tokens = markov_tokens(80, T + 1, V, seed=7)
    stats = corpus_stats(tokens, d_vocab=V, vocab=15, progress=False)  # restricted
    model = random_attn_only(V, T, seed=4)
    if gemm_dtype == torch.float64:  # the explorer's own tables (float64, its only dtype)
        explorer = explore(model, stats, text=tokens[0, :T], null=None, pair_tokens=8, n=4)
        tables = {label: head["pairs"] for label, head in explorer.data["heads"].items()}
    else:  # the precision benchmark's float32 products, through the function it times
        from tl_leadterms.adapters.convert import weights_for_stats
        from tl_leadterms.explorer.data import pair_tables

        labels = lambda ids: [str(int(i)) for i in ids]  # noqa: E731
        tables = pair_tables(weights_for_stats(model, stats), stats, labels, pair_tokens=8, k=4,
                             gemm_dtype=gemm_dtype)["heads"]  # fmt: skip
    positions = stats.unigram.double().topk(8).indices.sort().values
    ids = stats.kept[positions]
    W_E, W_U = model.W_E.detach().double()[ids], model.W_U.detach().double()[:, ids]
    for layer in range(2):
        attn = model.blocks[layer].attn
        for h in range(3):
            W_Q, W_K = attn.W_Q[h].detach().double(), attn.W_K[h].detach().double()
            W_V, W_O = attn.W_V[h].detach().double(), attn.W_O[h].detach().double()
            maps = {"W": W_E @ W_Q @ W_K.T @ W_E.T / model.cfg.d_head**0.5,
                    "V": W_E @ W_V @ W_O @ W_U}  # fmt: skip
            got = tables[f"L{layer}H{h}"]
            for name, M in maps.items():
                top = M.flatten().topk(4)
                want = [
                    [str(int(ids[i])), str(int(ids[j])), float(v)]
                    for v, (i, j) in zip(
                        top.values, (divmod(int(f), 8) for f in top.indices), strict=True
                    )
                ]
                assert [p[:2] for p in got[name]] == [w[:2] for w in want], (layer, h, name)
                scale = float(M.abs().max())
                assert [p[2] for p in got[name]] == pytest.approx(
                    [w[2] for w in want], rel=1e-5 if gemm_dtype == torch.float64 else 0,
                    abs=1e-6 * scale,
                )  # fmt: skip
