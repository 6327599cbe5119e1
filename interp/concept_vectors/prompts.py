"""Text prompt builders for real models (the notes' formats) and the first-answer-token rule.

Open-ended (OE): demonstrations `Q: x` / `A: y` separated by a blank line, then `Q: x` / `A:`; target " y".
Multiple choice (MC): an instruction block `### Instruction: Q: x A: ?`, four options (a)-(d) (the answer and
three distractors drawn from the task's outputs), `### Response: (l)`; the query ends at `### Response: (`
and the target is the letter. The notes give this structure; the exact wording of the blocks is ours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from core.config import ConfigError

LETTERS = ("a", "b", "c", "d")
Pair = tuple[str, str]


def open_ended_prompt(demos: Sequence[Pair], query: Pair) -> tuple[str, str]:
    """(prompt, target) of an OE prompt: target is " y" (leading space), so its first token is the answer's."""
    blocks = [f"Q: {x}\nA: {y}" for x, y in demos]
    return "\n\n".join(blocks + [f"Q: {query[0]}\nA:"]), f" {query[1]}"


def mc_block(x: str, options: Sequence[str], letter: str | None) -> str:
    if len(options) != 4:
        raise ConfigError(f"options={list(options)!r}: expected 4 options (a)-(d)")
    lines = [f"### Instruction: Q: {x} A: ?"] + [f"({l}) {o}" for l, o in zip(LETTERS, options)]
    lines.append("### Response: (" + ("" if letter is None else f"{letter})"))
    return "\n".join(lines)


def mc_options(answer: str, outputs: Sequence[str], rng: np.random.Generator) -> tuple[list[str], str]:
    """The answer and three distractors (distinct task outputs), shuffled: (options, the answer's letter)."""
    pool = sorted(set(outputs) - {answer})
    if len(pool) < 3:
        raise ConfigError(f"task outputs: {len(pool)} distinct distractors for {answer!r}, expected >= 3")
    options = [answer, *rng.choice(pool, 3, replace=False).tolist()]
    order = rng.permutation(4)
    options = [options[i] for i in order]
    return options, LETTERS[int(np.argwhere(order == 0)[0, 0])]


def multiple_choice_prompt(demos: Sequence[Pair], query: Pair, outputs: Sequence[str], rng: np.random.Generator
                           ) -> tuple[str, str]:
    """(prompt, target letter) of an MC prompt; every demonstration carries its own options and letter."""
    blocks = []
    for x, y in demos:
        options, letter = mc_options(y, outputs, rng)
        blocks.append(mc_block(x, options, letter))
    options, letter = mc_options(query[1], outputs, rng)
    return "\n\n".join(blocks + [mc_block(query[0], options, None)]), letter


def build_prompts(pairs: Sequence[Pair], fmt: str, *, num: int, shots: int, seed: int,
                  shuffle_labels: bool = False) -> list[tuple[str, str]]:
    """`num` prompts of one dataset (format "OE" or "MC"); shuffle_labels permutes the demos' answers (the
    corrupted prompts of causal mediation)."""
    if fmt not in ("OE", "MC"):
        raise ConfigError(f"format={fmt!r}: expected 'OE' or 'MC'")
    if len(pairs) < shots + 1:
        raise ConfigError(f"dataset of {len(pairs)} pairs: expected at least shots + 1 = {shots + 1}")
    rng = np.random.default_rng(seed)
    outputs = [y for _, y in pairs]
    out = []
    for _ in range(num):
        idx = rng.choice(len(pairs), shots + 1, replace=False)
        demos = [pairs[i] for i in idx[:-1]]
        if shuffle_labels:
            ys = [y for _, y in demos]
            perm = rng.permutation(shots)
            demos = [(x, ys[j]) for (x, _), j in zip(demos, perm)]
        query = pairs[idx[-1]]
        out.append(open_ended_prompt(demos, query) if fmt == "OE" else
                   multiple_choice_prompt(demos, query, outputs, rng))
    return out


def first_answer_token(encode: Callable[[str], list[int]], target: str, bos_id: int | None) -> int:
    """The first token of the answer: encode(target) starts with BOS on Llama-3 style tokenizers (take ids[1]),
    not on Qwen-style ones (ids[0]). Keep the leading space of OE targets: " y" tokenizes differently."""
    ids = list(encode(target))
    if bos_id is not None and ids and ids[0] == bos_id:
        ids = ids[1:]
    if not ids:
        raise ConfigError(f"target={target!r}: encodes to no token besides BOS")
    return int(ids[0])
