"""The knowledge-split world: facts only the sharer knows, facts only the receiver knows, one QA format.

Entities live in cities (e -> c) and cities have colours (c -> k). Cities are split in half: the sharer knows
the colours of the first half (C_s), the receiver those of every city. The entities form four groups:
- `recv`: their cities are known to both models (the receiver learns the two-hop composition on them);
- `hint`: used only in the receiver's hinted examples, each time with a random city (it learns to read a hint);
- `fuse`: cities in C_r (colour known to the receiver only); their cities only the sharer knows; the fuser
  trains on questions about them;
- `test`: like `fuse`, never seen by the fuser: the evaluation entities.
The sharer knows every entity's city and answers two-hop questions only for cities in C_s.

Sequences (one token per word). Both models learn the same questions; the receiver's format ends with an answer
cue A, the sharer's answers right after the question mark (so the sharer forms its answer inside the prompt
section that C2C fuses; the test questions are asked in the receiver's format):
- city question `BOS Q city e ? A` -> `c EOS`; colour question `BOS Q colour c ? A` -> `k EOS`;
  two-hop `BOS Q colour city e ? A` -> `k EOS`; the sharer's versions drop the `A`;
- statement (sharer) `BOS e lives in` -> `c . EOS`: what the sharer writes as a text-to-text hint;
- hinted question (receiver) `BOS e lives in c . Q ... ? A` -> answer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from core.config import ConfigError

WORDS = ("<pad>", "<bos>", "<eos>", "Q", "A", "city", "colour", "lives", "in", "?", ".")
PAD, BOS, EOS, Q, A, CITY, COLOUR, LIVES, IN, QMARK, DOT = range(len(WORDS))
KINDS = ("city", "colour", "two_hop")

Example = tuple[list[int], list[int]]  # (prompt, answer)


@dataclasses.dataclass(frozen=True)
class World:
    """Token ids and facts of one world. city_of (E,) city index per entity, colour_of (C,) colour index."""

    num_entities: int
    num_cities: int
    num_colours: int
    city_of: np.ndarray
    colour_of: np.ndarray
    groups: dict[str, np.ndarray]

    @property
    def vocab_size(self) -> int:
        return len(WORDS) + self.num_entities + self.num_cities + self.num_colours

    def entity(self, e: int) -> int:
        return len(WORDS) + int(e)

    def city(self, c: int) -> int:
        return len(WORDS) + self.num_entities + int(c)

    def colour(self, k: int) -> int:
        return len(WORDS) + self.num_entities + self.num_cities + int(k)

    @property
    def sharer_colour_cities(self) -> np.ndarray:
        return np.arange(self.num_cities // 2)

    # --- sequences ---------------------------------------------------------------------------------------

    def question(self, kind: str, x: int) -> list[int]:
        """Question tokens without BOS and the final A/H: `Q city e ?`, `Q colour c ?`, `Q colour city e ?`."""
        if kind == "city":
            return [Q, CITY, self.entity(x), QMARK]
        if kind == "colour":
            return [Q, COLOUR, self.city(x), QMARK]
        if kind == "two_hop":
            return [Q, COLOUR, CITY, self.entity(x), QMARK]
        raise ValueError(f"question kind {kind!r}: expected one of {KINDS}")

    def answer(self, kind: str, x: int, city: int | None = None) -> int:
        """The answer token; `city` overrides the entity's city (a hinted question with a made-up city)."""
        if kind == "colour":
            return self.colour(self.colour_of[x])
        c = self.city_of[x] if city is None else city
        return self.city(c) if kind == "city" else self.colour(self.colour_of[c])

    def hint(self, e: int, city: int | None = None) -> list[int]:
        """`e lives in c .`"""
        return [self.entity(e), LIVES, IN, self.city(self.city_of[e] if city is None else city), DOT]

    def qa(self, kind: str, x: int, cue: bool = True) -> Example:
        """The receiver's format (`... ? A` -> answer), or the sharer's with `cue=False` (`... ?` -> answer)."""
        return [BOS, *self.question(kind, x), *([A] if cue else [])], [self.answer(kind, x), EOS]

    def hinted_qa(self, kind: str, e: int, city: int | None = None) -> Example:
        return [BOS, *self.hint(e, city), *self.question(kind, e), A], [self.answer(kind, e, city), EOS]

    def statement(self, e: int) -> Example:
        """`BOS e lives in` -> `c . EOS`: the sharer completing it is the text-to-text hint."""
        hint = self.hint(e)
        return [BOS, *hint[:3]], [*hint[3:], EOS]


