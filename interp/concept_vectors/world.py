"""The small-scale world: a concepts x formats x languages in-context suite over abstract entities.

Vocabulary: format tokens, then two "languages" L1 and L2 (disjoint token sets, entity e is `L1:e` / `L2:e`).
A concept is a map on entities (and, for translation, a change of language). Formats:
  OE: `Q x A y ;` x k, then `Q x A` -> y
  MC: `Q x A ? (a) o1 (b) o2 (c) o3 (d) o4 R ( l ;` x k, then the same without `l ;` -> l (the letter)
Held-out cells (never trained): every concept in MC x L2, and one concept in L2 (all formats), so that
steering vectors extracted there come from genuinely out-of-distribution prompts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np

from core.config import check

FORMAT_TOKENS = ("<pad>", "Q", "A", ";", "?", "(a)", "(b)", "(c)", "(d)", "R", "(", "a", "b", "c", "d")
PAD = 0
Q, A, SEP, QMARK = 1, 2, 3, 4
OPTION_MARKS = (5, 6, 7, 8)
RESPONSE, OPEN = 9, 10
LETTERS = (11, 12, 13, 14)
CONCEPTS = ("antonym", "successor", "category", "copy", "translation")
FORMATS = ("OE", "MC")
LANGUAGES = ("L1", "L2")


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorldConfig:
    """The generated suite. `held_out_concept` is held out in L2 (all formats); MC x L2 is held out too."""

    num_entities: int = 64  # abstract entities; each has one token per language
    num_categories: int = 8  # equal-size entity blocks; the category concept maps to a block's first entity
    held_out_concept: str = "successor"  # concept never trained in L2 (both formats; MC x L2 is held out too)
    max_shots: int = 5  # most in-context demonstrations per training prompt (k uniform in 0..max_shots)
    mc_share: float | None = None  # share of MC prompts in training; None: cells drawn uniformly (5 of 14 are MC)
    seed: int = 0  # the world (antonym pairing), fixed across model seeds

    def __post_init__(self):
        check(self.num_entities >= 8 and self.num_entities % 2 == 0, "world.num_entities", self.num_entities,
              "an even number >= 8")
        check(self.num_categories >= 4 and self.num_entities % self.num_categories == 0, "world.num_categories",
              self.num_categories, f">= 4 and a divisor of num_entities={self.num_entities}")
        check(self.held_out_concept in CONCEPTS, "world.held_out_concept", self.held_out_concept,
              f"one of {CONCEPTS}")
        check(1 <= self.max_shots <= 10, "world.max_shots", self.max_shots, "in [1, 10]")
        check(self.mc_share is None or 0.0 <= self.mc_share <= 1.0, "world.mc_share", self.mc_share,
              "None or a share in [0, 1]")


@dataclasses.dataclass(frozen=True)
class Cell:
    concept: str
    format: str
    language: str

    @property
    def name(self) -> str:
        return f"{self.concept}-{self.format}-{self.language}"


class World:
    """Token ids, concept maps and prompt builders of one generated suite."""

    def __init__(self, config: WorldConfig):
        self.config = config
        n = config.num_entities
        rng = np.random.default_rng(config.seed)
        perm = rng.permutation(n)
        antonym = np.empty(n, np.int64)
        antonym[perm[0::2]], antonym[perm[1::2]] = perm[1::2], perm[0::2]  # a fixed-point-free involution
        size = n // config.num_categories
        self.maps = {"antonym": antonym, "successor": (np.arange(n) + 1) % n,
                     "category": (np.arange(n) // size) * size, "copy": np.arange(n), "translation": np.arange(n)}
        self.vocab_size = len(FORMAT_TOKENS) + 2 * n

    # tokens ---------------------------------------------------------------------------------------------
    def token(self, entity: int | np.ndarray, language: str) -> int | np.ndarray:
        return len(FORMAT_TOKENS) + LANGUAGES.index(language) * self.config.num_entities + entity

    def token_name(self, token: int) -> str:
        if token < len(FORMAT_TOKENS):
            return FORMAT_TOKENS[token]
        e = token - len(FORMAT_TOKENS)
        return f"{LANGUAGES[e // self.config.num_entities]}:{e % self.config.num_entities}"

    def decode(self, tokens) -> str:
        return " ".join(self.token_name(int(t)) for t in tokens if int(t) != PAD)

    @staticmethod
    def output_language(concept: str, language: str) -> str:
        if concept == "translation":
            return "L2" if language == "L1" else "L1"
        return language

    def answer(self, concept: str, x: int, language: str) -> int:
        """The answer token of concept on entity x given in `language`."""
        return int(self.token(int(self.maps[concept][x]), self.output_language(concept, language)))

    # cells ----------------------------------------------------------------------------------------------
    def cells(self) -> list[Cell]:
        return [Cell(c, f, lang) for c in CONCEPTS for f in FORMATS for lang in LANGUAGES]

    def is_held_out(self, cell: Cell) -> bool:
        return cell.language == "L2" and (cell.format == "MC" or cell.concept == self.config.held_out_concept)

    def train_cells(self) -> list[Cell]:
        return [c for c in self.cells() if not self.is_held_out(c)]

    # prompts --------------------------------------------------------------------------------------------
    def _options(self, concept: str, x: int, language: str, rng: np.random.Generator) -> tuple[list[int], int]:
        """Four option tokens (the answer and three distractors from the concept's outputs) and the answer's index."""
        out_lang = self.output_language(concept, language)
        correct = int(self.maps[concept][x])
        pool = np.setdiff1d(np.unique(self.maps[concept]), [correct])
        options = [correct, *rng.choice(pool, 3, replace=False).tolist()]
        order = rng.permutation(4)
        options = [options[i] for i in order]
        return [int(self.token(o, out_lang)) for o in options], int(np.argwhere(order == 0)[0, 0])

    def item(self, cell: Cell, x: int, rng: np.random.Generator, *, answer: int | None = None
             ) -> tuple[list[int], int]:
        """One question on entity x: (tokens up to and including the answer cue, answer token).

        `answer` overrides the correct answer token (label-shuffled demonstrations); for MC its option is placed
        among the choices."""
        xt = int(self.token(x, cell.language))
        if cell.format == "OE":
            return [Q, xt, A], self.answer(cell.concept, x, cell.language) if answer is None else answer
        options, idx = self._options(cell.concept, x, cell.language, rng)
        if answer is not None and answer not in options:
            options[idx] = answer
        elif answer is not None:
            idx = options.index(answer)
        marked = [t for mark, opt in zip(OPTION_MARKS, options) for t in (mark, opt)]
        return [Q, xt, A, QMARK, *marked, RESPONSE, OPEN], LETTERS[idx]

    def prompt(self, cell: Cell, shots: int, rng: np.random.Generator, *, shuffle_labels: bool = False,
               query: int | None = None) -> tuple[list[int], int, list[int], int]:
        """A k-shot prompt: (tokens, target, answer positions (indices of answer tokens, demos only), query x).

        shuffle_labels: the demonstrations' answers are permuted among themselves (the corrupted prompts of
        causal mediation), so the x -> y mapping of the demos no longer shows the concept."""
        n = self.config.num_entities
        xs = rng.choice(n, shots + 1, replace=False)
        if query is not None:
            xs = np.concatenate([[query], rng.choice(np.setdiff1d(np.arange(n), [query]), shots, replace=False)])
            xs = np.roll(xs, -1)
        demo_answers = [self.answer(cell.concept, int(x), cell.language) for x in xs[:-1]]
        if shuffle_labels and shots > 1:
            perm = rng.permutation(shots)
            while shots > 1 and np.all(perm == np.arange(shots)):
                perm = rng.permutation(shots)
            demo_answers = [demo_answers[i] for i in perm]
        tokens, answer_pos = [], []
        for x, y in zip(xs[:-1], demo_answers):
            cue, target = self.item(cell, int(x), rng, answer=y)
            tokens += cue
            answer_pos.append(len(tokens))
            tokens += [target, SEP]
        cue, target = self.item(cell, int(xs[-1]), rng)
        return tokens + cue, target, answer_pos, int(xs[-1])

    def prompt_set(self, cell: Cell, num: int, shots: int, seed: int, *, shuffle_labels: bool = False
                   ) -> dict[str, np.ndarray | list]:
        """`num` prompts of one cell: token lists, targets, query entities."""
        rng = np.random.default_rng([seed, self.cells().index(cell), shots, int(shuffle_labels)])
        prompts = [self.prompt(cell, shots, rng, shuffle_labels=shuffle_labels) for _ in range(num)]
        return {"tokens": [p[0] for p in prompts], "targets": np.array([p[1] for p in prompts]),
                "queries": np.array([p[3] for p in prompts])}

    def ambiguous_prompt(self, concept: str, shots: int, rng: np.random.Generator, language: str = "L1"
                         ) -> tuple[list[int], int, int]:
        """An OE prompt whose demonstrations alternate the concept's answers with translation answers (the
        notes' ambiguous setting): (tokens, the concept's answer to the query, query x)."""
        if concept == "translation":
            raise ValueError("ambiguous prompt for concept 'translation': expected another concept (the demos "
                             "mix the concept with translation)")
        xs = rng.choice(self.config.num_entities, shots + 1, replace=False)
        tokens = []
        for i, x in enumerate(xs[:-1]):
            c = concept if i % 2 == 0 else "translation"
            tokens += [Q, int(self.token(int(x), language)), A, self.answer(c, int(x), language), SEP]
        x = int(xs[-1])
        return tokens + [Q, int(self.token(x, language)), A], self.answer(concept, x, language), x

    # training data --------------------------------------------------------------------------------------
    def training_examples(self, rng: np.random.Generator) -> Iterator[tuple[list[int], list[int]]]:
        """Endless (tokens, answer positions) over the training cells, k uniform in [0, max_shots]; with
        `mc_share` set, a prompt is MC with that probability, its cell uniform within the format."""
        cells = self.train_cells()
        by_format = {f: [c for c in cells if c.format == f] for f in FORMATS}
        while True:
            if self.config.mc_share is None:
                cell = cells[rng.integers(len(cells))]
            else:
                pool = by_format["MC" if rng.random() < self.config.mc_share else "OE"]
                cell = pool[rng.integers(len(pool))]
            shots = int(rng.integers(0, self.config.max_shots + 1))
            tokens, target, answer_pos, _ = self.prompt(cell, shots, rng)
            yield tokens + [target], answer_pos + [len(tokens)]

    def training_rows(self, num_rows: int, seq_len: int, seed: int) -> dict[str, np.ndarray]:
        """Packed next-token rows: every answer token (demonstrations and query) carries loss; segments keep
        examples apart."""
        rng = np.random.default_rng(seed)
        examples = self.training_examples(rng)
        out = {k: np.zeros((num_rows, seq_len), np.int32) for k in ("inputs", "targets", "segment_ids")}
        out["loss_mask"] = np.zeros((num_rows, seq_len), np.float32)
        pending = next(examples)
        for r in range(num_rows):
            start, seg = 0, 1
            while True:
                seq, answer_pos = pending
                L = len(seq) - 1
                if L > seq_len:
                    raise ValueError(f"example of {len(seq)} tokens: expected seq_len >= {L}")
                if start + L > seq_len:
                    break
                out["inputs"][r, start:start + L] = seq[:-1]
                out["targets"][r, start:start + L] = seq[1:]
                out["segment_ids"][r, start:start + L] = seg
                for p in answer_pos:
                    out["loss_mask"][r, start + p - 1] = 1.0
                start, seg = start + L, seg + 1
                pending = next(examples)
        return out


def left_pad(token_lists: list[list[int]], length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Left-padded (B, T) tokens and mask, so every prompt's last token sits at T - 1."""
    T = max(len(t) for t in token_lists) if length is None else length
    if any(len(t) > T for t in token_lists):
        raise ValueError(f"a prompt of {max(len(t) for t in token_lists)} tokens: expected at most {T}")
    tokens = np.full((len(token_lists), T), PAD, np.int32)
    mask = np.zeros((len(token_lists), T), bool)
    for i, t in enumerate(token_lists):
        tokens[i, T - len(t):] = t
        mask[i, T - len(t):] = True
    return tokens, mask


def max_prompt_len(shots: int) -> int:
    """The longest prompt (MC) with `shots` demonstrations."""
    return 16 * shots + 14
