"""Every analysis of one saved tiny model as plain numbers, for comparing model classes.

``numbers(model, stats, tokens, analyses)`` runs the analyses and returns ``{name: [floats]}``
(JSON-ready), so a HookedTransformer, a TL 3.9 bridge and a TL 4.x bridge of the same folder can
be compared in one process or across interpreters. Run as a script it writes the numbers of
folders loaded by ``tl_leadterms.load_model`` under the installed TransformerLens:

    python tests/bridge_numbers.py OUT.json '{"gpt2": ["FOLDER", ["to_paper", ...]], ...}'

Gemma 2: TransformerLens skips ``center_unembed`` on a bridge (logit soft-capping), so every
number read through ``W_U`` (``W_O``, ``V``, token maps after the last layer) is compared after
centring over the output vocabulary; :func:`centred` does it for both sides.
"""

import json
import sys
import warnings
from pathlib import Path

import torch

D_VOCAB, N_LAYERS, D_MODEL, N_HEADS, N_CTX = 40, 2, 32, 4, 16
ALL = (
    "to_paper",
    "extended",
    "decompose",
    "covariance",
    "agreement",
    "token_maps",
    "atlas",
    "plot",
    "sweep",
)


def inputs() -> tuple[object, torch.Tensor]:
    """The statistics and tokens every side uses (seeded)."""
    from tl_leadterms import corpus_stats

    tokens = torch.randint(0, D_VOCAB, (24, 9), generator=torch.Generator().manual_seed(0))
    return corpus_stats(tokens, d_vocab=D_VOCAB, progress=False), tokens[:3, :8]


def centred(M: torch.Tensor) -> torch.Tensor:
    """``M`` minus its mean over the last (output vocabulary) axis."""
    return M - M.mean(-1, keepdim=True)


def _flat(x) -> list[float]:
    return torch.as_tensor(x).detach().double().flatten().tolist()


def _maps(model) -> dict[str, list[float]]:
    from tl_leadterms import to_paper

    pw = to_paper(model)
    out = {"W_O": _flat(centred(pw.W_O.AB))}
    for layer in range(pw.n_layers):
        out[f"V{layer}"] = _flat(centred(pw.V[layer].AB))
        out[f"W{layer}"] = _flat(pw.W[layer].AB)
        if pw.has_P:  # the first N_CTX offsets (TL 3.9 gives Qwen3 n_ctx 2048)
            out[f"P{layer}"] = _flat(pw.P[layer][:, :N_CTX])
    return out


def _rows(rows, keys) -> list[float]:
    return [float(r[k]) for r in rows for k in keys if isinstance(r.get(k), int | float)]


def numbers(model, stats, tokens, analyses=ALL) -> dict[str, list[float]]:
    """``{name: [floats]}`` for each requested analysis (see the module docstring)."""
    from tl_leadterms import (
        attention_agreement,
        covariance_similarity,
        decompose,
        head_atlas,
        sweep,
        to_paper,
    )
    from tl_leadterms.analyses.attention import plot_attention
    from tl_leadterms.analyses.covariance import token_maps  # fmt: skip

    out: dict[str, list[float]] = {}
    if "to_paper" in analyses:
        out |= _maps(model)
    if "extended" in analyses:  # layers ≥ 1 read through the residual stream after block 0
        pw = to_paper(model, input_map="extended")
        out["extended"] = _flat(torch.stack([centred(pw.V[1].AB), pw.W[1].AB]))
    if "decompose" in analyses:
        out["decompose"] = _rows(decompose(model, stats, per_head=True).rows, ("cosine",))
    if "covariance" in analyses:
        out["covariance"] = _rows(covariance_similarity(model, stats, progress=False).rows,
                                  ("value",))  # fmt: skip
    if "agreement" in analyses:
        rows = attention_agreement(model, stats, tokens, progress=False).rows
        out["agreement"] = _rows(rows, ("js_divergence", "rank_correlation"))
    if "token_maps" in analyses:
        maps = token_maps(model, progress=False)
        out["token_maps"] = _flat(torch.stack([maps.resid_pre, maps.resid_attn]))
    if "atlas" in analyses:
        rows = head_atlas(model, stats, tokens, null=None).rows
        out["atlas"] = _rows(rows, ("cosine", "value_cosine", "rank_correlation",
                                    "previous_token", "duplicate_token", "induction"))  # fmt: skip
    if "plot" in analyses:
        data = plot_attention(model, stats, tokens=tokens[0]).data
        out["plot"] = _flat(
            torch.cat([torch.as_tensor(v).flatten() for v in data["actual"].values()])
        )
    if "sweep" in analyses:
        table = sweep([("m", model)], stats, progress=False)
        out["sweep"] = _rows(table.rows, ("value",))
    return out


def main(out: str, spec: str) -> None:
    """Write ``{family: {"class": ..., "numbers": ...}}`` for ``{family: [folder, analyses]}``."""
    from tl_leadterms import load_model

    warnings.simplefilter("ignore")
    stats, tokens = inputs()
    result = {}
    for family, (folder, analyses) in json.loads(spec).items():
        model = load_model(folder, device="cpu")
        result[family] = {
            "class": type(model).__name__,
            "numbers": numbers(model, stats, tokens, analyses),
        }
    Path(out).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
