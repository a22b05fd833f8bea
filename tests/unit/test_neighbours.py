"""CorpusStats.top scorings against plain computations."""

import math

import pytest
import torch

from tests.factories import markov_tokens
from tl_leadterms import LeadTermsError, corpus_stats

V = 12


@pytest.fixture(scope="module")
def stats():
    tokens = markov_tokens(80, 7, V - 1, seed=6)  # token V-1 never occurs
    return corpus_stats(tokens, d_vocab=V, progress=False)


def _plain(M: torch.Tensor, i: int, scoring: str, gram: bool) -> list[float]:
    M = M.double()
    out = []
    for j in range(M.shape[1]):
        if scoring == "raw":
            out.append(float(M[i, j]))
        elif scoring == "cosine" and gram:
            d = math.sqrt(float(M[i, i]) * float(M[j, j]))
            out.append(float(M[i, j]) / d if d > 0 else 0.0)
        elif scoring == "cosine":
            d = float(M[i].norm()) * float(M[:, j].norm())
            out.append(float(M[i, j]) / d if d > 0 else 0.0)
        else:
            P = M.clamp(min=0)
            if float(P[i, j]) == 0:
                out.append(0.0)
                continue
            value = float(P[i, j]) * float(P.sum()) / (float(P[i].sum()) * float(P[:, j].sum()))
            out.append(max(0.0, math.log(value)))
    return out


@pytest.mark.parametrize("scoring", ["raw", "cosine", "ppmi"])
@pytest.mark.parametrize("name", ["B_bar", "Sigma_B", "Phi_bar"])
def test_scorings_match_plain(stats, scoring, name):
    M = stats.matrix(name)
    for token in (0, 3):
        want = _plain(M, token, scoring, name == "Sigma_B")
        got = stats.top(name, token, n=5, scoring=scoring, exclude=[1])
        assert got.scoring == scoring and len(got) == 5
        candidates = [(v, j) for j, v in enumerate(want)
                      if j != 1 and not (name == "Sigma_B" and j == token)]  # fmt: skip
        best = sorted(candidates, reverse=True)[:5]
        assert [n.score for n in got] == pytest.approx([v for v, _ in best], abs=1e-12)
        assert 1 not in [n.token_id for n in got]


def test_unseen_token_says_so(stats):
    out = stats.top("Sigma_B", V - 1, scoring="cosine")
    assert len(out) == 0 and "never occurs" in out.note and "never occurs" in repr(out)


def test_bad_scoring_and_exclude(stats):
    with pytest.raises(LeadTermsError, match="scoring"):
        stats.top("B_bar", 0, scoring="tfidf")
    with pytest.raises(LeadTermsError, match="special"):
        stats.top("B_bar", 0, exclude="specials")


def test_default_is_cosine_without_special_tokens_and_raw_is_one_keyword_away(stats):
    # no tokenizer: "special" (the default) leaves nothing out, as bare token ids have none
    assert stats.top("B_bar", 0) == stats.top("B_bar", 0, scoring="cosine", exclude=())
    assert stats.top("B_bar", 0).scoring == "cosine"
    raw = stats.top("B_bar", 0, scoring="raw")
    expected = torch.sort(stats.B_bar[0], descending=True, stable=True).indices[: len(raw)]
    expected = expected.tolist()  # equal scores in index order
    assert [x.token_id for x in raw] == expected and raw.scoring == "raw"


def test_best_is_the_stable_sort_of_the_finite_entries():
    """``best`` (topk, then a sort of what reaches the cut) against a plain stable ranking:
    rows full of ties and of left-out (−inf) entries, every k."""
    from tl_leadterms.stats.neighbours import best

    g = torch.Generator().manual_seed(3)
    for _ in range(50):
        row = torch.randint(-2, 3, (40,), generator=g).double()
        row[torch.rand(40, generator=g) < 0.3] = -torch.inf
        finite = [j for j in range(40) if row[j] > -torch.inf]
        want = sorted(finite, key=lambda j: (-float(row[j]), j))
        for k in (1, 3, 8, 40, 50):
            assert best(row, k) == [(float(row[j]), j) for j in want[:k]]
