"""What the covariance protocol compares (:class:`Protocol`) and how it computes
(:class:`Compute`), and the plain keywords of earlier releases that fill them in
(:func:`option_shorthands`: ``normalize=``, ``value_map=``, ``centre=``, ``device=``, ``dtype=``,
``gemm_dtype=``, ``batch_size=``).

>>> Protocol.of("paper-code")
Protocol(orientation='paper-code', normalize='theory', value_map='post', specific=True)
>>> fill(Protocol(normalize="both"), "protocol", value_map="write").value_map
'write'
"""

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from tl_leadterms.checks import check_bool, check_choice, positive_int
from tl_leadterms.errors import LeadTermsError
from tl_leadterms.theory import with_shorthands

__all__ = ["CENTRES", "ORIENTATIONS", "Compute", "Protocol", "fill", "option_shorthands"]

ORIENTATIONS = ("theorem", "paper-code")
NORMALIZE = ("theory", "both")
VALUE_MAPS = ("post", "write")
#: the former ``centre=``: both scores are rows now, whichever is given
CENTRES = ("features", "tokens")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Protocol:
    """What is compared (docs/guides/pythia-protocol.md).

    Args:
        orientation: ``"theorem"`` (the attention map against ``Q̄``, rows = query tokens) or
            ``"paper-code"`` (against ``Q̄ᵀ`` on statistics with ``last_target="paper-code"``,
            as the paper's ``pythia.py``).
        normalize: ``"theory"`` (the paper: only the theory's rows scaled to unit norm) or
            ``"both"`` (the model's rows too).
        value_map: ``"post"`` (the paper: ``E_post``, ``E_attn``) or ``"write"`` (the layer's
            own write, ``E_post − E_pre`` and ``E_attn − E_pre``).
        specific: also the token-specific score of every map, as its own ``<score>_specific``
            row with its own null and interval (``False``: the paper's raw scores only; the
            specific score comes from the same pass, so this saves rows rather than time).
    """

    orientation: str = "theorem"
    normalize: str = "theory"
    value_map: str = "post"
    specific: bool = True

    def __post_init__(self) -> None:
        check_choice("protocol", self.orientation, ORIENTATIONS)
        check_choice("normalize", self.normalize, NORMALIZE)
        check_choice("value_map", self.value_map, VALUE_MAPS)
        check_bool("specific", self.specific)

    @classmethod
    def of(cls, protocol: "str | Protocol") -> "Protocol":
        """A :class:`Protocol` from itself or an orientation's name."""
        return protocol if isinstance(protocol, Protocol) else cls(orientation=protocol)


@dataclass(frozen=True)
class Compute:
    """Where and in what precision the protocol runs (docs/guides/pythia-protocol.md#precision).

    Args:
        device: where the products run (default: the model's device); the statistics' two
            ``[k, k]`` theory matrices are moved there.
        dtype: ``torch.float64`` or ``torch.float32`` (every stage; halves the theory's memory,
            within 3e-7 of float64).
        gemm_dtype: ``torch.float32`` with a float64 ``dtype``: only the matrix products in
            float32, every sum in float64 (None: the products in ``dtype``).
        batch_size: tokens per forward pass of the token maps (default 1024).
    """

    device: Any = None
    dtype: torch.dtype = torch.float64
    gemm_dtype: torch.dtype | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in (torch.float32, torch.float64):
            raise LeadTermsError(
                f"dtype must be torch.float64 or torch.float32, got {self.dtype!r}"
            )
        if self.batch_size is not None:
            positive_int("batch_size", self.batch_size)


_OPTIONS = {"protocol": Protocol, "compute": Compute}
#: each plain keyword, and the option object whose field it fills in
SHORTHANDS = {"normalize": "protocol", "value_map": "protocol", "centre": "protocol",
              "device": "compute", "dtype": "compute", "gemm_dtype": "compute",
              "batch_size": "compute"}  # fmt: skip


def fill(option: Any, name: str, **given: Any) -> Any:
    """``option`` (a :class:`Protocol` or an orientation, a :class:`Compute` or None) with the
    fields ``given`` as plain keywords; a field given both ways, differently, is refused."""
    kind = _OPTIONS[name]
    option = Protocol.of(option) if name == "protocol" else option or Compute()
    if not isinstance(option, kind):
        raise LeadTermsError(f"{name} must be a {kind.__name__}, got {option!r}")
    for field, value in given.items():
        before = getattr(option, field)
        if before != getattr(kind(), field) and before != value:
            raise LeadTermsError(
                f"{field} is given twice: {field}={value!r} and {name}.{field}={before!r}; "
                "give it once"
            )
    return dataclasses.replace(option, **given)


def option_shorthands(fn: F) -> F:
    """Let ``fn`` (which takes ``protocol=`` and ``compute=``) take the plain keywords of
    earlier releases (:data:`SHORTHANDS`), each filling in its option object (:func:`fill`).
    ``centre=`` is checked and has no effect: the raw and the token-specific score are both
    rows (``Protocol.specific``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        given = {k: kwargs.pop(k) for k in SHORTHANDS if k in kwargs}
        check_choice("centre", given.pop("centre", "tokens"), CENTRES)
        for name in _OPTIONS:
            mine = {k: v for k, v in given.items() if SHORTHANDS[k] == name}
            if mine:
                kwargs[name] = fill(kwargs.get(name, "theorem" if name == "protocol" else None),
                                    name, **mine)  # fmt: skip
        return fn(*args, **kwargs)

    return with_shorthands(call, fn, tuple(SHORTHANDS))
