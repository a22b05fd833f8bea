"""output_agreement at a real model's size against a naive version; the monitor's overhead.

* ``output_agreement`` on the real-size benchmark model of ``bench_real_sizes.py`` (30 layers,
  9 query heads, d_vocab 49,152; statistics of Zipf windows restricted to the k = 5,000 most
  frequent tokens) on ``--windows`` held-out windows of 128 tokens, the leading-term model as
  deep as the model (and, second, the one-layer form of the paper's Eq. 12). The naive
  version builds what :func:`tl_leadterms.models.leading_model` would hold — a ``[k, k]`` ``W`` and
  ``V`` for every layer, in the statistics' float64 — and runs the dense one-hot forward
  (``h W hᵀ``, ``h V``, ``h W_O`` as full products, layer 1 included). The fast one is
  ``output_agreement`` itself: the leading-term model by the expansion of
  :mod:`tl_leadterms.analyses.output.predictors` (a basis of a few ``[u, k] × [k, k]`` products for
  the ``u`` distinct tokens of the windows, then ``[T, T]`` work per layer) when that is
  cheaper than its plain float32 forward; the route and the number of terms kept are recorded.
  Every fast call starts cold (the shared predictor cache is cleared first). Both score the
  same model log-probabilities; the KLs are checked to agree. The theory side alone (no model
  forward) is timed the same way.
* The monitor's overhead on the demo's training run (``tl-leadterms demo``: the paper's 3-layer
  model on the demo's word vocabulary, T = 32, 64 windows, full-batch GD at η = 1, here
  ``--train-steps`` steps): ``LeadingTermMonitor(every=8)`` with cosines and ``output`` on 8
  held-out windows; its time (timed by the monitor) against the rest of the same run.

    python benchmarks/bench_output.py [--k 5000] [--layers 30] [--windows 8] [--depths 30 1]
        [--train-steps 64] [--repeats 1] [--skip agreement|monitor] [--note TEXT]
"""

import argparse
import json
import math
import os
import platform
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_real_sizes import model_and_stats  # noqa: E402
from tl_leadterms import (  # noqa: E402
    corpus_stats,
    make_windows,
    output_agreement,
    paper_model,
    train,
)
from tl_leadterms.analyses import predictors  # noqa: E402
from tl_leadterms.analyses.output.compute import model_log_probs  # noqa: E402
from tl_leadterms.analyses.output.predictors import LeadingPredictor, with_bucket  # noqa: E402
from tl_leadterms.sweeps.monitor import LeadingTermMonitor  # noqa: E402
from tl_leadterms.theory import Schedule, term  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


@torch.no_grad()
def naive_kl(model, stats, tokens, s_lr: float, n_layers: int) -> float:
    """Mean KL(model ‖ leading-term model) with every layer's [k, k] weights materialised."""
    pred = naive_log_probs(stats, tokens, s_lr, n_layers)
    d_vocab = stats.d_vocab
    full = torch.log_softmax(model(tokens).double(), -1)  # the whole vocabulary, then reduced
    keep = torch.zeros(d_vocab, dtype=torch.bool)
    keep[stats.kept] = True
    mine = torch.cat([full[..., stats.kept], full[..., ~keep].logsumexp(-1, keepdim=True)], -1)
    return float((mine.exp() * (mine - pred)).sum(-1).clamp(min=0).mean())


@torch.no_grad()
def naive_log_probs(stats, tokens, s_lr: float, n_layers: int) -> torch.Tensor:
    """The leading-term model's log-probabilities, dense, one [k, k] W and V per layer."""
    schedule = Schedule(s_lr=s_lr)
    c = {w: schedule.coefficient(w) for w in ("W_O", "V", "W", "P")}
    k, d_vocab = stats.k, stats.d_vocab
    index = stats.vocab.index_map()
    x = index[tokens]
    X = torch.zeros(*x.shape, k + 1, dtype=torch.float64)
    X.scatter_(-1, x[..., None], 1.0)
    h = X[..., :k]  # a dropped token is a zero row
    T = tokens.shape[1]
    offset = torch.arange(T)[:, None] - torch.arange(T)[None, :]
    for _ in range(n_layers):
        W = c["W"] * term("W").target.build(stats).clone()  # this layer's own [k, k] copies
        V = c["V"] * term("V").target.build(stats).clone()
        bias = torch.where(offset >= 0, c["P"] * stats.Delta[offset.clamp(min=0)], -math.inf)
        scores = h @ W @ h.transpose(1, 2) + bias
        h = h + torch.softmax(scores, -1) @ h @ V
    logits = h @ (c["W_O"] * stats.B_bar)
    dropped = d_vocab - k
    bucket = math.log(dropped) - logits.sum(-1, keepdim=True) / dropped
    return torch.log_softmax(torch.cat([logits, bucket], -1), -1)


