"""The token-as-sequence protocol (docs/math.md#pythia-protocol, step 2): each token fed alone,
its residual stream per layer (``E_pre``, ``E_post``, ``E_attn = E_pre + attn_out``), computed
once by :func:`token_maps` and passed as ``maps=`` to sweep settings.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from tl_leadterms.adapters.support import check_supported
from tl_leadterms.adapters.view import model_view
from tl_leadterms.checks import Layers, check_layers, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.progress import progress_bar
from tl_leadterms.protocols import ReadableModel
from tl_leadterms.results.table import ResultTable

__all__ = ["MAPS", "TokenMaps", "token_maps"]

MAPS = ("pre", "post", "attn")


class TokenMaps(ResultTable):
    """Per-layer residual-stream maps of single tokens; see :func:`token_maps`.

    The maps are the activations themselves (plain tensors, detached from the model). As a
    :class:`~tl_leadterms.results.table.ResultTable` it has one row per (map, layer)
    summarising them: ``map``, ``layer``, ``n_tokens``, ``d_model``, ``mean_norm``, ``max_norm``
    and ``mean_cosine`` (of two different tokens' rows: near 1 when every token's row points
    one common way); ``row("pre", 3)`` looks one up.

    Attributes:
        token_ids: ``[n]`` the token ids, in row order.
        layers: the layers held, in the order of the first axis.
        resid_pre: ``[n_layers_selected, n, d_model]`` ``E_pre`` (``hook_resid_pre``).
        resid_post: ``[n_layers_selected, n, d_model]`` ``E_post`` (``hook_resid_post``).
        resid_attn: ``[n_layers_selected, n, d_model]`` ``E_attn = E_pre + attn_out``.
        metadata: model name, d_vocab, d_model, normalisation type.
    """

    KEYS = ("map", "layer")
    COLUMNS = ("map", "layer", "n_tokens", "d_model", "mean_norm", "max_norm", "mean_cosine")
    SCORE = "mean_cosine"
    SCORE_RANGE = (-1.0, 1.0)
    GRID = ("map", "layer")

    def __init__(
        self,
        token_ids: Int[Tensor, " n"],
        layers: list[int],
        resid_pre: Float[Tensor, "layers n d_model"],
        resid_post: Float[Tensor, "layers n d_model"],
        resid_attn: Float[Tensor, "layers n d_model"],
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.token_ids = token_ids
        self.layers = list(layers)
        self.resid_pre = resid_pre
        self.resid_post = resid_post
        self.resid_attn = resid_attn
        self.metadata = dict(metadata or {})
        self._rows: list[dict[str, Any]] | None = None

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One row per (map, layer) summarising the maps (see the class docstring)."""
        if self._rows is None:
            self._rows = [_summary(name, layer, self.get(name, layer))
                          for name in MAPS for layer in self.layers]  # fmt: skip
        return self._rows

    @property
    def n(self) -> int:
        """Number of tokens (rows)."""
        return int(self.token_ids.numel())

    def _index(self, layer: int) -> int:
        if layer not in self.layers:
            raise LeadTermsError(
                f"layer {layer!r} is not in these maps (layers {self.layers}); compute them with "
                f"token_maps(model, ..., layers=[..., {layer!r}])"
            )
        return self.layers.index(layer)

    def get(self, name: str, layer: int) -> Float[Tensor, "n d_model"]:
        """``E_pre`` (``"pre"``), ``E_post`` (``"post"``) or ``E_attn`` (``"attn"``) of a layer."""
        if name not in MAPS:
            raise LeadTermsError(f"map name must be one of {MAPS}, got {name!r}")
        return getattr(self, f"resid_{name}")[self._index(layer)]

    def __repr__(self) -> str:
        d_model = self.resid_pre.shape[-1]
        return (
            f"TokenMaps(n={self.n} tokens, layers={self.layers}, d_model={d_model}, "
            f"dtype={self.resid_pre.dtype}, device={self.resid_pre.device}, "
            f"model={self.metadata.get('model_name')!r})"
        )

    def plot(self, **kwargs: Any) -> Any:
        """:func:`~tl_leadterms.analyses.covariance.figure.plot_token_maps` of these maps (its
        keywords)."""
        from tl_leadterms.analyses.covariance.figure import plot_token_maps

        return plot_token_maps(self, **kwargs)


@torch.no_grad()
def _summary(name: str, layer: int, E: Tensor) -> dict[str, Any]:
    """The row of one ``[n, d_model]`` map: sizes, row norms and the mean cosine of two
    different tokens' rows (``(‖Σ uᵢ‖² − Σ ‖uᵢ‖²) / (n(n − 1))`` over the unit rows ``uᵢ``; a
    zero row counts as a zero vector)."""
    E = E.to(torch.float64)
    norms = E.norm(dim=1)
    unit = E / torch.where(norms > 0, norms, 1.0)[:, None]
    n = E.shape[0]
    total = unit.sum(dim=0)
    same = float((norms > 0).sum())
    mean_cosine = (float(total @ total) - same) / (n * (n - 1)) if n > 1 else float("nan")
    return {"map": name, "layer": layer, "n_tokens": n, "d_model": int(E.shape[1]),
            "mean_norm": float(norms.mean()), "max_norm": float(norms.max()),
            "mean_cosine": mean_cosine}  # fmt: skip


