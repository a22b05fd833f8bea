"""`PaperWeights`: a model's weights in the paper's notation (docs/math.md#model), kept factored."""

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from torch import Tensor
from transformer_lens import FactoredMatrix

from tl_leadterms.adapters import factored
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.theory import WEIGHTS, term

__all__ = ["LayerMaps", "PaperWeights"]


class LayerMaps(Sequence):
    """One map per layer, built on access (``maps[l]``), never all held at once.

    Large models would need ``n_layers`` vocabulary-sized factors per weight; building each on
    access keeps memory at one layer's worth. Indexing returns a fresh map each time.
    """

    def __init__(self, name: str, n_layers: int, build: Callable[[int], Any], kind: str):
        self.name = name
        self._n_layers = n_layers
        self._build = build
        self.kind = kind

    def __len__(self) -> int:
        return self._n_layers

    def __getitem__(self, layer):
        if isinstance(layer, slice):
            return [self[i] for i in range(*layer.indices(self._n_layers))]
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise LeadTermsError(f"{self.name}[{layer!r}]: the layer must be an int")
        if not -self._n_layers <= layer < self._n_layers:
            raise LeadTermsError(
                f"{self.name}[{layer}]: layer out of range, the model has {self._n_layers} layers"
            )
        return self._build(layer % self._n_layers)

    def __iter__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._n_layers))

    def __repr__(self) -> str:
        return f"<{self.name}: {self._n_layers} layers of {self.kind}>"


def _describe(M: Any) -> str:
    if isinstance(M, FactoredMatrix):
        return f"FactoredMatrix {list(M.shape)} (inner dim {M.mdim})"
    if isinstance(M, Tensor):
        return f"Tensor {list(M.shape)}"
    return type(M).__name__