def theory_side(stats, tokens, depth: int) -> dict:
    """The leading-term model alone (no model forward): shared maps + gathers vs dense."""
    schedule = Schedule(s_lr=1.0)
    c = [schedule.coefficient(w) for w in ("W_O", "V", "W")]
    index = stats.vocab.index_map()

    pred = LeadingPredictor(stats)

    def fast():
        return with_bucket(pred.logits(index[tokens], *c, n_layers=depth), stats.d_vocab)

    quick, fast_s = timed(fast)
    dense, naive_s = timed(lambda: naive_log_probs(stats, tokens, 1.0, depth))
    diff = float((quick.double() - dense).abs().max())
    print(f"theory side, {depth} layer(s): fast {fast_s:.1f} s, naive {naive_s:.1f} s "
          f"({naive_s / fast_s:.2f}x); max |log p| difference {diff:.2e}")  # fmt: skip
    return {"fast_s": fast_s, "naive_s": naive_s, "speedup": naive_s / fast_s,
            "max_abs_log_prob_difference": diff, "route": list(pred.last_route)}  # fmt: skip


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_agreement(args) -> dict:
    model, stats, windows = model_and_stats(args.k, args.layers)
    held = windows[-args.windows :, :128]
    model_log_probs(model, held[:1], stats.kept)  # warm-up
    out = {}
    forward = [timed(lambda: model_log_probs(model, held, stats.kept))[1]
               for _ in range(args.repeats)]  # fmt: skip
    out["model_forward_s"] = {"min": min(forward), "runs": forward}
    for depth in args.depths or (args.layers, 1):
        fast_runs, slow_runs = [], []
        for _ in range(args.repeats):  # interleaved, so both sides see the same load
            predictors._SHARED.clear()  # cold: no basis from an earlier call
            fast, seconds = timed(lambda d=depth: output_agreement(model, stats, held, s_lr=1.0,
                                                                   n_layers=d))  # fmt: skip
            fast_runs.append(seconds)
            route = LeadingPredictor.shared(stats).last_route
            slow, seconds = timed(lambda d=depth: naive_kl(model, stats, held, 1.0, d))
            slow_runs.append(seconds)
        fast_s, slow_s = min(fast_runs), min(slow_runs)
        out[f"leading_layers_{depth}"] = {
            "fast_s": fast_s, "naive_s": slow_s, "speedup": slow_s / fast_s,
            "fast_runs_s": fast_runs, "naive_runs_s": slow_runs,
            "kl_fast": fast.kl, "kl_naive": slow,
            "kl_rel_difference": abs(fast.kl - slow) / max(abs(slow), 1e-30),
            "explained": fast.explained, "route": list(route),
        }  # fmt: skip
        print(
            f"leading-term model with {depth} layer(s): fast {fast_s:.1f} s, naive "
            f"{slow_s:.1f} s ({slow_s / fast_s:.2f}x, min of {args.repeats}); KL {fast.kl:.6g} "
            f"vs {slow:.6g}"
        )
    for depth in args.depths or (args.layers, 1):
        out[f"theory_side_layers_{depth}"] = theory_side(stats, held, depth)
    out["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out["timing"] = "each time the minimum over --repeats interleaved runs (all runs listed)"
    out["sizes"] = {"k": args.k, "layers": args.layers, "windows": args.windows, "T": 128,
                    "depths": list(args.depths or (args.layers, 1)),
                    "d_vocab": stats.d_vocab}  # fmt: skip
    return out


def bench_monitor(args) -> dict:
    """One demo training run with the monitor (cosines + output) at every=8: its overhead is
    the monitor's own time over the rest of the run; the curves are kept for the guide."""
    from tl_leadterms.data import generate_stories, train_word_tokenizer

    stories = generate_stories(4000, seed=0)
    tokenizer = train_word_tokenizer(stories, 2000)
    windows = make_windows(stories, n_ctx=32, tokenizer=tokenizer)
    train_w, held = windows[:64], windows[64:72, :-1]
    stats = corpus_stats(train_w, d_vocab=len(tokenizer), tokenizer=tokenizer, progress=False)
    model = paper_model(d_vocab=len(tokenizer), n_ctx=32, n_layers=3)
    monitor = LeadingTermMonitor(stats, every=8, lr=1.0, analyses=("cosines", "output"),
                                 tokens=held)  # fmt: skip
    per_call, score = [], monitor.score

    def timed_score(model, step):  # each call's scoring time, for the first-call share
        start = time.perf_counter()
        try:
            return score(model, step)
        finally:
            per_call.append(time.perf_counter() - start)

    monitor.score = timed_score
    _, seconds = timed(lambda: train(model, train_w, lr=1.0, steps=args.train_steps,
                                     progress=False, callback=monitor.train_callback))  # fmt: skip
    training = seconds - monitor.seconds
    print(
        f"training {args.train_steps} steps: {training:.1f} s of training, monitor "
        f"{monitor.seconds:.1f} s in {monitor.calls} calls ({monitor.seconds / training:.1%})"
    )
    print(repr(monitor))
    return {"run_seconds": seconds, "training_seconds": training,
            "monitor_seconds": monitor.seconds, "calls": monitor.calls,
            "per_call_s": monitor.seconds / max(monitor.calls, 1), "score_s_per_call": per_call,
            "overhead": monitor.seconds / training, "flags": monitor.flags,
            "history": monitor.history.to_dict(),
            "settings": {"d_vocab": len(tokenizer), "n_ctx": 32, "windows": 64, "n_layers": 3,
                         "lr": 1.0, "steps": args.train_steps, "every": 8,
                         "held_out_windows": 8}}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=5000)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--windows", type=int, default=8)
    parser.add_argument(
        "--depths",
        type=int,
        nargs="*",
        default=None,
        help="depths of the leading-term model (default: the model's, then 1)",
    )
    parser.add_argument("--train-steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each agreement timing")
    parser.add_argument("--skip", choices=["agreement", "monitor"], default=None)
    parser.add_argument("--out", default=str(RESULTS / "output.json"))
    parser.add_argument("--note", default=None, help="the load conditions, kept in 'machine'")
    args = parser.parse_args()
    torch.manual_seed(0)
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.is_file() else {}  # one part may be rerun
    results["machine"] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "load_average_start": list(os.getloadavg()),
    }
    if args.note:
        results["machine"]["note"] = args.note
    if args.skip != "agreement":
        results["output_agreement"] = bench_agreement(args)
    if args.skip != "monitor":
        results["monitor"] = bench_monitor(args)
    results["machine"]["load_average_end"] = list(os.getloadavg())
    from tl_leadterms.atomic import write_text

    write_text(args.out, json.dumps(results, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
