"""Token windows of a random first-order Markov chain, for benchmarks that need a corpus with
bigram structure and no tokenizer."""

import torch


def markov_tokens(n: int, length: int, vocab: int, seed: int, power: int = 8) -> torch.Tensor:
    """``n`` windows of ``length`` ids in ``[0, vocab)``: each next id drawn from its row of a
    random transition matrix (uniform entries to ``power``, so larger powers are peakier)."""
    g = torch.Generator().manual_seed(seed)
    P = torch.rand(vocab, vocab, generator=g) ** power
    P = P / P.sum(1, keepdim=True)
    out = torch.empty(n, length, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (n,), generator=g)
    for t in range(1, length):
        out[:, t] = torch.multinomial(P[out[:, t - 1]], 1, generator=g).squeeze(1)
    return out
