"""The task prompts and the judge's three rubrics, in this project's own words, and a loader for the released ones.

The released evaluation (ola-krutrim/IndicVisionBench, Krutrim Community License) fixes the wording a model and
the GPT-4o judge see, and a changed word changes judge scores. The project does not ship that text (its rule:
no text of the authors' goes into the project); it ships prompts that ask for the same things in the same
formats (the OCR text only; `<A>`..`<D>` for the MCQ; the language's own True / False words; the judge's 0-10
score on accuracy (short), consistency / fluency / relevance (long), and 5 points for flagging a false premise
plus 0-5 for the real image content (adversarial)). To score exactly as released, put the released strings in a
JSON file with the keys of `PROMPT_KEYS` and call `use_prompts(path)` (or `iclr26 ivb eval --prompts FILE`):
templates keep their `{...}` fields.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Mapping
from typing import Any

from core.config import BadInputError
from multimodal.indicvision.metrics import TRUE_FALSE_WORDS

# VQA question fields and the answer field each one's prediction goes to, in the released order.
VQA_FIELDS = (("short_q1", "short_a1"), ("short_q2", "short_a2"), ("mcq", "mcq_a"),
              ("true_false_q", "true_false_a"), ("long_q", "long_a"), ("adversarial_question", "adversarial_answer"))
STRUCTURED_FIELDS = ("mcq", "true_false_q")
OPEN_FIELDS = ("short_q1", "short_q2", "long_q", "adversarial_question")

# the fields each template is formatted with
PROMPT_FIELDS = {
    "ocr": (),
    "mmt": ("caption_en", "target_language"),
    "vqa_short": ("question", "language"),
    "vqa_mcq": ("question", "a", "b", "c", "d"),
    "vqa_true_false": ("question", "true", "false"),
    "vqa_long": ("question", "language"),
    "judge_short": ("question", "ground_truth", "predicted_answer"),
    "judge_long": ("question", "ground_truth", "predicted_answer"),
    "judge_adversarial": ("question", "ground_truth", "predicted_answer"),
}
PROMPT_KEYS = tuple(PROMPT_FIELDS)

_ANSWER_BLOCK = "Question: {question}\nReference answer: {ground_truth}\nModel answer: {predicted_answer}\n\n"
_SCORE_ONLY = "Reply with the score alone, a number from 0 to 10, and nothing else."

DEFAULT_PROMPTS = {
    "ocr": "Read all the text in this image and write it out exactly. Reply with the text alone.",
    "mmt": ("{caption_en}\n\nThis is a caption of the image. Translate it into {target_language}. Reply with the "
            "translation alone, without any explanation."),
    "vqa_short": "{question} Answer briefly and clearly in {language}.",
    "vqa_mcq": ("Reply with exactly one option, written as <A>, <B>, <C> or <D>, and nothing else.\n"
                "Question: {question}\nOptions:\nA. {a}\nB. {b}\nC. {c}\nD. {d}"),
    "vqa_true_false": ("Reply with exactly one word, {true} or {false}.\n"
                       "Question: {question}\nOptions: {true} or {false}."),
    "vqa_long": "{question} Answer in detail in {language}.",
    "judge_short": ("Rate a vision-language model's answer to a short-answer question about an image. Judge its "
                    "accuracy against the reference answer: a high score when it agrees with the reference, a low "
                    "one when it is wrong, missing or unrelated.\n\n" + _ANSWER_BLOCK + _SCORE_ONLY),
    "judge_long": ("Rate a vision-language model's answer to a long-answer question about an image. Judge its "
                   "consistency with the reference answer, its fluency and its relevance: a high score when it "
                   "agrees with the reference, a low one when it is wrong, missing or unrelated.\n\n"
                   + _ANSWER_BLOCK + _SCORE_ONLY),
    "judge_adversarial": ("Rate a vision-language model's answer to a question about an image that rests on a false "
                          "assumption. Give 5 points if the answer says the assumption is wrong or doubts it, 0 if it "
                          "answers as though it were true; add 0 to 5 points for how well it says what the image "
                          "really shows (0 wrong or absent, 5 fully right). The score is the sum, 0 to 10.\n\n"
                          + _ANSWER_BLOCK + _SCORE_ONLY),
}
_prompts: dict[str, str] = dict(DEFAULT_PROMPTS)


def use_prompts(path: str | pathlib.Path | None) -> dict[str, str]:
    """Use the prompts in a JSON file (keys of PROMPT_KEYS; missing keys keep the defaults); None restores the
    defaults. Each template must use exactly its fields."""
    global _prompts
    if path is None:
        _prompts = dict(DEFAULT_PROMPTS)
        return _prompts
    path = pathlib.Path(path)
    try:
        given = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadInputError(f"{path}: expected a JSON object of prompt templates ({type(e).__name__}: {e})") from None
    if not isinstance(given, dict) or not all(isinstance(v, str) for v in given.values()):
        raise BadInputError(f"{path}: expected a JSON object mapping prompt keys to strings")
    unknown = sorted(set(given) - set(PROMPT_KEYS))
    if unknown:
        raise BadInputError(f"{path}: prompt key {unknown[0]!r}: expected one of {', '.join(PROMPT_KEYS)}")
    for key, text in given.items():
        try:
            text.format(**{f: "" for f in PROMPT_FIELDS[key]})
        except (KeyError, IndexError, ValueError) as e:
            raise BadInputError(f"{path}: prompt {key!r} uses a field it does not have ({e}); expected only "
                                f"{{{'}, {'.join(PROMPT_FIELDS[key])}}}") from None
    _prompts = {**DEFAULT_PROMPTS, **given}
    return _prompts


def ocr_prompt() -> str:
    return _prompts["ocr"]


def mmt_prompt(caption_en: str, target_language: str) -> str:
    return _prompts["mmt"].format(caption_en=caption_en, target_language=target_language)


def vqa_prompt(sample: Mapping[str, Any], field: str) -> str:
    """The prompt for one question field of a VQA sample (`language` names the answer's language)."""
    language = sample["language"]
    question = str(sample[field]).strip()
    if field in ("short_q1", "short_q2"):
        return _prompts["vqa_short"].format(question=question, language=language)
    if field == "mcq":
        return _prompts["vqa_mcq"].format(question=sample["mcq"], a=sample["mcq_opt1"], b=sample["mcq_opt2"],
                                          c=sample["mcq_opt3"], d=sample["mcq_opt4"])
    if field == "true_false_q":
        true, false = TRUE_FALSE_WORDS[language]
        return _prompts["vqa_true_false"].format(question=question, true=true, false=false)
    if field in ("long_q", "adversarial_question"):
        return _prompts["vqa_long"].format(question=question, language=language)
    raise BadInputError(f"VQA field {field!r}: expected one of {[q for q, _ in VQA_FIELDS]}")


def judged_question(sample: Mapping[str, Any], field: str) -> str:
    """The question text the judge is shown (the MCQ carries its options, as released)."""
    if field == "mcq":
        options = " | ".join(str(sample[f"mcq_opt{k}"]) for k in range(1, 5))
        return f"{sample['mcq']}: {options}"
    return str(sample[field])


def rubric_kind(field: str) -> str:
    return "short" if field.startswith("short") else "adversarial" if field.startswith("adversarial") else "long"


def judge_prompt(question: str, ground_truth: str, answer: str, kind: str) -> str:
    """The judge's prompt for one answer; `kind` is "short", "long" or "adversarial"."""
    if kind not in RUBRIC_KINDS:
        raise BadInputError(f"rubric {kind!r}: expected one of {list(RUBRIC_KINDS)}")
    return _prompts[f"judge_{kind}"].format(question=question, ground_truth=ground_truth, predicted_answer=answer)


RUBRIC_KINDS = ("short", "long", "adversarial")
