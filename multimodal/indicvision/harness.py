"""Score a model on IndicVisionBench's tasks as the released evaluation does, with the standard variants beside.

    ocr = evaluate_ocr(adapter, dataset)            # anls_word / anls_char (distances, lower better), true_anls
    vqa = evaluate_vqa(adapter, dataset, judge)     # MCQ / True-False accuracy; judged short / long / adversarial
    mmt = evaluate_mmt(adapter, dataset, targets)   # averaged sentence BLEU and RIBES; corpus BLEU, chrF++

Each returns `{"items": [...per item...], "summary": {language: {...}, "overall": {...}}, ...}`. Summary
columns keep the released names (`anls_word`, `mcq`, `true_false_q`, `short_q1`, `bleu`, `ribes`) and the
standard ones theirs (`true_anls`, `corpus_bleu`, `chrf_pp`). Judged columns carry `<field>_scored` and the
harness reports `unscored_fraction` (judge replies that never parsed, or empty answers), as the paper's
averages silently drop them. Calls that raised are counted in `errors`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from multimodal.indicvision import metrics, prompts
from multimodal.indicvision.adapters import ERROR_PREFIX, generate_batch, item_key
from multimodal.indicvision.data import Dataset
from multimodal.indicvision.judge import Judge


def _answers(adapter: Any, requests: list[tuple[str, Any, str]], batch_size: int = 256) -> list[str]:
    out: list[str] = []
    for start in range(0, len(requests), batch_size):
        chunk = requests[start:start + batch_size]
        out.extend(generate_batch(adapter, [r[1] for r in chunk], [r[2] for r in chunk], [r[0] for r in chunk]))
    return out


def _errors(answers: Sequence[str]) -> int:
    return sum(str(a).startswith(ERROR_PREFIX) for a in answers)


def evaluate_ocr(adapter: Any, dataset: Dataset) -> dict[str, Any]:
    rows = dataset.rows
    requests = [(item_key("ocr", r["id"], "text", r["language"], prompts.ocr_prompt()), r["image"],
                 prompts.ocr_prompt())
                for r in rows]
    answers = _answers(adapter, requests)
    items = [{"id": r["id"], "language": r["language"], "reference_text": r["text"], "predicted_text": a,
              **metrics.score_ocr(r["text"], a)} for r, a in zip(rows, answers)]
    return {"task": "ocr", "model": adapter.name, "items": items, "errors": _errors(answers),
            "bad_rows": dict(dataset.bad_rows),
            "summary": metrics.per_language(items, ("anls_word", "anls_char", "true_anls"))}


def evaluate_vqa(adapter: Any, dataset: Dataset, judge: Judge | None = None,
                 fields: Sequence[str] = tuple(q for q, _ in prompts.VQA_FIELDS)) -> dict[str, Any]:
    """Structured fields are matched exactly after normalisation; open ones go to `judge` (skipped when None).
    A question left empty in the data is not asked and not scored, as released."""
    answer_of = dict(prompts.VQA_FIELDS)
    requests, where = [], []
    for r in dataset.rows:
        for field in fields:
            if field not in prompts.STRUCTURED_FIELDS and judge is None:
                continue
            if not str(r[field]).strip():
                continue
            prompt = prompts.vqa_prompt(r, field)
            requests.append((item_key("vqa", r["id"], field, r["language"], prompt), r["image"], prompt))
            where.append((r, field))
    answers = _answers(adapter, requests)
    by_row: dict[str, dict[str, Any]] = {}
    for (r, field), answer in zip(where, answers):
        entry = by_row.setdefault(r["id"], {"id": r["id"], "language": r["language"], "predictions": {}})
        entry["predictions"][answer_of[field]] = answer
        reference = str(r[answer_of[field]])
        if field == "mcq":
            score = metrics.mcq_correct(reference, answer, r["language"])
        elif field == "true_false_q":
            score = metrics.true_false_correct(reference, answer, r["language"])
        elif not answer.strip() or not reference.strip():
            score = None
        else:
            score = judge.score(prompts.judge_prompt(prompts.judged_question(r, field), reference, answer,
                                                     prompts.rubric_kind(field)))
        entry[field] = score
    items = list(by_row.values())
    asked = [f for f in fields if f in prompts.STRUCTURED_FIELDS or judge is not None]
    summary = metrics.per_language(items, asked)
    judged = [f for f in asked if f in prompts.OPEN_FIELDS]
    judged_total = sum(1 for item in items for f in judged if f in item)
    unscored = sum(1 for item in items for f in judged if f in item and item[f] is None)
    return {"task": "vqa", "model": adapter.name, "judge": getattr(judge, "name", None), "items": items,
            "errors": _errors(answers), "bad_rows": dict(dataset.bad_rows), "summary": summary,
            "unscored_fraction": unscored / judged_total if judged_total else None}


def evaluate_mmt(adapter: Any, dataset: Dataset, targets: Sequence[str] = metrics.INDIC_LANGUAGES
                 ) -> dict[str, Any]:
    """Each row translated into every target language whose reference is present; a row without one is counted
    in `no_reference` (the hub's MMT rows have all ten)."""
    requests, where, no_reference = [], [], defaultdict(int)
    for target in targets:
        for r in dataset.rows:
            if not str(r.get(target, "")).strip():
                no_reference[target] += 1
                continue
            prompt = prompts.mmt_prompt(r["English"], target)
            requests.append((item_key("mmt", r["id"], "caption", target, prompt), r["image"], prompt))
            where.append((r, target))
    answers = _answers(adapter, requests)
    items = []
    for (r, target), answer in zip(where, answers):
        items.append({"id": r["id"], "target_language": target, "english_caption": r["English"],
                      "reference_caption": r[target], "predicted_caption": answer,
                      **metrics.score_mmt(r[target], answer)})
    summary = metrics.per_language(items, ("bleu", "ribes"), language_key="target_language", digits=None)
    for language, entry in summary.items():
        chosen = [i for i in items if language == "overall" or i["target_language"] == language]
        refs, hyps = [i["reference_caption"] for i in chosen], [i["predicted_caption"] for i in chosen]
        entry["corpus_bleu"] = metrics.corpus_bleu(refs, hyps) if chosen else None
        entry["chrf_pp"] = metrics.chrf_pp(refs, hyps) if chosen else None
    return {"task": "mmt", "model": adapter.name, "items": items, "errors": _errors(answers),
            "bad_rows": dict(dataset.bad_rows), "no_reference": dict(no_reference), "summary": summary}


def language_table(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """{language: {"ocr_anls_char": ..., "mcq": ..., ...}}: the per-language row of every task's summary."""
    table: dict[str, dict[str, Any]] = defaultdict(dict)
    for result in results:
        prefix = result["task"]
        for language, entry in result["summary"].items():
            for column, value in entry.items():
                if column != "count" and not column.endswith("_scored"):
                    table[language][f"{prefix}_{column}"] = value
    return dict(table)