def check_token_ids(token_ids: object, d_vocab: int) -> Int[Tensor, " n"]:
    """A ``[n]`` int64 CPU tensor of token ids in ``[0, d_vocab)`` (``None``: all of them)."""
    if token_ids is None:
        return torch.arange(d_vocab)
    if isinstance(token_ids, range):
        token_ids = list(token_ids)
    if isinstance(token_ids, (list, tuple)):
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in token_ids):
            raise LeadTermsError(f"token_ids must be ints, got {token_ids!r:.200}")
        token_ids = torch.tensor([int(t) for t in token_ids], dtype=torch.long)
    elif isinstance(token_ids, np.ndarray):
        token_ids = torch.from_numpy(token_ids)
    if not isinstance(token_ids, Tensor) or token_ids.is_floating_point() or token_ids.is_complex():
        raise LeadTermsError(
            f"token_ids must be a 1-D integer tensor, array or list of token ids (e.g. "
            f"stats.kept), got {type(token_ids).__name__}"
        )
    if token_ids.dim() != 1 or token_ids.numel() == 0:
        raise LeadTermsError(
            f"token_ids must be a non-empty 1-D list of ids, got shape {tuple(token_ids.shape)}"
        )
    token_ids = token_ids.detach().to("cpu", torch.long)
    bad = token_ids[(token_ids < 0) | (token_ids >= d_vocab)]
    if bad.numel():
        raise LeadTermsError(
            f"token ids {bad[:5].tolist()} are outside [0, d_vocab={d_vocab}); pass ids of the "
            "model's own vocabulary (statistics counted with its tokenizer)"
        )
    return token_ids


def model_device(model: Any, device: object) -> torch.device:
    """The device the model's weights live on; ``device``, when given, must be that one."""
    here = model_view(model, caller="model_device").device
    if device is None:
        return here
    try:
        wanted = torch.device(device)
    except (TypeError, RuntimeError) as err:
        raise LeadTermsError(f"device must be a torch device or its name, got {device!r}") from err
    if wanted.type != here.type or (wanted.index is not None and wanted.index != here.index):
        raise LeadTermsError(
            f"the model lives on {here} but device={device!r}; move it first "
            f"(torch.nn.Module.to(model, {str(wanted)!r})) or pass device=None"
        )
    return here


@torch.no_grad()
def token_maps(
    model: ReadableModel,
    token_ids: Sequence[int] | torch.Tensor | np.ndarray | None = None,
    *,
    layers: Layers = None,
    batch_size: int | None = None,
    device: torch.device | str | None = None,
    output_device: torch.device | str | None = "cpu",
    progress: bool = True,
) -> TokenMaps:
    """Feed every token in ``token_ids`` to ``model`` alone and collect its residual maps.

    Each token is a length-1 sequence (no BOS), so attention attends to the token itself; the
    forward pass stops after the last requested layer. Memory on the model's device is bounded
    by ``batch_size``; the maps are gathered on ``output_device`` (the CPU by default).

    Args:
        model: a HookedTransformer or a TransformerBridge in compatibility mode.
        token_ids: ids in row order, e.g. ``stats.kept``; default: every id in ``range(d_vocab)``.
        layers: layers to collect (default: all).
        batch_size: tokens per forward pass (default 1024).
        device: where the forward runs; the model must already be there (default: its device).
        output_device: where the returned maps are stored.
        progress: show a tqdm bar.

    Returns:
        :class:`TokenMaps` with ``resid_pre``, ``resid_post``, ``resid_attn``
        ``[n_layers_selected, n, d_model]`` in the model's dtype.

    Example:
        >>> from tl_leadterms import paper_model
        >>> maps = token_maps(paper_model(d_vocab=8, n_ctx=4, n_layers=2), [1, 5], progress=False)
        >>> maps.resid_pre.shape, maps.resid_pre[0, 1].argmax().item()  # one-hot embedding
        (torch.Size([2, 2, 8]), 5)
    """
    view = check_supported(model, caller="token_maps")
    ids = check_token_ids(token_ids, view.d_vocab)
    layers = check_layers(layers, view.n_layers)
    batch_size = positive_int("batch_size", 1024 if batch_size is None else batch_size)
    device = model_device(view, device)
    try:
        out_device = torch.device(output_device)
    except (TypeError, RuntimeError) as err:
        raise LeadTermsError(
            f"output_device must be a torch device, got {output_device!r}"
        ) from err
    shape = (len(layers), ids.numel(), view.d_model)
    dtype = view.dtype
    out = {name: torch.empty(shape, dtype=dtype, device=out_device) for name in MAPS}
    rows = slice(0, 0)

    def store(name: str, i: int) -> Callable[[Tensor], None]:
        # keyed by the hook registered, never by hook.name (a bridge's is the canonical one)
        def write(act: Tensor) -> None:
            out[name][i, rows] = act[:, 0].to(out_device, dtype)

        return write

    hooks = {}
    for i, layer in enumerate(layers):
        for kind, name in (("resid_pre", "pre"), ("resid_post", "post"), ("attn_out", "attn")):
            hooks[view.hook_name(kind, layer)] = store(name, i)
    bar = progress_bar(range(0, ids.numel(), batch_size), desc="token maps", disable=not progress)
    for start in bar:
        rows = slice(start, min(start + batch_size, ids.numel()))
        batch = ids[rows].to(device)[:, None]
        view.run_with_hooks(batch, hooks, stop_at_layer=max(layers) + 1)
    out["attn"] += out["pre"]  # E_attn = resid_pre + attn_out
    metadata = {
        "model_name": view.model_name,
        "d_vocab": view.d_vocab,
        "d_model": view.d_model,
        "normalization_type": view.normalization,
        "positional_embedding_type": view.positional_type,
    }
    return TokenMaps(ids, layers, out["pre"], out["post"], out["attn"], metadata)
