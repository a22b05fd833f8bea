"""Training speed of the paper model, against two baselines run in the same process.

One SGD step (forward, backward, update) on a batch of windows, for:

* ``reference``: the plain-torch paper model of tests/reference.py (one-hot inputs, dense
  products straight from docs/math.md#model);
* ``stock``: a stock TransformerLens ``HookedTransformer`` holding the same weights, with the
  identity ``W_K`` / ``W_O`` of attention and the identity embedding as frozen parameters (the
  obvious way to put the paper's model into TransformerLens 3.x; TransformerLens 4 has no
  ``HookedTransformer``, so there this baseline is left out and its entries are ``null``);
* ``paper_model``: :func:`tl_leadterms.paper_model`, whose attention skips the identities.

All three are checked to give the same loss. Also timed: ``decompose`` of the trained model and
``leading_cosines`` (what ``train(track=stats)`` calls at each logged step).

    python benchmarks/bench_paper_model.py [--d-vocab 600] [--n-ctx 64] [--batch 256]
"""

import argparse
import json
import os
import platform
import sys
import time
from importlib.metadata import version
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_stats import zipf_windows  # noqa: E402
from tests.reference import paper_loss  # noqa: E402
from tl_leadterms import corpus_stats, decompose, paper_model  # noqa: E402
from tl_leadterms.analyses.decompose import leading_cosines  # noqa: E402
from tl_leadterms.atomic import write_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def stock_model(model):
    """A stock HookedTransformer computing the same function as the paper model ``model``
    (``None`` under TransformerLens 4, which has no HookedTransformer)."""
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:
        return None
    cfg = HookedTransformerConfig(
        d_model=model.cfg.d_vocab, d_head=model.cfg.d_vocab, n_heads=1,
        n_layers=model.cfg.n_layers, n_ctx=model.cfg.n_ctx, d_vocab=model.cfg.d_vocab,
        attn_only=True, normalization_type=None, positional_embedding_type="standard",
        use_attn_scale=False, act_fn=None, init_weights=False,
    )  # fmt: skip
    stock = HookedTransformer(cfg, move_to_device=False)
    eye = torch.eye(cfg.d_model)
    with torch.no_grad():
        for p in stock.parameters():
            p.zero_()
            p.requires_grad_(False)
        stock.embed.W_E.copy_(eye)
        stock.unembed.W_U.copy_(model.unembed.W_U)
        stock.unembed.W_U.requires_grad_(True)
        for block, paper_block in zip(stock.blocks, model.blocks, strict=True):
            block.attn.W_K[0].copy_(eye)
            block.attn.W_O[0].copy_(eye)
            for name in ("W_Q", "W_V"):
                getattr(block.attn, name).copy_(getattr(paper_block.attn, name))
                getattr(block.attn, name).requires_grad_(True)
    # P as an additive score bias through a hook, so that the function is the same
    biases = [paper_block.attn.relative_bias(cfg.n_ctx, cfg.n_ctx) for paper_block in model.blocks]
    for layer, bias in enumerate(biases):
        stock.blocks[layer].attn.hook_attn_scores.add_hook(
            lambda scores, hook, b=bias: scores + b.detach().to(scores.dtype)
        )
    return stock


def tl_step(model, tokens: torch.Tensor) -> float:
    params = [p for p in model.parameters() if p.requires_grad]
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.sub_(0.1 * g)
    return float(loss.detach())


def reference_step(params: dict, tokens: torch.Tensor, d_vocab: int) -> float:
    leaves = [params["W_O"], *params["W"], *params["V"], *params["P"]]
    loss = paper_loss(tokens, params, d_vocab)
    grads = torch.autograd.grad(loss, leaves)
    with torch.no_grad():
        for p, g in zip(leaves, grads, strict=True):
            p.sub_(0.1 * g)
    return float(loss.detach())


def best_of(fn, repeats: int) -> tuple[float, float]:
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d-vocab", type=int, default=600)
    parser.add_argument("--n-ctx", type=int, default=64)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    V, T = args.d_vocab, args.n_ctx
    tokens = zipf_windows(args.batch, T, V, seed=0)
    model = paper_model(d_vocab=V, n_ctx=T, n_layers=args.layers)
    with torch.no_grad():  # small random weights so that no path is trivially zero
        gen = torch.Generator().manual_seed(0)
        for p in model.parameters():
            p.copy_(0.01 * torch.randn(p.shape, generator=gen))
    stock = stock_model(model)
    params = {
        "W_O": model.unembed.W_U.detach().clone().requires_grad_(True),
        "W": [m.detach().clone().requires_grad_(True) for m in model.W],
        "V": [m.detach().clone().requires_grad_(True) for m in model.V],
        "P": [m.detach().clone().requires_grad_(True) for m in model.P],
    }
    losses = {
        "paper_model": tl_step(model, tokens),
        "stock": None if stock is None else tl_step(stock, tokens),
        "reference": reference_step(params, tokens, V),
    }
    known = [loss for loss in losses.values() if loss is not None]
    if max(known) - min(known) > 1e-4:
        raise SystemExit(f"the models disagree: {losses}")

    timing = {
        "reference": best_of(lambda: reference_step(params, tokens, V), args.repeats)[0],
        "stock": None
        if stock is None
        else best_of(lambda: tl_step(stock, tokens), args.repeats)[0],
        "paper_model": best_of(lambda: tl_step(model, tokens), args.repeats)[0],
    }
    stats = corpus_stats(tokens, d_vocab=V, progress=False)
    timing["leading_cosines"] = best_of(lambda: leading_cosines(model, stats), args.repeats)[0]
    timing["decompose"] = best_of(lambda: decompose(model, stats, per_head=True), args.repeats)[0]
    result = {
        "case": "paper_model_step",
        "settings": vars(args),
        "seconds": timing,
        "ratio_vs_reference": timing["reference"] / timing["paper_model"],
        "ratio_vs_stock": None if stock is None else timing["stock"] / timing["paper_model"],
        "first_step_losses": losses,
        "transformer_lens": version("transformer-lens"),
        "machine": {
            "platform": platform.platform(),
            "threads": torch.get_num_threads(),
            "load_average_1min": os.getloadavg()[0],
        },
    }
    major = version("transformer-lens").split(".")[0]
    # one file per TransformerLens major: the stock baseline exists only under 3.x
    name = "paper_model_step.json" if major == "3" else f"paper_model_step_tl{major}.json"
    write_text(RESULTS / name, json.dumps(result, indent=1), parents=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
