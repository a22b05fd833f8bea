"""Next-token predictors built from corpus statistics: the leading-term model and two baselines.

:class:`LeadingPredictor` evaluates the paper model whose weights are their leading terms
(docs/math.md#leading-terms) without building that model: by the expansion of its residual stream
in powers of ``R = Φ̄ᵀB̄ᵀ`` whenever that is cheaper, else by the plain forward
(docs/guides/next-token.md#expansion). The coefficients are arguments (tensors allowed), so they
can be fitted by autograd.

Tokens outside a restricted vocabulary (kept index ``k``) are zero one-hot rows; the dropped
tokens' next-token probability is one *bucket* (docs/guides/next-token.md, :func:`with_bucket`).

>>> import torch
>>> from tl_leadterms import corpus_stats
>>> stats = corpus_stats(torch.randint(0, 9, (8, 6)), d_vocab=9, progress=False)
>>> pred = LeadingPredictor(stats, dtype=torch.float64)
>>> x = torch.tensor([[1, 2, 3]])
>>> logits = pred.logits(x, 0.5, 0.0, 0.0, n_layers=2)  # no value term: the bigram predictor
>>> torch.allclose(logits, 0.5 * stats.B_bar[x])
True
"""

import math
import weakref
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from tl_leadterms.stats.corpus import CorpusStats
from tl_leadterms.theory import term
from tl_leadterms.theory.leading import expansion_error

__all__ = ["LeadingPredictor", "unigram_log_probs", "with_bucket"]

# positions x kept tokens per chunk of windows: bounds the [n, T, k] residual stream
_CHUNK_ELEMENTS = 2**24
# the expansion's [rows, rows] score blocks stay below 6144² entries (288 MiB in float64)
_MAX_BASIS_ROWS = 6144
_BASES_KEPT = 4  # token sets whose basis a predictor keeps
_SHARED: "weakref.WeakKeyDictionary[CorpusStats, dict]" = weakref.WeakKeyDictionary()
ROUTES = ("auto", "expansion", "dense")


def _padded(M: Tensor, dtype: torch.dtype, device) -> Tensor:
    """``M`` with a zero row (and column, for a matrix) appended for the dropped tokens."""
    M = M.to(device=device, dtype=dtype)
    if M.dim() == 1:
        return torch.cat([M, M.new_zeros(1)])
    return torch.nn.functional.pad(M, (0, 1, 0, 1))


def _value(c) -> float:
    return float(c.detach()) if isinstance(c, Tensor) else float(c)


@dataclass
class _Basis:
    """The token-side rows of the expansion for one token set ``U`` (see the module docs).

    ``M`` holds the blocks ``K_i Q̄ K_jᵀ`` (``i, j ≤ gram_terms``) and ``out`` the rows ``K_j B̄``
    (``j ≤ terms``), each block padded by a zero row (and column) for a dropped token.
    """

    terms: int
    gram_terms: int
    u: int
    M: Tensor  # [(gram_terms + 1)(u + 1), (gram_terms + 1)(u + 1)]
    out: Tensor  # [(terms + 1)(u + 1), k]


