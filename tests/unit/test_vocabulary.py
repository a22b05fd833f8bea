"""One vocabulary across the public API: each shared parameter name has one kind, one default
and one meaning, every option is keyword-only, every parameter is typed and documented.

In the manner of scikit-learn's ``test_public_functions.py``: the table below is the reference,
written by hand; the tests walk every public function (``tl_leadterms.__all__``, the Ray
``corpus_stats`` and the methods users call most) and compare each signature with it. A change
of a name, a default or a kind has to change the table too, which is the point: ``sweep`` routes
its extra keywords to the analyses by name, so one name meaning two things is a wrong number.
"""

import inspect
import re
import typing
from dataclasses import dataclass
from typing import Any

import pytest
import torch

import tl_leadterms
from tl_leadterms.protocols import ReadableModel

REQUIRED = inspect.Parameter.empty
KEYWORD = inspect.Parameter.KEYWORD_ONLY
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


@dataclass(frozen=True)
class Shared:
    """A parameter name shared by several public functions: its kind, default and meaning."""

    kind: inspect._ParameterKind
    default: Any
    meaning: str
    #: ``(function, default, why)`` or ``(function, default, why, kind)``: the only
    #: departures allowed from ``default`` (and ``kind``)
    exceptions: tuple[tuple[Any, ...], ...] = ()

    def default_of(self, function: str) -> Any:
        for name, default, *_ in self.exceptions:
            if name == function:
                return default
        return self.default

    def kind_of(self, function: str) -> inspect._ParameterKind:
        for name, _, _, *kind in self.exceptions:
            if name == function and kind:
                return kind[0]
        return self.kind


