"""The per-request rules that change a step's logits before sampling: logit_bias, min_tokens, bad_words.

Every rule becomes (row, token, value) entries, written into the logits by one indexed add and one
indexed fill for the whole batch; a step in which no request set any of them does not touch the logits.
"""

from __future__ import annotations

import torch

from bulkinfer.engine.sequence import Sequence

# Biases are applied within +-BIAS_LIMIT: past it, a token is already certain or impossible (exp(-1e4) is 0
# even in float64), and a bias past float32's range would turn its logits into inf - inf = NaN.
BIAS_LIMIT = 1e4


def apply_logit_rules(logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: set[int]) -> torch.Tensor:
    """logits: [batch, vocab] fp32, one row per sequence; returned changed (a copy) or as it was."""
    rows = [row for row, seq in enumerate(seqs)
            if seq.params.logit_bias or seq.bad_word_ids or seq.num_output_tokens < seq.params.min_tokens]
    if not rows:
        return logits
    bias_rows, bias_tokens, biases = [], [], []
    banned_rows, banned_tokens = [], []
    for row in rows:
        for token, bias in (seqs[row].params.logit_bias or {}).items():
            bias_rows.append(row)
            bias_tokens.append(token)
            biases.append(min(max(bias, -BIAS_LIMIT), BIAS_LIMIT))
        # A stop token id past the vocabulary is allowed (it never comes), but has no logit to ban.
        banned = [token for token in _banned_tokens(seqs[row], eos_token_ids) if 0 <= token < logits.shape[1]]
        banned_rows += [row] * len(banned)
        banned_tokens += banned
    logits = logits.clone()
    device = logits.device
    if bias_rows:
        index = (torch.tensor(bias_rows, device=device), torch.tensor(bias_tokens, device=device))
        logits.index_put_(index, torch.tensor(biases, dtype=logits.dtype, device=device), accumulate=True)
    if banned_rows:
        index = (torch.tensor(banned_rows, device=device), torch.tensor(banned_tokens, device=device))
        logits.index_put_(index, torch.tensor(-torch.inf, dtype=logits.dtype, device=device))
    return logits


def _banned_tokens(seq: Sequence, eos_token_ids: set[int]) -> list[int]:
    """The tokens this sequence may not take next: what would end it before min_tokens, and the last
    token of each bad word whose tokens before it are the latest output."""
    params = seq.params
    banned = []
    if seq.num_output_tokens < params.min_tokens:
        banned += params.stop_token_ids
        banned += [] if params.ignore_eos else sorted(eos_token_ids)
    if seq.bad_word_ids:
        output = seq.output_token_ids
        for word in seq.bad_word_ids:
            prefix = word[:-1]
            if len(prefix) <= len(output) and output[len(output) - len(prefix):] == prefix:
                banned.append(word[-1])
    return banned


def bad_word_ids(tokenizer, words: list[str] | None) -> list[list[int]]:
    """Each bad word's token ids, as vLLM spells them: the word alone, and after a space when that
    spelling starts with another token but is as long (a word inside a sentence is usually tokenized
    after its space)."""
    spellings = []
    for word in words or []:
        alone = tokenizer.encode(word.lstrip(), add_special_tokens=False)
        spaced = tokenizer.encode(" " + word.lstrip(), add_special_tokens=False)
        spellings.append(alone)
        if alone and spaced and spaced[0] != alone[0] and len(spaced) == len(alone):
            spellings.append(spaced)
    return [ids for ids in spellings if ids]
