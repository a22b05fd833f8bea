"""``tl-leadterms top``: the tokens most associated with given tokens, read from a statistics file.

It reads only the row the query needs and the file's column totals, verified, with the standard
library and ``tokenizers`` alone (:mod:`tl_leadterms.stats.filetop`); lists that reader does not
cover (Ḡ, PPMI of Σ_B̄, block files) go through :meth:`CorpusStats.top`, which gives the same lists.
The tokenizer is the one the file records (its saved folder), unless ``--tokenizer`` names another.
"""

import argparse
from pathlib import Path
from typing import Any

from tl_leadterms.cli.inputs import positive_int_arg
from tl_leadterms.errors import LeadTermsError

__all__ = ["add_parser", "cmd_top", "recorded_tokenizer"]

_MATRICES = ("bigram", "interchangeability", "context", "composed", "attention",
             "B_bar", "Sigma_B", "Phi_bar", "G_bar", "Q_bar")  # fmt: skip
_ALIASES = {"bigram": "B_bar", "interchangeability": "Sigma_B", "context": "Phi_bar",
            "composed": "G_bar", "attention": "Q_bar"}  # fmt: skip


def _candidates(path: Path, meta: dict[str, Any]) -> list[Path]:
    """Folders that may hold the file's tokenizer, most explicit first: the folder the file
    records (``tokenizer_path``, relative to the file), the recorded name as a folder, then
    ``<stem>.tokenizer`` and ``tokenizer`` beside the file."""
    here = path.parent
    out = []
    for key in ("tokenizer_path", "tokenizer_name"):
        value = meta.get(key)
        if isinstance(value, str) and value:
            out += [here / value, Path(value)]
    return list(dict.fromkeys(p.resolve() for p in [*out, here / f"{path.stem}.tokenizer",
                                                    here / "tokenizer"]))  # fmt: skip


def recorded_tokenizer(path: Path, meta: dict[str, Any]) -> tuple[Any, str]:
    """The tokenizer the statistics were counted with, from a saved folder whose vocabulary hash
    is the file's; or None and why there is none."""
    from tl_leadterms.stats.filetop import FileTokenizer

    wanted = meta.get("tokenizer_vocab_hash")
    if not wanted:
        return None, "the statistics file records no tokenizer"
    others = []
    for folder in _candidates(path, meta):
        if folder.is_dir() and (folder / "tokenizer.json").is_file():
            try:
                tokenizer = FileTokenizer(folder)
            except Exception:
                others.append(f"{folder} holds an unreadable tokenizer")
                continue
            if tokenizer.vocab_hash() == wanted:
                return tokenizer, ""
            others.append(f"{folder} now holds another (hash {tokenizer.vocab_hash()[:12]})")
    if others:
        held = "; ".join(others)
        return None, f"{path} was counted with a tokenizer of hash {wanted[:12]} and {held}: " + (
            "overwritten since, by another run perhaps"
        )
    return None, "the statistics file records no saved tokenizer folder that is still there"


def _given_tokenizer(spec: str) -> Any:
    """``--tokenizer``: a saved folder through ``tokenizers`` alone, else a name (transformers)."""
    from tl_leadterms.cli.inputs import first_line, tokenizer_from_spec
    from tl_leadterms.stats.filetop import FileTokenizer

    folder = Path(spec).expanduser()
    if folder.is_dir() and (folder / "tokenizer.json").is_file():
        try:
            return FileTokenizer(folder)
        except Exception as err:  # malformed tokenizer.json or tokenizer_config.json
            raise LeadTermsError(
                f"cannot load tokenizer {spec!r} ({first_line(err)}); pass a local tokenizer "
                "folder (tokenizer.json) or a cached hub name."
            ) from err
    return tokenizer_from_spec(spec, None)


def _token_id(word: str, tokenizer: Any, missing: str = "") -> int:
    if tokenizer is None:
        if not word.isdigit():
            raise LeadTermsError(
                f"token {word!r} is a string but {missing}; pass --tokenizer FOLDER (the "
                "tokenizer the statistics were counted with, or compute them again with "
                "--save-tokenizer) to look it up, or give its token id"
            )
        return int(word)
    from tl_leadterms.stats.scoring import single_token_id  # not needed for --help

    return single_token_id(word, tokenizer)


def _excluded(spec: str | list[str], tokenizer: Any) -> list[int] | str:
    """``--exclude``: ``special`` (the tokenizer's special tokens), ``none``, or token ids."""
    if spec in ("special", ["special"]):
        return "special"
    if spec == ["none"]:
        return []
    if not all(s.isdigit() for s in spec):
        raise LeadTermsError(f"--exclude takes special, none or token ids, got {' '.join(spec)!r}")
    return [int(s) for s in spec]