THEOREM_INPUT = "the leading terms' coefficients need it; there is no default"
SHARED = {
    "model": Shared(
        POSITIONAL,
        REQUIRED,
        "the model to read (a ReadableModel)",
        (("report", None, "read for its provenance only: the results hold the scores", KEYWORD),),
    ),
    "stats": Shared(
        POSITIONAL,
        REQUIRED,
        "the corpus statistics",
        (("report", None, "read for its provenance only: the results hold the scores", KEYWORD),),
    ),
    "tokens": Shared(
        POSITIONAL,
        REQUIRED,
        "token windows [n, T + 1]",
        (
            ("head_atlas", None, "windows only for the attention columns"),
            ("explore", None, "text= or tokens=, one of the two", KEYWORD),
            ("LeadingTermMonitor", None, "only the output analysis reads windows", KEYWORD),
        ),
    ),
    "progress": Shared(KEYWORD, True, "show progress (bars on a terminal, lines on a log)"),
    "per_head": Shared(KEYWORD, False, "score each head on its own (default: per layer)"),
    "layers": Shared(KEYWORD, None, "the layers to analyse (None: all)"),
    "lr": Shared(
        KEYWORD,
        None,
        "the learning rate of the leading terms' step count (None: s_lr or fitted)",
        (
            ("train", REQUIRED, THEOREM_INPUT),
            ("leading_terms", REQUIRED, THEOREM_INPUT),
            ("coefficients", REQUIRED, THEOREM_INPUT),
            ("step_bound", REQUIRED, THEOREM_INPUT),
        ),
    ),
    "steps": Shared(
        KEYWORD,
        None,
        "the number of training steps s of the leading terms (never checkpoint steps)",
        (
            ("train", REQUIRED, THEOREM_INPUT),
            ("leading_terms", REQUIRED, THEOREM_INPUT),
            ("coefficients", REQUIRED, THEOREM_INPUT),
        ),
    ),
    "s_lr": Shared(KEYWORD, None, "the product s·η, when lr and steps are not given"),
    "checkpoint_steps": Shared(KEYWORD, None, "which checkpoints of a series, by step"),
    "null": Shared(
        KEYWORD,
        None,
        "R permutations (or a NullSpec) for a null distribution",
        (
            ("head_atlas", 99, "the atlas' characters are read off the null's z"),
            ("explore", 99, "the explorer's grid fades by the null's verdict"),
        ),
    ),
    "ci": Shared(KEYWORD, None, "a confidence level for bootstrap intervals"),
    "bootstrap": Shared(KEYWORD, 50, "resamples (or a BootstrapSpec) for the intervals"),
    "population": Shared(
        KEYWORD,
        None,
        "which question the scores answer: 'training' (exact, no interval), 'distribution' "
        "or None (from the windows' fingerprints)",
    ),
    "seed": Shared(
        KEYWORD,
        0,
        "the seed of random draws",
        (("sweep", None, "None leaves a NullSpec or BootstrapSpec its own seed"),),
    ),
    "device": Shared(KEYWORD, None, "where the work runs (None: the model's device, else CPU)"),
    "batch_size": Shared(KEYWORD, None, "items per batch (None: the function's own size)"),
    "tokenizer": Shared(KEYWORD, None, "a tokenizer, for strings and provenance"),
    "want": Shared(KEYWORD, None, "which statistics to compute or read (None: all)"),
    "n": Shared(KEYWORD, 10, "how many entries a list shows", (("explore", 8, "per panel"),)),
    "d_vocab": Shared(
        KEYWORD,
        REQUIRED,
        "the tokenizer's vocabulary size",
        (("CorpusStats.load", None, "checked against the file when given"),),
    ),
    "n_ctx": Shared(
        KEYWORD,
        REQUIRED,
        "the window length T",
        (
            ("leading_model", None, "None: the statistics' T"),
            ("corpus_stats", None, "Ray: None takes the windows as they are (no cutting)"),
        ),
    ),
    "n_layers": Shared(
        KEYWORD,
        REQUIRED,
        "the number of attention layers",
        (
            ("leading_terms", 1, "one layer, the paper's Theorem 1"),
            ("leading_model", 1, "one layer, the paper's Theorem 1"),
            ("output_agreement", None, "None: the model's own"),
        ),
    ),
}
#: names that meant the same thing as a table name, and what replaced them
RETIRED = {
    "only": "want",
    "k": "n (k is the kept vocabulary size everywhere else)",
    "timings": "the result's .timings",
}
#: the only positional parameters: what a function works on, never an option
SUBJECTS = {
    "model",
    "stats",
    "tokens",
    "documents",
    "source",
    "checkpoints",
    "path",
    "path_or_name",
    "token_ids",
    "matrix_name",
    "token",
}
#: dtype is "the dtype of what the function computes": float64 for statistics and scores,
#: float32 for models; functions that keep what they are given default to None
DTYPE_DEFAULTS = {
    "corpus_stats": torch.float64,
    "block_stats": torch.float64,
    "leading_model": torch.float32,
    "paper_model": torch.float32,
    "output_agreement": torch.float32,
    "load_model": None,
}


#: functions a user reaches through their packages (the top level holds the most used ones)
PACKAGE_FUNCTIONS = {
    "leading_cosines": "tl_leadterms.analyses.decompose",
    "token_maps": "tl_leadterms.analyses.covariance",
    "evaluate_loss": "tl_leadterms.analyses.ablation",
    "leading_model": "tl_leadterms.models",
}


def _public_functions() -> dict[str, Any]:
    import importlib

    from tl_leadterms import CorpusStats, LeadingTermMonitor
    from tl_leadterms.distributed import corpus_stats as ray_corpus_stats

    found = {name: getattr(importlib.import_module(home), name)
             for name, home in PACKAGE_FUNCTIONS.items()}  # fmt: skip
    for name in tl_leadterms.__all__:
        value = getattr(tl_leadterms, name)
        if inspect.isfunction(value):
            found[name] = value
    found["distributed.corpus_stats"] = ray_corpus_stats
    found["CorpusStats.top"] = CorpusStats.top
    found["CorpusStats.load"] = CorpusStats.load
    found["LeadingTermMonitor"] = LeadingTermMonitor.__init__
    return found


FUNCTIONS = _public_functions()


def _base(name: str) -> str:
    return name.removeprefix("distributed.")


