"""An offline system under test: a small `core/lm` decoder trained here on benign A2A transcripts.

The transcripts come from running the benign (control) cases of every attack and domain in the lab with the
scripted benign coordinator (`sut.ScriptedSUT`) and recording its decisions as text: for the first turn, each
admitted card with the request ("card request ... card <card text> -> yes|no"); for each item a peer returned
(an input request, a reference, a renderable artifact, a delegation, an action request), the item with the
request ("item request ... kind url content ... -> do|skip"). The decoder (`core.lm.model.Transformer`, a
word-level tokenizer trained on the transcripts) learns next-token prediction on the answers with
`core.train.fit`; it never sees an attack.

`LMPolicySUT` then acts by scoring the two answers of each decision: it sends the task to the card with the
highest p(yes) and carries out an item when p(do) > p(skip). Tool-call arguments (which URL, which artifact,
the reference number) are filled from the item itself (`sut.call_for`): the model chooses which tool to call
and on what, not the strings it types.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from core import data as data_lib
from core import train as train_lib
from core.lm import losses
from core.lm import model as model_lib
from core.lm.configs import LMConfig
from core.lm.data import to_training_rows
from core.lm.tokenizer import Tokenizer, train_word_level
from rl_tools.a2a_security import episodes, scenarios
from rl_tools.a2a_security.coordinator import NAIVE
from rl_tools.a2a_security.sut import AgendaSUT, ScriptedSUT

SEQ = 96        # tokens of a decision prompt (left-truncated) plus its answer
BATCH = 16      # rows of one scoring call (a fixed shape: one compile)
CONTENT_WORDS = 24


def _words(text: Any, limit: int | None = None) -> str:
    text = text if isinstance(text, str) else json.dumps(text)
    words = re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())
    return " ".join(words[:limit] if limit else words)


def card_prompt(request: dict[str, Any], card: dict[str, Any]) -> str:
    skills = " ".join(f"{s['name']} {s['description']} {' '.join(s['tags'])}" for s in card["skills"])
    return (f"card request {_words(request['request'])} card {_words(card['name'])} "
            f"{_words(card['description'])} provider {_words(card['provider'])} skills {_words(skills)} ->")


def item_prompt(request: dict[str, Any], kind: str, item: dict[str, Any], view: dict[str, Any],
                visited: bool) -> str:
    content = item.get("message") if kind == "input" else item.get("content")
    extra = f" target visited {'yes' if visited else 'no'}" if kind == "delegate" else ""
    if kind == "action":
        agent = next((c for c in request["agents"] if c["name"] == view["agent"]), None)
        declared = agent is not None and item["content"].get("action") in {s["id"] for s in agent["skills"]}
        extra = f" declared {'yes' if declared else 'no'}"
    return (f"item request {_words(request['request'])} kind {kind} from {_words(view['agent'])} "
            f"content {_words(content, CONTENT_WORDS)}{extra} ->")


class _Visited:
    def __init__(self):
        self.seen: set[str] = set()


class RecordingSUT(ScriptedSUT):
    """The scripted benign coordinator, recording each decision as (prompt, answer) text."""

    name = "recording"

    def __init__(self, log: list[tuple[str, str]]):
        super().__init__()
        self.log, self.visited = log, _Visited()

    def choose_card(self, request):
        chosen = super().choose_card(request)
        for card in request["agents"]:
            self.log.append((card_prompt(request, card), "yes" if card["name"] == chosen else "no"))
        self.visited.seen.add(chosen)
        return chosen

    def decide_item(self, request, kind, item, view):
        choice = super().decide_item(request, kind, item, view)
        target = item["content"].get("delegate_to", "") if kind == "delegate" else ""
        self.log.append((item_prompt(request, kind, item, view, target in self.visited.seen), choice))
        if target:
            self.visited.seen.add(target)
        return choice


def benign_transcripts(cases_per_cell: int, *, seed: int) -> list[tuple[str, str]]:
    """Decisions of the scripted benign coordinator on the benign controls of every attack and domain."""
    log: list[tuple[str, str]] = []
    cases = [c for attack in scenarios.ATTACKS for domain in scenarios.DOMAINS
             for c in episodes.generate(attack, domain, cases_per_cell, seed=seed) if c.control]
    episodes.run_suite(cases, NAIVE, lambda: RecordingSUT(log))
    return log


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    cases_per_cell: int = 12  # benign control cases per attack and domain whose transcripts are the training set
    hidden_size: int = 64  # decoder residual width
    num_layers: int = 2  # decoder blocks
    num_heads: int = 4  # query heads (2 key/value heads)
    steps: int = 400  # optimiser steps of core.train.fit
    batch_size: int = 32  # decisions per step
    lr: float = 3e-3  # AdamW peak learning rate (warmup-cosine)
    seed: int = 1000  # seed of the transcripts (kept apart from the evaluation cases' seeds) and of the init

    def __post_init__(self):
        if self.cases_per_cell < 1:
            raise ValueError(f"cases_per_cell={self.cases_per_cell}: expected at least 1")
        if self.steps < 1:
            raise ValueError(f"steps={self.steps}: expected at least 1")


def encode_prompt(tok: Tokenizer, prompt: str) -> list[int]:
    """A decision prompt's token ids, left-truncated so that prompt + answer + EOS fit SEQ + 1."""
    return tok.encode(prompt)[-(SEQ - 2):]