def _line(items, tokenizer) -> str:
    if isinstance(items, str):
        return items
    from tl_leadterms.jsontext import terminal_text

    label = (lambda t: terminal_text(tokenizer.decode([t]))) if tokenizer is not None else str
    return ", ".join(f"{label(t)} ({s:.3g})" for t, s in items)


def cmd_top(args: argparse.Namespace) -> int:
    from tl_leadterms.stats import fileformat as ff

    key = _ALIASES.get(args.matrix, args.matrix)
    path = Path(args.stats)
    meta = ff.read_header(path)
    if args.tokenizer:
        tokenizer, missing = _given_tokenizer(args.tokenizer), ""
    else:
        tokenizer, missing = recorded_tokenizer(path, meta)
    if tokenizer is not None and not args.allow_vocab_mismatch and meta.get("format") == ff.FORMAT:
        ff.check_tokenizer(path, meta, tokenizer)
    exclude = _excluded(args.exclude, tokenizer)
    lines = None
    if meta.get("format") == ff.FORMAT:
        lines = _from_file(path, meta, key, args, tokenizer, exclude, missing)
    if lines is None:
        lines = _from_stats(args, key, tokenizer, exclude)
    for word, line in zip(args.tokens, lines, strict=True):
        print(f"{word}: {line}")
    return 0


def _from_file(path: Path, meta, key: str, args, tokenizer, exclude, missing) -> list[str] | None:
    """The lists read with the standard library, or None where :meth:`CorpusStats.top` must
    answer."""
    from tl_leadterms.stats.filetop import StatsFile

    stats = StatsFile(path, meta)
    if exclude == "special":
        exclude = list(getattr(tokenizer, "all_special_ids", None) or [])
    lines = []
    for word in args.tokens:
        token = _token_id(word, tokenizer, missing)
        found = stats.top(key, token, args.k, args.scoring, exclude, word)
        if found is None:
            return None
        lines.append(_line(found, tokenizer))
    return lines


def _from_stats(args, key: str, tokenizer: Any, exclude) -> list[str]:
    """The lists through :meth:`CorpusStats.top` (torch), reading only the table asked for."""
    from tl_leadterms.cli.inputs import read_stats

    want = {"Sigma_B": "B_bar"}.get(key, key)
    stats = read_stats(args.stats, tokenizer, want=(want,), check_vocab=False)
    lines = []
    for word in args.tokens:
        token = int(word) if word.isdigit() and tokenizer is None else word
        found = stats.top(key, token, n=args.k, tokenizer=tokenizer, scoring=args.scoring,
                          exclude=exclude)  # fmt: skip
        lines.append(found.note if not found and found.note else
                     _line([(x.token_id, x.score) for x in found], tokenizer))  # fmt: skip
    return lines


def add_parser(sub) -> None:
    """The ``top`` subcommand's arguments."""
    from tl_leadterms.cli.help import subparser

    top = subparser(
        sub, "top", "the tokens most associated with given tokens",
        "tl-leadterms top stats.safetensors red fish --matrix context -n 5",
    )  # fmt: skip
    top.add_argument("stats", help="a statistics file (tl-leadterms stats -o FILE)")
    top.add_argument("tokens", nargs="+", help="words (with a tokenizer) or token ids")
    top.add_argument("--matrix", default="bigram", choices=_MATRICES, metavar="MATRIX",
                     help="which statistic: bigram (next tokens), interchangeability, context "
                     "(earlier tokens), composed, attention")  # fmt: skip
    top.add_argument("--tokenizer", help="tokenizer folder or name (default: the folder the "
                     "statistics file records, if it is there)")  # fmt: skip
    top.add_argument("-n", "-k", dest="k", type=positive_int_arg, default=10, metavar="N",
                     help="how many tokens to list")  # fmt: skip
    top.add_argument("--scoring", choices=("cosine", "raw", "ppmi"), default="cosine",
                     help="cosine: row and column normalised (readable); raw: the paper's "
                     "scores (frequent tokens first); ppmi: frequency-corrected")  # fmt: skip
    top.add_argument(
        "--exclude",
        nargs="+",
        default="special",
        metavar="special|none|ID",
        help="tokens to leave out: the tokenizer's special tokens, none, or ids",
    )
    top.add_argument(
        "--allow-vocab-mismatch",
        action="store_true",
        help="use a tokenizer other than the statistics' (experts: the hash check is skipped)",
    )
    top.set_defaults(func=cmd_top)
