"""Order-independent attribution of a least-squares fit: exact Shapley values of R².

For a map ``M`` fitted onto basis maps ``T_1..T_n`` (Gram matrix ``G``, ``b_i = ⟨T_i, M⟩``),
the variance a subset ``S`` of the components explains is

    R²(S) = b_Sᵀ G_S⁺ b_S / ‖M‖²

(``G_S⁺`` the pseudo-inverse, so linearly dependent components are fine). The Shapley value of
component ``i`` averages its marginal gain ``R²(S ∪ {i}) − R²(S)`` over every order in which the
components could be added; with ``n ≤ 5`` components that is ``2ⁿ ≤ 32`` small solves per
basis, shared by every head. The values add up to ``R²(all)`` exactly, do not depend on the
order the basis is listed in, and for mutually orthogonal components equal ``b_i²/(‖T_i‖²‖M‖²)``
(the squared-coefficient shares). Each component also gets its *unique* part
``R²(all) − R²(all ∖ {i})`` (what is lost without it) and its *shared* part (Shapley − unique).

Character rule (:func:`character`): a weight is "``<component>``-like" only when its explained
fraction ``R²`` is at least :data:`R2_FLOOR` (0.1) and its largest Shapley value exceeds the
runner-up by at least :data:`MARGIN` (0.2) of ``R²``; "unexplained" below the floor; "mixed"
otherwise; "zero" for a map that is exactly 0.

Example (two orthogonal components mixed 3:1 in amplitude, so 9:1 in variance):

>>> import torch
>>> G = torch.eye(2, dtype=torch.float64)
>>> b = torch.tensor([[3.0, 1.0]], dtype=torch.float64)   # M = 3·T_1 + 1·T_2
>>> a = shapley(G, b, torch.tensor([10.0], dtype=torch.float64))
>>> [round(v, 6) for v in a.shapley[0].tolist()], round(float(a.r2[0]), 6)
([0.9, 0.1], 1.0)
"""

import math
from dataclasses import dataclass
from itertools import combinations

import torch
from torch import Tensor

__all__ = ["MARGIN", "R2_FLOOR", "Attribution", "character", "shapley", "subset_r2"]

R2_FLOOR = 0.1  # below this explained fraction a weight is "unexplained"
MARGIN = 0.2  # the top Shapley value must lead the runner-up by this fraction of R²


@dataclass(frozen=True)
class Attribution:
    """Shapley values of R² per head: ``shapley``, ``unique``, ``shared`` are ``[h, n]``."""

    r2: Tensor  # [h]
    shapley: Tensor  # [h, n]
    unique: Tensor  # [h, n]

    @property
    def shared(self) -> Tensor:
        return self.shapley - self.unique


def subset_r2(gram: Tensor, b: Tensor, sq: Tensor) -> dict[int, Tensor]:
    """``R²(S)`` for every subset ``S`` (a bitmask) of the components, per head (``[h]``).

    Columns are scaled to unit norm before the pseudo-inverse (relative tolerance 1e-10), so
    components of very different magnitudes are handled alike; a zero component adds nothing.
    """
    gram, b, sq = gram.double(), b.double(), sq.double()
    n = gram.shape[0]
    scale = gram.diagonal().clamp(min=0).sqrt()
    usable = [i for i in range(n) if scale[i] > 0]
    safe_sq = torch.where(sq > 0, sq, torch.ones_like(sq))
    out = {0: torch.zeros_like(sq)}
    for size in range(1, n + 1):
        for subset in combinations(range(n), size):
            mask = sum(1 << i for i in subset)
            idx = [i for i in subset if i in usable]
            if not idx:
                out[mask] = torch.zeros_like(sq)
                continue
            s = scale[idx]
            G = gram[idx][:, idx] / (s[:, None] * s[None, :])
            rhs = b[:, idx] / s
            inv = torch.linalg.pinv(G, rtol=1e-10, hermitian=True)
            value = ((rhs @ inv) * rhs).sum(-1) / safe_sq
            out[mask] = torch.where(sq > 0, value, torch.zeros_like(value))
    return out


def shapley(gram: Tensor, b: Tensor, sq: Tensor) -> Attribution:
    """Exact Shapley values of ``R²`` over the components (see the module docstring).

    Args:
        gram: ``[n, n]`` Gram matrix of the basis.
        b: ``[h, n]`` inner products of each head's map with each component.
        sq: ``[h]`` squared norms of the maps.
    """
    n = gram.shape[0]
    r2 = subset_r2(gram, b, sq)
    full = (1 << n) - 1
    values = torch.zeros(b.shape[0], n, dtype=torch.float64)
    unique = torch.zeros_like(values)
    for i in range(n):
        bit = 1 << i
        for mask, value in r2.items():
            if mask & bit:
                continue
            size = bin(mask).count("1")
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            values[:, i] += weight * (r2[mask | bit] - value)
        unique[:, i] = r2[full] - r2[full & ~bit]
    return Attribution(r2=r2[full], shapley=values, unique=unique)


def character(names: list[str], values: list[float], r2: float, norm: float) -> str:
    """The label of one fitted map from its Shapley values (rule in the module docstring)."""
    if not norm > 0:
        return "zero"
    if not r2 >= R2_FLOOR:
        return "unexplained"
    order = sorted(range(len(values)), key=lambda i: values[i], reverse=True)
    top = values[order[0]]
    second = values[order[1]] if len(order) > 1 else 0.0
    if top - second >= MARGIN * r2:
        return f"{names[order[0]]}-like"
    return "mixed"
