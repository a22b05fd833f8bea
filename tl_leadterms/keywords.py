"""Calls in the old form keep working for one release, with a warning that names the new form.

The public functions take their subject (``model``, ``stats``, ``tokens``) by position and every
option by keyword. :func:`positional_until_next_release` lets a function still accept options that
used to be positional (and options under a former name), warning with :class:`FutureWarning`
and the call to write instead.

>>> import warnings
>>> @positional_until_next_release("d_vocab")
... def count(tokens, *, d_vocab: int) -> int:
...     return d_vocab
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     count([1, 2], 50)
50
>>> print(caught[0].message)  # doctest: +NORMALIZE_WHITESPACE
count(): pass d_vocab= by keyword (count(..., d_vocab=...)); passing it by position is
deprecated and stops working in the next release
"""

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from tl_leadterms.errors import LeadTermsError

__all__ = ["positional_until_next_release"]

F = TypeVar("F", bound=Callable[..., Any])


def positional_until_next_release(*moved: str, renamed: dict[str, str] | None = None):
    """Accept ``moved`` (keyword-only now) after the positional parameters, in this order, and
    each old keyword name of ``renamed`` (old -> new), each with a :class:`FutureWarning`."""
    renamed = dict(renamed or {})

    def decorate(fn: F) -> F:
        params = inspect.signature(fn).parameters.values()
        n_positional = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        name = fn.__name__

        @functools.wraps(fn)
        def accept_old_calls(*args: Any, **kwargs: Any) -> Any:
            if len(args) > n_positional and moved:
                extra = args[n_positional:]
                if len(extra) > len(moved):
                    raise TypeError(
                        f"{name}() takes {n_positional} positional arguments but "
                        f"{len(args)} were given"
                    )
                given = dict(zip(moved, extra, strict=False))
                twice = sorted(given.keys() & kwargs.keys())
                if twice:
                    raise TypeError(f"{name}() got multiple values for argument {twice[0]!r}")
                names = ", ".join(f"{key}=" for key in given)
                call = ", ".join(f"{key}=..." for key in given)
                warnings.warn(
                    f"{name}(): pass {names} by keyword ({name}(..., {call})); passing "
                    f"{'it' if len(given) == 1 else 'them'} by position is deprecated and stops "
                    "working in the next release",
                    FutureWarning,
                    stacklevel=2,
                )
                kwargs.update(given)
                args = args[:n_positional]
            for old, new in renamed.items():
                if old in kwargs:
                    if new in kwargs:
                        raise LeadTermsError(
                            f"{name}() got both {old}= and {new}=; {old}= is the former name of "
                            f"{new}=, pass {new}= only"
                        )
                    warnings.warn(
                        f"{name}(): {old}= is now called {new}=; the old name stops working "
                        "in the next release",
                        FutureWarning,
                        stacklevel=2,
                    )
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return accept_old_calls  # type: ignore[return-value]

    return decorate
