"""One fixed word-level vocabulary for instructions, plans, requirement memories and command sequences.

Command sequences are flattened Text2CAD-style: each DeepCAD row becomes its command token followed by the
8-bit levels of the arguments that command uses (DeepCAD's argument mask), as shared value tokens `v0..v255`:
`SOL`, `L x y`, `A x y alpha f`, `R x y r` (circle), `EXT theta phi gamma px py pz s e1 e2 b u`; the final EOS
row is the `<eos>` token. `tokens_to_program` parses a generated sequence back (CADError when malformed).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from generative.cad import corpus
from generative.cad.commands import (
    ARC,
    ARG_MASK,
    CIRCLE,
    EOS,
    EXT,
    LINE,
    N_ARGS,
    PAD,
    SOL,
    CADError,
    Program,
    from_vector,
    to_vector,
)

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>", "<plan>", "<req>", "<text>", "<cmd>")
CMD_WORDS = {SOL: "SOL", LINE: "L", ARC: "A", CIRCLE: "R", EXT: "EXT"}
VALUE_WORDS = tuple(f"v{i}" for i in range(256))
PLAN_WORDS = ("sketch", "xy", "xz", "top", "rect", "lshape", "slot", "disc", "hole", "circle", "extrude", "new",
              "join", "cut", "symmetric", ";")
TEXT_WORDS = ("a", "make", "design", "rectangular", "plate", "l-shaped", "slot-shaped", "round", "disc", "width",
              "length", "radius", "thickness", "notch", "with", "through", "hole", "at", "x", "y", "z", "then",
              "and", "plus", "boss", "square", "pocket", "cross", "depth", "height")
NUMBER_WORDS = tuple(str(i) for i in range(-128, 256))
ROLE_WORDS = (*(f"role:{r}" for r in corpus.ROLES), "rel:corner", "rel:centred")
WORDS = tuple(dict.fromkeys((*SPECIALS, *CMD_WORDS.values(), *VALUE_WORDS, *PLAN_WORDS, *TEXT_WORDS, *NUMBER_WORDS,
                             *ROLE_WORDS)))
IDS = {w: i for i, w in enumerate(WORDS)}
PAD_ID, BOS_ID, EOS_ID, UNK_ID = (IDS[w] for w in SPECIALS[:4])
PLAN_ID, REQ_ID, TEXT_ID, CMD_ID = (IDS[w] for w in SPECIALS[4:])
VOCAB = len(WORDS)
_CMD_OF = {w: c for c, w in CMD_WORDS.items()}


def encode(words: Iterable[str]) -> list[int]:
    return [IDS.get(w, UNK_ID) for w in words]


def decode(ids: Iterable[int]) -> list[str]:
    out = []
    for i in ids:
        i = int(i)
        if i == EOS_ID:
            break
        if i != PAD_ID:
            out.append(WORDS[i] if 0 <= i < VOCAB else "<unk>")
    return out


def check_words(words: Sequence[str]) -> None:
    bad = sorted({w for w in words if w not in IDS})
    if bad:
        raise CADError(f"words {bad[:8]}: expected words of the CAD vocabulary (numbers -128..255)")


def program_words(program: Program) -> list[str]:
    words = []
    for row in to_vector(program):
        cmd = int(row[0])
        if cmd == EOS:
            break
        words.append(CMD_WORDS[cmd])
        words += [f"v{int(a)}" for a in row[1:][ARG_MASK[cmd]]]
    return words


def words_to_vector(words: Sequence[str]) -> np.ndarray:
    rows, i = [], 0
    while i < len(words):
        w = words[i]
        if w not in _CMD_OF:
            raise CADError(f"token {i} {w!r}: expected a command ({', '.join(CMD_WORDS.values())})")
        cmd = _CMD_OF[w]
        k = int(ARG_MASK[cmd].sum())
        args = words[i + 1:i + 1 + k]
        if len(args) < k or any(not a.startswith("v") or a[1:] not in _LEVEL_STR for a in args):
            raise CADError(f"token {i} {w!r}: arguments {list(args)}: expected {k} value tokens v0..v255")
        row = np.full(1 + N_ARGS, PAD, np.int64)
        row[0] = cmd
        row[1:][ARG_MASK[cmd]] = [int(a[1:]) for a in args]
        rows.append(row)
        i += 1 + k
    rows.append(np.array([EOS] + [PAD] * N_ARGS, np.int64))
    return np.stack(rows)


_LEVEL_STR = frozenset(str(i) for i in range(256))


def tokens_to_program(ids: Iterable[int]) -> Program:
    """Generated ids (up to `<eos>`) -> program; CADError when the sequence does not parse."""
    return from_vector(words_to_vector(decode(ids)))


def value_word(mm: int) -> str:
    """The level token of a length or position stated in mm (1 mm = one level, 0 mm = v128)."""
    return f"v{int(np.clip(128 + mm, 0, 255))}"