class PaperWeights:
    """A model's vocabulary-space weights in the paper's notation; build it with ``to_paper``.

    Attributes:
        W_O: direct-path map [current token, next-token logit].
        V: per layer, ``[n_heads, d_vocab, d_vocab]`` value maps [key token, output]; see
            :attr:`V_kind` for what "output" means.
        W: per layer, ``[n_heads, d_vocab, d_vocab]`` query-key maps [query token, key token],
            exactly what enters the softmax (divided by the model's attention scale).
        P: per layer, ``[n_heads, n_ctx]`` relative positional bias, index ``d`` = query − key
            (learned or rotary: ``metadata["P_kind"]``, :mod:`tl_leadterms.adapters.convert`).
            Raises :class:`LeadTermsError` for models with neither (ALiBi, ...).
        V_kind: ``"value"`` (paper model: ``V`` is the paper's ``V^(l)``, theory target
            ``Φ̄ᵀB̄ᵀ``) or ``"value_output"`` (models with embeddings: ``V`` is the value→logit map
            ``W_E W_V W_O W_U``, theory target ``Φ̄ᵀΣ_B̄``).
        kv_group: per query head, the index of its key/value head (``list(range(n_heads))``
            without grouped-query attention). Per-head maps have one entry per query head.
        n_kv_heads: number of key/value heads.
        architecture: ``"paper"``, ``"attn_only"`` or ``"full"``.
        exact: whether the maps are exact (no LayerNorm scale or MLP approximated away).
        metadata: how the weights were processed (see ``to_paper``).

    Maps are dense tensors or :class:`~transformer_lens.FactoredMatrix`; use
    :mod:`tl_leadterms.adapters.factored` to compare them with corpus statistics.
    """

    def __init__(
        self,
        *,
        W_O: Any,
        V: LayerMaps,
        W: LayerMaps,
        P: LayerMaps | None,
        P_error: str | None,
        V_kind: str,
        n_layers: int,
        n_heads: int,
        d_vocab: int,
        n_ctx: int,
        architecture: str,
        exact: bool,
        metadata: dict[str, Any],
        kv_group: Sequence[int] | None = None,
        sandwiches: dict[str, Callable[[int], Any]] | None = None,
    ) -> None:
        self.W_O = W_O
        self.V = V
        self.W = W
        self._P = P
        self._P_error = P_error
        self.V_kind = V_kind
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.d_vocab = d_vocab
        self.n_ctx = n_ctx
        self.architecture = architecture
        self.exact = exact
        self.metadata = metadata
        self._sandwiches = dict(sandwiches or {})
        self.kv_group = list(range(n_heads)) if kv_group is None else [int(g) for g in kv_group]
        if len(self.kv_group) != n_heads:
            raise LeadTermsError(
                f"kv_group has {len(self.kv_group)} entries for {n_heads} query heads; give one "
                "key/value group index per query head"
            )
        self.n_kv_heads = len(set(self.kv_group))

    def head_label(self, layer: int, head: int) -> str:
        """``"L{layer}H{head}"``, plus ``"/KV{group}"`` under grouped-query attention.

        Example:
            >>> from tl_leadterms.models.paper import paper_model
            >>> from tl_leadterms.adapters import to_paper
            >>> to_paper(paper_model(d_vocab=4, n_ctx=3, n_layers=1)).head_label(0, 0)
            'L0H0'
        """
        label = f"L{layer}H{head}"
        if self.n_kv_heads != self.n_heads:
            label += f"/KV{self.kv_group[head]}"
        return label

    @property
    def P(self) -> LayerMaps:
        """Relative positional biases ``[n_heads, n_ctx]`` per layer (see the class docstring)."""
        if self._P is None:
            raise LeadTermsError(self.P_unavailable())
        return self._P

    def P_unavailable(self) -> str:
        """Why this model has no ``P`` (what reading :attr:`P` raises); see :attr:`has_P`."""
        return self._P_error or "P is not defined for this model"

    def sandwich(self, weight: str, layer: int) -> Any:
        """The layer's per-head ``V`` or ``W`` maps as a
        :class:`~tl_leadterms.adapters.sandwich.Sandwich` ``L·A_h·B_h·R`` (shared outer
        factors), or None when the model's maps have no such form (the paper model)."""
        build = self._sandwiches.get("V" if weight in ("V", "V·W_O") else weight)
        return None if build is None else build(layer)

    @property
    def value_weight(self) -> str:
        """The theorem's name of :attr:`V`: ``"V"`` (paper model) or ``"V·W_O"`` (embeddings)."""
        return term(self.V_kind).weight

    @property
    def has_P(self) -> bool:
        """Whether :attr:`P` is defined (learned positions)."""
        return self._P is not None

    def layer_map(self, weight: str, layer: int | None = None) -> Any:
        """The head-combined map of one weight in one layer.

        ``W`` and ``P`` average over heads (the paper's Pythia protocol uses
        ``mean_h W_Q^h W_K^hᵀ``); ``V`` (or ``V·W_O``, the same value path) sums over heads
        (head outputs add in the residual stream); ``W_O`` has no layer and comes back as is.
        """
        if weight not in WEIGHTS:
            raise LeadTermsError(f"weight must be one of {', '.join(WEIGHTS)}, got {weight!r}")
        if weight == "W_O":
            return self.W_O
        if layer is None:
            raise LeadTermsError(f"layer_map({weight!r}) needs a layer (0..{self.n_layers - 1})")
        if weight == "P":
            return self.P[layer].mean(0)
        if weight in ("V", "V·W_O"):
            return factored.sum_heads(self.V[layer])
        return factored.mean_heads(self.W[layer])

    def __repr__(self) -> str:
        P = _describe(self._P[0]) if self._P is not None else "undefined"
        meta = self.metadata
        lines = [
            f"PaperWeights({meta.get('model_name')!r}, architecture={self.architecture!r}, "
            f"exact={self.exact})",
            f"  n_layers={self.n_layers}, n_heads={self.n_heads}, d_vocab={self.d_vocab}, "
            f"n_ctx={self.n_ctx}, n_kv_heads={self.n_kv_heads}",
            f"  W_O:    {_describe(self.W_O)}",
            f"  V[l]:   {_describe(self.V[0]) if self.n_layers else '-'}  (V_kind={self.V_kind!r})",
            f"  W[l]:   {_describe(self.W[0]) if self.n_layers else '-'}",
            f"  P[l]:   {P if self.n_layers else '-'}",
            f"  LayerNorm: {meta.get('ln_handling')}; biases ignored: "
            f"{len(meta.get('biases_ignored', []))} nonzero",
        ]
        return "\n".join(lines)
