"""Synthetic language tasks for from-scratch tiny LMs, and sequence packing.

Token ids: 0 pad, 1 bos, 2 sep, 3 eos, then the task's symbols. An example is a prompt (ending in sep) and an
answer (ending in eos); the loss covers answer tokens only.

- `reverse`: `bos a1 .. an sep` -> `an .. a1 eos`.
- `kv_recall`: `bos k1 v1 .. kn vn sep kq` -> `v_q eos` (keys distinct; keys and values from separate symbols).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PAD, BOS, SEP, EOS = 0, 1, 2, 3
FIRST_SYMBOL = 4
TASKS = ("reverse", "kv_recall")


def vocab_size_needed(task: str, num_symbols: int) -> int:
    return FIRST_SYMBOL + (2 * num_symbols if task == "kv_recall" else num_symbols)


def make_examples(task: str, n: int, *, num_symbols: int, min_len: int, max_len: int,
                  rng: np.random.Generator) -> list[tuple[list[int], list[int]]]:
    """n (prompt, answer) pairs of token lists (host-side data generation)."""
    if task not in TASKS:
        raise ValueError(f"task={task!r}: expected one of {TASKS}")
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        if task == "reverse":
            seq = (FIRST_SYMBOL + rng.integers(0, num_symbols, size=length)).tolist()
            out.append(([BOS, *seq, SEP], [*seq[::-1], EOS]))
        else:
            length = min(length, num_symbols)
            keys = FIRST_SYMBOL + rng.permutation(num_symbols)[:length]
            vals = FIRST_SYMBOL + num_symbols + rng.integers(0, num_symbols, size=length)
            q = int(rng.integers(0, length))
            body = [int(t) for kv in zip(keys, vals) for t in kv]
            out.append(([BOS, *body, SEP, int(keys[q])], [int(vals[q]), EOS]))
    return out


def to_training_rows(examples: Sequence[tuple[list[int], list[int]]], seq_len: int
                     ) -> dict[str, np.ndarray]:
    """One example per row, right-padded: inputs, targets (next token), loss_mask (answer targets),
    segment_ids (1 on real tokens, 0 on padding)."""
    n = len(examples)
    arrays = {k: np.zeros((n, seq_len), np.int32) for k in ("inputs", "targets", "segment_ids")}
    arrays["loss_mask"] = np.zeros((n, seq_len), np.float32)
    for i, (prompt, answer) in enumerate(examples):
        seq = prompt + answer
        if len(seq) - 1 > seq_len:
            raise ValueError(f"example of {len(seq)} tokens: expected at most seq_len + 1 = {seq_len + 1}")
        L = len(seq) - 1
        arrays["inputs"][i, :L] = seq[:-1]
        arrays["targets"][i, :L] = seq[1:]
        arrays["loss_mask"][i, len(prompt) - 1:L] = 1.0
        arrays["segment_ids"][i, :L] = 1
    return arrays


def pack(examples: Sequence[tuple[list[int], list[int]]], seq_len: int) -> dict[str, np.ndarray]:
    """Greedy in-order packing of examples into rows of `seq_len`; each example gets its own segment id
    (1, 2, ...) so attention stays inside it and positions restart; 0 marks padding."""
    rows: list[list[tuple[list[int], list[int]]]] = [[]]
    used = 0
    for prompt, answer in examples:
        L = len(prompt) + len(answer) - 1
        if L > seq_len:
            raise ValueError(f"example of {L + 1} tokens: expected at most seq_len + 1 = {seq_len + 1}")
        if used + L > seq_len:
            rows.append([])
            used = 0
        rows[-1].append((prompt, answer))
        used += L
    n = len(rows)
    out = {k: np.zeros((n, seq_len), np.int32) for k in ("inputs", "targets", "segment_ids")}
    out["loss_mask"] = np.zeros((n, seq_len), np.float32)
    for r, row in enumerate(rows):
        start = 0
        for s, (prompt, answer) in enumerate(row, start=1):
            seq = prompt + answer
            L = len(seq) - 1
            out["inputs"][r, start:start + L] = seq[:-1]
            out["targets"][r, start:start + L] = seq[1:]
            out["loss_mask"][r, start + len(prompt) - 1:start + L] = 1.0
            out["segment_ids"][r, start:start + L] = s
            start += L
    return out
