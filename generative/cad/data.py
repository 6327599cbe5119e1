"""Training and evaluation examples of the three sequence models and the requirement tagger.

Prompts and answers (token words; every model is a decoder over the one vocabulary of `tokens.py`):
- direct:   `<bos> <text> instruction <cmd>`                       -> `commands <eos>`
- planner:  `<bos> <text> instruction <plan>`                      -> `plan <eos>`
- actioner: `<bos> <plan> plan [<req> memory] <text> instruction <cmd>` -> `commands <eos>`
The requirement memory (RAM) lists each tagged number as its role and its level tokens in the command frame,
`role:width v158 v98 role:depth v140 ...` (a width of 60 as its edges +-30), in the order they are stated; the
actioner's copy path (`model.copy_loss`) can copy any of those levels into a command argument.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from generative.cad import corpus, tokens
from generative.cad.corpus import Part

NO_ROLE = 0  # tag id of a word that states no requirement; role i is tag i + 1


def text_words(part: Part, level: int) -> list[str]:
    return part.texts[level].split()


def tag_labels(part: Part, level: int) -> list[int]:
    """Per instruction word: 0, or 1 + the index of the role of the requirement that number states."""
    words = text_words(part, level)
    reqs = list(part.requirements[level])
    labels = []
    for w in words:
        if _is_number(w):
            _, role, value = reqs.pop(0)
            assert int(w) == value, (w, value)
            labels.append(1 + corpus.ROLES.index(role))
        else:
            labels.append(NO_ROLE)
    assert not reqs
    return labels


def _is_number(w: str) -> bool:
    return w.lstrip("-").isdigit()


HALVED_ROLES = frozenset({"width", "length"})  # sizes of centred sketches: the commands hold +-size/2
SIGNED_ROLES = frozenset({"radius"})  # a circle's radius, and the slot's edges at +-r
CORNER_OF = {"notch_w": "width", "notch_l": "length"}  # a notch is cut from the plate's corner
CENTRE_OF = {"x": "width", "y": "length"}  # a sized feature is centred on its stated position
FEATURE_WORDS = frozenset({"then", "and", "plus"})  # the words that introduce the next feature


def command_levels(role: str, mm: int) -> list[str]:
    """The level tokens a stated requirement puts into the commands of a sketch centred on its feature: a
    width or length s as the two edges +-s/2, a radius r as +r and -r (a circle's radius, a slot's sides),
    everything else (depths, positions, hole sizes, notches) as its own level."""
    if role in HALVED_ROLES:
        return [tokens.value_word(mm // 2), tokens.value_word(-(mm // 2))]
    if role in SIGNED_ROLES:
        return [tokens.value_word(mm), tokens.value_word(-mm)]
    return [tokens.value_word(mm)]


def memory_words(words: Sequence[str], tags: Sequence[int]) -> list[str]:
    """The RAM memory from an instruction and its tags (tags on non-numbers are ignored): each tagged number
    as its role and its levels in the command frame (`command_levels`), and the geometric relations that tie
    it to the feature's other stated sizes: `rel:corner` (a notch's inner edge, size/2 - notch, from the
    plate's corner) and `rel:centred` (a sized feature's edges, position +- size/2)."""
    out: list[str] = []
    sizes: dict[str, int] = {}  # the current feature's stated width / length
    for w, t in zip(words, tags):
        if w in FEATURE_WORDS:
            sizes = {}
        if t == NO_ROLE or not _is_number(w):
            continue
        role, mm = corpus.ROLES[t - 1], int(w)
        out += [f"role:{role}", *command_levels(role, mm)]
        if role in HALVED_ROLES:
            sizes[role] = mm
        elif role in CORNER_OF and CORNER_OF[role] in sizes:
            out += ["rel:corner", tokens.value_word(sizes[CORNER_OF[role]] // 2 - mm)]
        elif role in CENTRE_OF and CENTRE_OF[role] in sizes:
            half = sizes[CENTRE_OF[role]] // 2
            out += ["rel:centred", tokens.value_word(mm + half), tokens.value_word(mm - half)]
    return out


def gold_memory(part: Part, level: int) -> list[str]:
    return memory_words(text_words(part, level), tag_labels(part, level))


def direct_prompt(part: Part, level: int) -> list[str]:
    return ["<bos>", "<text>", *text_words(part, level), "<cmd>"]


def planner_prompt(part: Part, level: int) -> list[str]:
    return ["<bos>", "<text>", *text_words(part, level), "<plan>"]


def actioner_prompt(part: Part, level: int, plan: Sequence[str], memory: Sequence[str] | None) -> list[str]:
    mem = ["<req>", *memory] if memory is not None else []
    return ["<bos>", "<plan>", *plan, *mem, "<text>", *text_words(part, level), "<cmd>"]


def examples(parts: Sequence[Part], kind: str, *, levels: Sequence[int] = (0, 1, 2, 3)
             ) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + eos) for `kind` in direct | planner | actioner | actioner_no_ram, training
    targets from the gold plan and the gold requirement memory (teacher forcing). The actioner's examples serve
    both actioners with a memory (with and without the copy path)."""
    out = []
    for part in parts:
        cmds = tokens.program_words(part.program)
        for level in levels:
            if kind == "direct":
                prompt, answer = direct_prompt(part, level), cmds
            elif kind == "planner":
                prompt, answer = planner_prompt(part, level), list(part.plan)
            elif kind == "actioner":
                prompt, answer = actioner_prompt(part, level, part.plan, gold_memory(part, level)), cmds
            elif kind == "actioner_no_ram":
                prompt, answer = actioner_prompt(part, level, part.plan, None), cmds
            else:
                raise ValueError(f"kind={kind!r}: expected direct, planner, actioner or actioner_no_ram")
            out.append((tokens.encode(prompt), tokens.encode(answer) + [tokens.EOS_ID]))
    return out


def tagger_arrays(parts: Sequence[Part], length: int, *, levels: Sequence[int] = (0, 1, 2, 3)
                  ) -> dict[str, np.ndarray]:
    """ids (N, length), labels (N, length), mask (N, length) for the tagger."""
    rows = [(tokens.encode(text_words(p, lv)), tag_labels(p, lv)) for p in parts for lv in levels]
    n = len(rows)
    ids, labels, mask = (np.zeros((n, length), np.int32), np.zeros((n, length), np.int32),
                         np.zeros((n, length), np.float32))
    for i, (w, t) in enumerate(rows):
        if len(w) > length:
            raise ValueError(f"instruction of {len(w)} words: expected at most tagger length {length}")
        ids[i, :len(w)], labels[i, :len(t)], mask[i, :len(w)] = w, t, 1.0
    return {"ids": ids, "labels": labels, "mask": mask}
