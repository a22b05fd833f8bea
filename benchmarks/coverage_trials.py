"""What the coverage benchmark's population trials share: the configurations, the targets and
the maps scored, where the trials are cached, and each trial's intervals (read by
:mod:`benchmarks.coverage_population`, which runs and summarizes the trials,
:mod:`benchmarks.coverage_shares`, which splits their coverage by noise share, and the other
parts that reuse its models)."""

from pathlib import Path

import torch

from tl_leadterms import to_paper
from tl_leadterms.results.bootstrap import BootstrapSpec
from tl_leadterms.results.intervals import DEFAULT_METHOD, interval

__all__ = [
    "CACHE",
    "CUTS",
    "KINDS",
    "LEVELS",
    "POPULATION_CONFIGS",
    "RESAMPLES",
    "RESULTS",
    "bounds",
    "geometry",
    "map_kinds",
    "map_names",
    "paper_maps",
    "story_tokenizer",
    "story_windows",
    "target_vectors",
]

RESULTS = Path(__file__).resolve().parent / "results"
LEVELS = (0.9, 0.95)
RESAMPLES = BootstrapSpec().resamples  # the library's default, as the demo uses it

#: issue 28's configurations: the issue's size, and the demo's (``tl-leadterms demo``'s quick
#: preset: |V| 500, T 32, the paper's 3-layer model trained on 64 windows with η = 2 for 8 steps,
#: read against held-out samples of 1,024 windows in 16 blocks, as the demo does). ``windows``/
#: ``blocks``: the training sample; ``held_windows``/``held_blocks``: each held-out sample.
POPULATION_CONFIGS = {
    "issue": {"stories": 6500, "vocab": 300, "n_ctx": 32, "windows": 200, "blocks": 20,
              "held_windows": 200, "held_blocks": 20, "layers": 1, "lr": 1.0, "steps": 24,
              "truth_windows": 16_000},
    "demo": {"stories": 10000, "vocab": 500, "n_ctx": 32, "windows": 64, "blocks": 8,
             "held_windows": 1024, "held_blocks": 16, "layers": 3, "lr": 2.0, "steps": 8,
             "truth_windows": 32_000},
}  # fmt: skip
#: the demo's models and samples again, each held-out sample cut into 64 blocks of 16 windows
#: instead of 16 of 64 (paired with ``demo``: the same models, samples and truth)
POPULATION_CONFIGS["demo64"] = {**POPULATION_CONFIGS["demo"], "held_blocks": 64}
#: the demo's size again with twice the models (16, 8 held-out samples each: 128 samples), from
#: twice the stories (a tokenizer and models of their own): the demo-size cells at a smaller
#: standard error
POPULATION_CONFIGS["demo16"] = {**POPULATION_CONFIGS["demo"], "stories": 20000}


def map_names(layers: int) -> list[str]:
    return ["W_O"] + [f"{w}.{layer}" for layer in range(layers) for w in ("V", "W", "P")]


#: the cache of each configuration's trials (``name``: its key in ``POPULATION_CONFIGS``)
CACHE = "coverage_population_{name}_shares_draws.pt"
CUTS = ("windows", "documents")  # equal blocks; blocks cut where stories end (eos_id)
KINDS = ("B", "V", "W", "P")  # the targets: B̄, B̄Φ̄ᵀ (as V scores it), Q̄, Δ


def target_vectors(stats) -> list[torch.Tensor]:
    return [t.double().flatten() for t in (stats.B_bar, stats.B_bar_Phi_bar.T, stats.Q_bar,
                                             stats.Delta)]  # fmt: skip


def map_kinds(layers: int) -> list[str]:
    """The target of each map of :func:`map_names` (a key of :data:`KINDS`)."""
    return ["B"] + ["V", "W", "P"] * layers


def geometry(t: dict, layers: int) -> tuple[torch.Tensor, ...]:
    """``(‖T*‖² [R, maps], ⟨T̂, T*⟩ [R, maps], ‖T̂‖² [maps])`` of one trial: each map's
    resamples' geometry, taken from its target's (``star_sq``, ``cross``, ``norm2``)."""
    k = [KINDS.index(kind) for kind in map_kinds(layers)]
    return t["star_sq"][:, k], t["cross"][:, k], t["norm2"][k]


def bounds(t: dict, layers: int, level: float, n_blocks: int,
            method: str = DEFAULT_METHOD) -> tuple[torch.Tensor, ...]:  # fmt: skip
    """``(lo, hi, corrected)`` ``[maps]`` of one trial's intervals by ``method``."""
    return interval(t["draws"], level, method, t["estimate"], blocks=n_blocks,
                    geometry=geometry(t, layers))  # fmt: skip


def story_tokenizer(cfg: dict):
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    return train_word_tokenizer(generate_stories(cfg["stories"], seed=28), cfg["vocab"])


def story_windows(cfg: dict):
    from tl_leadterms import make_windows
    from tl_leadterms.data import generate_stories

    stories = generate_stories(cfg["stories"], seed=28)
    tokenizer = story_tokenizer(cfg)
    return make_windows(stories, n_ctx=cfg["n_ctx"], tokenizer=tokenizer), len(tokenizer)


def paper_maps(model, layers: int) -> list:
    """W_O, then V, W, P of each layer, dense (names in :func:`map_names`)."""
    pw = to_paper(model)
    return [pw.W_O.detach()] + [pw.layer_map(w, layer).detach() for layer in range(layers)
                                for w in ("V", "W", "P")]  # fmt: skip
