"""Small models shared by the tests.

``HookedTransformer``/``HookedTransformerConfig`` are re-exported from here (``None`` under
TransformerLens 4, where every test that builds one carries the ``hooked`` mark and skips).
"""

import torch

try:
    from transformer_lens import HookedTransformer, HookedTransformerConfig
except ImportError:  # TransformerLens 4 removed them; the tests using them are marked hooked
    HookedTransformer = HookedTransformerConfig = None


def random_attn_only(
    d_vocab: int,
    n_ctx: int,
    *,
    seed: int,
    n_layers: int = 2,
    d_model: int = 12,
    d_head: int = 4,
    n_heads: int = 3,
    positional: str = "standard",
) -> "HookedTransformer":
    """An attention-only HookedTransformer with embeddings, learned positions and no LayerNorm,
    every weight (biases included) drawn from N(0, 0.5²)."""
    cfg = HookedTransformerConfig(
        d_model=d_model, d_head=d_head, n_heads=n_heads, n_layers=n_layers, n_ctx=n_ctx,
        d_vocab=d_vocab, attn_only=True, normalization_type=None, act_fn=None, seed=seed,
        positional_embedding_type=positional,
    )  # fmt: skip
    model = HookedTransformer(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def train_with_trainer(hf_model, tokens, folder, callbacks=(), **args):
    """Train ``hf_model`` on the windows ``tokens`` with a seeded ``transformers.Trainer`` on the
    CPU (batches of 8, lr 1e-2, nothing saved; ``args`` override); returns the Trainer."""
    import transformers

    class Windows(torch.utils.data.Dataset):
        def __len__(self):
            return len(tokens)

        def __getitem__(self, i):
            return {"input_ids": tokens[i], "labels": tokens[i]}

    settings = dict(output_dir=str(folder), max_steps=2, per_device_train_batch_size=8,
                    report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
                    learning_rate=1e-2, disable_tqdm=True, seed=0)  # fmt: skip
    trainer = transformers.Trainer(
        model=hf_model, args=transformers.TrainingArguments(**{**settings, **args}),
        train_dataset=Windows(), callbacks=list(callbacks),
    )  # fmt: skip
    trainer.train()
    return trainer


def save_format2(stats, path) -> None:
    """Write ``stats`` in the layout of format version 2, as the release before the packed
    format wrote it: every dense table (Φ̄, Ḡ, Q̄, Δ) under its own name, checksums of each."""
    from pathlib import Path

    from tl_leadterms.stats.io import write_file
    from tl_leadterms.stats.provenance import ids_vocab_hash

    names = ("pair_codes", "pair_counts", "unigram_counts")
    floats = [n for n in ("Phi_bar", "G_bar", "Q_bar", "Delta") if stats.has(n)]
    tensors = {n: getattr(stats, n) for n in (*names, *floats)}
    if stats.kept is not None:
        tensors["kept"] = stats.kept
    tensors = {n: t.detach().cpu().contiguous() for n, t in tensors.items()}
    header = {
        **{k: v for k, v in stats.metadata.items() if k != "rebuilt"},
        "format": "tl_leadterms.CorpusStats",
        "format_version": 2,
        "library_version": stats.metadata.get("library_version", "0.1.0"),
        "d_vocab": stats.d_vocab,
        "n_ctx": stats.n_ctx,
        "n_sequences": stats.n_sequences,
        "n_kept": stats.k,
        "centre_vocab": stats.centre_vocab,
        "dtype": str(stats.dtype).removeprefix("torch."),
        "vocab_hash": stats.metadata.get("tokenizer_vocab_hash")
        or ids_vocab_hash(stats.d_vocab, stats.kept),
        "statistics": ["B_bar", *floats],
    }
    write_file(Path(path), tensors, header)


def word_tokenizer_folder(folder, tokens: list[str]):
    """A saved word-level tokenizer (``tokenizer.json``) whose vocabulary is ``tokens``, in
    order (ids 0, 1, ...), whatever characters they hold."""
    from pathlib import Path

    from tokenizers import Tokenizer, models

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(tokens)}
    Tokenizer(models.WordLevel(vocab, unk_token=tokens[0])).save(str(folder / "tokenizer.json"))
    return folder


def markov_tokens(n_samples: int, length: int, d_vocab: int, seed: int) -> torch.LongTensor:
    """Tokens from a random sparse-ish Markov chain so the statistics are not degenerate."""
    gen = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(d_vocab, d_vocab, generator=gen, dtype=torch.float64)
    transition = torch.softmax(logits, dim=1)
    tokens = torch.zeros(n_samples, length, dtype=torch.long)
    tokens[:, 0] = torch.randint(0, d_vocab, (n_samples,), generator=gen)
    for pos in range(1, length):
        for n in range(n_samples):
            prev = int(tokens[n, pos - 1])
            tokens[n, pos] = int(torch.multinomial(transition[prev], 1, generator=gen))
    return tokens
