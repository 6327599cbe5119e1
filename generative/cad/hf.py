"""The planner as a local LLM (`planner_path`: a HuggingFace folder with config.json, safetensors and
tokenizer.json, e.g. Qwen2.5-1.5B-Instruct): the paper's planner is a fine-tuned LLM. Here it is fine-tuned in
full on the corpus's (instruction -> plan) pairs in its ChatML format, answer-only loss, with `core.train.fit`,
and plans are greedy continuations up to the tokenizer's end-of-turn token, read back as plan words
(`train.llm_plans`).

Nothing is downloaded; the weights are the user's (a GPU is needed at that size). The tests run the same path
on a random-init folder with a word-level tokenizer.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import optax

from core import data as data_lib
from core import train as train_lib
from core.config import BadInputError
from core.lm import data as lm_data
from core.lm import losses
from core.lm.tokenizer import Tokenizer, chat_format, load_tokenizer
from core.lm.weights import check_hf_folder, load_hf
from generative.cad.corpus import Part

INSTRUCTION = "Write the CAD operation plan (sketch and extrude steps) for: "


class LLMPlanner(NamedTuple):
    graphdef: Any
    params: Any
    tokenizer: Tokenizer


def prompt_text(part: Part, level: int) -> str:
    return chat_format([{"role": "user", "content": INSTRUCTION + part.texts[level]}])


def plan_examples(parts: Sequence[Part], tok: Tokenizer, *, levels: Sequence[int] = (0, 1, 2, 3)
                  ) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, plan ids + end of turn) per part and level, in the tokenizer's own ids."""
    if tok.eos_id is None:
        raise BadInputError("planner tokenizer: expected an end-of-turn token (<|im_end|> or </s>)")
    return [(tok.encode(prompt_text(p, level)), tok.encode(" ".join(p.plan)) + [tok.eos_id])
            for p in parts for level in levels]


def train_planner(config, parts: Sequence[Part], workdir: pathlib.Path, key: jax.Array, *,
                  progress_bar: bool = True) -> tuple[LLMPlanner, list[dict]]:
    """Load `config.planner_path` and fine-tune it for `config.planner_steps` steps (lr `config.planner_lr`,
    rows of `config.planner_seq_len` tokens)."""
    folder = check_hf_folder(config.planner_path, "planner_path")
    _, graphdef, params = load_hf(folder)
    tok = load_tokenizer(folder)
    rows = lm_data.pack(plan_examples(parts, tok), config.planner_seq_len)
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.planner_lr, min(config.warmup, config.planner_steps // 2),
                                                  config.planner_steps, config.planner_lr * 0.1)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, weight_decay=0.0))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    state = train_lib.init_train_state(params, tx, key)
    loader = data_lib.ArrayLoader(rows, min(config.batch_size, rows["inputs"].shape[0]), seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.planner_steps, workdir=workdir,
                                   config=config, log_every=min(config.log_every, config.planner_steps),
                                   ckpt_every=config.planner_steps, progress_bar=progress_bar)
    return LLMPlanner(graphdef, state.params, tok), history
