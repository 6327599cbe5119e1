"""The paper's setting for SFT versus RL: a HuggingFace chat model folder as the base (`CFTrainConfig.model_dir`,
e.g. Qwen2.5-1.5B-Instruct: config.json, safetensors and tokenizer.json), in English.

- Questions are the export's prompts (`export.question`: the Python function, the observation, the question,
  the answer format) in the model's ChatML turn (`core.lm.tokenizer.chat_format`).
- SFT targets are the enumerating teacher's English traces (`teacher.trace_text`: abduction over every latent,
  intervention, prediction, `Answer: {...}`) ended by the tokenizer's end-of-turn token. The paper distils
  DeepSeek-R1-Distill-Qwen-32B traces instead; a user with such traces can swap them in here.
- The base is evaluated as it comes (it is never trained here): interventional and counterfactual EM per split.

Nothing is downloaded; the weights are the user's (a GPU is needed at 1.5B). The tests run the same path on a
random-init folder with a small BPE tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.config import BadInputError
from core.lm.tokenizer import Tokenizer, chat_format, load_tokenizer
from core.lm.weights import check_hf_folder, load_hf
from rl_tools.counterfactuals import export, harness, teacher
from rl_tools.counterfactuals.generate import Item


def tokenizer(path: str) -> Tokenizer:
    """The folder's tokenizer; it must have an end-of-turn token (SFT targets and rollouts end with it)."""
    tok = load_tokenizer(check_hf_folder(path, "model_dir"))
    if tok.eos_id is None:
        raise BadInputError(f"model_dir={path!r}: expected a tokenizer with an end-of-turn token (<|im_end|> or "
                            "</s>)")
    return tok


def load(path: str) -> tuple[Any, Any]:
    """(graphdef, params) of the folder's model."""
    _, graphdef, params = load_hf(check_hf_folder(path, "model_dir"))
    return graphdef, params


def prompt(item: Item, variant: str) -> str:
    """The question of one variant as the user turn of a ChatML conversation, ready for the assistant."""
    return chat_format([{"role": "user", "content": export.question(item, variant)}])


def sft_examples(items: Sequence[Item], tok: Tokenizer, seq_len: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, teacher trace ids + end of turn) for the counterfactual question of every item whose row
    fits `seq_len` + 1 tokens."""
    out = []
    for it in items:
        ids = (tok.encode(prompt(it, "counterfactual")), tok.encode(teacher.trace_text(it)) + [tok.eos_id])
        if len(ids[0]) + len(ids[1]) <= seq_len + 1:
            out.append(ids)
    return out


def evaluate(graphdef, params, tok: Tokenizer, items, *, variants: Sequence[str], max_new_tokens: int,
             batch_size: int) -> dict[str, Any]:
    """Greedy answers to every split and variant, scored by the harness (rows and per-item predictions)."""
    adapter = harness.LMAdapter(graphdef, params, tok, max_new_tokens=max_new_tokens, batch_size=batch_size,
                                name="cf-hf")
    return harness.evaluate(items, adapter, variants=variants, prompt=prompt, keep_predictions=True)


__all__ = ["tokenizer", "load", "prompt", "sft_examples", "evaluate"]