def make_world(*, num_recv: int, num_hint: int, num_fuse: int, num_test: int, num_cities: int,
               num_colours: int, seed: int) -> World:
    """A random world; `fuse` and `test` entities live in cities whose colour only the receiver knows."""
    if num_cities < 4 or num_cities % 2:
        raise ConfigError(f"world.num_cities={num_cities}: expected an even number >= 4 (half with colours the "
                          "sharer knows)")
    if num_colours < 2:
        raise ConfigError(f"world.num_colours={num_colours}: expected >= 2")
    for name, n in (("num_recv", num_recv), ("num_hint", num_hint), ("num_fuse", num_fuse), ("num_test", num_test)):
        if n < 1:
            raise ConfigError(f"world.{name}={n}: expected >= 1")
    rng = np.random.default_rng(seed)
    colour_of = rng.permutation(np.arange(num_cities) % num_colours)  # every colour used
    half = num_cities // 2
    sizes = {"recv": num_recv, "hint": num_hint, "fuse": num_fuse, "test": num_test}
    ids = rng.permutation(sum(sizes.values()))
    groups, start = {}, 0
    for name, n in sizes.items():
        groups[name] = np.sort(ids[start:start + n])
        start += n
    city_of = np.zeros(len(ids), np.int64)
    for name in ("recv", "hint"):  # half of them in C_s so that the sharer can learn the two-hop format
        g = groups[name]
        city_of[g] = rng.integers(0, num_cities, size=len(g))
        city_of[g[: len(g) // 2]] = rng.integers(0, half, size=len(g) // 2)
    for name in ("fuse", "test"):
        city_of[groups[name]] = rng.integers(half, num_cities, size=len(groups[name]))
    return World(num_entities=len(ids), num_cities=num_cities, num_colours=num_colours, city_of=city_of,
                 colour_of=colour_of, groups=groups)


def receiver_examples(world: World, rng: np.random.Generator, hinted_copies: int = 4) -> list[Example]:
    """The receiver's training text: its own facts, the QA format, and hint reading."""
    out = [world.qa("colour", c) for c in range(world.num_cities)]
    for e in world.groups["recv"]:
        out += [world.qa("city", e), world.qa("two_hop", e), world.hinted_qa("city", e),
                world.hinted_qa("two_hop", e)]
    for e in world.groups["hint"]:  # a made-up city each time: the answer can only come from the hint
        for _ in range(hinted_copies):
            for kind in ("city", "two_hop"):
                out.append(world.hinted_qa(kind, e, int(rng.integers(0, world.num_cities))))
    return out


def sharer_examples(world: World) -> list[Example]:
    """The sharer's training text (its format): every entity's city, the colours of C_s, two-hop on C_s, and
    the statements it completes as hints."""
    known = set(int(c) for c in world.sharer_colour_cities)
    out = [world.qa("colour", c, cue=False) for c in sorted(known)]
    for e in range(world.num_entities):
        out += [world.qa("city", e, cue=False), world.statement(e)]
        if int(world.city_of[e]) in known:
            out.append(world.qa("two_hop", e, cue=False))
    return out


def fuser_examples(world: World) -> list[Example]:
    """The fuser's training mixture (both models frozen; CE on answers): questions about `fuse` entities (the
    sharer's facts), the colour questions, and the receiver's own entities (where fusion must not hurt)."""
    out = [world.qa("colour", c) for c in range(world.num_cities)]
    for e in world.groups["fuse"]:
        out += [world.qa("city", e), world.qa("two_hop", e)]
    for e in world.groups["recv"]:
        out += [world.qa("city", e), world.qa("two_hop", e)]
    return out


def test_examples(world: World, kind: str) -> list[Example]:
    """Held-out questions on `test` entities: `city` (a sharer-only fact) or `two_hop` (needs both)."""
    return [world.qa(kind, e) for e in world.groups["test"]]


def left_pad(seqs: Sequence[Sequence[int]], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded tokens (B, P) int32 and mask (B, P) bool."""
    length = length or max(len(s) for s in seqs)
    tokens = np.full((len(seqs), length), PAD, np.int32)
    mask = np.zeros((len(seqs), length), bool)
    for i, s in enumerate(seqs):
        if len(s) > length:
            raise ValueError(f"sequence of {len(s)} tokens: expected at most {length}")
        tokens[i, length - len(s):] = s
        mask[i, length - len(s):] = True
    return tokens, mask
