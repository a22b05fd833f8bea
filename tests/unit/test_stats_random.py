"""Seeded random cases: every option combination against the dense reference."""

import random

import pytest

from tests.reference import dense_corpus_stats
from tests.unit.test_stats import STATS, markov_windows
from tl_leadterms import corpus_stats


def draw(seed: int) -> dict:
    rng = random.Random(seed)
    v, t, n = rng.randint(3, 30), rng.randint(2, 12), rng.randint(1, 10)
    restriction = rng.choice(["none", "list", "int"])
    kept = None
    if restriction == "list":
        kept = rng.sample(range(v), rng.randint(1, v))
    elif restriction == "int":
        kept = rng.randint(1, v)
    return {
        "v": v,
        "t": t,
        "n": n,
        "vocab": kept,
        "centre_vocab": rng.choice([None, rng.randint(1, 2 * v)]),
        "backend": rng.choice(["numba", "torch"]),
        "batch_size": rng.choice([None, 1, rng.randint(1, n)]),
        "form": rng.choice(["tensor", "numpy", "batches", "generator"]),
    }


@pytest.mark.parametrize("seed", range(40))
def test_random_case_matches_reference(seed):
    case = draw(seed)
    tokens = markov_windows(case["n"], case["t"], case["v"], seed=seed)
    forms = {
        "tensor": lambda: tokens,
        "numpy": lambda: tokens.numpy(),
        "batches": lambda: list(tokens.split(2)),
        "generator": lambda: (b for b in tokens.split(3)),
    }
    stats = corpus_stats(
        forms[case["form"]](),
        d_vocab=case["v"],
        vocab=case["vocab"],
        centre_vocab=case["centre_vocab"],
        backend=case["backend"],
        batch_size=case["batch_size"],
        progress=False,
    )
    kept = None if stats.kept is None else stats.kept.tolist()  # vocab=int: the chosen ids
    ref = dense_corpus_stats(tokens, case["v"], kept=kept, centre_vocab=case["centre_vocab"])
    for name in STATS:
        mine, theirs = getattr(stats, name), ref[name]
        # round-off floor: Q̄ and Δ are built from Ḡ, so they are compared on Ḡ's scale too
        scale = max(theirs.abs().max(), ref["G_bar"].abs().max() if name in "Q_bar Delta" else 0)
        assert (mine - theirs).abs().max() <= 1e-10 * scale + 1e-300, (name, case)
