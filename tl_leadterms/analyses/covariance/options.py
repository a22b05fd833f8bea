"""What the covariance protocol compares (:class:`Protocol`), how it computes
(:class:`Compute`), and the plain keywords of earlier releases that fill them in
(:func:`option_shorthands`).

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
#: the former ``centre=``: both scores are rows now, whichever is given
CENTRES = ("features", "tokens")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Protocol:
    """What is compared (docs/guides/pythia-protocol.md): the attention map against ``Q̄``
    (``orientation="theorem"``) or ``Q̄ᵀ`` (``"paper-code"``); only the theory's rows scaled to
    unit norm (``normalize="theory"``, the paper) or the model's too (``"both"``); ``E_post``
    and ``E_attn`` (``value_map="post"``, the paper) or the layer's own write (``"write"``); and
    whether each map's token-specific score is a ``<score>_specific`` row too (``specific``)."""

    orientation: str = "theorem"
    normalize: str = "theory"
    value_map: str = "post"
    specific: bool = True

    def __post_init__(self) -> None:
        check_choice("protocol", self.orientation, ORIENTATIONS)
        check_choice("normalize", self.normalize, ("theory", "both"))
        check_choice("value_map", self.value_map, ("post", "write"))
        check_bool("specific", self.specific)

    @classmethod
    def of(cls, protocol: "str | Protocol") -> "Protocol":
        """A :class:`Protocol` from itself or an orientation's name."""
        return protocol if isinstance(protocol, Protocol) else cls(orientation=protocol)


@dataclass(frozen=True)
class Compute:
    """Where (``device``; None: the model's) and in what precision (``dtype`` float64 or
    float32; ``gemm_dtype=torch.float32`` under float64: only the matrix products in float32)
    the protocol runs, and its token maps' ``batch_size`` (None: 1024); every setting within the
    documented 1e-6 (docs/guides/pythia-protocol.md#precision)."""

    device: Any = None
    dtype: torch.dtype = torch.float64
    gemm_dtype: torch.dtype | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        if self.dtype not in (torch.float32, torch.float64):
            raise LeadTermsError(
                f"dtype must be torch.float64 or torch.float32, got {self.dtype!r}"
            )
        if self.gemm_dtype not in (None, self.dtype) and (self.gemm_dtype, self.dtype) != (
                torch.float32, torch.float64):  # fmt: skip
            raise LeadTermsError(
                f"gemm_dtype must be None (the products in dtype) or torch.float32 with "
                f"dtype=torch.float64, got gemm_dtype={self.gemm_dtype!r} with dtype={self.dtype!r}"
            )
        if self.batch_size is not None:
            positive_int("batch_size", self.batch_size)


_OPTIONS = {"protocol": Protocol, "compute": Compute}
#: each plain keyword, and the option object whose field it fills in
SHORTHANDS = {"normalize": "protocol", "value_map": "protocol", "centre": "protocol",
              "device": "compute", "dtype": "compute", "gemm_dtype": "compute",
              "batch_size": "compute"}  # fmt: skip


def fill(option: Any, name: str, **given: Any) -> Any:
    """``option`` (``name`` "protocol": a :class:`Protocol` or an orientation; "compute": a
    :class:`Compute` or None) with the fields ``given``; one given both ways, differently, is
    refused."""
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
    """Let ``fn`` (which takes ``protocol=`` and ``compute=``) take the plain keywords
    :data:`SHORTHANDS`, each filling in its option (:func:`fill`); ``centre=`` is checked and
    has no effect (both scores are rows)."""

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