class LeadingPredictor:
    """The leading-term model of ``stats`` as a function of its three coefficients.

    Args:
        stats: corpus statistics (with ``Q_bar``, ``Phi_bar``, ``Delta``).
        dtype: compute precision (float32 by default; the statistics are usually float64).
        device: where to compute.
        permutation: optional ``[k]`` relabelling of the theory's tokens (the null): every map
            is re-indexed by it on rows and columns. Computed by relabelling the tokens
            (``logits(x)`` of the permuted maps is ``logits(perm[x])[..., perm]`` of the
            original ones), so no permuted ``[k, k]`` copy is made.
    """

    def __init__(self, stats: CorpusStats, *, dtype=torch.float32, device=None,
                 permutation: Tensor | None = None) -> None:  # fmt: skip
        device = torch.device(device) if device is not None else stats.device
        self._stats = lambda: stats  # a weak reference once shared (see :meth:`shared`)
        self.k, self.d_vocab = stats.k, stats.d_vocab
        self.dtype, self.device = dtype, device
        self.Delta = stats.Delta.to(device=device, dtype=dtype)
        self.perm = None
        if permutation is not None:
            perm = permutation.to(device=device, dtype=torch.long)
            self.perm = torch.cat([perm, perm.new_full((1,), self.k)])  # dropped stays dropped
        self._maps: dict[str, Tensor] | None = None  # the plain forward's padded maps
        self._norms: tuple[float, float, float] | None = None
        self._bases: dict[bytes, _Basis] = {}
        self.last_route: tuple[str, int] | None = None  # ("expansion", J) or ("dense", L)

    @classmethod
    def shared(cls, stats: CorpusStats, *, dtype=torch.float32, device=None) -> "LeadingPredictor":
        """One predictor per ``(stats, dtype, device)``, kept while ``stats`` lives, so that
        repeated calls on the same statistics (a monitor, a sweep) reuse its maps and bases."""
        device = torch.device(device) if device is not None else stats.device
        try:
            per_stats = _SHARED.setdefault(stats, {})
        except TypeError:  # not weakly referenceable: no sharing
            return cls(stats, dtype=dtype, device=device)
        key = (dtype, str(device))
        if key not in per_stats:
            pred = cls(stats, dtype=dtype, device=device)
            pred._stats = weakref.ref(stats)  # the cache must not keep its key alive
            per_stats[key] = pred
        return per_stats[key]

    @property
    def stats(self) -> CorpusStats:
        return self._stats()

    def permuted(self, permutation: Tensor) -> "LeadingPredictor":
        """This predictor with the tokens relabelled (the null); shares the maps and norms."""
        out = LeadingPredictor.__new__(LeadingPredictor)
        out.__dict__.update(self.__dict__)
        perm = permutation.to(device=self.device, dtype=torch.long)
        out.perm = torch.cat([perm, perm.new_full((1,), self.k)])
        out._bases, out.last_route = {}, None
        return out

    # -- shared pieces --------------------------------------------------------------------
    def _bias(self, T: int, c_W) -> Tensor:
        """``c_W·DM(Δ)`` with the causal mask, ``[T, T]``."""
        delta = torch.nn.functional.pad(self.Delta, (0, max(0, T - self.Delta.shape[0])))
        offset = torch.arange(T, device=self.device)[:, None] - torch.arange(T, device=self.device)
        bias = c_W * delta[offset.clamp(min=0)]
        return bias.masked_fill(offset < 0, -math.inf)

    def _relabel(self, x: Tensor) -> Tensor:
        x = x.to(self.device)
        return x if self.perm is None else self.perm[x]

    def _unlabel(self, logits: Tensor) -> Tensor:
        return logits if self.perm is None else logits[..., self.perm[: self.k]]

    @property
    def norms(self) -> tuple[float, float, float]:
        """``(‖Φ̄ᵀB̄ᵀ‖_F, ‖Q̄‖_F, ‖B̄‖_F)`` in float64 (B̄'s from its sparse counts)."""
        if self._norms is None:
            stats = self.stats
            r = float(term("V").target.build(stats).norm(dtype=torch.float64))
            q = float(term("W").target.build(stats).norm(dtype=torch.float64))
            bg = stats.bigram  # B̄ = B − u·α·1ᵀ: ‖B̄‖² = ΣB² − 2u·Σ_i α_i·rowsum_i + u²·k·Σα²
            values, alpha = bg.values.double(), bg.alpha.double()
            rowsum = torch.zeros_like(alpha).index_add_(0, bg.rows, values)
            sq = (values.square().sum() - 2 * bg.u * (alpha * rowsum).sum()
                  + bg.u**2 * self.k * alpha.square().sum())  # fmt: skip
            self._norms = (r, q, math.sqrt(max(float(sq), 0.0)))
        return self._norms

    def terms(self, c_O, c_V, c_W, n_layers: int) -> int:
        """``J``: how many powers of ``R`` the expansion keeps (``n_layers`` = exact).

        The smallest ``J`` whose dropped terms move no log-probability by more than the unit
        roundoff of ``dtype``: the residual stream's error bound
        :func:`~tl_leadterms.theory.leading.expansion_error` moves the logits by at most
        ``|c_O|‖B̄‖`` times it, the bucket's by ``√k/(d_vocab − k)`` times that, a log-softmax by
        twice the largest.
        """
        exact = n_layers
        cO, cV, cW = (abs(_value(c)) for c in (c_O, c_V, c_W))
        if not all(map(math.isfinite, (cO, cV, cW))):
            return exact
        r, q, b = self.norms
        rate = cV * r
        if rate >= 0.5:
            return exact
        dropped = self.d_vocab - self.k
        reach = 2.0 * cO * b * max(1.0, math.sqrt(self.k) / dropped if dropped else 1.0)
        tol = torch.finfo(self.dtype).eps
        for J in range(exact):
            eps = expansion_error(J, n_layers=n_layers, rate=rate, score_scale=cW * q)
            if reach * eps <= tol:
                return J
        return exact

    # -- the two routes -------------------------------------------------------------------
    def logits(
        self, x: Int[Tensor, "n T"], c_O, c_V, c_W, *, n_layers: int = 1, route: str = "auto"
    ) -> Float[Tensor, "n T k"]:
        """Next-token logits over the kept tokens for kept indices ``x`` (``k`` = dropped).

        ``route``: ``"auto"`` (the cheaper of the two), ``"expansion"`` or ``"dense"`` (the
        plain forward). The coefficients may be tensors that require grad.
        """
        if route not in ROUTES:
            raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
        x = self._relabel(x)
        n, T = x.shape
        tokens, local = self._token_set(x)
        J = self.terms(c_O, c_V, c_W, n_layers)
        if route == "auto":
            route = "expansion" if self._expansion_pays(n, T, tokens, J, n_layers) else "dense"
        if route == "expansion":
            basis = self._basis(tokens, J, min(J, n_layers - 1))
            chunk = max(1, _CHUNK_ELEMENTS // (T * (J + 1) * max(self.k, T)))
            parts = [self._expand(local[i : i + chunk], basis, c_O, c_V, c_W, n_layers, J)
                     for i in range(0, n, chunk)]  # fmt: skip
            self.last_route = ("expansion", J)
        else:
            chunk = max(1, _CHUNK_ELEMENTS // (T * (self.k + 1)))
            parts = [self._dense(x[i : i + chunk], c_O, c_V, c_W, n_layers)
                     for i in range(0, n, chunk)]  # fmt: skip
            self.last_route = ("dense", n_layers)
        return self._unlabel(torch.cat(parts))

    def bigram_logits(self, x: Int[Tensor, "n T"], c_O) -> Float[Tensor, "n T k"]:
        """The ``W_O`` term alone, ``c_O·B̄[x_t]`` (what :meth:`logits` gives with ``c_V = 0``)."""
        x = self._relabel(x)
        tokens, local = self._token_set(x)
        basis = self._basis(tokens, 0, 0)
        rows = basis.out[: basis.u + 1]  # B̄[U] and a zero row
        return self._unlabel(c_O * rows[local])

    # -- the expansion ----------------------------------------------------------------------
    def _token_set(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The distinct kept tokens ``U`` of ``x`` and ``x`` as positions in ``U`` (``u`` =
        dropped)."""
        tokens = torch.unique(x[x < self.k])
        where = torch.full((self.k + 1,), tokens.numel(), dtype=torch.long, device=x.device)
        where[tokens] = torch.arange(tokens.numel(), device=x.device)
        return tokens, where[x]

    def _work_dtype(self) -> torch.dtype:
        return torch.promote_types(self.stats.dtype, self.dtype)

    def _expansion_pays(self, n: int, T: int, tokens: Tensor, J: int, n_layers: int) -> bool:
        """Whether the expansion's multiply-adds are fewer than the plain forward's."""
        k, u, Jg = self.k, tokens.numel(), min(J, n_layers - 1)
        rows = (Jg + 1) * u
        if rows > _MAX_BASIS_ROWS:
            return False
        cached = self._bases.get(self._key(tokens))
        basis = 0.0
        if cached is None or cached.terms < J or cached.gram_terms < Jg:
            weight = self._work_dtype().itemsize / self.dtype.itemsize  # float64 is ~2x slower
            basis = weight * ((max(J - 1, 0) + Jg) * u * k * k + rows * rows * k)
        layers = n * n_layers * ((Jg + 1) ** 2 + J + 1) * T**3
        output = n * (J + 1) * T * T * k
        dense = n * T * k * k * (2 * n_layers + 1)
        return basis + layers + output < dense

    @staticmethod
    def _key(tokens: Tensor) -> bytes:
        return tokens.cpu().numpy().tobytes()

    def _basis(self, tokens: Tensor, J: int, Jg: int) -> _Basis:
        """The ``[u, u]`` score blocks and ``[u, k]`` output rows for the token set ``U``."""
        key = self._key(tokens)
        cached = self._bases.get(key)
        if cached is not None and cached.terms >= J and cached.gram_terms >= Jg:
            return cached
        if cached is not None:
            J, Jg = max(J, cached.terms), max(Jg, cached.gram_terms)
        stats, work = self.stats, self._work_dtype()
        R = term("V").target.build(stats).to(work)  # Φ̄ᵀB̄ᵀ [context, current]
        Q = term("W").target.build(stats).to(work)  # Q̄ [query, key]
        idx = tokens.to(R.device)
        u = idx.numel()
        K = [R[idx]]  # K_1 .. K_J (K_0 is the one-hot rows of U)
        for _ in range(1, J):
            K.append(K[-1] @ R)
        F = [Q[idx]] + [K[i] @ Q for i in range(Jg)]  # F_i = K_i Q̄, i = 0 .. Jg
        Fs = torch.cat(F)  # [(Jg + 1)u, k]
        M = torch.cat([Fs[:, idx]] + ([Fs @ torch.cat(K[:Jg]).T] if Jg else []), dim=1)
        M = torch.nn.functional.pad(M.reshape(Jg + 1, u, Jg + 1, u), (0, 1, 0, 0, 0, 1))
        onehot = torch.zeros(self.k, u, dtype=work, device=R.device)
        onehot[idx, torch.arange(u, device=R.device)] = 1.0
        cols = torch.cat([onehot] + [k_j.T for k_j in K[:J]], dim=1).contiguous()
        out = stats.bigram.t_times(cols.to(stats.bigram.dtype)).T  # rows K_j B̄, j = 0 .. J
        out = torch.nn.functional.pad(out.reshape(J + 1, u, self.k), (0, 0, 0, 1))
        size = (Jg + 1) * (u + 1)
        basis = _Basis(
            terms=J,
            gram_terms=Jg,
            u=u,
            M=M.reshape(size, size).to(device=self.device, dtype=self.dtype),
            out=out.reshape((J + 1) * (u + 1), self.k).to(device=self.device, dtype=self.dtype),
        )
        self._bases.pop(key, None)
        while len(self._bases) >= _BASES_KEPT:
            self._bases.pop(next(iter(self._bases)))
        self._bases[key] = basis
        return basis

    def _expand(self, local: Tensor, basis: _Basis, c_O, c_V, c_W, n_layers: int, J: int):
        """Logits of windows whose tokens are ``local`` (positions in ``U``) by the expansion."""
        n, T = local.shape
        up, Jg = basis.u + 1, min(J, n_layers - 1)

        def rows(blocks: int) -> Tensor:  # [n, blocks·T]: row of block j, token x_t
            offsets = torch.arange(blocks, device=local.device)[:, None, None] * up
            return (offsets + local[None]).permute(1, 0, 2).reshape(n, blocks * T)

        g = rows(Jg + 1)
        G = basis.M[g[:, :, None], g[:, None, :]]  # [n, (Jg+1)T, (Jg+1)T]
        bias = self._bias(T, c_W)
        eye = torch.eye(T, dtype=self.dtype, device=self.device).expand(n, T, T)
        C = torch.cat([eye, eye.new_zeros(n, T, J * T)], dim=-1)  # [C_0 | ... | C_J]
        for _ in range(n_layers):
            Cg = C[..., : (Jg + 1) * T]
            scores = c_W * (Cg @ G @ Cg.transpose(1, 2)) + bias
            AC = torch.softmax(scores, dim=-1) @ C[..., : J * T]  # A·C_{j−1}, j = 1 .. J
            C = C + c_V * torch.nn.functional.pad(AC, (T, 0))
        return c_O * (C @ basis.out[rows(J + 1)])

    # -- the plain forward ------------------------------------------------------------------
    def _dense_maps(self) -> dict[str, Tensor]:
        if self._maps is None:
            self._maps = {w: _padded(term(w).target.build(self.stats), self.dtype, self.device)
                          for w in ("W", "V", "W_O")}  # fmt: skip
        return self._maps

    def _dense(self, x: Tensor, c_O, c_V, c_W, n_layers: int) -> Tensor:
        maps = self._dense_maps()
        Q, R, B = maps["W"], maps["V"], maps["W_O"]  # Q̄, Φ̄ᵀB̄ᵀ, B̄ (padded)
        bias = self._bias(x.shape[1], c_W)
        scores = c_W * Q[x[:, :, None], x[:, None, :]] + bias  # layer 1: gathers only
        H = c_V * (torch.softmax(scores, dim=-1) @ R[x])  # h^(1) − X
        for _ in range(1, n_layers):
            hQ = Q[x] + H @ Q
            keys = hQ.gather(2, x[:, None, :].expand(-1, x.shape[1], -1))  # ⟨hQ_t, e_{x_j}⟩
            scores = c_W * (keys + hQ @ H.transpose(1, 2)) + bias
            H = H + c_V * (torch.softmax(scores, dim=-1) @ (R[x] + H @ R))
        return (c_O * (B[x] + H @ B))[..., : self.k]


def with_bucket(logits: Float[Tensor, "... k"], d_vocab: int) -> Float[Tensor, "... outcomes"]:
    """Log-probabilities over the kept tokens plus, when ``k < d_vocab``, the dropped bucket."""
    k = logits.shape[-1]
    dropped = d_vocab - k
    if dropped > 0:
        mean = -logits.sum(-1, keepdim=True) / dropped
        logits = torch.cat([logits, mean + math.log(dropped)], dim=-1)
    return torch.log_softmax(logits, dim=-1)


def unigram_log_probs(stats: CorpusStats, dtype=torch.float32, device=None) -> Tensor:
    """``log`` of the add-one smoothed unigram over the kept tokens (and the bucket).

    The counts are the input-position frequencies ``α``; the bucket holds every position whose
    token is not kept.
    """
    counts = stats.unigram_counts.to(torch.float64)
    if stats.k < stats.d_vocab:
        counts = torch.cat([counts, (stats.n_positions - counts.sum()).reshape(1)])
    probs = (counts + 1.0) / (counts.sum() + counts.numel())
    return probs.log().to(dtype=dtype, device=device or stats.device)