def _parameters(fn: Any) -> list[inspect.Parameter]:
    params = inspect.signature(inspect.unwrap(fn)).parameters.values()
    return [
        p
        for p in params
        if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def test_the_walk_finds_the_public_functions():
    for name in ("decompose", "corpus_stats", "sweep", "train", "output_agreement", "report"):
        assert name in FUNCTIONS
    assert len(FUNCTIONS) >= 25


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_shared_names_have_one_kind_and_one_default(name):
    wrong = []
    for p in _parameters(FUNCTIONS[name]):
        if p.name in RETIRED:
            wrong.append(f"{p.name}= is retired: use {RETIRED[p.name]}")
        spec = SHARED.get(p.name)
        if spec is None:
            continue
        want = spec.default_of(_base(name))
        if p.kind != spec.kind_of(_base(name)):
            wrong.append(f"{p.name} is {p.kind.description}, the table: {spec.kind.description}")
        if p.default is not want and p.default != want:
            wrong.append(f"{p.name} defaults to {p.default!r}, the table says {want!r}")
        if p.name == "dtype" and _base(name) in DTYPE_DEFAULTS:
            assert p.default == DTYPE_DEFAULTS[_base(name)], name
    assert not wrong, f"{name}: " + "; ".join(wrong)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_options_are_keyword_only(name):
    positional = [p.name for p in _parameters(FUNCTIONS[name]) if p.kind != KEYWORD]
    options = [p for p in positional if p not in SUBJECTS]
    assert not options, f"{name}: {options} can be passed by position; make them keyword-only"


def _bare(annotation: Any) -> bool:
    return annotation is object or annotation is inspect.Parameter.empty


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_parameters_are_typed(name):
    fn = inspect.unwrap(FUNCTIONS[name])
    hints = typing.get_type_hints(fn)
    untyped = [p.name for p in _parameters(FUNCTIONS[name]) if _bare(hints.get(p.name, object))]
    assert not untyped, f"{name}: {untyped} have no type (or a bare object)"
    if "model" in hints and name != "ablate":
        allowed = typing.get_args(hints["model"]) or (hints["model"],)
        assert ReadableModel in allowed, f"{name}: model is {hints['model']}, not ReadableModel"


_ENTRY = re.compile(r"^(\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: \([^)]*\))?:(?:\s|$)")


def documented_names(doc: str) -> set[str]:
    """The parameter names an ``Args:`` section documents (``a, b: ...`` documents both).

    >>> sorted(documented_names("x.\\n\\nArgs:\\n    a: one.\\n    b, c: two\\n        d: no\\n"))
    ['a', 'b', 'c']
    """
    lines = inspect.cleandoc(doc or "").splitlines()
    names: set[str] = set()
    for i, line in enumerate(lines):
        if line.strip() != "Args:":
            continue
        indent = None
        for entry in lines[i + 1 :]:
            if not entry.strip():
                continue
            width = len(entry) - len(entry.lstrip())
            if width == 0:
                break
            indent = width if indent is None else indent
            match = _ENTRY.match(entry[indent:]) if width == indent else None
            if match:
                names |= {n.lstrip("*") for n in match.group(1).split(", ")}
    return names


def test_documented_names_reads_groups_and_stops_at_the_next_section():
    doc = "Summary.\n\nArgs:\n    a: x.\n    b, c (int): y\n        no: z\n\nReturns:\n    q: r"
    assert documented_names(doc) == {"a", "b", "c"}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_parameter_has_a_docstring_entry(name):
    fn = FUNCTIONS[name]
    doc = fn.__doc__ if name != "LeadingTermMonitor" else tl_leadterms.LeadingTermMonitor.__doc__
    missing = [p.name for p in _parameters(fn) if p.name not in documented_names(doc)]
    assert not missing, f"{name}: no Args entry for {missing}"


def test_former_positional_and_renamed_calls_are_refused():
    """0.1.0 dropped the one-release shims: options go by keyword, under their current names."""
    windows = torch.randint(0, 7, (6, 5))
    with pytest.raises(TypeError, match="positional"):
        tl_leadterms.corpus_stats(windows, 7, progress=False)
    stats = tl_leadterms.corpus_stats(windows, d_vocab=7, progress=False)
    with pytest.raises(TypeError, match="'k'"):
        stats.top("B_bar", 1, k=3)
    assert len(stats.top("B_bar", 1, n=3)) == 3
