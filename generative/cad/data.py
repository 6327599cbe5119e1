"""Training and evaluation examples of the three sequence models and the requirement tagger.

Prompts and answers (token words; every model is a decoder over the one vocabulary of `tokens.py`):
- direct:   `<bos> <text> instruction <cmd>`                       -> `commands <eos>`
- planner:  `<bos> <text> instruction <plan>`                      -> `plan <eos>`
- actioner: `<bos> <plan> plan [<req> memory] <text> instruction <cmd>` -> `commands <eos>`
The requirement memory (RAM) lists each tagged number as its role and its level token in the command frame,
`role:width v188 role:depth v140 ...`, in the order they are stated.
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


def memory_words(words: Sequence[str], tags: Sequence[int]) -> list[str]:
    """The RAM memory from an instruction and its tags (tags on non-numbers are ignored)."""
    out = []
    for w, t in zip(words, tags):
        if t != NO_ROLE and _is_number(w):
            out += [f"role:{corpus.ROLES[t - 1]}", tokens.value_word(int(w))]
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
    targets from the gold plan and the gold requirement memory (teacher forcing)."""
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