class Scorer:
    """p(answer | prompt) for a fixed pair of answers, in batches of BATCH left-truncated prompts."""

    def __init__(self, tokenizer: Tokenizer, graphdef, params):
        self.tok, self.graphdef, self.params = tokenizer, graphdef, params

        @jax.jit
        def last_logits(params, tokens, lengths):
            out = model_lib.apply(graphdef, params, tokens, attention_mask=tokens > 0)
            return out.logits[jnp.arange(tokens.shape[0]), lengths - 1]

        self._last = last_logits

    def encode(self, prompt: str) -> list[int]:
        return encode_prompt(self.tok, prompt)

    def prefer(self, prompts: Sequence[str], first: str, second: str) -> np.ndarray:
        """log p(first) - log p(second) after each prompt."""
        a, b = self.tok.token_to_id(first), self.tok.token_to_id(second)
        out = []
        for start in range(0, len(prompts), BATCH):
            chunk = [self.encode(p) for p in prompts[start:start + BATCH]]
            tokens = np.zeros((BATCH, SEQ), np.int32)
            lengths = np.ones(BATCH, np.int32)
            for i, ids in enumerate(chunk):
                tokens[i, :len(ids)] = ids
                lengths[i] = len(ids)
            logits = np.asarray(self._last(self.params, jnp.asarray(tokens), jnp.asarray(lengths)))
            out.extend((logits[:, a] - logits[:, b])[:len(chunk)].tolist())
        return np.asarray(out)


def train_policy(config: PolicyConfig, workdir: pathlib.Path) -> tuple[Scorer, dict[str, Any]]:
    """Generate the benign transcripts, train the decoder with core.train.fit; returns the scorer and stats
    (held-out decision accuracy on transcripts from other seeds, wall seconds, counts)."""
    start = time.perf_counter()
    log = benign_transcripts(config.cases_per_cell, seed=config.seed)
    held_out = benign_transcripts(max(2, config.cases_per_cell // 4), seed=config.seed + 1)
    transcript_seconds = time.perf_counter() - start
    tok = train_word_level([p + " " + a for p, a in log] + ["yes no do skip"])
    examples = [(encode_prompt(tok, p), tok.encode(a) + [tok.token_to_id("</s>")]) for p, a in log]
    rows = to_training_rows(examples, SEQ)
    model = LMConfig(vocab_size=tok.vocab_size, hidden_size=config.hidden_size,
                     intermediate_size=2 * config.hidden_size, num_layers=config.num_layers,
                     num_heads=config.num_heads, num_kv_heads=2, head_dim=config.hidden_size // config.num_heads,
                     max_position_embeddings=SEQ)
    graphdef, params = model_lib.init(model, jax.random.key(config.seed))
    schedule = optax.warmup_cosine_decay_schedule(0.0, config.lr, max(1, config.steps // 10), config.steps,
                                                  config.lr * 0.05)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(schedule, b2=0.98, weight_decay=0.01))
    state = train_lib.init_train_state(params, tx, jax.random.key(config.seed))
    step = train_lib.make_train_step(losses.next_token_loss(graphdef), tx)
    loader = data_lib.ArrayLoader(rows, min(config.batch_size, rows["inputs"].shape[0]), seed=config.seed)
    state, history = train_lib.fit(state, step, loader, num_steps=config.steps, workdir=workdir, config=config,
                                   log_every=max(1, config.steps // 4), ckpt_every=config.steps,
                                   progress_bar=False)
    scorer = Scorer(tok, graphdef, state.params)
    stats = {"transcript_decisions": len(log), "vocab": tok.vocab_size, "train_seconds":
             time.perf_counter() - start - transcript_seconds, "transcript_seconds": transcript_seconds,
             "params": int(sum(np.size(x) for x in jax.tree.leaves(state.params)))}
    for name, pairs in (("train", log), ("held_out", held_out)):
        prompts = [p for p, _ in pairs]
        yes = scorer.prefer(prompts, "yes", "no")
        do = scorer.prefer(prompts, "do", "skip")
        predicted = [("yes" if y > 0 else "no") if p.startswith("card") else ("do" if d > 0 else "skip")
                     for p, y, d in zip(prompts, yes, do)]
        stats[f"{name}_decision_accuracy"] = float(np.mean([pr == a for pr, (_, a) in zip(predicted, pairs)]))
    losses_seen = [r["loss"] for r in history if "loss" in r]
    stats["final_loss"] = losses_seen[-1] if losses_seen else float("nan")
    return scorer, stats


class LMPolicySUT(AgendaSUT):
    """The trained decoder as a coordinator: card with the highest p(yes); an item is acted on if p(do) > p(skip)."""

    name = "core-lm-policy"

    def __init__(self, scorer: Scorer):
        super().__init__()
        self.scorer, self.visited = scorer, _Visited()

    def choose_card(self, request):
        cards = request["agents"]
        margins = self.scorer.prefer([card_prompt(request, c) for c in cards], "yes", "no")
        chosen = cards[int(np.argmax(margins))]["name"]
        self.visited.seen.add(chosen)
        return chosen

    def decide_item(self, request, kind, item, view):
        target = item["content"].get("delegate_to", "") if kind == "delegate" else ""
        prompt = item_prompt(request, kind, item, view, target in self.visited.seen)
        if target:
            self.visited.seen.add(target)
        return "do" if self.scorer.prefer([prompt], "do", "skip")[0] > 0 else "skip"
