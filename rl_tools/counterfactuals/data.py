"""The compact token language for the from-scratch model: vocabulary, prompts, answers, training rows.

A prompt is the program's compact rendering (`programs.to_tokens`) followed by the query:

- counterfactual:  `<prog> obs x0 -> y0 ask x1 ?`
- interventional:  `<prog> obs x0 -> y0 given r 5 ask x1 ?`
- factual:         `<prog> given r 5 ask x0 ?`

and the answer is the sorted set, e.g. `2 5 <eos>`. With `trace=True` training answers of the factual and
interventional variants first spell out the execution (y after every executed assignment, then the return
expression before `% m`) and then `=> value`, e.g. `12 36 => 0 <eos>`: a scratchpad that makes execution
learnable by a small model. With `trace_style="steps"` the trace is `programs.step_trace` instead: every
operation as `op a b result` and every test as `cmp a b T|F`, e.g. `* 6 3 18 + 18 4 22 ; mod 22 4 =>`, so each
word the model writes is one lookup on the three words before it. With `trace_style="flow"` the prompt shows the
program as a labelled control-flow graph (`programs.to_flow_tokens`: `n3 y= * y r g6` ...) and the trace
names each node it executes (`n3 * 6 5 30 n6 ...`), so finding the next statement is a lookup of its label
rather than a walk through nested braces. Counterfactual answers (SFT) with `trace=True` follow the enumerating
teacher (`teacher.trace_words`: abduction over every latent, then prediction under the consistent ones; in the
steps and flow styles each of those runs is written out as its execution trace). The
word-level vocabulary is fixed (numbers -99..199 are single tokens), so the tokenizer needs no
training and a prompt string maps to the same ids everywhere (model, server, tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from core.config import BadInputError
from rl_tools.counterfactuals import programs as P
from rl_tools.counterfactuals import teacher
from rl_tools.counterfactuals.generate import VARIANTS, Item

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
MIN_NUMBER, MAX_NUMBER = -99, 199
WORDS = (PAD, BOS, EOS, UNK, "x", "y", "i", "r", "r1", "r2", "r3", "|", "y=", ";", "if", "elif", "else", "while",
         "for", "{", "}", "ret", "mod", "+", "-", "*", "%", "//", ">", "<", ">=", "<=", "==", "!=", "obs", "->",
         "given", "ask", "?", "=>", *(str(n) for n in range(MIN_NUMBER, MAX_NUMBER + 1)),
         "abduce", "predict", "ok",  # counterfactual teacher traces (teacher.py)
         "T", "F",  # test outcomes in step traces (programs.step_trace)
         "i=", *(f"n{k}" for k in range(P.MAX_FLOW_NODES)),  # control-flow rendering: node labels
         *(f"g{k}" for k in range(P.MAX_FLOW_NODES)))  # ... and references to them (programs.to_flow_tokens)
_WORD_SET = frozenset(WORDS)


class CompactTokenizer:
    """Whitespace word-level tokenizer over `WORDS` (unknown words map to `<unk>`)."""

    def __init__(self):
        self.words = WORDS
        self.ids = {w: i for i, w in enumerate(WORDS)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = (self.ids[w] for w in (PAD, BOS, EOS, UNK))

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str | Sequence[str], *, add_bos: bool = True) -> list[int]:
        words = text.split() if isinstance(text, str) else list(text)
        return ([self.bos_id] if add_bos else []) + [self.ids.get(w, self.unk_id) for w in words]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.bos_id):
                out.append(self.words[i] if 0 <= i < len(self.words) else UNK)
        return " ".join(out)


TRACE_STYLES = ("values", "steps", "flow")


def prompt_words(item: Item, variant: str, style: str = "values") -> list[str]:
    """The question in compact words; with `style="flow"` the program is its control-flow rendering
    (`programs.to_flow_tokens`), otherwise the statement tree (`programs.to_tokens`)."""
    if variant not in VARIANTS:
        raise BadInputError(f"variant={variant!r}: expected one of {VARIANTS}")
    if style not in TRACE_STYLES:
        raise BadInputError(f"trace style={style!r}: expected one of {TRACE_STYLES}")
    given: list[str] = []
    for name, v in zip(item.program.latent_names, item.r_true):
        given += [name, str(v)]
    prog = P.to_flow_tokens(item.program) if style == "flow" else P.to_tokens(item.program)
    if variant == "counterfactual":
        return [*prog, "obs", str(item.x0), "->", str(item.y0), "ask", str(item.x1), "?"]
    if variant == "interventional":
        return [*prog, "obs", str(item.x0), "->", str(item.y0), "given", *given, "ask", str(item.x1), "?"]
    return [*prog, "given", *given, "ask", str(item.x0), "?"]


def prompt_text(item: Item, variant: str, style: str = "values") -> str:
    return " ".join(prompt_words(item, variant, style))


def prompt_fn(style: str):
    """`prompt_text` for one trace style, as the harness calls it: (item, variant) -> str."""
    return lambda item, variant: prompt_text(item, variant, style)


def answer_words(values: Iterable[int]) -> list[str]:
    return [str(v) for v in sorted(set(values))]


def check_in_vocab(words: Sequence[str]) -> None:
    bad = sorted({w for w in words if w not in _WORD_SET})
    if bad:
        raise BadInputError(f"tokens {bad}: expected words of the compact vocabulary (numbers "
                            f"{MIN_NUMBER}..{MAX_NUMBER})")


def trace_words(item: Item, variant: str, style: str = "values") -> list[str]:
    """The execution trace of a factual / interventional answer, ending in `=>` (see the module docstring)."""
    if style not in TRACE_STYLES:
        raise BadInputError(f"trace style={style!r}: expected one of {TRACE_STYLES}")
    if variant == "counterfactual":
        raise BadInputError("variant='counterfactual': expected factual or interventional (r must be known); "
                            "counterfactual traces come from teacher.trace_words")
    x = item.x0 if variant == "factual" else item.x1
    if style in ("steps", "flow"):
        trace = P.step_trace if style == "steps" else P.flow_trace
        return trace(item.program, x, item.r_true) + ["=>"]
    ys, pre, _ = P.run_trace(item.program, x, item.r_true)
    return [str(v) for v in (*ys, pre)] + ["=>"]


def examples(items: Sequence[Item], variants: Sequence[str], tok: CompactTokenizer, *, trace: bool = False,
             trace_style: str = "values") -> list[tuple[list[int], list[int]]]:
    """(prompt ids, answer ids + eos) for every item and variant; items whose trace leaves the number range
    are skipped when `trace` (`trace_style`: the execution trace's form, see `trace_words`)."""
    out = []
    for item in items:
        for v in variants:
            words = prompt_words(item, v, trace_style)
            ans = answer_words(item.answer(v))
            if trace:
                steps = (teacher.trace_words(item, trace_style) if v == "counterfactual"
                         else trace_words(item, v, trace_style))
                if any(w not in _WORD_SET for w in steps):
                    continue
                ans = steps + ans
            check_in_vocab(words + ans)
            out.append((tok.encode(words), tok.encode(ans, add_bos=False) + [tok.eos_id]))
    return out


def to_rows(examples_: Sequence[tuple[list[int], list[int]]], seq_len: int) -> dict[str, np.ndarray]:
    """Right-padded rows: inputs, targets, loss_mask (answer tokens), segment_ids (core.lm.losses format)."""
    from core.lm import data as lm_data
    return lm_data.pack(examples_, seq_len)
